#!/bin/sh
# One straggler (--straggler rank=1,slowdown=4) among 4 workers on one
# parameter server: how long an epoch takes under each schedule, and the
# accuracy each reaches. sync waits for the straggler at every step; async
# and backup:1 do not; ssp:3 lets the others run at most 3 clocks ahead,
# so a straggler that is slow all the time sets its pace (as the taxonomy
# notes: bounded staleness absorbs occasional delays, not a slow worker).
# An epoch is one pass over the shared batch order (sync, ssp: the
# synchronous slices), so fast workers take more batches under async.
#   sh bench/ps_stragglers.sh         (EPOCHS=1; the mlp on Fashion-MNIST)
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
EPOCHS=${EPOCHS:-1}
SCHEDULES=${SCHEDULES:-"sync async ssp:3 backup:1"}
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
COMMON="--workers 4 --exchange ps:1 --epochs $EPOCHS --batch 64 --lr 0.05 --momentum 0.9 --lr-schedule cosine --seed 1 --straggler rank=1,slowdown=4 --quiet"
echo "# $DTRAIN train $COMMON --schedule S"
printf "%-10s %10s %9s %22s %9s %10s\n" schedule "epoch s" speed-up "batches per worker" "test acc" staleness
for s in $SCHEDULES; do
  "$DTRAIN" train $COMMON --schedule $s --metrics "$TMP/$s.jsonl" >/dev/null 2>"$TMP/err" || { echo "$s: failed: $(tail -1 "$TMP/err")"; continue; }
  $PY - "$TMP/$s.jsonl" "$s" "$TMP/base" <<'PYEOF'
import json, os, sys
path, s, base = sys.argv[1:4]
ep = [json.loads(l) for l in open(path) if '"epoch"' in l]
sec = sum(e["epoch_sec"] for e in ep) / len(ep)
batches = [sum(e["batches"][w] for e in ep) / len(ep) for w in range(4)]
if not os.path.exists(base): open(base, "w").write(str(sec))
first = float(open(base).read())
print(f"{s:<10} {sec:10.2f} {first / sec:8.2f}x {str([round(b) for b in batches]):>22} {100 * ep[-1]['test_acc']:8.2f}% {ep[-1]['staleness_mean']:10.2f}")
PYEOF
done
