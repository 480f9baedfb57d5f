#!/bin/sh
# The Horovod paper's table from dtrain's model (issue 33): VGG-16
# (models/vgg16.model, 224x224x3, 1000 classes, batch 64 a GPU: the
# tf_cnn_benchmarks default) projected onto the paper's hardware
# (docs/clusters/horovod-p100.json: 128 servers of 4 P100s, 25 Gbit/s RoCE;
# every assumption is in the file's comment) at 8 ... 512 GPUs, beside the
# paper's scaling efficiency. The paper's text gives one figure for VGG-16:
# 68% at 512 GPUs (Sergeev & Del Balso 2018; horovod docs/benchmarks.rst);
# the other worker counts are only drawn in its figure, not printed, and
# are left blank rather than read off a picture.
#
# Printed: the one-GPU throughput the device's efficiency gives (the
# yardstick it was fitted to: TensorFlow's 154 images/s on one P100), then
# per worker count the predicted efficiency of the ring (NCCL 2's flat
# ring, what Horovod ran) and the hierarchical allreduce, the paper's, and
# the difference in points; then the sensitivity of the 512-GPU figure to
# the assumptions: the device's efficiency x0.75 and x1.25, no overlap of
# the exchange with backward (one bucket after it), half the NIC's rate.
# Nothing here is measured on this CPU: GPU compute is FLOP/s x efficiency.
#
# usage: bench/plan_horovod.sh   (DTRAIN: the binary, default build/dtrain)
DTRAIN=${DTRAIN:-build/dtrain}
CL=docs/clusters/horovod-p100.json
TMP=$(mktemp -d /tmp/plan-horovod.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PLAN="$DTRAIN plan --model models/vgg16.model --classes 1000 --batch 64"

eff() { # FILE WORKERS STRATEGY: the efficiency column, in percent
  awk -v n="$2" -v s="$3" '$1 == n && $2 == s {sub("%", "", $(NF-1)); print $(NF-1)}' "$1"
}

$PLAN --cluster $CL --project 8:512 --plot "$TMP/horovod.html" >"$TMP/base.txt" 2>"$TMP/err" ||
  { cat "$TMP/err"; exit 1; }
one=$(awk '/a worker.s step alone/ {for (i = 1; i <= NF; i++) if ($i == "alone") print $(i + 1)}' "$TMP/base.txt")
echo "VGG-16 on the Horovod paper's cluster ($CL), batch 64 a GPU"
awk -v t="$one" 'BEGIN {printf "one GPU alone: %.4f s a step = %.1f images/s (yardstick, TensorFlow on one P100: 154; ratio %.3f)\n", t, 64 / t, 64 / t / 154}'
printf '%-6s %12s %12s %8s %12s\n' GPUs "ring_pred%" "hier_pred%" "paper%" "ring-paper"
for n in 8 16 32 64 128 256 512; do
  r=$(eff "$TMP/base.txt" $n allreduce:ring) h=$(eff "$TMP/base.txt" $n allreduce:hier)
  p=; [ $n = 512 ] && p=68
  if [ -n "$p" ]; then d=$(awk -v a="$r" -v b="$p" 'BEGIN {printf "%+.1f", a - b}'); else d=-; p=-; fi
  printf '%-6s %12s %12s %8s %12s\n' $n "$r" "$h" "$p" "$d"
done

echo "sensitivity at 512 GPUs (ring):"
variant() { # NAME SED-EXPRESSION [PLAN OPTIONS]
  vn=$1 vs=$2; shift 2
  sed "$vs" $CL >"$TMP/v.json"
  $PLAN --cluster "$TMP/v.json" --workers 512 "$@" >"$TMP/v.txt" 2>/dev/null
  printf '  %-44s %6s%%  (paper 68%%)\n' "$vn" "$(eff "$TMP/v.txt" 512 allreduce:ring)"
}
variant "as assumed" 's/x/x/'
variant "device efficiency x0.75 (1.0405)" 's/"efficiency": 1.3873/"efficiency": 1.0405/'
variant "device efficiency x1.25 (1.7341)" 's/"efficiency": 1.3873/"efficiency": 1.7341/'
variant "no overlap (one bucket after backward)" 's/x/x/' --bucket-mb 100000
variant "NIC at half its rate (12.5 Gbit/s)" 's/"bandwidth": 3.125e9/"bandwidth": 1.5625e9/'

# The same device inside one DGX-1 (NVLink, docs/clusters/dgx1-p100.json)
# against TensorFlow's measured 8-GPU figure: what the model leaves out
# where the links are not the limit.
$PLAN --cluster docs/clusters/dgx1-p100.json --workers 8 >"$TMP/dgx.txt" 2>/dev/null
awk -v p="$(eff "$TMP/dgx.txt" 8 allreduce:ring)" 'BEGIN {m = 100 * 1081 / (8 * 154);
  printf "one DGX-1, 8 P100s on NVLink: predicted %.1f%%, TensorFlow measured %.1f%% (1081 / (8 x 154) images/s): %+.1f points\n", p, m, p - m}'
echo "(cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load avg $(cut -d' ' -f1 /proc/loadavg); nothing of it is in the figures)"
