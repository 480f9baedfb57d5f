#!/bin/sh
# Time per synchronous step with K = 1, 2, 4 parameter servers under an
# emulated 1 Gbit/s network (4 workers, mlp on Fashion-MNIST, batch 64 per
# worker): each server's link carries N/K of the model in replies per step,
# so a single server's link is the bottleneck and the step time falls as K
# grows, down to the workers' own links (one model each way per step).
# allreduce:ring on the same network is the yardstick.
#   sh bench/ps_servers.sh            (STEPS=40 NET=latency=50us,bandwidth=1Gbit)
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
STEPS=${STEPS:-40}
NET=${NET:-latency=50us,bandwidth=1Gbit}
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
COMMON="--workers 4 --epochs 1 --max-steps $STEPS --batch 64 --lr 0.05 --momentum 0.9 --seed 1 --net $NET --quiet"
echo "# $DTRAIN train $COMMON --exchange ps:K   (emulated network)"
printf "%-16s %12s %14s %10s\n" exchange "ms/step" "server MB/step" speed-up
for ex in ps:1 ps:2 ps:4 allreduce:ring; do
  "$DTRAIN" train $COMMON --exchange $ex --metrics "$TMP/$ex.jsonl" >/dev/null 2>"$TMP/err" || { echo "$ex: failed: $(tail -1 "$TMP/err")"; continue; }
  $PY - "$TMP/$ex.jsonl" "$ex" "$STEPS" "$TMP/base" <<'PYEOF'
import json, os, sys
path, ex, steps, base = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
e = [json.loads(l) for l in open(path) if '"epoch"' in l][0]
ms = 1000 * e["epoch_sec"] / steps
model_mb = e["bytes_pushed"][0] / steps / 1e6 if "bytes_pushed" in e else 0
k = int(ex.split(":")[1]) if ex.startswith("ps:") else 0
# the busiest server link sends N/K models (pull replies) per step
server_mb = f"{4 * model_mb / k:.1f}" if k else "-"
if not os.path.exists(base): open(base, "w").write(str(ms))
first = float(open(base).read())
print(f"{ex:<16} {ms:12.1f} {server_mb:>14} {first / ms:9.2f}x")
PYEOF
done
