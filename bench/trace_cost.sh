#!/bin/sh
# The cost of --trace: the same training with and without a timeline of
# every step, interleaved round by round (the yardstick is the untraced
# run of the same round). Prints each round's seconds and, at the end,
# traced / untraced as best and median over the rounds.
#   sh bench/trace_cost.sh [ROUNDS] [STEPS] [extra train options...]
DTRAIN=${DTRAIN:-build/dtrain}
ROUNDS=${1:-5}; STEPS=${2:-300}
[ $# -ge 2 ] && shift 2 || shift $#
TMP=$(mktemp -d /tmp/dtrain-trace-cost.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
ARGS="--model mlp --workers 2 --max-steps $STEPS --quiet $*"
run() { # prints the run's total_sec
  $DTRAIN train $ARGS --metrics "$TMP/m.jsonl" "$@" >/dev/null 2>&1 || { echo "run failed" >&2; exit 1; }
  sed -n 's/.*"event":"done".*"total_sec":\([0-9.]*\).*/\1/p' "$TMP/m.jsonl"
}
echo "round  untraced_s  traced_s  ratio   ($ARGS)"
: >"$TMP/ratios"
for r in $(seq 1 "$ROUNDS"); do
  rm -f "$TMP/t.json"
  a=$(run); b=$(run --trace "$TMP/t.json")
  ratio=$(echo "$b $a" | awk '{printf "%.3f", $1 / $2}')
  echo "$ratio" >>"$TMP/ratios"
  printf '%5d  %10s  %8s  %s  (trace %s bytes)\n' "$r" "$a" "$b" "$ratio" "$(wc -c <"$TMP/t.json")"
done
sort -n "$TMP/ratios" | awk '{v[NR]=$1} END {printf "traced/untraced: best %.3f, median %.3f over %d rounds\n", v[1], v[int((NR+1)/2)], NR}'
