#!/bin/sh
# Pipeline parallelism end to end (src/strategy/pipe/): GPipe, 1F1B and
# interleaved 1F1B with P stages and M micro-batches give the weights of
# one worker with the same batch - bitwise for M = 1 (the same sums in the same order), within
# 1e-6 for M > 1 (a micro-batch's gradient is summed apart, then added:
# float rounding, measured at most 1e-7 after an epoch) - bitwise run to
# run and between local and mpi; dp = 2 x pp = 2 equals one worker with
# twice the batch; GPipe holds M activation sets on stage 0, 1F1B at most
# P; a pipeline checkpoint resumes bit for bit; bad values and
# combinations give one line naming the option.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 1024 256
BASE="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16 --epochs 1 --max-steps 24"

"$DTRAIN" train $BASE --checkpoint "$TMP/one.st" >/dev/null 2>&1 || fail pipe_reference_run
"$DTRAIN" train $BASE --model lenet --checkpoint "$TMP/one_lenet.st" >/dev/null 2>&1 || fail pipe_reference_run_lenet

# equal NAME TOL REF -- dtrain options: the run's weights within TOL of REF
equal() {
  name=$1 tol=$2 ref=$3; shift 4
  rm -f "$TMP/$name.st"
  if ! "$@" --checkpoint "$TMP/$name.st" >"$TMP/out" 2>&1; then fail "$name" "$(tail -c 300 "$TMP/out")"; return; fi
  if close "$ref" "$TMP/$name.st" "$tol"; then pass "$name"; else fail "$name" "$(cat "$TMP/cmp.out")"; fi
}

for sched in gpipe 1f1b; do
  equal pipe_${sched}_p2_m1_bitwise_equals_one_worker 0 "$TMP/one.st" -- \
    "$DTRAIN" train $BASE --workers 2 --pp 2 --micro-batches 1 --pipe-schedule $sched
  for P in 2 3; do
    for M in 2 4 8; do
      equal pipe_${sched}_p${P}_m${M}_equals_one_worker 1e-6 "$TMP/one.st" -- \
        "$DTRAIN" train $BASE --workers $P --pp $P --micro-batches $M --pipe-schedule $sched
    done
  done
  equal pipe_${sched}_lenet_p4_m4_equals_one_worker 1e-6 "$TMP/one_lenet.st" -- \
    "$DTRAIN" train $BASE --model lenet --workers 4 --pp 4 --micro-batches 4 --pipe-schedule $sched
done
equal pipe_micro_batches_alone_equal_one_worker 1e-6 "$TMP/one.st" -- \
  "$DTRAIN" train $BASE --micro-batches 4
equal pipe_explicit_partition_equals_one_worker 1e-6 "$TMP/one_lenet.st" -- \
  "$DTRAIN" train $BASE --model lenet --workers 2 --pp 2 --micro-batches 2 --partition 0,3

