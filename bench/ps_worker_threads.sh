#!/bin/sh
# Project Adam's worker-side threads (--worker-threads T, issue 36): the
# project-adam preset's servers (async, ps:2, factors, 2 server threads,
# the 75% epoch cut) with 2 whole replicas (--tp 1: worker threads do not
# combine with --tp), each worker training with T lock-free threads on its
# batch's images, against T = 1 (the yardstick, same run of the script).
# Per variant and seed: test accuracy after each epoch, mean samples/s,
# and the ratios to T = 1 (accuracy difference in points, speed ratio).
#   sh bench/ps_worker_threads.sh        (EPOCHS=5, SEEDS="1 2", THREADS="1 2 4")
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
EPOCHS=${EPOCHS:-5}
SEEDS=${SEEDS:-"1 2"}
THREADS=${THREADS:-"1 2 4"}
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
COMMON="--preset project-adam --workers 2 --tp 1 --epochs $EPOCHS --quiet"
echo "# $DTRAIN train $COMMON --seed S --worker-threads T; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-3s %5s %-44s %8s %9s %8s %8s\n" T seed "test accuracy by epoch (%)" final samples/s "d acc" "speed x"
for seed in $SEEDS; do
  for T in $THREADS; do
    "$DTRAIN" train $COMMON --seed "$seed" --worker-threads "$T" --metrics "$TMP/m$T.jsonl" >/dev/null 2>"$TMP/err" ||
      { echo "T=$T seed $seed: failed: $(tail -1 "$TMP/err")"; continue; }
    $PY - "$TMP/m$T.jsonl" "$TMP/m1.jsonl" "$T" "$seed" <<'PYEOF'
import json, sys
path, base, T, seed = sys.argv[1:5]
def load(p):
    ep = [json.loads(l) for l in open(p) if '"epoch"' in l]
    return ep, sum(e["samples_per_sec"] for e in ep) / len(ep)
ep, sps = load(path)
b, bsps = load(base)
accs = " ".join(f"{100 * e['test_acc']:.2f}" for e in ep)
d = 100 * (ep[-1]["test_acc"] - b[-1]["test_acc"])
print(f"{T:<3} {seed:>5} {accs:<44} {100 * ep[-1]['test_acc']:7.2f}% {sps:9.0f} {d:+8.2f} {sps / bsps:8.2f}")
PYEOF
  done
done
echo "# after: load $(cut -d' ' -f1-3 /proc/loadavg)"
