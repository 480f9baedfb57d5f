#!/bin/sh
# Priority scheduling on the parameter-server path (--comm-order priority:
# ByteScheduler; --comm-order tictac: TicTac's TAC): each layer pushed in
# parts as backprop readies it, the model pulled back layer by layer, the
# forward waiting per layer. The order moves bytes, never changes them:
# under sync the weights are fifo's bit for bit on 1, 2 and 4 servers and
# on both transports, with the same bytes pushed and pulled; async and
# ssp:S train; what needs a push or a pull whole is refused.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 512
BASE="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --max-steps 12 --epochs 1 --batch 8"

run() { "$DTRAIN" train "$@" >"$TMP/run.out" 2>"$TMP/run.err"; }

# ---- sync: bitwise fifo, the same bytes --------------------------------------------
# the bytes each worker pushed and pulled, and the model's keys a step: equal
cat >"$TMP/bytes.py" <<'PYEOF'
import json, sys
def last(path):
    return [json.loads(l) for l in open(path) if '"epoch"' in l][-1]
a, b = last(sys.argv[1]), last(sys.argv[2])
for k in ("bytes_pushed", "bytes_pulled"):
    assert a[k] == b[k], (k, a[k], b[k])
done = [json.loads(l) for l in open(sys.argv[1]) if '"done"' in l][0]
model = 4 * done["params"]
# 12 clocks: a whole model pushed and pulled per clock by every worker
assert all(abs(x - 12 * model) <= 1e-5 * 12 * model for x in a["bytes_pushed"]), (a["bytes_pushed"], model)
print("ok")
PYEOF
for k in 1 2 4; do
  run $BASE --workers 4 --exchange ps:$k --checkpoint "$TMP/fifo_$k.st" --metrics "$TMP/fifo_$k.jsonl"
  run $BASE --workers 4 --exchange ps:$k --comm-order priority --partition-kb 64 --checkpoint "$TMP/prio_$k.st" --metrics "$TMP/prio_$k.jsonl"
  check "ps_${k}_priority_bitwise_equals_fifo" cmp -s "$TMP/fifo_$k.st" "$TMP/prio_$k.st"
  if $PY "$TMP/bytes.py" "$TMP/fifo_$k.jsonl" "$TMP/prio_$k.jsonl" >"$TMP/check.out" 2>&1; then pass "ps_${k}_priority_bytes_equal_fifo"
  else fail "ps_${k}_priority_bytes_equal_fifo" "$(tail -c 300 "$TMP/check.out")"; fi
