#!/bin/sh
# How failures are reported (issue 37, second round): ranks named in world
# numbering under --tp/--pp, the trace kept on SIGINT and divergence, the
# `diverged` record wherever a NaN is found, resume shapes named.
. tests/lib.sh
SYN="--data synthetic --quiet"

# ---- a resumed tensor of another shape names both shapes ---------------------
"$DTRAIN" train $SYN --max-steps 2 --checkpoint "$TMP/shape.st" >/dev/null 2>&1
$PY - "$TMP/shape.st" <<'PYEOF'
import sys
p = sys.argv[1]; b = open(p, "rb").read()
open(p, "wb").write(b.replace(b'"shape":[512,784]', b'"shape":[784,512]', 1))
PYEOF
expect_error resume_names_shapes 1 "tensor 'layers.0.weight' has shape \[784,512\] in the file but \[512,784\] in the model" -- \
  "$DTRAIN" train $SYN --max-steps 2 --resume "$TMP/shape.st"

# ---- a NaN in the middle of an epoch leaves a `diverged` record ---------------
# (--lr 1e9: the loss is NaN at step 2 of the first epoch; under a pipeline
# the last stage finds it and rank 0 holds the file)
diverged_record() { grep -q '^{"event":"diverged","epoch":1,"step":[0-9]*,"what":"train loss"}$' "$1"; }
for grid in "1w --workers 1" "dp --workers 2" "pp --workers 2 --pp 2" "tp --workers 2 --tp 2"; do
  set -- $grid; g=$1; shift
  rm -f "$TMP/nan.jsonl"
  expect_error "nan_mid_epoch_${g}_stops" 1 "the training loss is NaN" -- \
    "$DTRAIN" train $SYN --max-steps 20 --lr 1e9 --metrics "$TMP/nan.jsonl" "$@"
  check "nan_mid_epoch_${g}_diverged_record" diverged_record "$TMP/nan.jsonl"
done
if have_mpi; then
  rm -f "$TMP/nan.jsonl"
  $MPIRUN -np 2 "$DTRAIN" train --comm mpi $SYN --max-steps 20 --lr 1e9 --pp 2 --comm-timeout 5 \
    --metrics "$TMP/nan.jsonl" >/dev/null 2>&1
  check nan_mid_epoch_mpi_pp_diverged_record diverged_record "$TMP/nan.jsonl"
fi
