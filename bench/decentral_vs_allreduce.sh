#!/bin/sh
# Under an emulated 100 Mbit/s network (--net latency=50us,bandwidth=100Mbit,
# --comm local), time to 85% test accuracy of synchronous allreduce data
# parallelism against local SGD (tau = 8) and GoSGD: mlp, 4 workers, batch
# 64 per worker, lr 0.05, momentum 0.9, cosine over 5 epochs, seed 1. Time
# is the sum of the epochs' epoch_sec (training only, evaluation excluded)
# up to the first epoch with test_acc >= 0.85; a run stops once there
# (pass --full to run all 5 epochs). Prints a markdown table with the ratio
# to allreduce. Emulated: the link model of comm/local, not a real network.
# usage: bench/decentral_vs_allreduce.sh [--full]
cd "$(dirname "$0")/.." || exit 1
. bench/decentral_lib.sh
STOP=1
[ "$1" = --full ] && STOP=0
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
NET="--net latency=50us,bandwidth=100Mbit"
COMMON="--model mlp --data fashion-mnist --workers 4 --epochs 5 --batch 64 --lr 0.05 --momentum 0.9 --lr-schedule cosine --seed 1"
echo "emulated network: latency 50 us, 100 Mbit/s per rank's outgoing link; target 85% test accuracy"
echo
echo "| method | options | s to 85% (epoch) | speed-up over allreduce | test acc at stop |"
echo "|---|---|---|---|---|"
base=""
for m in allreduce local-sgd gosgd; do
  case $m in
    allreduce) opts="--exchange allreduce:ring" ;;
    local-sgd) opts="--preset local-sgd --tau 8" ;;
    gosgd) opts="--preset gosgd" ;;
  esac
  run_until "$TMP/$m.jsonl" 0.85 $STOP -- $COMMON $NET $opts
  if [ ! -s "$TMP/$m.jsonl" ]; then echo "| $m | \`$opts\` | failed: $(head -c 200 "$TMP/$m.jsonl.err") | | |"; continue; fi
  set -- $(summary "$TMP/$m.jsonl" 0.85)
  t=$4
  [ "$m" = allreduce ] && base=$t
  if [ "$t" = never ] || [ -z "$base" ] || [ "$base" = never ]; then ratio="-"
  else ratio=$(awk "BEGIN{printf \"%.1fx\", $base/$t}"); fi
  echo "| $m | \`$opts\` | $t ($5) | $ratio | $(awk "BEGIN{printf \"%.2f%%\", 100*$1}") |"
done