done
run $BASE --workers 4 --exchange ps:2 --comm-order tictac --partition-kb 64 --checkpoint "$TMP/tictac_2.st" --metrics "$TMP/tictac_2.jsonl"
check ps_2_tictac_bitwise_equals_fifo cmp -s "$TMP/fifo_2.st" "$TMP/tictac_2.st"
if $PY "$TMP/bytes.py" "$TMP/fifo_2.jsonl" "$TMP/tictac_2.jsonl" >"$TMP/check.out" 2>&1; then pass ps_2_tictac_bytes_equal_fifo
else fail ps_2_tictac_bytes_equal_fifo "$(tail -c 300 "$TMP/check.out")"; fi
# whole layers in one part each (the default 1 MB), ssp:0 (= sync), lenet
run $BASE --workers 4 --exchange ps:2 --comm-order priority --checkpoint "$TMP/prio_whole.st"
check ps_priority_default_parts_bitwise_equals_fifo cmp -s "$TMP/fifo_2.st" "$TMP/prio_whole.st"
run $BASE --workers 4 --exchange ps:2 --schedule ssp:0 --comm-order tictac --partition-kb 16 --checkpoint "$TMP/tictac_ssp0.st"
check ps_ssp0_tictac_bitwise_equals_fifo cmp -s "$TMP/fifo_2.st" "$TMP/tictac_ssp0.st"
run $BASE --model lenet --workers 3 --exchange ps:2 --checkpoint "$TMP/lenet_fifo.st"
run $BASE --model lenet --workers 3 --exchange ps:2 --comm-order tictac --partition-kb 32 --checkpoint "$TMP/lenet_tictac.st"
check lenet_tictac_bitwise_equals_fifo cmp -s "$TMP/lenet_fifo.st" "$TMP/lenet_tictac.st"
# two epochs: the order is planned again from the timings each step
run $BASE --max-steps 40 --epochs 2 --workers 2 --exchange ps:2 --checkpoint "$TMP/fifo_2ep.st"
run $BASE --max-steps 40 --epochs 2 --workers 2 --exchange ps:2 --comm-order priority --partition-kb 128 --checkpoint "$TMP/prio_2ep.st"
check priority_two_epochs_bitwise_equals_fifo cmp -s "$TMP/fifo_2ep.st" "$TMP/prio_2ep.st"
# a credit that binds: one part in flight each way (64 KiB), or less than a part (1 KiB)
run $BASE --workers 4 --exchange ps:2 --comm-order priority --partition-kb 64 --credit-kb 64 --checkpoint "$TMP/credit_64.st"
check priority_credit_one_part_bitwise_equals_fifo cmp -s "$TMP/fifo_2.st" "$TMP/credit_64.st"
run $BASE --workers 4 --exchange ps:2 --comm-order tictac --partition-kb 64 --credit-kb 1 --checkpoint "$TMP/credit_1.st"
check tictac_credit_below_a_part_bitwise_equals_fifo cmp -s "$TMP/fifo_2.st" "$TMP/credit_1.st"
run $BASE --workers 4 --exchange ps:2 --comm-order priority --partition-kb 64 --credit-kb 200 --checkpoint "$TMP/credit_200.st"
check priority_credit_three_parts_bitwise_equals_fifo cmp -s "$TMP/fifo_2.st" "$TMP/credit_200.st"
# parts by the thousand (1 KiB: more than the client's 256 slots a step): at most 64 in flight each way
run $BASE --workers 4 --exchange ps:2 --comm-order tictac --partition-kb 1 --checkpoint "$TMP/parts_1k.st"
check tictac_thousands_of_parts_bitwise_equals_fifo cmp -s "$TMP/fifo_2.st" "$TMP/parts_1k.st"
# the presets
for p in bytescheduler-ps tictac; do
  check "preset_${p}_bitwise_equals_fifo" sh -c "'$DTRAIN' train $BASE --workers 2 --preset $p --checkpoint '$TMP/preset.st' >/dev/null 2>&1 &&
    '$DTRAIN' train $BASE --workers 2 --exchange ps:n --checkpoint '$TMP/preset_fifo.st' >/dev/null 2>&1 && cmp -s '$TMP/preset.st' '$TMP/preset_fifo.st'"
done

# ---- async and ssp:S train ----------------------------------------------------------
for s in async ssp:2; do
  if run --data "$SMALL" --workers 4 --exchange ps:2 --schedule $s --comm-order priority --partition-kb 64 --epochs 2 --quiet --metrics "$TMP/a.jsonl" &&
     $PY - "$TMP/a.jsonl" >"$TMP/check.out" 2>&1 <<'PYEOF'
import json, sys
ep = [json.loads(l) for l in open(sys.argv[1]) if '"epoch"' in l]
assert len(ep) == 2 and sum(sum(e["batches"]) for e in ep) == 64, [e["batches"] for e in ep]
assert ep[-1]["test_acc"] > 0.45, ep[-1]["test_acc"]
print("ok")
PYEOF
  then pass "priority_${s}_trains"; else fail "priority_${s}_trains" "$(cat "$TMP/check.out" "$TMP/run.err" | tail -c 400)"; fi
