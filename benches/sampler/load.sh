#!/usr/bin/env bash
# The sampler on a host whose CPUs are all busy, two builds side by side (issue 29): each run is
# `culprit sample --interval 1s --duration SECS` beside
#
#   cpu30    stress-ng --cpu 30 (load 30 on this 2-core machine), default kernel events
#   layers   stress-ng --cpu 30 --switch 8 and two processes doing pread() in a loop, with
#            --layers (the system-call tracepoints: ~300,000 records/s)
#
# OLD and NEW alternate within each repetition (interleaved: the machine is shared and noisy).
# Per run: samples, samples lost, kernel-event and process-tracking records lost (the old
# sampler counted every record dropped in its shared ring as a lost sample), sample intervals
# missed, OS-metrics seconds written and missed, how long the run lasted by its own account
# (run-s: from its start, once the events are open, to its end; --duration is SECS) and the whole
# command (exit-s: start-up included), and the sampler's CPU.
#
# Needs root, stress-ng, gcc.
#   REPS=2 SECS=20 bash benches/sampler/load.sh OLD_CULPRIT NEW_CULPRIT
set -euo pipefail
OLD=${1:?old culprit binary}
NEW=${2:?new culprit binary}
REPS=${REPS:-2}
SECS=${SECS:-20}
command -v stress-ng >/dev/null || { echo "stress-ng is not installed" >&2; exit 1; }
OUT=$(mktemp -d /tmp/culprit-load.XXXXXX)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$OUT"' EXIT
cat > "$OUT/pread.c" <<'C'
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDWR | O_CREAT, 0600);
    char buf[64] = {0};
    pwrite(fd, buf, sizeof buf, 0);
    for (;;) pread(fd, buf, sizeof buf, 0);
}
C
gcc -O2 -o "$OUT/pread" "$OUT/pread.c"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); ${SECS} s runs, ${REPS} repetitions"
printf "%-7s %-4s %9s %7s %11s %9s %7s %8s %8s %7s %7s %7s\n" scene bin samples lost events-lost track-lost missed os-secs os-miss run-s exit-s cpu-%
run() { # scene name bin
  local scene=$1 name=$2 bin=$3 dir="$OUT/$1-$2-$RANDOM"
  PIDS=()
  if [ "$scene" = layers ]; then
    stress-ng --cpu 30 --switch 8 --timeout $((SECS + 8))s >/dev/null 2>&1 & PIDS+=($!)
    for i in 1 2; do "$OUT/pread" "$OUT/pread.dat.$i" & PIDS+=($!); done
    extra=(--layers)
  else
    stress-ng --cpu 30 --timeout $((SECS + 8))s >/dev/null 2>&1 & PIDS+=($!)
    extra=()
  fi
  sleep 2
  local t0 t1 err
  t0=$(date +%s%N)
  err=$("$bin" sample -o "$dir" --node n --interval 1s --duration "${SECS}s" "${extra[@]}" 2>&1 || true)
  t1=$(date +%s%N)
  kill "${PIDS[@]}" 2>/dev/null || true
  wait "${PIDS[@]}" 2>/dev/null || true
  local samples lost evlost tracklost cpu runs
  samples=$(sed -n 's/^culprit: \([0-9]*\) samples (\([0-9]*\) lost).*/\1/p' <<< "$err")
  lost=$(sed -n 's/^culprit: \([0-9]*\) samples (\([0-9]*\) lost).*/\2/p' <<< "$err")
  evlost=$(sed -n 's/.* kernel events (\([0-9]*\) \(records \)\{0,1\}lost).*/\1/p' <<< "$err")
  tracklost=$(sed -n 's/.* \([0-9]*\) process-tracking records lost.*/\1/p' <<< "$err")
  cpu=$(sed -n 's/.*(\([0-9.]*\) % of one CPU).*/\1/p' <<< "$err" | head -1)
  runs=$(sed -n 's/.* intervals in \([0-9.]*\) s;.*/\1/p' <<< "$err")
  # Missed sample intervals and OS seconds, read back by the new reader (it reads both).
  read -r missed ossecs osmiss < <("$NEW" report --json "$dir" 2>/dev/null | python3 -c '
import json, sys
v = json.load(sys.stdin)["nodes"][0]
s = v["samples"][0] if v["samples"] else {}
o = v.get("os") or {}
print(s.get("missed_intervals", "?"), o.get("intervals", 0), o.get("missed_intervals", 0))')
  printf "%-7s %-4s %9s %7s %11s %9s %7s %8s %8s %7s %7.1f %7s\n" "$scene" "$name" "$samples" \
    "$lost" "${evlost:-?}" "${tracklost:-n/a}" "$missed" "$ossecs" "$osmiss" "${runs:-?}" \
    "$(echo "($t1 - $t0) / 1000000000" | bc -l)" "$cpu"
  rm -rf "$dir"
}
for rep in $(seq "$REPS"); do
  for scene in cpu30 layers; do
    run "$scene" old "$OLD"
    run "$scene" new "$NEW"
  done
done
