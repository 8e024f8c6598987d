#!/usr/bin/env bash
# Attribution and symbolization throughput of the sampler's pipeline against
# `perf report --sort comm,dso,sym` on the very same samples: one system-wide perf.data
# (cpu-clock, SECS seconds at HZ per CPU, while smp_ratio, smp_libuser, smp_sys and dd run), then
# REPS interleaved runs of each tool on it; medians compared. `culprit sample --replay` decodes
# the file with the sampler's own record decoder, process tracker, symbolizer and writer.
#
# Usage: sudo benches/sampler/symbolize.sh [REPS] [SECS] [HZ]   (defaults 5, 7, 10000)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-5}
SECS=${2:-7}
HZ=${3:-10000}
work=$(mktemp -d /tmp/culprit-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
cargo build --release -q -p culprit
CULPRIT=$PWD/target/release/culprit
gcc -O2 -fno-ipa-icf -o "$work/smp_ratio" tests/c/smp_ratio.c
gcc -O2 -fPIC -shared -Wl,-soname,libsmp_lib.so -o "$work/libsmp_lib.so" tests/c/smp_lib.c
gcc -O2 -Wl,-rpath,'$ORIGIN' -o "$work/smp_libuser" tests/c/smp_libuser.c "$work/libsmp_lib.so"
gcc -O2 -o "$work/smp_sys" tests/c/smp_sys.c

perf record -q -a -e cpu-clock -F "$HZ" -o "$work/perf.data" -- bash -c "
  '$work/smp_ratio' 1000000 & a=\$!
  '$work/smp_libuser' 1000000 & b=\$!
  '$work/smp_sys' 1000000000 & c=\$!
  dd if=/dev/zero of=/dev/null bs=64k 2>/dev/null & d=\$!
  sleep $SECS; kill \$a \$b \$c \$d; wait" 2>/dev/null || true
samples=$(perf report -i "$work/perf.data" --stdio --sort comm 2>/dev/null |
  sed -n 's/^# Samples: \(.*\) of event.*/\1/p')
echo "perf.data: $samples samples, $(du -h "$work/perf.data" | cut -f1)" >&2

: >"$work/results"
for rep in $(seq "$REPS"); do
  /usr/bin/time -f "perf %e %U %S" -a -o "$work/results" \
    perf report -i "$work/perf.data" --sort comm,dso,sym --stdio >/dev/null 2>&1
  rm -rf "$work/out"
  /usr/bin/time -f "culprit %e %U %S" -a -o "$work/results" \
    "$CULPRIT" sample --replay "$work/perf.data" -o "$work/out" --node bench 2>"$work/replay.err"
  tail -2 "$work/results" >&2
done
cat "$work/replay.err" >&2
python3 - "$work/results" "$samples" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0] in ("perf", "culprit")]
by = {}
for r in rows:
    by.setdefault(r[0], []).append([float(x) for x in r[1:]])
print(f"{len(by['perf'])} interleaved repetitions on {sys.argv[2]} samples; medians:")
for cfg in ("perf", "culprit"):
    w = st.median(v[0] for v in by[cfg]); c = st.median(v[1] + v[2] for v in by[cfg])
    print(f"  {cfg:8} wall {w:6.3f} s  CPU {c:6.3f} s")
pw = st.median(v[0] for v in by["perf"]); cw = st.median(v[0] for v in by["culprit"])
print(f"  culprit / perf report wall time: {cw / pw:.2f}")
PY
