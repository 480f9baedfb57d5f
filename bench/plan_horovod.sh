#!/bin/sh
# The Horovod paper's table from dtrain's model (issue 33): VGG-16
# (models/vgg16.model, 224x224x3, 1000 classes, batch 64 a GPU: the
# tf_cnn_benchmarks default) projected onto the paper's hardware
# (docs/clusters/horovod-p100.json: 128 servers of 4 P100s, 25 Gbit/s RoCE;
# every assumption is in the file's comment) at 8 ... 512 GPUs, beside the
# paper's scaling efficiency. The paper's text gives one figure for VGG-16:
# 68% at 512 GPUs (Sergeev & Del Balso 2018; horovod docs/benchmarks.rst);
# Horovod's docs of late 2017 (docs/benchmarks.md, the 128-GPU benchmark:
# 32 such servers) give 79% at 128. The other worker counts are only drawn
# in figures, not printed, and are left blank rather than read off a picture.
#
# The allreduces run as Horovod's loop runs them (--cycle-ms 5, its
# HOROVOD_CYCLE_TIME default; --bucket-mb 64, its fusion threshold): every
# cycle the tensors ready on all ranks, negotiated with the coordinator,
# fused, copied in and out of the fusion buffer, one response after
# another; the NIC gives the payload what RoCE's frames and NCCL leave of
# its line rate (the file's frame_payload, frame_overhead, efficiency).
#
# Printed: the one-GPU throughput the device's efficiency gives (the
# yardstick it was fitted to: TensorFlow's 154 images/s on one P100), then
# per worker count the predicted efficiency of the ring (NCCL 2's flat
# ring, what Horovod ran) and the hierarchical allreduce, the paper's, and
# the difference in points; then the 512-GPU figure with the mechanisms
# added one at a time, from the model without them; then its sensitivity
# to each assumption. Nothing here is measured on this CPU: GPU compute is
# FLOP/s x efficiency.
#
# usage: bench/plan_horovod.sh   (DTRAIN: the binary, default build/dtrain)
DTRAIN=${DTRAIN:-build/dtrain}
CL=docs/clusters/horovod-p100.json
TMP=$(mktemp -d /tmp/plan-horovod.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PLAN="$DTRAIN plan --model models/vgg16.model --classes 1000 --batch 64"
HVD="--cycle-ms 5 --bucket-mb 64" # Horovod's loop, at its defaults

eff() { # FILE WORKERS STRATEGY: the efficiency column, in percent
  awk -v n="$2" -v s="$3" '$1 == n && $2 == s {sub("%", "", $(NF-1)); print $(NF-1)}' "$1"
}

$PLAN --cluster $CL --project 8:512 $HVD --plot "$TMP/horovod.html" >"$TMP/base.txt" 2>"$TMP/err" ||
  { cat "$TMP/err"; exit 1; }
one=$(awk '/a worker.s step alone/ {for (i = 1; i <= NF; i++) if ($i == "alone") print $(i + 1)}' "$TMP/base.txt")
echo "VGG-16 on the Horovod paper's cluster ($CL), batch 64 a GPU"
awk -v t="$one" 'BEGIN {printf "one GPU alone: %.4f s a step = %.1f images/s (yardstick, TensorFlow on one P100: 154; ratio %.3f)\n", t, 64 / t, 64 / t / 154}'
printf '%-6s %12s %12s %8s %12s\n' GPUs "ring_pred%" "hier_pred%" "paper%" "ring-paper"
for n in 8 16 32 64 128 256 512; do
  r=$(eff "$TMP/base.txt" $n allreduce:ring) h=$(eff "$TMP/base.txt" $n allreduce:hier)
  p=; [ $n = 512 ] && p=68; [ $n = 128 ] && p=79
  if [ -n "$p" ]; then d=$(awk -v a="$r" -v b="$p" 'BEGIN {printf "%+.1f", a - b}'); else d=-; p=-; fi
  printf '%-6s %12s %12s %8s %12s\n' $n "$r" "$h" "$p" "$d"
done
echo "(paper: 68% at 512, Sergeev & Del Balso 2018; 79% at 128, horovod docs/benchmarks.md of 2017)"

variant() { # NAME SED-EXPRESSION [PLAN OPTIONS]: the ring's efficiency at 512
  vn=$1 vs=$2; shift 2
  sed "$vs" $CL >"$TMP/v.json"
  $PLAN --cluster "$TMP/v.json" --workers 512 "$@" >"$TMP/v.txt" 2>/dev/null
  printf '  %-58s %6s%%  (paper 68%%)\n' "$vn" "$(eff "$TMP/v.txt" 512 allreduce:ring)"
}
LINE='s/, "frame_payload": 1024, "frame_overhead": 82,//; s/"efficiency": 0.966}/}/'
NOFRAME='s/, "frame_payload": 1024, "frame_overhead": 82,/,/'
NONCCL='s/"efficiency": 0.966}/"efficiency": 1}/'
echo "the mechanisms one at a time at 512 GPUs (ring):"
variant "none: line rate, fixed 64 MB buckets sent when ready" "$LINE" --cycle-ms 0
variant "+ Horovod's loop (5 ms cycle, negotiation, buffer copies)" "$LINE" $HVD
variant "+ RoCE's frames (1024-byte payload, 82 bytes of headers)" "$NONCCL" $HVD
variant "+ NCCL at 0.966 of the payload rate (all: as assumed)" 's/x/x/' $HVD

echo "sensitivity at 512 GPUs (ring), one assumption changed at a time:"
variant "device efficiency x0.75 (1.0405)" 's/"efficiency": 1.3873/"efficiency": 1.0405/' $HVD
variant "device efficiency x1.25 (1.7341)" 's/"efficiency": 1.3873/"efficiency": 1.7341/' $HVD
variant "jumbo frames (RoCE payload 4096)" 's/"frame_payload": 1024/"frame_payload": 4096/' $HVD
variant "NCCL at 0.90 of the payload rate" 's/"efficiency": 0.966}/"efficiency": 0.90}/' $HVD
variant "Horovod's cycle at 1 ms" 's/x/x/' --cycle-ms 1
variant "Horovod's cycle at 20 ms" 's/x/x/' --cycle-ms 20
variant "7 us a message (NCCL's tuning model, averaged)" 's/"inter": {"latency": 10e-6/"inter": {"latency": 7e-6/' $HVD
variant "20 us a message" 's/"inter": {"latency": 10e-6/"inter": {"latency": 20e-6/' $HVD
variant "no overlap (one bucket after backward)" 's/x/x/' --bucket-mb 100000
variant "NIC at half its rate (12.5 Gbit/s)" 's/"bandwidth": 3.125e9/"bandwidth": 1.5625e9/' $HVD

# The same device inside one DGX-1 (NVLink, docs/clusters/dgx1-p100.json)
# against TensorFlow's measured 8-GPU figure (its replicated variables with
# NCCL, not Horovod: no loop), overlapped with backward and not.
$PLAN --cluster docs/clusters/dgx1-p100.json --workers 8 >"$TMP/dgx.txt" 2>/dev/null
$PLAN --cluster docs/clusters/dgx1-p100.json --workers 8 --bucket-mb 100000 >"$TMP/dgx1.txt" 2>/dev/null
awk -v p="$(eff "$TMP/dgx.txt" 8 allreduce:ring)" -v q="$(eff "$TMP/dgx1.txt" 8 allreduce:ring)" 'BEGIN {
  m = 100 * 1081 / (8 * 154);
  printf "one DGX-1, 8 P100s on NVLink, TensorFlow measured %.1f%% (1081 / (8 x 154) images/s):\n", m
  printf "  predicted %.1f%% overlapped (%+.1f points), %.1f%% after backward (%+.1f points)\n", p, p - m, q, q - m}'
echo "(cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load avg $(cut -d' ' -f1 /proc/loadavg); nothing of it is in the figures)"
