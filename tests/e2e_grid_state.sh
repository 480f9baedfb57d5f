#!/bin/sh
# End-to-end checks of the tensor and pipeline grids' state and options
# (issue 37, items 5, 7, 13): the compressor's state kept across a resume
# under --tp and --pp, --compress refused where no replica sums gradients,
# dropout under a pipeline drawing one worker's masks.
. tests/lib.sh
SYN="--data synthetic --quiet --max-steps 2 --epochs 1"

# ---- --compress where no data-parallel replica sums gradients (item 7) ----
# one worker, or one tensor-parallel group: the run equalled the
# uncompressed one (bytes and weights); refused before it starts
expect_error compress_one_worker_refused 2 "option --compress int8: one worker sums no gradients" -- \
  "$DTRAIN" train $SYN --workers 1 --compress int8
expect_error compress_one_tp_group_refused 2 "option --compress int8: --tp 2 on 2 workers is one tensor-parallel group, no data-parallel replica" -- \
  "$DTRAIN" train $SYN --workers 2 --tp 2 --compress int8
"$DTRAIN" train $SYN --workers 4 --tp 2 --compress int8 >/dev/null 2>"$TMP/err"
check compress_dp2_tp2_still_runs [ $? -eq 0 ]
if have_mpi; then
  $MPIRUN -np 2 "$DTRAIN" train $SYN --comm mpi --tp 2 --compress int8 >/dev/null 2>"$TMP/err"
  check mpi_compress_one_tp_group_refused grep -q "mpirun -np 2 and --tp 2 leaves one data-parallel replica" "$TMP/err"
fi

# ---- the compressor's state across a resume on a grid (item 5) -----------
# every rank's error-feedback memory, DGC velocity and PowerSGD Q is saved
# by world rank, so 1 + 1 epochs are the 2-epoch run bit for bit under
# --tp and --pp as under plain data parallelism (before: 1.4e-2 apart)
TINY="$TMP/tiny"
make_small_fashion "$TINY" 256 64
RES="--data $TINY --quiet --lr 0.05 --momentum 0.9 --seed 3 --batch 16"
resume_case() { # NAME GRID...: straight 2 epochs against 1 + resumed 1, local and mpi
  name=$1; shift
  "$DTRAIN" train $RES "$@" --epochs 2 --checkpoint "$TMP/$name.a" >/dev/null 2>&1
  "$DTRAIN" train $RES "$@" --epochs 1 --checkpoint "$TMP/$name.h" >/dev/null 2>&1
  "$DTRAIN" train $RES "$@" --epochs 2 --resume "$TMP/$name.h" --checkpoint "$TMP/$name.b" >/dev/null 2>&1
  check "${name}_resume_bit_exact" cmp -s "$TMP/$name.a" "$TMP/$name.b"
}
resume_case tp2_dgc --workers 4 --tp 2 --compress dgc:0.01
resume_case tp2_powersgd --workers 4 --tp 2 --compress powersgd:2
resume_case pp2_dgc --workers 4 --pp 2 --micro-batches 2 --compress dgc:0.01
resume_case pp2_onebit_2bw --workers 4 --pp 2 --micro-batches 2 --pipe-schedule 2bw --compress onebit
check "grid_checkpoint_names_memory_by_world_rank" $PY -c "
import json, struct
b = open('$TMP/tp2_dgc.h', 'rb').read(); h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
assert h['__metadata__']['compress'] == 'dgc:0.01 over 4 ranks as dp 2 x pp 1 x tp 2', h['__metadata__']
names = {k for k in h if k.startswith('compress.')}
assert names == {f'compress.{a}.rank{r}' for a in ('residual', 'velocity') for r in range(4)}, names"
# onto another grid: the memory does not fit, and the run says so
"$DTRAIN" train $RES --workers 6 --tp 2 --compress dgc:0.01 --epochs 2 --resume "$TMP/tp2_dgc.h" >/dev/null 2>"$TMP/err"
check grid_resume_other_grid_starts_empty grep -q "holds the compression state of dgc:0.01 over 4 ranks as dp 2 x pp 1 x tp 2, not of dgc:0.01 over 6 ranks as dp 3 x pp 1 x tp 2: this run starts with an empty memory" "$TMP/err"
if have_mpi; then
  for c in tp2_dgc pp2_dgc; do
    grid=$([ $c = tp2_dgc ] && echo "--tp 2" || echo "--pp 2 --micro-batches 2")
    $MPIRUN -np 4 "$DTRAIN" train $RES --comm mpi $grid --compress dgc:0.01 --epochs 2 --resume "$TMP/$c.h" --checkpoint "$TMP/$c.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "mpi_${c}_resume_bit_exact" cmp -s "$TMP/$c.a" "$TMP/$c.mpi"
  done
