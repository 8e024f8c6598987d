#!/usr/bin/env bash
# Speed of two culprit builds side by side: `culprit diagnose` and `culprit report` on the same
# data, the two builds interleaved in each repetition (the machine is shared and noisy), the
# median of each and the ratio new ÷ old, of the CPU time (user + system: what a busy machine
# disturbs least) and of the wall time.
#
#   bash benches/diagnose/compare.sh OLD_CULPRIT NEW_CULPRIT DATA [REPS]
#
# DATA is a data root (DATA/<node>/…), for example one made by tests/c/diag_server.c under
# libculprit_rt.so (benches/diagnose/real_eval.sh shows how) or by `cargo run -p
# culprit-testbed`. REPS is the number of repetitions (default 9). Extra options for diagnose
# go in DIAGNOSE_ARGS (default: none). The two builds' outputs must agree first.
set -euo pipefail
old=$1
new=$2
data=$3
reps=${4:-9}
read -r -a extra <<<"${DIAGNOSE_ARGS:-}"

for verb in diagnose report; do
    args=("$verb" "$data")
    [ "$verb" = diagnose ] && args+=(--json "${extra[@]}")
    if ! cmp -s <("$old" "${args[@]}" 2>&1) <("$new" "${args[@]}" 2>&1); then
        echo "$verb: the two builds' outputs differ" >&2
        exit 1
    fi
    python3 - "$reps" "$old" "$new" "${args[@]}" <<'EOF'
import os, resource, statistics, subprocess, sys, time

reps, old, new, args = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]

def run(exe):
    """CPU and wall seconds of one run (exit status 1, a culprit, is fine)."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    code = subprocess.call([exe] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t1, r1 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if code not in (0, 1):
        sys.exit(f"{exe} {' '.join(args)}: exit status {code}")
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), t1 - t0

o, n = [], []
for _ in range(reps):
    o.append(run(old))
    n.append(run(new))
med = lambda v, i: statistics.median(x[i] for x in v)
cpu_o, cpu_n, wall_o, wall_n = med(o, 0), med(n, 0), med(o, 1), med(n, 1)
print(f"{args[0]:9} CPU old {cpu_o*1000:7.1f} ms new {cpu_n*1000:7.1f} ms new/old {cpu_n/cpu_o:.3f}"
      f" | wall old {wall_o*1000:7.1f} ms new {wall_n*1000:7.1f} ms new/old {wall_n/wall_o:.3f}"
      f" ({reps} interleaved runs each)")
EOF
done
