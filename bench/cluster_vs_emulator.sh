#!/bin/sh
# The emulator against a real network: the same training on the namespace
# cluster (scripts/cluster.sh: 2 hosts x 2 ranks, TCP between hosts through
# a tbf of RATE each way on each host's link) and on --comm local with
# --net hosts=2,bandwidth=RATE, with each rank its own link of RATE to the
# other host (link=own) and with the host's ranks sharing one
# (link=shared, the default: as on a real machine). Prints each one's seconds per step
# (the best of ROUNDS, interleaved) and emulated/real; needs root.
#
# usage: sudo bench/cluster_vs_emulator.sh [RATE_MBIT=500] [STEPS=60] [ROUNDS=3] [MODEL=mlp]
RATE=${1:-500} STEPS=${2:-60} ROUNDS=${3:-3} MODEL=${4:-mlp}
DTRAIN=${DTRAIN:-build/dtrain}
. tests/lib.sh
NAME="b$(($$ % 100000))"
trap 'scripts/cluster.sh down "$NAME" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
make_small_fashion "$TMP/small" 8192 512
scripts/cluster.sh up "$NAME" 2 --bandwidth "${RATE}mbit" >/dev/null || exit 1
B="--data $TMP/small --model $MODEL --batch 64 --epochs 1 --max-steps $STEPS --seed 1 --quiet --workers 4 --exchange allreduce:hier"
sec() { $PY -c 'import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; print(d["total_sec"] / d["steps"])' "$1"; }
best_real=9e9 best_emu=9e9 best_shared=9e9
r=0
while [ $r -lt "$ROUNDS" ]; do
  scripts/cluster.sh run "$NAME" 2 -- "$DTRAIN" train $B --comm mpi --metrics "$TMP/real.jsonl" >/dev/null 2>&1
  "$DTRAIN" train $B --net "hosts=2,bandwidth=${RATE}Mbit,link=own" --metrics "$TMP/emu.jsonl" >/dev/null 2>&1
  "$DTRAIN" train $B --net "hosts=2,bandwidth=${RATE}Mbit,link=shared" --metrics "$TMP/shared.jsonl" >/dev/null 2>&1
  real=$(sec "$TMP/real.jsonl") emu=$(sec "$TMP/emu.jsonl") shared=$(sec "$TMP/shared.jsonl")
  best_real=$($PY -c "print(min($best_real, $real))") best_emu=$($PY -c "print(min($best_emu, $emu))")
  best_shared=$($PY -c "print(min($best_shared, $shared))")
  r=$((r + 1))
done
$PY -c "
real, emu, shared = $best_real, $best_emu, $best_shared
print(f'$MODEL, 2 hosts x 2 ranks, allreduce:hier, $RATE Mbit/s each way per host link, $STEPS steps, best of $ROUNDS')
print(f'  namespace cluster (tbf, TCP):  {real * 1e3:8.2f} ms/step')
print(f'  --net, link=own (a rank each): {emu * 1e3:8.2f} ms/step   emulated / real {emu / real:6.3f}')
print(f'  --net, link=shared (a host):   {shared * 1e3:8.2f} ms/step   emulated / real {shared / real:6.3f}')"
