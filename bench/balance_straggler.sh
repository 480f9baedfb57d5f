#!/bin/sh
# --balance against a straggler: 2 workers of synchronous data parallelism,
# rank 1 computing SLOWDOWN times slower (--straggler), with and without
# splitting each step's batch by measured speed. The two settings run
# interleaved, ROUNDS times (this VM drifts); each keeps its best round.
# The global batch is 128 a step either way, so samples/s compare directly.
#   sh bench/balance_straggler.sh       (ROUNDS=3 SLOWDOWN=2 STEPS=400)
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
ROUNDS=${ROUNDS:-3}
SLOWDOWN=${SLOWDOWN:-2}
STEPS=${STEPS:-400}
export OPENBLAS_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
COMMON="--model mlp --workers 2 --batch 64 --lr 0.05 --momentum 0.9 --lr-schedule cosine --max-steps $STEPS --straggler rank=1,slowdown=$SLOWDOWN --quiet"
echo "# $DTRAIN train $COMMON EXCHANGE --balance off|on   (best of $ROUNDS interleaved rounds)"
printf "%-34s %12s %12s %8s %16s\n" exchange "off samples/s" "on samples/s" "on/off" "batch per rank"
for ex in "shared --schedule sync" "allreduce:ring" ; do
  name=$(echo "$ex" | cut -d' ' -f1)
  for r in $(seq "$ROUNDS"); do
    for b in off on; do
      "$DTRAIN" train $COMMON --exchange $ex --balance $b --metrics "$TMP/$name.$b.$r.jsonl" >/dev/null 2>"$TMP/err" ||
        { echo "$ex --balance $b: failed: $(tail -1 "$TMP/err")"; exit 1; }
    done
  done
  $PY - "$TMP" "$name" "$ROUNDS" "$ex" <<'PYEOF'
import json, sys
tmp, name, rounds, ex = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def first(b, r): return json.loads(open(f"{tmp}/{name}.{b}.{r}.jsonl").readline())
off = max(first("off", r)["samples_per_sec"] for r in range(1, rounds + 1))
on_rows = [first("on", r) for r in range(1, rounds + 1)]
best = max(on_rows, key=lambda e: e["samples_per_sec"])
print(f"{ex:<34} {off:12.0f} {best['samples_per_sec']:12.0f} {best['samples_per_sec'] / off:7.2f}x {str(best['batch_per_rank']):>16}")
print(json.dumps({"bench": "balance_straggler", "exchange": ex, "off": round(off), "on": round(best["samples_per_sec"]),
                  "ratio": round(best["samples_per_sec"] / off, 3), "batch_per_rank": best["batch_per_rank"]}))
PYEOF
done
