#!/bin/sh
# Project Adam's server-side traits against the preset's old behaviour:
# the project-adam preset (async, ps:2, 2 replicas x tp 2, the 75% epoch
# cut) with its dense layers pushed as sufficient factors and 2 lock-free
# server threads (--ps-push factors --ps-server-threads 2, today's preset)
# against gradient pushes and one server thread (the preset before issue
# 36). Test accuracy after each epoch (asynchronous runs differ run to
# run: SEEDS runs each), and the bytes a tp rank pushes per push, counted
# by the transport on 12 sync steps of the same configuration; the ratio
# factors / gradients is the yardstick comparison.
#   sh bench/ps_project_adam.sh            (EPOCHS=5, SEEDS="1 2")
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
EPOCHS=${EPOCHS:-5}
SEEDS=${SEEDS:-"1 2"}
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
COMMON="--preset project-adam --workers 4 --epochs $EPOCHS --quiet"
FACTORS="--ps-push factors --ps-server-threads 2"
GRADIENTS="--ps-push gradients --ps-server-threads 1"
echo "# $DTRAIN train $COMMON --seed S, with '$FACTORS' (factors) or '$GRADIENTS' (gradients)"
for v in factors gradients; do
  opt=$FACTORS; [ $v = gradients ] && opt=$GRADIENTS
  "$DTRAIN" train $COMMON $opt --schedule sync --epochs 1 --max-steps 12 --metrics "$TMP/$v.bytes" >/dev/null 2>"$TMP/err" ||
    { echo "$v: bytes run failed: $(tail -1 "$TMP/err")"; exit 1; }
done
$PY - "$TMP/factors.bytes" "$TMP/gradients.bytes" <<'PYEOF'
import json, sys
per = []
for path in sys.argv[1:3]:
    ep = [json.loads(l) for l in open(path) if '"epoch"' in l][-1]
    per.append([b / 12 for b in ep["tp_bytes_pushed"]])
f, g = per
print("bytes per push, tp rank 0 / 1: factors %d / %d, gradients %d / %d; factors / gradients = %.3f / %.3f"
      % (f[0], f[1], g[0], g[1], f[0] / g[0], f[1] / g[1]))
PYEOF
printf "%-10s %5s %-44s %9s %8s\n" variant seed "test accuracy by epoch (%)" final "s/epoch"
for v in factors gradients; do
  opt=$FACTORS; [ $v = gradients ] && opt=$GRADIENTS
  for seed in $SEEDS; do
    "$DTRAIN" train $COMMON $opt --seed "$seed" --metrics "$TMP/m.jsonl" >/dev/null 2>"$TMP/err" ||
      { echo "$v seed $seed: failed: $(tail -1 "$TMP/err")"; rm -f "$TMP/m.jsonl"; continue; }
    $PY - "$TMP/m.jsonl" "$v" "$seed" <<'PYEOF'
import json, sys
path, v, seed = sys.argv[1:4]
ep = [json.loads(l) for l in open(path) if '"epoch"' in l]
accs = " ".join(f"{100 * e['test_acc']:.2f}" for e in ep)
sec = sum(e["epoch_sec"] for e in ep) / len(ep)
print(f"{v:<10} {seed:>5} {accs:<44} {100 * ep[-1]['test_acc']:8.2f}% {sec:8.2f}")
PYEOF
    rm -f "$TMP/m.jsonl"
  done
done