fi

# ---- dropout under a pipeline draws one worker's masks (item 13) ----------
# each micro-batch of a stage takes its samples' place in one worker's
# stream (the stream of data parallelism's rank r for replica r): M = 1 is
# one worker bit for bit, M > 1 within float rounding (measured 9e-8),
# three dropout layers split over the stages and two in one stage; before,
# a stage drew its own masks (0.2 apart)
export DTRAIN_GEMM=openblas # one worker's dot products in the same order whatever the split
cat >"$TMP/drop.txt" <<'MEOF'
dense units=96
relu
dropout rate=0.3
dense units=64
dropout rate=0.2
relu
dense units=40
tanh
dropout rate=0.1
dense units=10
MEOF
DROP="--data $TINY --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16 --epochs 1 --max-steps 12 --model $TMP/drop.txt"
"$DTRAIN" train $DROP --checkpoint "$TMP/drop_one.st" >/dev/null 2>&1 || fail dropout_reference_run
"$DTRAIN" train $DROP --workers 2 --exchange allreduce:ring --checkpoint "$TMP/drop_dp2.st" >/dev/null 2>&1 || fail dropout_reference_run_dp2
equal() { # NAME TOL REF -- dtrain options: the run's weights within TOL of REF
  name=$1 tol=$2 ref=$3; shift 4
  if ! "$@" --checkpoint "$TMP/$name.st" >"$TMP/out" 2>&1; then fail "$name" "$(tail -c 300 "$TMP/out")"; return; fi
  if close "$ref" "$TMP/$name.st" "$tol"; then pass "$name"; else fail "$name" "$(cat "$TMP/cmp.out")"; fi
}
equal pipe_dropout_p2_m1_bitwise_equals_one_worker 0 "$TMP/drop_one.st" -- "$DTRAIN" train $DROP --workers 2 --pp 2
equal pipe_dropout_p3_m1_bitwise_equals_one_worker 0 "$TMP/drop_one.st" -- "$DTRAIN" train $DROP --workers 3 --pp 3 --partition 0,2,6
equal pipe_dropout_p2_m4_equals_one_worker 1e-6 "$TMP/drop_one.st" -- "$DTRAIN" train $DROP --workers 2 --pp 2 --micro-batches 4 --pipe-schedule 1f1b
equal pipe_dropout_interleaved_equals_one_worker 1e-6 "$TMP/drop_one.st" -- "$DTRAIN" train $DROP --workers 2 --pp 2 --micro-batches 4 --pipe-schedule interleaved:2 --partition 0,2,4,6
equal pipe_dropout_pp2_tp2_equals_one_worker 1e-6 "$TMP/drop_one.st" -- "$DTRAIN" train $DROP --workers 4 --pp 2 --tp 2 --micro-batches 2 --partition macs
equal pipe_dropout_dp2_pp2_equals_dp2 1e-6 "$TMP/drop_dp2.st" -- "$DTRAIN" train $DROP --workers 4 --pp 2 --micro-batches 2
if have_mpi; then
  $MPIRUN -np 2 "$DTRAIN" train $DROP --comm mpi --pp 2 --checkpoint "$TMP/drop_mpi.st" >/dev/null 2>"$TMP/mpi.err"
  check mpi_pipe_dropout_p2_m1_bitwise_equals_one_worker cmp -s "$TMP/drop_one.st" "$TMP/drop_mpi.st"
fi