# interleaved 1F1B (Megatron): V = 2 chunks per rank on a model of 8 equal
# dense layers, M a multiple of P (Megatron's rule); the same weights
printf 'dense units=32\nrelu\n%.0s' 1 2 3 4 5 6 7 >"$TMP/eight.model"
echo 'dense units=10' >>"$TMP/eight.model"
E8="$BASE --model $TMP/eight.model --batch 24"
"$DTRAIN" train $E8 --checkpoint "$TMP/one_eight.st" >/dev/null 2>&1 || fail pipe_reference_run_eight
for PM in 2:2 2:4 2:8 3:3 3:6 4:4 4:8; do
  P=${PM%:*} M=${PM#*:}
  equal pipe_interleaved2_p${P}_m${M}_equals_one_worker 1e-6 "$TMP/one_eight.st" -- \
    "$DTRAIN" train $E8 --workers $P --pp $P --micro-batches $M --pipe-schedule interleaved:2
done
equal pipe_interleaved4_p2_m2_equals_one_worker 1e-6 "$TMP/one_eight.st" -- \
  "$DTRAIN" train $E8 --workers 2 --pp 2 --micro-batches 2 --pipe-schedule interleaved:4
"$DTRAIN" train $E8 --workers 4 --pp 4 --micro-batches 8 --pipe-schedule interleaved:2 --checkpoint "$TMP/il.st" >/dev/null 2>&1
equal pipe_interleaved_bitwise_repeatable 0 "$TMP/il.st" -- \
  "$DTRAIN" train $E8 --workers 4 --pp 4 --micro-batches 8 --pipe-schedule interleaved:2
if have_mpi; then
  equal mpi_pipe_interleaved_bitwise_equals_local 0 "$TMP/il.st" -- \
    $MPIRUN -np 4 "$DTRAIN" train $E8 --comm mpi --pp 4 --micro-batches 8 --pipe-schedule interleaved:2
fi
expect_error pipe_interleaved_m_not_multiple_of_p 2 "a multiple of --pp 3 micro-batches (e.g. --micro-batches 6)" -- \
  "$DTRAIN" train $E8 --workers 3 --pp 3 --micro-batches 4 --pipe-schedule interleaved:2
expect_error pipe_interleaved_m1 2 "a multiple of --pp 2" -- \
  "$DTRAIN" train $E8 --workers 2 --pp 2 --pipe-schedule interleaved:2
# with --pp 1 (micro-batches alone) every rank holds every layer: --partition was accepted and did nothing
expect_error pipe_partition_one_stage 2 "option --partition: not used with --optimization central --schedule sync --exchange allreduce (it applies to --pp P > 1)" -- "$DTRAIN" train --workers 2 --micro-batches 2 --partition macs --max-steps 1
expect_error pipe_interleaved_needs_v 2 "interleaved:V" -- "$DTRAIN" train $E8 --workers 2 --pp 2 --pipe-schedule interleaved
expect_error pipe_interleaved_bad_v 2 "1 to 64" -- "$DTRAIN" train $E8 --workers 2 --pp 2 --pipe-schedule interleaved:0
expect_error pipe_interleaved_too_many_chunks 2 "at most --pp x V = 8" -- \
  "$DTRAIN" train $E8 --workers 4 --pp 4 --micro-batches 4 --pipe-schedule interleaved:3
expect_error pipe_interleaved_partition_count 2 "names 2 stages (give 4)" -- \
  "$DTRAIN" train $E8 --workers 2 --pp 2 --micro-batches 2 --pipe-schedule interleaved:2 --partition 0,3

# asynchronous pipelines (their update rules: test_pipe_async): bitwise run
# to run and local = mpi; weight versions in the metrics (PipeDream stage s:
# P - s, 2BW: 2, DDG: 1); an epoch drains, so a resume is bit exact
for sk in pipedream:1 2bw:4 ddg:1; do
  k=${sk%:*} M=${sk#*:}
  A="$BASE --workers 3 --pp 3 --micro-batches $M --pipe-schedule $k"
  rm -f "$TMP/$k.jsonl"
  "$DTRAIN" train $A --checkpoint "$TMP/$k.st" --metrics "$TMP/$k.jsonl" >/dev/null 2>&1
  equal pipe_${k}_bitwise_repeatable 0 "$TMP/$k.st" -- "$DTRAIN" train $A
  if have_mpi; then
    equal mpi_pipe_${k}_bitwise_equals_local 0 "$TMP/$k.st" -- \
      $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --pp 3 --micro-batches $M --pipe-schedule $k
  fi
  check pipe_${k}_weight_versions_in_metrics $PY -c "
import json; e = [json.loads(l) for l in open('$TMP/$k.jsonl')][0]
want = {'pipedream': [3, 2, 1], '2bw': [2, 2, 2], 'ddg': [1, 1, 1]}['$k']
assert e['stage_weight_versions'] == want and e['stage_peak_activations'] == [3, 2, 1], e"
done
"$DTRAIN" train $BASE --workers 3 --pp 3 --pipe-schedule pipedream --vertical-sync on --checkpoint "$TMP/vs.st" >/dev/null 2>&1
if have_mpi; then
  equal mpi_pipe_vertical_sync_bitwise_equals_local 0 "$TMP/vs.st" -- \
    $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --pp 3 --pipe-schedule pipedream --vertical-sync on
fi
# 2BW's rule does not depend on P: pp 2 and pp 3 give the same bits, also
# through a last step of 1 sample over 3 micro-batches (empty units)
B93="--data $SMALL --lr 0.02 --momentum 0.9 --seed 3 --quiet --batch 93 --epochs 1 --micro-batches 3 --pipe-schedule 2bw"
"$DTRAIN" train $B93 --workers 2 --pp 2 --checkpoint "$TMP/b93.st" >/dev/null 2>&1
equal pipe_2bw_same_bits_whatever_p_with_empty_units 0 "$TMP/b93.st" -- "$DTRAIN" train $B93 --workers 3 --pp 3
# dp 2 x pp 2 without a flush: the replicas sum each update's gradients
"$DTRAIN" train $BASE --workers 4 --pp 2 --pipe-schedule pipedream --checkpoint "$TMP/dpd.st" >/dev/null 2>&1
if have_mpi; then
  equal mpi_pipe_pipedream_dp2_pp2_bitwise_equals_local 0 "$TMP/dpd.st" -- \
    $MPIRUN -np 4 "$DTRAIN" train $BASE --comm mpi --pp 2 --pipe-schedule pipedream
fi
R2="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16 --workers 2 --pp 2 --micro-batches 2 --pipe-schedule 2bw"
"$DTRAIN" train $R2 --epochs 2 --checkpoint "$TMP/two2.st" >/dev/null 2>&1
"$DTRAIN" train $R2 --epochs 1 --checkpoint "$TMP/half2.st" >/dev/null 2>&1
equal pipe_2bw_resume_bit_exact 0 "$TMP/two2.st" -- "$DTRAIN" train $R2 --epochs 2 --resume "$TMP/half2.st"
equal pipe_2bw_resume_onto_other_p_bit_exact 0 "$TMP/two2.st" -- "$DTRAIN" train $R2 --epochs 2 \
  --resume "$TMP/half2.st" --workers 3 --pp 3
expect_error pipe_pipedream_whole_batches 2 "give --micro-batches 1" -- \
  "$DTRAIN" train $BASE --workers 2 --pp 2 --micro-batches 2 --pipe-schedule pipedream
expect_error pipe_2bw_needs_p_minus_1 2 "--micro-batches 3 or more" -- \
  "$DTRAIN" train $BASE --workers 4 --pp 4 --micro-batches 2 --pipe-schedule 2bw --model lenet
expect_error pipe_vertical_sync_needs_pipedream 2 "option --vertical-sync" -- \
  "$DTRAIN" train $BASE --workers 2 --pp 2 --pipe-schedule 2bw --vertical-sync on

# run to run, and local against mpi: the same bits
"$DTRAIN" train $BASE --workers 3 --pp 3 --micro-batches 4 --pipe-schedule 1f1b --checkpoint "$TMP/r1.st" >/dev/null 2>&1
equal pipe_bitwise_repeatable 0 "$TMP/r1.st" -- \
  "$DTRAIN" train $BASE --workers 3 --pp 3 --micro-batches 4 --pipe-schedule 1f1b
if have_mpi; then
  equal mpi_pipe_1f1b_bitwise_equals_local 0 "$TMP/r1.st" -- \
    $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --pp 3 --micro-batches 4 --pipe-schedule 1f1b
  "$DTRAIN" train $BASE --workers 4 --pp 2 --micro-batches 2 --checkpoint "$TMP/d1.st" >/dev/null 2>&1
  equal mpi_pipe_dp2_pp2_bitwise_equals_local 0 "$TMP/d1.st" -- \
    $MPIRUN -np 4 "$DTRAIN" train $BASE --comm mpi --pp 2 --micro-batches 2
fi

# dp = 2 x pp = 2: the replicas' gradients summed, as one worker with twice the batch
B32=$(echo "$BASE" | sed 's/--batch 16/--batch 32/')
"$DTRAIN" train $B32 --checkpoint "$TMP/one32.st" >/dev/null 2>&1
equal pipe_dp2_pp2_equals_one_worker_twice_the_batch 1e-6 "$TMP/one32.st" -- \
  "$DTRAIN" train $BASE --workers 4 --pp 2 --micro-batches 2

# activation sets held and the bubble, from the metrics
for sched in gpipe 1f1b; do
  rm -f "$TMP/$sched.jsonl"
  "$DTRAIN" train $BASE --model lenet --workers 4 --pp 4 --micro-batches 8 --pipe-schedule $sched \
    --metrics "$TMP/$sched.jsonl" >/dev/null 2>&1
done
check pipe_gpipe_holds_m_activation_sets $PY -c "
import json; e = [json.loads(l) for l in open('$TMP/gpipe.jsonl')][0]
assert e['stage_peak_activations'] == [8, 8, 8, 8] and e['pp'] == 4 and 0 < e['bubble_fraction'] < 1, e"
check pipe_1f1b_holds_at_most_p_activation_sets $PY -c "
import json; e = [json.loads(l) for l in open('$TMP/1f1b.jsonl')][0]
assert e['stage_peak_activations'] == [4, 3, 2, 1], e"

# resume: one epoch, then a second from its checkpoint = two epochs straight
R="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16 --workers 2 --pp 2 --micro-batches 4"
"$DTRAIN" train $R --epochs 2 --checkpoint "$TMP/two.st" >/dev/null 2>&1
"$DTRAIN" train $R --epochs 1 --checkpoint "$TMP/half.st" >/dev/null 2>&1
equal pipe_resume_bit_exact 0 "$TMP/two.st" -- "$DTRAIN" train $R --epochs 2 --resume "$TMP/half.st"
# onto another P (the checkpoint holds every stage): pp 2 GPipe, then pp 3 1F1B
equal pipe_resume_onto_other_p_bit_exact 0 "$TMP/two.st" -- "$DTRAIN" train $R --epochs 2 \
  --resume "$TMP/half.st" --workers 3 --pp 3 --pipe-schedule 1f1b
if have_mpi; then
  equal mpi_pipe_resume_onto_other_p_bit_exact 0 "$TMP/two.st" -- $MPIRUN -np 3 "$DTRAIN" train $R \
    --comm mpi --workers 3 --pp 3 --pipe-schedule 1f1b --epochs 2 --resume "$TMP/half.st"
fi

# bad values and combinations
expect_error pipe_workers_not_multiple 2 "multiple of --pp" -- "$DTRAIN" train $BASE --workers 3 --pp 2
expect_error pipe_batch_not_divisible 2 "give a batch that M divides" -- "$DTRAIN" train $BASE --micro-batches 3
expect_error pipe_zero_micro_batches 2 "option --micro-batches" -- "$DTRAIN" train $BASE --micro-batches 0
expect_error pipe_zero_stages 2 "option --pp" -- "$DTRAIN" train $BASE --pp 0
expect_error pipe_too_many_stages 2 "at most --pp 3" -- "$DTRAIN" train $BASE --workers 4 --pp 4
expect_error pipe_partition_count 2 "names 2 stages" -- "$DTRAIN" train $BASE --workers 3 --pp 3 --partition 0,2
expect_error pipe_partition_order 2 "increasing from 0" -- "$DTRAIN" train $BASE --workers 2 --pp 2 --partition 1,2
expect_error pipe_partition_junk 2 "option --partition" -- "$DTRAIN" train $BASE --workers 2 --pp 2 --partition 0,x
expect_error pipe_partition_past_the_model 2 "the model has 3 layers" -- "$DTRAIN" train $BASE --workers 2 --pp 2 --partition 0,7
expect_error pipe_unknown_schedule 2 "expected gpipe, 1f1b, interleaved:V, pipedream, 2bw or ddg" -- "$DTRAIN" train $BASE --workers 2 --pp 2 --pipe-schedule pipedreamer
expect_error pipe_with_ps 2 "pipelines run with" -- "$DTRAIN" train $BASE --workers 2 --pp 2 --exchange ps:1
expect_error pipe_with_zero1 2 "does not combine with --shard-optimizer" -- "$DTRAIN" train $BASE --workers 2 --pp 2 --shard-optimizer on
expect_error pipe_schedule_needs_pp 2 "option --pipe-schedule" -- "$DTRAIN" train $BASE --pipe-schedule 1f1b
expect_error pipe_overlap_unused 2 "option --overlap" -- "$DTRAIN" train $BASE --workers 2 --pp 2 --overlap on

# a stage that fails under mpi (the last stage's loss is NaN) ends the job,
# the message naming the stage
if have_mpi; then
  timeout 120 $MPIRUN -np 2 "$DTRAIN" train $BASE --comm mpi --pp 2 --micro-batches 2 --lr 1e9 >"$TMP/out" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "stage 1: step [0-9]*: the training loss is NaN" "$TMP/out"; then
    pass mpi_pipe_stage_failure_ends_the_job_naming_it
  else fail mpi_pipe_stage_failure_ends_the_job_naming_it "exit $rc: $(tail -c 300 "$TMP/out")"; fi
fi

# presets: each a pipeline with its schedule
for p in gpipe pipedream-flush distbelief-mp pipedream pipedream-2bw ddg; do
  rm -f "$TMP/p.jsonl"
  if "$DTRAIN" train $BASE --preset $p --workers 2 --metrics "$TMP/p.jsonl" >/dev/null 2>"$TMP/err" &&
     $PY -c "
import json; e = [json.loads(l) for l in open('$TMP/p.jsonl')][0]
want = {'gpipe': ('gpipe', 8), 'pipedream-flush': ('1f1b', 8), 'distbelief-mp': ('gpipe', 1),
        'pipedream': ('pipedream', 1), 'pipedream-2bw': ('2bw', 4), 'ddg': ('ddg', 1)}['$p']
assert (e['pipe_schedule'], e['micro_batches'], e['pp']) == want + (2,), e" 2>"$TMP/err"; then pass "pipe_preset_$p"
  else fail "pipe_preset_$p" "$(tail -c 300 "$TMP/err")"; fi
done

# the partitioner: measured (each layer timed, the default) or multiply-adds
for part in balanced macs; do
  rm -f "$TMP/part.jsonl"
  "$DTRAIN" train $BASE --model lenet --workers 3 --pp 3 --micro-batches 4 --partition $part \
    --metrics "$TMP/part.jsonl" >/dev/null 2>&1
  check pipe_partition_${part}_reported $PY -c "
import json; e = [json.loads(l) for l in open('$TMP/part.jsonl')][0]
f, prof, params = e['stage_first_layer'], e['stage_profiled_sec'], e['stage_params']
assert len(f) == 3 and f[0] == 0 and f == sorted(set(f)) and sum(params) == 431080, e
if '$part' == 'macs': assert f == [0, 2, 3], f   # the second convolution alone: most multiply-adds
else: assert all(t > 0 for t in prof), prof"
done

# the measured partition follows the times, not the multiply-adds: a chain
# whose dropouts (a random draw a value; counted as one operation a value)
# take most of the time, and whose dense layer (most of the multiply-adds)
# little. By multiply-adds the cut is before the dense layer (8); by time
# it falls among the dropouts. The split reported must be the best of the
# reported layer times over every cut (a chain: every cut is valid), and
# not the multiply-adds' one.
printf 'conv2d filters=16 kernel=3 pad=1\n' >"$TMP/skew.model"
printf 'batchnorm\ndropout rate=0.1\n%.0s' 1 2 3 >>"$TMP/skew.model"
printf 'flatten\ndense units=32\ndense units=10\n' >>"$TMP/skew.model"
for part in balanced macs; do
  rm -f "$TMP/skew_$part.jsonl"
  "$DTRAIN" train --data "$SMALL" --model "$TMP/skew.model" --lr 0.05 --seed 3 --quiet --max-steps 2 \
    --epochs 1 --batch 32 --workers 2 --pp 2 --micro-batches 2 --partition $part \
    --metrics "$TMP/skew_$part.jsonl" >"$TMP/out" 2>&1 || fail "pipe_partition_skew_$part" "$(tail -c 300 "$TMP/out")"
done
check pipe_partition_balanced_follows_measured_times $PY -c "
import json
e = [json.loads(l) for l in open('$TMP/skew_balanced.jsonl') if '\"epoch\"' in l][0]
m = [json.loads(l) for l in open('$TMP/skew_macs.jsonl') if '\"epoch\"' in l][0]
t, cut, macs_cut = e['layer_profiled_sec'], e['stage_first_layer'][1], m['stage_first_layer'][1]
cost = lambda c: max(sum(t[:c]), sum(t[c:]))
best = min(cost(c) for c in range(1, len(t)))
print('measured cut', cut, 'multiply-adds cut', macs_cut, 'layer seconds', t)
assert macs_cut == 8, macs_cut
assert cost(cut) <= best * (1 + 1e-6) and cut != macs_cut, (cut, cost(cut), best)"

# ... and the transfer at a cut (PipeDream's 2 a / B, perf/partition.c): on
# a 10 Mbit/s link every cut among the 16-channel activations (12544 floats
# a sample) costs 2 x 12544 x 8 x 4 B / 1.25 MB/s = 0.64 s, so the cut goes
# after the 32-unit dense layer (1 KiB: 1.6 ms), whatever the layer times;
# the reported cut must be the least of max(stage, transfer) over the cuts.
rm -f "$TMP/skew_slow.jsonl"
"$DTRAIN" train --data "$SMALL" --model "$TMP/skew.model" --lr 0.05 --seed 3 --quiet --max-steps 2 \
  --epochs 1 --batch 16 --workers 2 --pp 2 --micro-batches 2 --partition balanced --net bandwidth=10Mbit \
  --metrics "$TMP/skew_slow.jsonl" >"$TMP/out" 2>&1 || fail pipe_partition_balanced_transfer "$(tail -c 300 "$TMP/out")"
check pipe_partition_balanced_weighs_the_transfer $PY -c "
import json
e = [json.loads(l) for l in open('$TMP/skew_slow.jsonl') if '\"epoch\"' in l][0]
t, cut = e['layer_profiled_sec'], e['stage_first_layer'][1]
out = [16 * 28 * 28] * 8 + [32, 10]   # floats a sample after each layer
cost = lambda c: max(sum(t[:c]), sum(t[c:]), 2 * out[c - 1] * 8 * 4 / 1.25e6)
best = min(cost(c) for c in range(1, len(t)))
assert cut == 9 and cost(cut) <= best * (1 + 1e-6), (cut, cost(cut), best)"

# the progress line shows the training loss, which only the last stage has
# (the line printed at the epoch's last step, so no --quiet and no --max-steps)
"$DTRAIN" train --data "$SMALL" --lr 0.05 --momentum 0.9 --seed 3 --batch 64 --epochs 1 \
  --workers 2 --pp 2 --micro-batches 4 >/dev/null 2>"$TMP/progress.err"
check pipe_progress_line_shows_the_loss sh -c "grep -q 'batch 16/16  loss [0-9.]*' '$TMP/progress.err' && ! grep -q 'loss 0.0000' '$TMP/progress.err'"
