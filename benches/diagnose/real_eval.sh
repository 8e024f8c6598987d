#!/usr/bin/env bash
# Accuracy of the diagnosis scores on real data (an experiment, not a test): groups of N
# processes of tests/c/diag_server.c, each its own node, traced by libculprit_rt.so.
#
# Kinds of runs (R of each; the first 3 of each fault-free kind train thresholds):
#   ff  fault-free
#   x   one node does 20x the work of checksum_payload from 3 s (extreme)
#   m   one node does 30x the work of lookup_object from 3 s (moderate)
#   fo  fault-free, but node n1 is persistently different: it always does 25x the
#       lookup_object work (another role) — the small-cluster case of issue 4
#   xo  as fo, and another node does 20x checksum_payload from 3 s
# ff/x/m are judged with thresholds trained on ff1-3, fo/xo with thresholds trained on fo1-3.
#
# For each score (seed 000's pairwise median, median node, leave-one-out), trained and
# untrained: TP = the faulty node is a culprit, FP = a healthy node is (seed 000's definitions).
#
#   NICE=-10 N=4 R=10 bash benches/diagnose/real_eval.sh
#
# Environment: N nodes (4), R runs per kind (8), SECS per run (10), KINDS ("ff x m fo xo"),
# SIZE and SHIFT (windows: 1s, 500ms), NICE (niceness of the servers, e.g. -10 as root: shields
# them from the other load of a shared machine, as a node's own CPU share would), RT (runtime
# library; default target/release/libculprit_rt.so), DATA (reuse the runs of an earlier KEEP=1
# run), KEEP=1 keeps the data. Windows are short so runs are short: 3 of 5 windows of 1 s every
# 500 ms is 1.5 s of persistence, where the defaults (60 s every 30 s) need 90 s.
set -euo pipefail
N=${N:-4}
R=${R:-8}
SECS=${SECS:-10}
KINDS=${KINDS:-ff x m fo xo}
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

# The faulty node of run R of KIND (none for fault-free kinds).
bad_of() {
    case $1 in
    x | m) echo "n$(($2 % N))" ;;
    xo) # any node but n1
        local b=$(($2 % (N - 1)))
        [ $b -ge 1 ] && b=$((b + 1))
        echo "n$b"
        ;;
    *) echo none ;;
    esac
}

# The arguments of node I in run R of KIND.
node_args() {
    local kind=$1 r=$2 i=$3
    local bad
    bad=$(bad_of "$kind" "$r")
    if [ "n$i" = "$bad" ]; then
        case $kind in
        m) echo "work lookup_object 30 3" ;;
        *) echo "work checksum_payload 20 3" ;;
        esac
    elif [ "$i" = 1 ] && { [ "$kind" = fo ] || [ "$kind" = xo ]; }; then
        echo "work lookup_object 25 0"
    fi
}

echo "N=$N, $R runs per kind ($KINDS), $SECS s each, windows $SIZE every $SHIFT, nice $NICE; data in $work"
for r in $(seq 1 "$R"); do
    [ -n "${DATA:-}" ] && break
    for kind in $KINDS; do
        for i in $(seq 0 $((N - 1))); do
            # shellcheck disable=SC2046 # word splitting of the fault arguments is intended
            CULPRIT_DIR=$work/$kind$r CULPRIT_NODE=n$i CULPRIT_INTERVAL_MS=100 LD_PRELOAD=$RT \
                nice -n "$NICE" "$work/srv" "$SECS" $(node_args "$kind" "$r" "$i") >/dev/null &
        done
        wait
    done
done

printf '%-14s %-10s' score thresholds
for kind in $KINDS; do printf ' %16s' "$kind TP/FP"; done
echo
for score in pairwise median-node leave-one-out; do
    for set in ff fo; do
        [ -d "$work/${set}3" ] || continue
        "$CULPRIT" train "$work/${set}1" "$work/${set}2" "$work/${set}3" --score "$score" \
            "${OPTS[@]}" --out "$work/th-$set-$score.json" >/dev/null
    done
    for trained in yes no; do
        line=$(
            for r in $(seq 1 "$R"); do
                for kind in $KINDS; do
                    case $kind in ff | fo) [ "$r" -le 3 ] && continue ;; esac
                    case $kind in fo | xo) set=fo ;; *) set=ff ;; esac
                    args=(--score "$score" "${OPTS[@]}")
                    [ $trained = yes ] && args=(--thresholds "$work/th-$set-$score.json")
                    echo "$kind $(bad_of "$kind" "$r") $("$CULPRIT" diagnose "$work/$kind$r" "${args[@]}" --json |
                        python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["culprits"]) or "-")')"
                done
            done | KINDS="$KINDS" python3 -c '
import os, sys
t = {}
for l in sys.stdin:
    kind, bad, got = l.split()
    got = [] if got == "-" else got.split(",")
    s = t.setdefault(kind, [0, 0, 0])
    s[0] += 1
    s[1] += bad in got
    s[2] += any(g != bad for g in got)
out = []
for k in os.environ["KINDS"].split():
    n, tp, fp = t.get(k, [0, 0, 0])
    pct = lambda v: "%3.0f%%" % (100.0 * v / n) if n else "  - "
    out.append("%16s" % ("%s / %s" % ("  - " if k in ("ff", "fo") else pct(tp), pct(fp))))
print(" ".join(out))
'
        )
        printf '%-14s %-10s %s\n' "$score" "$([ $trained = yes ] && echo trained || echo untrained)" "$line"
    done
done
