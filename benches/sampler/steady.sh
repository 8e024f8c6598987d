#!/usr/bin/env bash
# The sampler's own CPU time in steady state, apart from its start-up: `culprit sample` runs
# SECS seconds on the machine as it is (default rate, 10 s intervals), with the default kernel
# events and without; its user and system time (from /proc/<pid>/stat) is read after WARM
# seconds (start-up: /proc scan, kallsyms, naming everything running) and at the end.
# System time includes softirq work of other processes that lands while the sampler runs when
# the kernel lacks CONFIG_IRQ_TIME_ACCOUNTING, so it is an upper bound.
#
# Usage: sudo benches/sampler/steady.sh [SECS] [WARM]   (defaults 60 and 15)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
WARM=${2:-15}
work=$(mktemp -d /tmp/culprit-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
cargo build --release -q -p culprit
CULPRIT=$PWD/target/release/culprit
HZ=$(getconf CLK_TCK)

measure() {
  local label=$1; shift
  rm -rf "$work/data"
  "$CULPRIT" sample -o "$work/data" --node bench --duration "${SECS}s" "$@" 2>"$work/err" &
  local pid=$!
  sleep "$WARM"
  read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  local t0=$SECONDS
  while kill -0 $pid 2>/dev/null; do
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null || echo "$u1 $s1")
    sleep 0.5
  done
  wait $pid
  local dt=$((SECONDS - t0))
  local samples events bytes
  samples=$(sed -n 's/^culprit: \([0-9]*\) samples (.*/\1/p' "$work/err")
  events=$(sed -n 's/.* samples ([0-9]* lost), \([0-9]*\) kernel events.*/\1/p' "$work/err")
  bytes=$(sed -n 's/^culprit:   bench: [0-9]* samples, \([0-9]*\) bytes.*/\1/p' "$work/err")
  python3 - "$label" "$u0" "$s0" "$u1" "$s1" "$dt" "$HZ" "$WARM" "$SECS" "$samples" "$events" \
    "$bytes" <<'PY'
import sys
label, u0, s0, u1, s1, dt, hz, warm, secs, samples, events, nbytes = sys.argv[1:]
u0, s0, u1, s1, dt, hz = map(float, (u0, s0, u1, s1, dt, hz))
dt = max(dt, 1.0)
print(f"{label:22} start-up ({warm} s): user {u0/hz:.2f} s sys {s0/hz:.2f} s | steady: user "
      f"{(u1-u0)/hz/dt*100:.2f} %, sys {(s1-s0)/hz/dt*100:.2f} % of one CPU over {dt:.0f} s | "
      f"{int(samples)/float(secs):.0f} samples/s, {int(events)/float(secs):.0f} events/s, "
      f"{int(nbytes)/float(secs)/1000:.1f} kB/s")
PY
}

measure "default" 
measure "--tracepoints none" --tracepoints none
