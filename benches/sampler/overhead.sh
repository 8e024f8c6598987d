#!/usr/bin/env bash
# Overhead of `culprit sample` at its default rate on a CPU-bound workload, side by side with
# `perf record` at the same rate (cpu-clock, 1 kHz per CPU) and with no sampler, in one run:
# the three configurations are interleaved REPS times and medians compared, because the machine
# is shared and noisy.
#
# Workload: one smp_ratio (tests/c/) per CPU, a fixed amount of work each. Per run:
#   wall      the workload's wall time;
#   work CPU  user+sys time of the workload processes (includes the sampling interrupts charged
#             to them);
#   own CPU   the sampler's own user and system time over its whole run (start-up, /proc scan,
#             kallsyms, naming, writing), from /usr/bin/time: the least noisy figure. Note that
#             without CONFIG_IRQ_TIME_ACCOUNTING, softirq work of other processes that lands
#             while the sampler runs is charged to its system time.
# and for culprit: samples, samples lost, bytes written per second.
#
# Usage: sudo benches/sampler/overhead.sh [REPS] [ROUNDS]   (defaults 5 and 6000, about 5 s of
# CPU per workload process)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-5}
ROUNDS=${2:-6000}
NCPU=$(nproc)
work=$(mktemp -d /tmp/culprit-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
cargo build --release -q -p culprit
CULPRIT=$PWD/target/release/culprit
gcc -O2 -fno-ipa-icf -o "$work/smp_ratio" tests/c/smp_ratio.c

# The workload; prints "wall_s work_cpu_s".
workload() {
  /usr/bin/time -f "%e %U %S" -o "$work/time" bash -c "
    for i in \$(seq $NCPU); do '$work/smp_ratio' $ROUNDS & done; wait"
  tail -1 "$work/time" | awk '{printf "%s %.3f\n", $1, $2 + $3}'
}

# Starts "$@" under /usr/bin/time (own CPU to $work/own), runs the workload, stops it with
# SIGINT. Prints "wall work_cpu own_user own_sys".
with_sampler() {
  local ready=$1; shift
  /usr/bin/time -f "%U %S" -o "$work/own" "$@" &
  local tpid=$!
  local t0=$SECONDS
  until eval "$ready"; do
    sleep 0.01
    if [ $((SECONDS - t0)) -gt 20 ]; then echo "sampler did not start" >&2; exit 1; fi
  done
  sleep 0.5
  local r; r=$(workload)
  pkill -INT -P $tpid || true
  wait $tpid || true
  echo "$r $(tail -1 "$work/own")"
}

run_none() { echo "$(workload) 0 0"; }

run_culprit() {
  rm -rf "$work/data"
  local r
  r=$(with_sampler "[ -d '$work/data/bench' ]" \
        "$CULPRIT" sample -o "$work/data" --node bench 2>"$work/culprit.err")
  local lost samples bytes secs
  samples=$(sed -n 's/^culprit: \([0-9]*\) samples (.*/\1/p' "$work/culprit.err")
  lost=$(sed -n 's/^culprit: [0-9]* samples (\([0-9]*\) lost).*/\1/p' "$work/culprit.err")
  secs=$(sed -n 's/.* intervals in \([0-9.]*\) s;.*/\1/p' "$work/culprit.err")
  bytes=$(sed -n 's/^culprit:   bench: [0-9]* samples, \([0-9]*\) bytes.*/\1/p' "$work/culprit.err")
  echo "$r $samples $lost $bytes $secs"
}

run_perf() {
  rm -f "$work/perf.data"
  with_sampler "[ -s '$work/perf.data' ]" \
    perf record -q -a -e cpu-clock -c 1000000 -o "$work/perf.data" -- sleep 100000 2>/dev/null
}

: >"$work/results"
for rep in $(seq "$REPS"); do
  for cfg in none culprit perf; do
    echo "$cfg $(run_$cfg)" | tee -a "$work/results" >&2
  done
done

python3 - "$work/results" "$NCPU" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
ncpu = int(sys.argv[2])
by = {}
for r in rows:
    by.setdefault(r[0], []).append([float(x) for x in r[1:]])
def med(cfg, f): return st.median(f(v) for v in by[cfg])
bw, bc = med("none", lambda v: v[0]), med("none", lambda v: v[1])
print(f"{len(by['none'])} interleaved repetitions, {ncpu} workload processes; medians:")
print(f"{'':8} {'wall s':>7} {'wall +%':>8} {'work CPU s':>10} {'work +%':>8} "
      f"{'own user s':>10} {'own sys s':>9} {'extra CPU %':>11}")
for cfg in ("none", "culprit", "perf"):
    w, c = med(cfg, lambda v: v[0]), med(cfg, lambda v: v[1])
    u, s = med(cfg, lambda v: v[2]), med(cfg, lambda v: v[3])
    extra = med(cfg, lambda v: (v[1] - bc + v[2] + v[3]) / bc * 100)
    print(f"{cfg:8} {w:7.2f} {(w/bw-1)*100:8.2f} {c:10.2f} {(c/bc-1)*100:8.2f} "
          f"{u:10.3f} {s:9.3f} {extra:11.2f}")
c = by["culprit"]
print(f"culprit: {int(sum(v[4] for v in c))} samples, {int(sum(v[5] for v in c))} lost, "
      f"{st.median(v[6] / v[7] for v in c) / 1000:.1f} kB/s written (median)")
PY
