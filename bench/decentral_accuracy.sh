#!/bin/sh
# Every decentralized method against synchronous allreduce data
# parallelism: mlp on Fashion-MNIST, 4 workers (threads, --comm local),
# 5 epochs, batch 64 per worker, lr 0.05, momentum 0.9, cosine schedule,
# seed 1. Prints a markdown table: final and best test accuracy, training
# seconds (sum of the epochs' epoch_sec) and the seconds to 85%.
# usage: bench/decentral_accuracy.sh [extra dtrain options]
cd "$(dirname "$0")/.." || exit 1
. bench/decentral_lib.sh
EXTRA="$*"
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
COMMON="--model mlp --data fashion-mnist --workers 4 --epochs 5 --batch 64 --lr 0.05 --momentum 0.9 --lr-schedule cosine --seed 1"
echo "| method | options | final test acc | best | train s | s to 85% |"
echo "|---|---|---|---|---|---|"
for m in allreduce sparknet local-sgd easgd easgd-async deepspark d-psgd ad-psgd gosgd tree-easgd mpca-sgd; do
  if [ "$m" = allreduce ]; then opts="--exchange allreduce:ring"; else opts="--preset $m"; fi
  run_until "$TMP/$m.jsonl" 0.85 0 -- $COMMON $opts $EXTRA
  if [ ! -s "$TMP/$m.jsonl" ]; then echo "| $m | $opts | failed: $(head -c 200 "$TMP/$m.jsonl.err") | | | |"; continue; fi
  set -- $(summary "$TMP/$m.jsonl" 0.85)
  echo "| $m | \`$opts\` | $(awk "BEGIN{printf \"%.2f%%\", 100*$1}") | $(awk "BEGIN{printf \"%.2f%%\", 100*$2}") | $3 | $4 |"
done
