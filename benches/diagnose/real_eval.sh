#!/usr/bin/env bash
# Accuracy of the diagnosis scores on real data (an experiment, not a test): groups of N
# processes of tests/c/diag_server.c, each its own node, traced by libculprit_rt.so.
#
#   R fault-free runs   (the first 3 train thresholds, the others measure false positives)
#   R runs with an extreme fault: one node does 20x the work of checksum_payload from 3 s
#   R runs with a moderate fault: one node does 30x the work of lookup_object from 3 s
#
# For each score (seed 000's pairwise median, median node, leave-one-out), trained and
# untrained: TP = the faulty node is a culprit, FP = a healthy node is (seed 000's definitions).
#
#   N=4 R=8 SECS=10 bash benches/diagnose/real_eval.sh
#
# Environment: N nodes (4), R runs per kind (8), SECS per run (10), KINDS (which runs: "ff x m"),
# SIZE and SHIFT (windows: 1s, 500ms), RT (runtime library; default
# target/release/libculprit_rt.so), DATA (reuse the runs of an earlier KEEP=1 run), KEEP=1,
# NICE (run the servers at this niceness, e.g. -10 as root: shields them from the other load of
# a shared machine, as a node's own CPU share would).
# Windows are short so runs are short: 3 of 5 windows of 1 s every 500 ms is 1.5 s of
# persistence, where the defaults (60 s every 30 s) need 90 s.
set -euo pipefail
N=${N:-4}
R=${R:-8}
SECS=${SECS:-10}
KINDS=${KINDS:-ff x m}
SIZE=${SIZE:-1s}
SHIFT=${SHIFT:-500ms}
NICE=${NICE:-0}
root=$(cd "$(dirname "$0")/../.." && pwd)
(cd "$root" && cargo build --release -q -p culprit -p culprit-rt)
CULPRIT=$root/target/release/culprit
RT=${RT:-$root/target/release/libculprit_rt.so}
if [ -n "${DATA:-}" ]; then
    work=$DATA
else
    work=$(mktemp -d /tmp/culprit-real-eval.XXXXXX)
    [ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
fi
gcc -O0 -g -finstrument-functions -o "$work/srv" "$root/tests/c/diag_server.c"
OPTS=(--win-size "$SIZE" --win-shift "$SHIFT" --min-time 1ms)

echo "N=$N, $R runs per kind ($KINDS), $SECS s each, windows $SIZE every $SHIFT, nice $NICE; data in $work"
for r in $(seq 1 "$R"); do
    [ -n "${DATA:-}" ] && break
    bad=$((r % N))
    for i in $(seq 0 $((N - 1))); do
        CULPRIT_DIR=$work/ff$r CULPRIT_NODE=n$i CULPRIT_INTERVAL_MS=100 LD_PRELOAD=$RT \
            nice -n "$NICE" "$work/srv" "$SECS" >/dev/null &
    done
    wait
    for kind in $KINDS; do
        [ $kind = ff ] && continue
        if [ $kind = x ]; then fault=(work checksum_payload 20 3); else fault=(work lookup_object 30 3); fi
        for i in $(seq 0 $((N - 1))); do
            extra=()
            [ "$i" = "$bad" ] && extra=("${fault[@]}")
            CULPRIT_DIR=$work/$kind$r CULPRIT_NODE=n$i CULPRIT_INTERVAL_MS=100 LD_PRELOAD=$RT \
                nice -n "$NICE" "$work/srv" "$SECS" "${extra[@]}" >/dev/null &
        done
        wait
        echo "n$bad" >"$work/$kind$r.bad"
    done
done

printf '%-14s %-10s %14s %20s %20s\n' score thresholds "fault-free FP" "20x work TP/FP" "30x work TP/FP"
for score in pairwise median-node leave-one-out; do
    "$CULPRIT" train "$work/ff1" "$work/ff2" "$work/ff3" --score "$score" "${OPTS[@]}" \
        --out "$work/th-$score.json" >/dev/null
    for trained in yes no; do
        args=(--score "$score" "${OPTS[@]}")
        [ $trained = yes ] && args=(--thresholds "$work/th-$score.json")
        line=$(
            for r in $(seq 1 "$R"); do
                for kind in $KINDS; do
                    [ $kind = ff ] && [ "$r" -le 3 ] && continue
                    [ -d "$work/$kind$r" ] || continue
                    bad=none
                    [ -f "$work/$kind$r.bad" ] && bad=$(cat "$work/$kind$r.bad")
                    echo "$kind $bad $("$CULPRIT" diagnose "$work/$kind$r" "${args[@]}" --json | python3 -c \
                        'import json,sys; print(",".join(json.load(sys.stdin)["culprits"]) or "-")')"
                done
            done | python3 -c '
import sys
t = {}
for l in sys.stdin:
    kind, bad, got = l.split()
    got = [] if got == "-" else got.split(",")
    s = t.setdefault(kind, [0, 0, 0])
    s[0] += 1
    s[1] += bad in got
    s[2] += any(g != bad for g in got)
p = lambda k, i: "%5.1f%%" % (100.0 * t[k][i] / t[k][0]) if k in t else "-"
print("%14s %11s / %6s %11s / %6s" % (p("ff", 2), p("x", 1), p("x", 2), p("m", 1), p("m", 2)))
'
        )
        printf '%-14s %-10s %s\n' "$score" "$([ $trained = yes ] && echo trained || echo untrained)" "$line"
    done
done
