#!/usr/bin/env python3
"""Compare diagnosis settings on the runs an accuracy experiment kept, without re-recording.

    python3 benches/diagnose/variants.py [--culprit BIN] [--exp DIR] [--train-args "..."]
        [--diagnose-args "..."] [--training 2|4] [--cross-validate]

Default: per workload, `culprit train` on the two fault-free training runs, then `culprit
diagnose` of every fault-free test run and faulty run of that workload; prints combined TP per
fault class and FP (runs where a healthy node was flagged). `--training 4` also trains on the
fault-free test runs (FP then counts only the faulty runs' healthy nodes). `--cross-validate`
instead trains on every pair of the four fault-free runs of a workload and diagnoses the other
two: FP and the largest score / threshold seen on fault-free data (how close to a false alarm).

The windows and keep rules are those of `culprit experiment`'s shortened protocol. Used for the
figures in docs/thresholds.md ("Pooled by default", "Variance weighting").
"""
import argparse
import itertools
import json
import subprocess

WINDOWS = ["--win-size", "10s", "--win-shift", "5s", "--k", "3",
           "--min-time", "167ms", "--min-samples", "16.7"]
WORKLOADS = ["ddw", "ddr", "postmark"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--culprit", default="target/release/culprit")
    ap.add_argument("--exp", default="/var/tmp/culprit-exp")
    ap.add_argument("--train-args", default="")
    ap.add_argument("--diagnose-args", default="")
    ap.add_argument("--training", type=int, choices=[2, 4], default=2)
    ap.add_argument("--cross-validate", action="store_true")
    a = ap.parse_args()
    runs = f"{a.exp}/runs"
    truth = {}
    with open(f"{a.exp}/results.jsonl") as f:
        for line in f:
            d = json.loads(line)
            if d.get("kind") == "run":
                r = d["record"]
                truth[r["id"]] = (r["workload"], r["fault"], r["faulty_node"])

    def train(out, ids):
        subprocess.run([a.culprit, "train", *WINDOWS, *a.train_args.split(), "-o", out,
                        *[f"{runs}/{i}/data" for i in ids]], capture_output=True, check=True)

    def diagnose(th, rid):
        o = subprocess.run([a.culprit, "diagnose", *WINDOWS, *a.diagnose_args.split(),
                            "--thresholds", th, "--json", f"{runs}/{rid}/data"],
                           capture_output=True)
        if o.returncode not in (0, 1):
            raise SystemExit(f"{rid}: {o.stderr.decode().strip()}")
        return json.loads(o.stdout)

    th = "/tmp/culprit-variants-thresholds.json"
    if a.cross_validate:
        fp = n = 0
        ratios = []
        for w in WORKLOADS:
            free = [f"train-{w}-0", f"train-{w}-1", f"clean-{w}-0", f"clean-{w}-1"]
            for pair in itertools.combinations(free, 2):
                train(th, pair)
                for rid in (r for r in free if r not in pair):
                    j = diagnose(th, rid)
                    fp += bool(j.get("culprits"))
                    n += 1
                    ratios.append(max(nd["max_score"] / nd["threshold"]
                                      for m in j["metrics"] for nd in m["nodes"]
                                      if nd.get("threshold")))
        ratios.sort()
        print(f"fault-free runs flagged: {fp}/{n}; largest score / threshold: "
              f"median {ratios[len(ratios) // 2]:.2f}, max {ratios[-1]:.2f}")
        return
    per = {}
    for w in WORKLOADS:
        ids = [f"train-{w}-0", f"train-{w}-1"]
        if a.training == 4:
            ids += [f"clean-{w}-0", f"clean-{w}-1"]
        train(th, ids)
        for rid, (wl, fault, node) in sorted(truth.items()):
            if wl != w or rid in ids or rid.startswith("train"):
                continue
            culprits = set(diagnose(th, rid).get("culprits", []))
            s = per.setdefault(fault, [0, 0, 0])
            s[0] += int(bool(node) and node in culprits)
            s[1] += int(bool(culprits - {node}))
            s[2] += 1
    print(" ".join(f"{k} {v[0]}/{v[2]}" + (f" (FP {v[1]})" if v[1] else "")
                   for k, v in sorted(per.items())))
    tp = sum(v[0] for k, v in per.items() if k != "none")
    n = sum(v[2] for k, v in per.items() if k != "none")
    fp = sum(v[1] for v in per.values())
    print(f"combined TP {tp}/{n}, FP {fp}/{sum(v[2] for v in per.values())}")


if __name__ == "__main__":
    main()
