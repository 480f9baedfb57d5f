#!/bin/sh
# DC-ASGD against plain async with one 4x straggler (--straggler
# rank=1,slowdown=4): 4 workers, one parameter server, the mlp on
# Fashion-MNIST, test accuracy after each epoch, the staleness the
# compensation works against. Asynchronous runs differ run to run (arrival
# order): SEEDS runs each, their accuracies side by side.
#   sh bench/ps_dc_asgd.sh            (EPOCHS=5, SEEDS="1 2")
#   VARIANTS="async:0 dc:0.04 dc:a:2" picks the runs (dc:X is --dc-asgd X)
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
EPOCHS=${EPOCHS:-5}
SEEDS=${SEEDS:-"1 2"}
VARIANTS=${VARIANTS:-"async:0 dc:0.04 dc:a:2"}
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
COMMON="--workers 4 --exchange ps:1 --schedule async --epochs $EPOCHS --batch 64 --lr 0.05 --momentum 0.9 --lr-schedule cosine --straggler rank=1,slowdown=4 --quiet"
echo "# $DTRAIN train $COMMON --seed S [--dc-asgd X]"
printf "%-14s %5s %-44s %9s %10s %8s\n" variant seed "test accuracy by epoch (%)" final staleness "s/epoch"
for v in $VARIANTS; do
  x=${v#*:}
  for seed in $SEEDS; do
    opt=""
    [ "${v%%:*}" = dc ] && opt="--dc-asgd $x"
    "$DTRAIN" train $COMMON --seed "$seed" $opt --metrics "$TMP/m.jsonl" >/dev/null 2>"$TMP/err" ||
      { echo "$v seed $seed: failed: $(tail -1 "$TMP/err")"; rm -f "$TMP/m.jsonl"; continue; }
    $PY - "$TMP/m.jsonl" "$v" "$seed" <<'PYEOF'
import json, sys
path, v, seed = sys.argv[1:4]
ep = [json.loads(l) for l in open(path) if '"epoch"' in l]
accs = " ".join(f"{100 * e['test_acc']:.2f}" for e in ep)
sec = sum(e["epoch_sec"] for e in ep) / len(ep)
print(f"{v:<14} {seed:>5} {accs:<44} {100 * ep[-1]['test_acc']:8.2f}% {ep[-1]['staleness_mean']:10.2f} {sec:8.2f}")
PYEOF
    rm -f "$TMP/m.jsonl"
  done
done
