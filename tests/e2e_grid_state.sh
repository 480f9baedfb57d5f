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
