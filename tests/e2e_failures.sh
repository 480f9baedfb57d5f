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

# ---- --trace: checked before training, kept (or said lost) when a run fails ---
expect_error trace_unwritable_folder_refused 2 "option --trace: /proc/dtrain-trace.json: cannot be written" -- \
  "$DTRAIN" train $SYN --max-steps 2 --trace /proc/dtrain-trace.json
"$DTRAIN" train $SYN --max-steps 2 --trace "$TMP/ok.json" >/dev/null 2>&1
check trace_probe_leaves_nothing sh -c "[ -s '$TMP/ok.json' ] && ! ls '$TMP' | grep -q dtrain-probe"
# trace_ranks FILE N: a whole trace file holding events of ranks 0..N-1
trace_ranks() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert sorted({e['pid'] for e in d['traceEvents']}) == list(range(int(sys.argv[2])))" "$1" "$2"; }
rm -f "$TMP/nan.json"
expect_error trace_kept_on_nan_says_so 1 "the training loss is NaN; .*; --trace .*nan.json holds the run until it stopped" -- \
  "$DTRAIN" train $SYN --max-steps 20 --lr 1e9 --workers 2 --trace "$TMP/nan.json"
check trace_kept_on_nan_file_whole trace_ranks "$TMP/nan.json" 2
expect_error trace_kept_on_epoch_divergence 1 "above --max-loss): training diverged.*--trace .*div.json holds the run" -- \
  "$DTRAIN" train $SYN --max-steps 2 --max-loss 0.01 --workers 2 --trace "$TMP/div.json"
check trace_kept_on_epoch_divergence_file_whole trace_ranks "$TMP/div.json" 2
"$DTRAIN" train $SYN --epochs 100000 --workers 2 --trace "$TMP/int.json" >/dev/null 2>"$TMP/int.err" &
p=$!
sleep 3
kill -INT $p
wait $p; rc=$?
check trace_kept_on_sigint_exit_130 test "$rc" -eq 130
check trace_kept_on_sigint_one_line sh -c "[ \$(grep -c . '$TMP/int.err') -eq 1 ] && grep -q 'interrupted by SIGINT.*; --trace .*int.json holds the run until it stopped' '$TMP/int.err'"
check trace_kept_on_sigint_file_whole trace_ranks "$TMP/int.json" 2
if have_mpi; then
  $MPIRUN -np 2 "$DTRAIN" train --comm mpi $SYN --max-steps 20 --lr 1e9 --comm-timeout 5 \
    --trace "$TMP/mpi.json" >/dev/null 2>"$TMP/mpi.err"
  check trace_mpi_failed_run_says_dropped grep -q "the training loss is NaN; .*--trace .*mpi.json is not written (under mpi" "$TMP/mpi.err"
fi

# ---- ranks are named in world numbering on tp and pp groups -------------------
# world rank 2 held back (--straggler): every line names it "rank 2", with
# its rank in the group beside; no line names a group's numbering alone
STALLTP="$SYN --max-steps 2 --batch 512 --stall-warning 0.5 --comm-timeout 2 --straggler rank=2,slowdown=1000"
"$DTRAIN" train $STALLTP --workers 4 --tp 2 >/dev/null 2>"$TMP/tp.err"
check stall_local_tp_names_world_ranks grep -q 'on the tp group: joined rank 3; not joined: rank 2; waited' "$TMP/tp.err"
"$DTRAIN" train $STALLTP --workers 4 --tp 2 --pp 2 --partition macs >/dev/null 2>"$TMP/tppp.err"
check stall_local_tp_pp_names_world_ranks grep -q 'recv from rank 2 (rank 1 of the pp group) tag [0-9]* ([0-9]* bytes): timed out' "$TMP/tppp.err"
check stall_local_tp_pp_no_group_numbering sh -c "! grep -q 'from rank [01] \|not joined: rank [01]' '$TMP/tppp.err'"
if have_mpi; then
  $MPIRUN -np 4 "$DTRAIN" train --comm mpi $STALLTP --tp 2 >/dev/null 2>"$TMP/mpitp.err"
  check stall_mpi_tp_names_world_rank grep -q 'from rank 2 (rank [01] of the tp [a-z]*) tag [0-9]*: timed out' "$TMP/mpitp.err"
  check stall_mpi_tp_no_group_numbering sh -c "! grep -q 'from rank [01] ' '$TMP/mpitp.err'"
fi
