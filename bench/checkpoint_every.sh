#!/bin/sh
# The cost of --checkpoint-every (issue 35): the same run with a checkpoint
# every epoch only (the yardstick) and with one every K steps, interleaved,
# ROUNDS rounds; prints each round's run times, the median ratio, and the
# median time rank 0 spends writing one checkpoint (write_sec, from the
# metrics) against the median step time of the yardstick.
#   bench/checkpoint_every.sh [MODEL] [K] [ROUNDS]     (mlp 8 3)
# DTRAIN (build/dtrain), WORKERS (4), EPOCHS (3), DATA (a 4096-sample slice
# of Fashion-MNIST made here).
MODEL=${1:-mlp} K=${2:-8} ROUNDS=${3:-3}
WORKERS=${WORKERS:-4} EPOCHS=${EPOCHS:-3}
. tests/lib.sh # $TMP (removed at exit), $DTRAIN, make_small_fashion
set -eu
if [ -z "${DATA:-}" ]; then
  DATA="$TMP/data"
  make_small_fashion "$DATA" 4096 512
fi
run() { # TAG [options]: the run's metrics in $TMP/TAG.jsonl
  tag=$1
  shift
  rm -f "$TMP/$tag.st" "$TMP/$tag.jsonl"
  "$DTRAIN" train --data "$DATA" --model "$MODEL" --batch 16 --seed 1 --quiet --workers "$WORKERS" \
    --epochs "$EPOCHS" --exchange allreduce:ring --checkpoint "$TMP/$tag.st" --metrics "$TMP/$tag.jsonl" "$@" >/dev/null
}
r=1
while [ $r -le "$ROUNDS" ]; do
  run "base$r"
  run "every$r" --checkpoint-every "$K"
  r=$((r + 1))
done
/usr/bin/python3 - "$TMP" "$ROUNDS" "$K" <<'EOF'
import json, statistics, sys
tmp, rounds, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def recs(tag): return [json.loads(l) for l in open(f"{tmp}/{tag}.jsonl")]
ratios, writes, steps = [], [], []
for r in range(1, rounds + 1):
    b, e = recs(f"base{r}"), recs(f"every{r}")
    tb, te = b[-1]["total_sec"], e[-1]["total_sec"]
    ratios.append(te / tb)
    writes += [d["write_sec"] for d in e if d["event"] == "checkpoint"]
    steps.append(tb / b[-1]["steps"])
    print(f"round {r}: epochs only {tb:.3f} s, every {k} steps {te:.3f} s: {te / tb:.3f}")
print(f"median ratio (every {k} steps / epochs only): {statistics.median(ratios):.3f}")
print(f"median write_sec {statistics.median(writes) * 1e3:.1f} ms over {len(writes)} checkpoints; "
      f"median step {statistics.median(steps) * 1e3:.1f} ms; a write every {k} steps = "
      f"{statistics.median(writes) / (k * statistics.median(steps)):.3f} of their time")
EOF
