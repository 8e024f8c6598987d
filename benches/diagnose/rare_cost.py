#!/usr/bin/env python3
"""What the rare-function rule (docs/thresholds.md, "Rare functions") costs and finds on the runs
an accuracy experiment kept: two `culprit` binaries, before and after, side by side.

    python3 benches/diagnose/rare_cost.py --before BIN --after BIN [--exp DIR]

For each binary: `culprit train` on the experiment's fault-free training runs (all workloads,
the shortened protocol's windows and keep rules), then `culprit diagnose` of every fault-free
test run (`clean-*`) and faulty run (`faulty-*`) three ways — untrained, with the thresholds it
trained, and with `--baseline "first 1/3"` — the two binaries interleaved run by run. Prints,
per binary and way: faulty runs whose faulty node was flagged, faulty runs with a healthy node
flagged, fault-free runs with a node flagged (the combined verdict), the same for the count
metric alone, and the runs in which a rare function made a window anomalous (after only).
"""
import argparse
import json
import os
import subprocess
import tempfile

from variants import read_truth

WINDOWS = ["--win-size", "10s", "--win-shift", "5s", "--k", "3",
           "--min-time", "167ms", "--min-samples", "16.7"]
WAYS = ["untrained", "trained", "baseline"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--exp", default="/var/tmp/culprit-exp-baseline")
    a = ap.parse_args()
    runs = f"{a.exp}/runs"
    truth = {i: t[2] for i, t in read_truth(a.exp).items()}
    # A run without its record in results.jsonl (the recording stopped in it) has no truth.
    ids = sorted(i for i in os.listdir(runs)
                 if i.startswith(("clean-", "faulty-")) and i in truth)
    training = sorted(i for i in os.listdir(runs) if i.startswith("train-"))
    tmp = tempfile.mkdtemp(prefix="rare-cost-")
    bins = {"before": a.before, "after": a.after}
    thresholds = {}
    for name, b in bins.items():
        out = f"{tmp}/{name}.json"
        subprocess.run([b, "train", *WINDOWS, "-o", out,
                        *[f"{runs}/{i}/data" for i in training]],
                       capture_output=True, check=True)
        thresholds[name] = out
        rare = {m: t.get("rare") for m, t in json.load(open(out))["metrics"].items()
                if t.get("rare")}
        print(f"{name}: trained on {len(training)} runs; rare bars {rare}")

    def diagnose(name, rid, way):
        extra = {"untrained": [], "trained": ["--thresholds", thresholds[name]],
                 "baseline": ["--baseline", "first 1/3"]}[way]
        o = subprocess.run([bins[name], "diagnose", *WINDOWS, *extra, "--json",
                            f"{runs}/{rid}/data"], capture_output=True)
        if o.returncode not in (0, 1):
            return None
        d = json.loads(o.stdout)
        count = [m for m in d["metrics"] if m["metric"] == "count"]
        count_flagged = set()
        rare = set()
        for m in count:
            for n in m["nodes"]:
                if n["verdict"] == "faulty":
                    count_flagged.add(n["node"])
                if any(w.get("rare") for w in n.get("anomalous_windows", [])):
                    rare.add(n["node"])
        return set(d["culprits"]), count_flagged, rare

    tally = {}
    for rid in ids:
        bad = truth.get(rid, "")
        for way in WAYS:
            for name in bins:
                r = diagnose(name, rid, way)
                t = tally.setdefault((name, way), {"tp": 0, "fp_faulty": 0, "fp_clean": 0,
                                                   "count_tp": 0, "count_fp": 0,
                                                   "rare": [], "errors": [], "faulty": 0,
                                                   "clean": 0})
                if r is None:
                    t["errors"].append(rid)
                    continue
                flagged, count_flagged, rare = r
                if bad:
                    t["faulty"] += 1
                    t["tp"] += bad in flagged
                    t["fp_faulty"] += bool(flagged - {bad})
                    t["count_tp"] += bad in count_flagged
                else:
                    t["clean"] += 1
                    t["fp_clean"] += bool(flagged)
                t["count_fp"] += bool(count_flagged - {bad})
                if rare:
                    t["rare"].append(f"{rid}:{','.join(sorted(rare))}")
                print(f"{rid} {way} {name}: flagged {sorted(flagged)} count {sorted(count_flagged)}"
                      f" rare {sorted(rare)}", flush=True)
    print()
    print("binary way | faulty found | faulty runs, healthy flagged | fault-free flagged |"
          " count: faulty found | count: runs with a healthy node flagged | rare windows in")
    for (name, way), t in sorted(tally.items(), key=lambda x: (WAYS.index(x[0][1]), x[0][0])):
        print(f"{name} {way} | {t['tp']}/{t['faulty']} | {t['fp_faulty']}/{t['faulty']} |"
              f" {t['fp_clean']}/{t['clean']} | {t['count_tp']}/{t['faulty']} |"
              f" {t['count_fp']}/{t['faulty'] + t['clean']} | {' '.join(t['rare']) or '-'}"
              + (f" | errors: {' '.join(t['errors'])}" if t["errors"] else ""))


if __name__ == "__main__":
    main()
