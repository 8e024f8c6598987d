#!/usr/bin/env bash
# Samples lost on a busy machine: `culprit sample` for SECS seconds while `stress-ng --cpu 2`
# keeps both cores saturated (and whatever else runs on the machine). One run per setting,
# one after the other:
#
#   1 kHz           the default rate (cpu-clock every 1 ms here), rings sized from the rate
#   1 kHz, fp       the same with --call-graph fp
#   10 kHz, fp      ten times the rate, with call chains
#   10 kHz, 64 p    ten times the rate with the old fixed rings (64 pages = 256 KiB per CPU)
#
# Needs root, stress-ng.   bash benches/sampler/loss.sh [SECS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
command -v stress-ng >/dev/null || { echo "stress-ng is not installed" >&2; exit 1; }
cargo build -q --release -p culprit
BIN=$PWD/target/release/culprit
OUT=$(mktemp -d /tmp/culprit-loss.XXXXXX)
trap 'rm -rf "$OUT"; kill $STRESS 2>/dev/null || true' EXIT
echo "samples lost under load: ${SECS} s per run, stress-ng --cpu 2, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-14s %10s %8s %10s %8s\n" setting samples lost "ring KiB" events
run() { # name args...
  local name=$1; shift
  stress-ng --cpu 2 --timeout $((SECS + 5))s >/dev/null 2>&1 &
  STRESS=$!
  sleep 1
  local err
  err=$("$BIN" sample -o "$OUT/$name" --node n --interval 10s --duration "${SECS}s" "$@" 2>&1)
  kill $STRESS 2>/dev/null || true
  wait $STRESS 2>/dev/null || true
  local samples lost events pages
  samples=$(sed -n 's/.*culprit: \([0-9]*\) samples (\([0-9]*\) lost).*/\1/p' <<< "$err")
  lost=$(sed -n 's/.*culprit: \([0-9]*\) samples (\([0-9]*\) lost).*/\2/p' <<< "$err")
  events=$(sed -n 's/.* \([0-9]*\) kernel events.*/\1/p' <<< "$err")
  pages=$(grep -a -o 'ring_pages=[0-9]*' "$OUT/$name"/n/samples-*.cul | head -1 | cut -d= -f2)
  printf "%-14s %10s %8s %10s %8s\n" "$name" "$samples" "$lost" "$((pages * $(getconf PAGESIZE) / 1024))" "$events"
}
run 1kHz
run 1kHz-fp --call-graph fp
run 10kHz-fp --event cpu-clock --period 100000 --call-graph fp
run 10kHz-64p --event cpu-clock --period 100000 --ring-pages 64
