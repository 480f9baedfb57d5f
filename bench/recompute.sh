#!/bin/sh
# --recompute: activation memory and step time, none vs blocks vs full.
# 1. bench/recompute.c on one worker (gpt-deep by default): each mode's
#    activation arena, and its step time (wall and process CPU, the
#    fastest of STEPS steps; the modes' steps interleaved in one run, so a
#    shared machine's load falls on all of them alike), and that every
#    mode gives the same bits.
# 2. `dtrain train` on a pipeline (gpt-deep's shape with an untied head,
#    --pp 2, GPipe, 4 micro-batches in flight): activation_peak_bytes of
#    the first stage's rank from the metrics, where `full` keeps one
#    stage input per micro-batch and shares one micro-batch's workspace.
#
# usage: bench/recompute.sh [MODEL [BATCH [STEPS]]]   (gpt-deep 8 5)
set -e
MODEL=${1:-gpt-deep} BATCH=${2:-8} STEPS=${3:-5}
BUILD=${BUILD:-build}
make -s -j2 BUILD="$BUILD" "$BUILD/dtrain" "$BUILD/bench/recompute" >/dev/null
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load avg before: $(cut -d' ' -f1-3 /proc/loadavg) (shared)"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$BUILD/bench/recompute" "$MODEL" "$BATCH" "$STEPS"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
head -c 60000 /usr/share/games/fortunes/cookie >"$TMP/text"
{
  echo "embedding vocab=256 units=256 name=tok"
  echo "posembed positions=128 name=x0"
  b=0
  while [ $b -lt 8 ]; do
    printf 'layernorm\nattention heads=4\nadd with=x%d name=a%d\nlayernorm\nlinear units=1024\ngelu\nlinear units=256\nadd with=a%d name=x%d\n' $b $b $b $((b + 1))
    b=$((b + 1))
  done
  printf 'layernorm\nlmhead vocab=256\n'
} >"$TMP/deep.model"
echo "pipeline: --pp 2 --micro-batches 4 (gpipe), batch 16, T 128, 2 steps; first stage's rank:"
printf '%-8s %22s %10s\n' mode activation_peak_bytes mem_cut
base=
for m in none blocks full; do
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$BUILD/dtrain" train --model "$TMP/deep.model" --data "text:$TMP/text" \
    --batch 16 --max-steps 2 --epochs 1 --workers 2 --pp 2 --micro-batches 4 --quiet \
    --recompute $m --metrics "$TMP/$m.jsonl" >/dev/null
  bytes=$(grep '"event":"epoch"' "$TMP/$m.jsonl" | sed 's/.*"activation_peak_bytes":\([0-9]*\).*/\1/')
  [ -n "$base" ] || base=$bytes
  printf '%-8s %22s %9.2fx\n' $m "$bytes" "$(awk "BEGIN{print $base / $bytes}")"
done
echo "load avg after: $(cut -d' ' -f1-3 /proc/loadavg)"