done
check tictac_async_fetch_every_2_runs run --data "$SMALL" --workers 3 --exchange ps:1 --schedule async --fetch-every 2 --comm-order tictac --partition-kb 64 --max-steps 10 --epochs 1 --quiet

# ---- mpi ------------------------------------------------------------------------------
if have_mpi; then
  $MPIRUN -np 6 "$DTRAIN" train $BASE --comm mpi --exchange ps:2 --comm-order priority --partition-kb 64 --checkpoint "$TMP/mpi_prio.st" >/dev/null 2>"$TMP/mpi.err"
  check mpi_priority_bitwise_equals_local_fifo cmp -s "$TMP/fifo_2.st" "$TMP/mpi_prio.st"
  $MPIRUN -np 5 "$DTRAIN" train $BASE --comm mpi --exchange ps:1 --comm-order tictac --partition-kb 64 --checkpoint "$TMP/mpi_tictac.st" >/dev/null 2>"$TMP/mpi.err"
  check mpi_tictac_bitwise_equals_local_fifo cmp -s "$TMP/fifo_1.st" "$TMP/mpi_tictac.st"
  if $MPIRUN -np 6 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:2 --schedule async --comm-order priority --partition-kb 64 --epochs 2 --quiet --metrics "$TMP/mpi_a.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     $PY -c "
import json; ep = [json.loads(l) for l in open('$TMP/mpi_a.jsonl') if '\"epoch\"' in l]
assert len(ep) == 2 and ep[-1]['test_acc'] > 0.45, [e['test_acc'] for e in ep]" >"$TMP/check.out" 2>&1
  then pass mpi_priority_async_trains; else fail mpi_priority_async_trains "$(cat "$TMP/check.out" "$TMP/mpi.err" | tail -c 400)"; fi
else
  echo "SKIP mpi: no mpirun"
fi

# ---- refusals ---------------------------------------------------------------------------
P="--exchange ps:2 --comm-order priority"
expect_error priority_ps_not_value 2 "not with --schedule value, whose servers keep each worker's model as it pulled it whole" -- "$DTRAIN" train $P --schedule value:0.1
expect_error priority_ps_not_backup 2 "not with --schedule backup" -- "$DTRAIN" train $P --schedule backup:1 --workers 3
expect_error priority_ps_not_dc_asgd 2 "not with --dc-asgd" -- "$DTRAIN" train $P --schedule async --dc-asgd 0.04
expect_error priority_ps_not_lazy 2 "not with --ps-refresh lazy" -- "$DTRAIN" train $P --schedule ssp:2 --ps-refresh lazy
expect_error priority_ps_not_push_every 2 "not with --push-every" -- "$DTRAIN" train $P --schedule async --push-every 2
expect_error priority_ps_not_tp 2 "not with --tp" -- "$DTRAIN" train $P --tp 2 --workers 4
expect_error priority_ps_not_compress 2 "not with --compress" -- "$DTRAIN" train $P --compress fp16
expect_error tictac_not_allreduce 2 "option --comm-order tictac: orders the transfers to and from parameter servers" -- "$DTRAIN" train --comm-order tictac
expect_error tictac_not_decentral 2 "option --comm-order" -- "$DTRAIN" train --comm-order tictac --optimization decentral
expect_error partition_needs_an_order_ps 2 "option --partition-kb: not used with --comm-order fifo" -- "$DTRAIN" train --exchange ps:2 --partition-kb 64
expect_error credit_needs_an_order_ps 2 "option --credit-kb: not used with --comm-order fifo" -- "$DTRAIN" train --exchange ps:2 --credit-kb 64
expect_error credit_needs_ps 2 "option --credit-kb: not used with" -- "$DTRAIN" train --comm-order priority --credit-kb 64
expect_error credit_positive 2 "option --credit-kb" -- "$DTRAIN" train --exchange ps:2 --comm-order priority --credit-kb 0
expect_error comm_order_values_tictac 2 "expected fifo, priority or tictac" -- "$DTRAIN" train --comm-order lifo
