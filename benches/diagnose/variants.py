#!/usr/bin/env python3
"""Compare diagnosis settings on the runs an accuracy experiment kept, without re-recording.

    python3 benches/diagnose/variants.py [--culprit BIN] [--exp DIR] [--train-args "..."]
        [--diagnose-args "..."] [--training all|N] [--cross-validate] [--untrained]
        [--per-metric]

Default: per workload, `culprit train` on the fault-free training runs (`train-W-*`), then
`culprit diagnose` of every fault-free test run and faulty run of that workload; prints
combined TP per fault class and FP (runs where a healthy node was flagged). `--training N` uses
the first N training runs. `--cross-validate` instead trains on every pair of the workload's
fault-free runs (training and test) and diagnoses the others: FP and the largest score /
threshold seen on fault-free data (how close to a false alarm). `--untrained` diagnoses every
run without thresholds. `--per-metric` also prints, for the white-box metrics (samples, count,
time), how often the faulty node was faulty on that metric and how often a healthy node was —
what the root-cause tables rest on, which the combined verdict can hide.

The windows and keep rules are those of `culprit experiment`'s shortened protocol. Used for the
figures in docs/thresholds.md ("Pooled by default", "Variance weighting", "Functions training
never saw", "Pooled, per-node or a robust middle").
"""
import argparse
import itertools
import json
import subprocess

WINDOWS = ["--win-size", "10s", "--win-shift", "5s", "--k", "3",
           "--min-time", "167ms", "--min-samples", "16.7"]
WORKLOADS = ["ddw", "ddr", "postmark"]
WHITE_BOX = ["samples", "count", "time"]


def read_truth(exp):
    """Each run of the experiment in `exp`: (workload, fault, faulty node or "")."""
    truth = {}
    with open(f"{exp}/results.jsonl") as f:
        for line in f:
            d = json.loads(line)
            if d.get("kind") == "run":
                r = d["record"]
                truth[r["id"]] = (r["workload"], r["fault"], r["faulty_node"])
    return truth


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--culprit", default="target/release/culprit")
    ap.add_argument("--exp", default="/var/tmp/culprit-exp")
    ap.add_argument("--train-args", default="")
    ap.add_argument("--diagnose-args", action="append",
                    help="repeat to compare several diagnose settings on the same thresholds")
    ap.add_argument("--training", default="all")
    ap.add_argument("--cross-validate", action="store_true")
    ap.add_argument("--untrained", action="store_true")
    ap.add_argument("--per-metric", action="store_true")
    a = ap.parse_args()
    variants = a.diagnose_args or [""]
    runs = f"{a.exp}/runs"
    truth = read_truth(a.exp)

    def train(out, ids):
        subprocess.run([a.culprit, "train", *WINDOWS, *a.train_args.split(), "-o", out,
                        *[f"{runs}/{i}/data" for i in ids]], capture_output=True, check=True)

    def diagnose(th, rid, extra=""):
        thr = ["--thresholds", th] if th else []
        o = subprocess.run([a.culprit, "diagnose", *WINDOWS, *extra.split(),
                            *thr, "--json", f"{runs}/{rid}/data"],
                           capture_output=True)
        if o.returncode == 2 and b"not enough data" in o.stderr:
            return {"culprits": [], "metrics": []}
        if o.returncode not in (0, 1):
            raise SystemExit(f"{rid}: {o.stderr.decode().strip()}")
        return json.loads(o.stdout)

    def free_runs(w):
        return sorted(r for r in truth if truth[r][0] == w and truth[r][1] == "none")

    th = "/tmp/culprit-variants-thresholds.json"
    if a.cross_validate:
        fp = {v: 0 for v in variants}
        ratios = {v: [] for v in variants}
        n = 0
        for w in WORKLOADS:
            free = free_runs(w)
            for pair in itertools.combinations(free, 2):
                train(th, pair)
                for rid in (r for r in free if r not in pair):
                    n += 1
                    for v in variants:
                        j = diagnose(th, rid, v)
                        fp[v] += bool(j.get("culprits"))
                        ratios[v].append(max([nd["max_score"] / nd["threshold"]
                                              for m in j["metrics"] for nd in m["nodes"]
                                              if nd.get("threshold")] or [0.0]))
        for v in variants:
            r = sorted(ratios[v])
            print(f"[{v or 'defaults'}] fault-free runs flagged: {fp[v]}/{n}; largest score / "
                  f"threshold: median {r[len(r) // 2]:.2f}, max {r[-1]:.2f}")
        return
    per = {v: {} for v in variants}
    # (metric) -> [faulty node faulty, faulty runs, healthy nodes faulty, healthy nodes]
    white = {v: {m: [0, 0, 0, 0] for m in WHITE_BOX} for v in variants}
    for w in WORKLOADS:
        ids = sorted(r for r in truth if truth[r][0] == w and r.startswith("train"))
        if a.training != "all":
            ids = ids[:int(a.training)]
        if not a.untrained:
            train(th, ids)
        for rid, (wl, fault, node) in sorted(truth.items()):
            if wl != w or rid in ids or rid.startswith("train"):
                continue
            for v in variants:
                j = diagnose(None if a.untrained else th, rid, v)
                culprits = set(j.get("culprits", []))
                s = per[v].setdefault(fault, [0, 0, 0])
                s[0] += int(bool(node) and node in culprits)
                s[1] += int(bool(culprits - {node}))
                s[2] += 1
                for m in j.get("metrics", []):
                    if m["metric"] not in WHITE_BOX:
                        continue
                    w_ = white[v][m["metric"]]
                    for nd in m["nodes"]:
                        bad = nd.get("verdict") == "faulty"
                        if nd["node"] == node:
                            w_[0] += bad
                            w_[1] += 1
                        else:
                            w_[2] += bad
                            w_[3] += 1
    for v in variants:
        p = per[v]
        print(f"[{v or 'defaults'}] " + " ".join(
            f"{k} {x[0]}/{x[2]}" + (f" (FP {x[1]})" if x[1] else "") for k, x in sorted(p.items())))
        tp = sum(x[0] for k, x in p.items() if k != "none")
        n = sum(x[2] for k, x in p.items() if k != "none")
        fp = sum(x[1] for x in p.values())
        print(f"[{v or 'defaults'}] combined TP {tp}/{n}, FP {fp}/{sum(x[2] for x in p.values())}")
        if a.per_metric:
            print(f"[{v or 'defaults'}] per metric: " + ", ".join(
                f"{m} faulty node {x[0]}/{x[1]}, healthy nodes {x[2]}/{x[3]}"
                for m, x in white[v].items()))


if __name__ == "__main__":
    main()
