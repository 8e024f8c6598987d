#!/usr/bin/env bash
# How long `culprit sample` takes to end after `--duration`, two builds side by side, beside
# `stress-ng --hdd 1 --cpu 2` (docs/sampler.md "Ending on time"). Disk writes slow the kernel's
# RCU grace periods, which closing the last perf event of a tracepoint waits for; the CPU load
# slows the naming of a last interval's locations.
#
#   1s    --interval 1s: the last interval is short, its locations mostly named already; the
#         end is the release of the perf events (the case of tests/tests/stacks.rs's sampler)
#   10s   the default 10 s interval: a run shorter than it names every location at its end
#
# Each run: `culprit sample --duration SECS --no-os-metrics` with the default kernel events,
# system-wide, its own stress-ng (SECS + 6 s) started 2 s before. OLD and NEW alternate within
# each repetition (interleaved: the machine is shared and noisy). Per run: the exit status (2:
# the watchdog ended it, its words below), end-s (the run's own account of its length,
# "intervals in X s", minus SECS: from the end of --duration to the end of the run, events
# closed; "-" when the watchdog ended it) and exit-s (the whole command, start-up included).
# Lines of the builds' stderr that start with "DBG" are shown (for builds instrumented by hand).
#
# Needs root and stress-ng.
#   REPS=6 SECS=4 SCENES="1s 10s" bash benches/sampler/ending.sh OLD_CULPRIT NEW_CULPRIT
set -euo pipefail
OLD=${1:?old culprit binary}
NEW=${2:?new culprit binary}
REPS=${REPS:-6}
SECS=${SECS:-4}
SCENES=${SCENES:-1s 10s}
command -v stress-ng >/dev/null || { echo "stress-ng is not installed" >&2; exit 1; }
OUT=$(mktemp -d /tmp/culprit-ending.XXXXXX)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$OUT"' EXIT
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); ${SECS} s runs, ${REPS} repetitions"
printf "%-5s %-4s %4s %6s %7s\n" scene bin rc end-s exit-s
run() { # scene name bin
  local scene=$1 name=$2 bin=$3 dir="$OUT/$1-$2-$RANDOM"
  mkdir -p "$OUT/hdd"
  (cd "$OUT/hdd" && exec stress-ng --hdd 1 --hdd-bytes 512m --cpu 2 --timeout $((SECS + 6))s \
    >/dev/null 2>&1) & PIDS=($!)
  sleep 2
  local t0 t1 err rc=0
  t0=$(date +%s%N)
  err=$("$bin" sample -o "$dir" --interval "$scene" --duration "${SECS}s" --no-os-metrics 2>&1) \
    || rc=$?
  t1=$(date +%s%N)
  kill "${PIDS[@]}" 2>/dev/null || true
  wait "${PIDS[@]}" 2>/dev/null || true
  local took
  took=$(sed -n 's/.* intervals in \([0-9.]*\) s;.*/\1/p' <<< "$err")
  if [ -n "$took" ]; then took=$(echo "$took - $SECS" | bc -l); else took=-; fi
  printf "%-5s %-4s %4s %6s %7.2f  %s\n" "$scene" "$name" "$rc" "$took" \
    "$(echo "($t1 - $t0) / 1000000000" | bc -l)" \
    "$({ grep '^DBG' <<< "$err" || true; } | tr '\n' ' ')"
  if [ "$rc" != 0 ]; then
    { grep -v '^culprit: sampling' <<< "$err" || true; } | grep -v '^DBG' | sed 's/^/    /'
  fi
  rm -rf "$dir"
}
for rep in $(seq "$REPS"); do
  for scene in $SCENES; do
    run "$scene" old "$OLD"
    run "$scene" new "$NEW"
  done
done
