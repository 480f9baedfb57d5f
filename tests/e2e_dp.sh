#!/bin/sh
# Synchronous data parallelism end to end: N workers with batch b equal one
# worker with batch N*b (to float rounding), on both transports; fixed
# reduction order gives the same weights run to run and across transports;
# presets run; invalid combinations are refused.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 512
BASE="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --max-steps 20 --epochs 1"
ADAM0="--data $SMALL --optimizer adam --lr 0.002 --seed 3 --quiet --max-steps 20 --epochs 1"


# float sums in another order: tolerance 2e-5 absolute on weights of size ~0.05
TOL=2e-5
for n in 2 3 4 8; do
  "$DTRAIN" train $BASE --batch $((8 * n)) --workers 1 --checkpoint "$TMP/one_$n.st" >/dev/null
  # an explicit algorithm: auto decides from each transport's link estimate,
  # so local and mpi may pick different (equally deterministic) algorithms
  "$DTRAIN" train $BASE --batch 8 --workers $n --exchange allreduce:ring --checkpoint "$TMP/local_$n.st" >/dev/null
  if close "$TMP/one_$n.st" "$TMP/local_$n.st" $TOL; then pass "local_${n}_workers_equal_one_worker_${n}x_batch($(cat "$TMP/cmp.out"))"; else fail "local_${n}_workers_equal_one_worker_${n}x_batch" "$(cat "$TMP/cmp.out")"; fi
  if have_mpi; then
    $MPIRUN -np $n "$DTRAIN" train $BASE --batch 8 --comm mpi --exchange allreduce:ring --checkpoint "$TMP/mpi_$n.st" >/dev/null 2>"$TMP/mpi.err"
    if close "$TMP/one_$n.st" "$TMP/mpi_$n.st" $TOL; then pass "mpi_${n}_workers_equal_one_worker_${n}x_batch($(cat "$TMP/cmp.out"))"; else fail "mpi_${n}_workers_equal_one_worker_${n}x_batch" "$(cat "$TMP/cmp.out") $(tail -c 300 "$TMP/mpi.err")"; fi
    check "mpi_${n}_bitwise_equals_local_${n}" cmp -s "$TMP/local_$n.st" "$TMP/mpi_$n.st"
  else
    echo "SKIP mpi_${n}: no mpirun"
  fi
done

# every algorithm: the same sums, deterministic run to run
for algo in ring rhd tree naive hier shm; do
  "$DTRAIN" train $BASE --batch 8 --workers 4 --exchange allreduce:$algo --checkpoint "$TMP/$algo.a" >/dev/null
  "$DTRAIN" train $BASE --batch 8 --workers 4 --exchange allreduce:$algo --checkpoint "$TMP/$algo.b" >/dev/null
  check "allreduce_${algo}_deterministic" cmp -s "$TMP/$algo.a" "$TMP/$algo.b"
  if close "$TMP/one_4.st" "$TMP/$algo.a" $TOL; then pass "allreduce_${algo}_equals_one_worker"; else fail "allreduce_${algo}_equals_one_worker" "$(cat "$TMP/cmp.out")"; fi
done
# hosts (--net hosts=): auto picks hier, whose bits do not depend on the
# emulated links' timing
"$DTRAIN" train $BASE --batch 8 --workers 4 --net hosts=2 --exchange allreduce:hier --checkpoint "$TMP/hosts_hier.st" >/dev/null
"$DTRAIN" train $BASE --batch 8 --workers 4 --net hosts=2 --exchange allreduce:auto --checkpoint "$TMP/hosts_auto.st" >/dev/null
"$DTRAIN" train $BASE --batch 8 --workers 4 --net hosts=2,intra-bandwidth=10Gbit,intra-latency=5us,bandwidth=1Gbit,latency=50us --exchange allreduce:auto --checkpoint "$TMP/hosts_net.st" >/dev/null
check allreduce_auto_picks_hier_on_hosts cmp -s "$TMP/hosts_hier.st" "$TMP/hosts_auto.st"
check allreduce_hier_hosts_emulated_same_bits cmp -s "$TMP/hosts_hier.st" "$TMP/hosts_net.st"
# link=shared (a host's ranks share its link, as on a real machine): only
# the timing changes, never the bits
"$DTRAIN" train $BASE --batch 8 --workers 4 --net hosts=2,bandwidth=1Gbit,latency=50us,link=shared --exchange allreduce:auto --metrics "$TMP/hosts_shared.jsonl" --checkpoint "$TMP/hosts_shared.st" >/dev/null
check allreduce_hier_shared_link_same_bits cmp -s "$TMP/hosts_hier.st" "$TMP/hosts_shared.st"
check allreduce_hier_shared_link_emulated grep -q '"emulated":true' "$TMP/hosts_shared.jsonl"
if close "$TMP/one_4.st" "$TMP/hosts_hier.st" $TOL; then pass "allreduce_hier_hosts_equals_one_worker"; else fail "allreduce_hier_hosts_equals_one_worker" "$(cat "$TMP/cmp.out")"; fi
# bench with hosts: the model and the ring's ratio beside the measurement
check bench_allreduce_hosts sh -c "'$DTRAIN' bench allreduce --workers 4 --net hosts=2,intra-bandwidth=10Gbit,bandwidth=1Gbit,latency=50us --algo ring,hier,auto --min-bytes 64KiB --max-bytes 64KiB --iters 3 --json '$TMP/bench_hosts.jsonl' >/dev/null && grep -q '\"algo\":\"auto\",\"chosen\":\"hier\"' '$TMP/bench_hosts.jsonl' && [ \$(grep -c 'model_us' '$TMP/bench_hosts.jsonl') -eq 3 ] && [ \$(grep -c 'vs_ring' '$TMP/bench_hosts.jsonl') -eq 3 ]"
# overlap on or off: the same buckets give the same bits. Other bucket
# boundaries change which ring block an element falls in, and so the order
# of its sum: equal to rounding only.
"$DTRAIN" train $BASE --batch 8 --workers 4 --exchange allreduce:ring --overlap off --checkpoint "$TMP/nooverlap.st" >/dev/null
check overlap_does_not_change_result cmp -s "$TMP/ring.a" "$TMP/nooverlap.st"
"$DTRAIN" train $BASE --batch 8 --workers 4 --exchange allreduce:ring --bucket-mb 0 --checkpoint "$TMP/perlayer.st" >/dev/null
if close "$TMP/ring.a" "$TMP/perlayer.st" $TOL; then pass "per_layer_buckets_equal_to_rounding"; else fail per_layer_buckets_equal_to_rounding "$(cat "$TMP/cmp.out")"; fi

# ---- sharded optimizer (ZeRO-1): the bits of the unsharded ring, optimizer
# state (gathered for the checkpoint) included, with and without overlap, on
# both transports ---------------------------------------------------------------
for n in 2 3 4; do
  "$DTRAIN" train $BASE --batch 8 --workers $n --exchange allreduce:ring --shard-optimizer on --checkpoint "$TMP/zero_$n.st" >/dev/null
  check "shard_optimizer_${n}_bitwise_equals_ring" cmp -s "$TMP/local_$n.st" "$TMP/zero_$n.st"
  if have_mpi; then
    $MPIRUN -np $n "$DTRAIN" train $BASE --batch 8 --comm mpi --exchange allreduce:ring --shard-optimizer on --checkpoint "$TMP/zero_mpi_$n.st" >/dev/null 2>"$TMP/mpi.err"
    check "mpi_shard_optimizer_${n}_bitwise_equals_ring" cmp -s "$TMP/local_$n.st" "$TMP/zero_mpi_$n.st"
  fi
done
"$DTRAIN" train $BASE --batch 8 --workers 4 --exchange allreduce:ring --shard-optimizer on --overlap off --checkpoint "$TMP/zero_seq.st" >/dev/null
check shard_optimizer_without_overlap_same_bits cmp -s "$TMP/local_4.st" "$TMP/zero_seq.st"
"$DTRAIN" train $ADAM0 --batch 8 --workers 3 --exchange allreduce:ring --checkpoint "$TMP/adam_ring.st" >/dev/null
"$DTRAIN" train $ADAM0 --batch 8 --workers 3 --exchange allreduce:ring --shard-optimizer on --checkpoint "$TMP/adam_zero.st" >/dev/null
check shard_optimizer_adam_same_bits cmp -s "$TMP/adam_ring.st" "$TMP/adam_zero.st"
expect_error shard_needs_ring 2 "option --shard-optimizer: needs --exchange allreduce:ring" -- "$DTRAIN" train --workers 2 --exchange allreduce:rhd --shard-optimizer on
expect_error shard_needs_allreduce 2 "option --shard-optimizer: applies to synchronous data parallelism" -- "$DTRAIN" train --workers 2 --exchange ps:1 --shard-optimizer on
expect_error shard_no_lars 2 "options --shard-optimizer and --optimizer lars do not combine" -- "$DTRAIN" train --workers 2 --shard-optimizer on --optimizer lars

# ---- --comm-order priority: each bucket's update applied during the next
# forward pass, the first layers' allreduces first. Whole buckets (a huge
# --partition-kb) give FIFO's bits; parts move elements between ring blocks,
# which changes the order of a sum over 3+ ranks (2 ranks: a + b = b + a) --
for n in 2 3 4; do
  "$DTRAIN" train $BASE --batch 8 --workers $n --exchange allreduce:ring --comm-order priority --partition-kb 4194304 --checkpoint "$TMP/prio_$n.st" >/dev/null
  check "priority_${n}_bitwise_equals_fifo" cmp -s "$TMP/local_$n.st" "$TMP/prio_$n.st"
  if have_mpi; then
    $MPIRUN -np $n "$DTRAIN" train $BASE --batch 8 --comm mpi --exchange allreduce:ring --comm-order priority --partition-kb 4194304 --checkpoint "$TMP/prio_mpi_$n.st" >/dev/null 2>"$TMP/mpi.err"
    check "mpi_priority_${n}_bitwise_equals_fifo" cmp -s "$TMP/local_$n.st" "$TMP/prio_mpi_$n.st"
  fi
done
"$DTRAIN" train $BASE --batch 8 --workers 2 --exchange allreduce:ring --comm-order priority --partition-kb 16 --checkpoint "$TMP/prio_parts_2.st" >/dev/null
check priority_in_parts_2_ranks_same_bits cmp -s "$TMP/local_2.st" "$TMP/prio_parts_2.st"
# ranks that reach the same request at different times (an emulated link,
# a straggler) still agree on each: the bits do not move
"$DTRAIN" train $BASE --batch 8 --workers 2 --exchange allreduce:ring --comm-order priority --partition-kb 256 --net latency=50us,bandwidth=1Gbit --checkpoint "$TMP/prio_net.st" >/dev/null
check priority_emulated_link_same_bits cmp -s "$TMP/local_2.st" "$TMP/prio_net.st"
"$DTRAIN" train $BASE --batch 8 --workers 3 --exchange allreduce:ring --comm-order priority --partition-kb 4194304 --bucket-mb 0 --straggler rank=1,slowdown=3 --checkpoint "$TMP/prio_slow.st" >/dev/null
"$DTRAIN" train $BASE --batch 8 --workers 3 --exchange allreduce:ring --bucket-mb 0 --checkpoint "$TMP/fifo_perlayer_3.st" >/dev/null
check priority_straggler_same_bits cmp -s "$TMP/fifo_perlayer_3.st" "$TMP/prio_slow.st"
"$DTRAIN" train $BASE --batch 8 --workers 3 --exchange allreduce:ring --comm-order priority --partition-kb 16 --bucket-mb 0 --checkpoint "$TMP/prio_parts_3.st" >/dev/null
if close "$TMP/one_3.st" "$TMP/prio_parts_3.st" $TOL; then pass "priority_in_parts_3_ranks_equal_one_worker"; else fail priority_in_parts_3_ranks_equal_one_worker "$(cat "$TMP/cmp.out")"; fi
# two epochs (the update of an epoch's last step is not deferred: the test
# pass and the checkpoint see it), Adam (its step count once per step)
E2="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --epochs 2 --batch 16"
"$DTRAIN" train $E2 --workers 2 --exchange allreduce:rhd --checkpoint "$TMP/e2_fifo.st" --metrics "$TMP/e2_fifo.jsonl" >/dev/null
"$DTRAIN" train $E2 --workers 2 --exchange allreduce:rhd --comm-order priority --checkpoint "$TMP/e2_prio.st" --metrics "$TMP/e2_prio.jsonl" >/dev/null
check priority_two_epochs_same_bits cmp -s "$TMP/e2_fifo.st" "$TMP/e2_prio.st"
check priority_two_epochs_same_test_loss sh -c "[ \"\$(grep -o '\"test_loss\":[0-9.]*' '$TMP/e2_fifo.jsonl')\" = \"\$(grep -o '\"test_loss\":[0-9.]*' '$TMP/e2_prio.jsonl')\" ]"
"$DTRAIN" train $ADAM0 --batch 8 --workers 3 --exchange allreduce:ring --comm-order priority --partition-kb 4194304 --checkpoint "$TMP/adam_prio.st" >/dev/null
check priority_adam_same_bits cmp -s "$TMP/adam_ring.st" "$TMP/adam_prio.st"
expect_error priority_needs_overlap 2 "options --comm-order priority and --overlap off do not combine" -- "$DTRAIN" train --workers 2 --comm-order priority --overlap off
# (parameter servers take it too since issue 22: e2e_ps_priority.sh)
expect_error priority_needs_allreduce 2 "option --comm-order priority: applies to synchronous data parallelism" -- "$DTRAIN" train --workers 2 --preset bytescheduler --exchange shared
expect_error priority_not_sharded 2 "option --comm-order priority: does not combine with --shard-optimizer on" -- "$DTRAIN" train --workers 2 --comm-order priority --shard-optimizer on
expect_error comm_order_values 2 "option --comm-order: 'lifo' (expected fifo, priority or tictac)" -- "$DTRAIN" train --workers 2 --comm-order lifo
expect_error partition_positive 2 "option --partition-kb" -- "$DTRAIN" train --workers 2 --comm-order priority --partition-kb 0

# ---- synchronous data parallelism through shared memory (local) --------------
for n in 2 3 4 8; do
  "$DTRAIN" train $BASE --batch 8 --workers $n --exchange shared --schedule sync --checkpoint "$TMP/shm_$n.st" >/dev/null
  if close "$TMP/one_$n.st" "$TMP/shm_$n.st" $TOL; then pass "shared_sync_${n}_workers_equal_one_worker_${n}x_batch($(cat "$TMP/cmp.out"))"; else fail "shared_sync_${n}_workers_equal_one_worker_${n}x_batch" "$(cat "$TMP/cmp.out")"; fi
done
"$DTRAIN" train $BASE --batch 8 --workers 4 --exchange shared --schedule sync --checkpoint "$TMP/shm_4b.st" >/dev/null
check shared_sync_deterministic cmp -s "$TMP/shm_4.st" "$TMP/shm_4b.st"
# Adam keeps two state arenas, sharded over the ranks
"$DTRAIN" train $ADAM0 --batch 24 --workers 1 --checkpoint "$TMP/adam_1.st" >/dev/null
"$DTRAIN" train $ADAM0 --batch 8 --workers 3 --exchange shared --schedule sync --checkpoint "$TMP/adam_3.st" >/dev/null
if close "$TMP/adam_1.st" "$TMP/adam_3.st" 1e-4; then pass "shared_sync_adam_equals_one_worker($(cat "$TMP/cmp.out"))"; else fail shared_sync_adam_equals_one_worker "$(cat "$TMP/cmp.out")"; fi
# resume: the sharded state is saved whole and shared again
RES="--data $SMALL --batch 8 --workers 4 --exchange shared --schedule sync --lr 0.05 --momentum 0.9 --seed 5 --quiet"
"$DTRAIN" train $RES --epochs 3 --checkpoint "$TMP/shm_a.st" >/dev/null
"$DTRAIN" train $RES --epochs 2 --checkpoint "$TMP/shm_c.st" >/dev/null
"$DTRAIN" train $RES --epochs 3 --resume "$TMP/shm_c.st" --checkpoint "$TMP/shm_c.st" >/dev/null
check shared_sync_resume_bit_exact cmp -s "$TMP/shm_a.st" "$TMP/shm_c.st"
# ---- --balance: each step's batch split by measured speed. The same samples
# and the same global count, so equal to one worker to rounding (the split,
# and so the rounding, follows timings: not bitwise) -------------------------
"$DTRAIN" train $BASE --batch 8 --workers 3 --exchange shared --schedule sync --balance on --checkpoint "$TMP/bal_shm.st" >/dev/null
if close "$TMP/one_3.st" "$TMP/bal_shm.st" $TOL; then pass "balance_shared_sync_equals_one_worker($(cat "$TMP/cmp.out"))"; else fail balance_shared_sync_equals_one_worker "$(cat "$TMP/cmp.out")"; fi
"$DTRAIN" train $BASE --batch 8 --workers 3 --exchange allreduce:ring --balance on --checkpoint "$TMP/bal_ring.st" >/dev/null
if close "$TMP/one_3.st" "$TMP/bal_ring.st" $TOL; then pass "balance_allreduce_equals_one_worker($(cat "$TMP/cmp.out"))"; else fail balance_allreduce_equals_one_worker "$(cat "$TMP/cmp.out")"; fi
if have_mpi; then
  $MPIRUN -np 3 "$DTRAIN" train $BASE --batch 8 --comm mpi --exchange allreduce:ring --balance on --checkpoint "$TMP/bal_mpi.st" >/dev/null 2>"$TMP/mpi.err"
  if close "$TMP/one_3.st" "$TMP/bal_mpi.st" $TOL; then pass "mpi_balance_equals_one_worker($(cat "$TMP/cmp.out"))"; else fail mpi_balance_equals_one_worker "$(cat "$TMP/cmp.out") $(tail -c 300 "$TMP/mpi.err")"; fi
fi
# a rank four times slower gets the smaller share (the metrics show the split)
for ex in "shared --schedule sync" "allreduce:ring"; do
  name=$(echo "$ex" | cut -d' ' -f1 | tr : _)
  "$DTRAIN" train $BASE --batch 32 --max-steps 40 --workers 2 --exchange $ex --balance on --straggler rank=1,slowdown=4 --metrics "$TMP/bal_$name.jsonl" >/dev/null
  check "balance_${name}_moves_samples_off_the_straggler" $PY -c "
import json; e=json.loads(open('$TMP/bal_$name.jsonl').readline()); s=e['batch_per_rank']
assert len(s) == 2 and abs(s[0] + s[1] - 64) < 1e-6 and s[1] < s[0], s"
done
# the speeds are in the checkpoint: a resumed run splits its first step as
# the run it continues would have (with fresh estimates it would split evenly)
"$DTRAIN" train $BASE --batch 32 --workers 2 --exchange allreduce:ring --balance on --straggler rank=1,slowdown=4 --checkpoint "$TMP/bal_res.st" >/dev/null
"$DTRAIN" train $BASE --batch 32 --workers 2 --exchange allreduce:ring --balance on --straggler rank=1,slowdown=4 --resume "$TMP/bal_res.st" --epochs 2 --max-steps 21 --metrics "$TMP/bal_res.jsonl" >/dev/null
check balance_speeds_survive_resume $PY -c "
import json; e, d = [json.loads(l) for l in open('$TMP/bal_res.jsonl')]; s=e['batch_per_rank']
assert e['epoch'] == 2 and s[1] < s[0], e
assert d['event'] == 'done' and d['steps'] == 21 and d['samples_per_sec'] > 0, d  # 1 step since the resume, mid-epoch"
# ---- the default exchange: shared memory on --comm local (2+ workers), the
# same bits as asking for it; allreduce:auto under mpi and wherever the other
# options need allreduce (the "done" line names the exchange) --------------
default_exchange() { # NAME EXPECTED OPTIONS...
  name=$1 want=$2; shift 2
  rm -f "$TMP/default_$name.jsonl"
  "$DTRAIN" train $BASE --batch 8 "$@" --metrics "$TMP/default_$name.jsonl" >/dev/null 2>"$TMP/default.err"
  check "default_exchange_${name}_is_$(echo $want | tr : _)" grep -q "\"exchange\":\"$want\",\"schedule\":\"sync\"" "$TMP/default_$name.jsonl"
}
default_exchange local_2 shared --workers 2 --checkpoint "$TMP/default_2.st"
"$DTRAIN" train $BASE --batch 8 --workers 2 --exchange shared --schedule sync --checkpoint "$TMP/shared_2.st" >/dev/null
check default_exchange_same_bits_as_shared_sync cmp -s "$TMP/default_2.st" "$TMP/shared_2.st"
default_exchange local_1 allreduce:auto --workers 1
default_exchange bucket_mb allreduce:auto --workers 2 --bucket-mb 0
default_exchange shard_optimizer allreduce:auto --workers 2 --shard-optimizer on
default_exchange net allreduce:auto --workers 2 --net latency=50us
default_exchange lars allreduce:auto --workers 2 --optimizer lars
default_exchange preset allreduce:ring --workers 2 --preset pytorch-ddp
if have_mpi; then
  rm -f "$TMP/default_mpi.jsonl"
  $MPIRUN -np 2 "$DTRAIN" train $BASE --batch 8 --comm mpi --metrics "$TMP/default_mpi.jsonl" >/dev/null 2>"$TMP/mpi.err"
  check default_exchange_mpi_is_allreduce_auto grep -q '"exchange":"allreduce:auto","schedule":"sync"' "$TMP/default_mpi.jsonl"
fi
expect_error balance_needs_sync_data_parallelism 2 "option --balance: applies to synchronous data parallelism" -- "$DTRAIN" train --workers 2 --schedule async --exchange ps:1 --balance on
expect_error balance_one_worker 2 "option --balance on: one worker is one data-parallel replica" -- "$DTRAIN" train --workers 1 --exchange allreduce:ring --balance on --max-steps 1
expect_error balance_on_or_off 2 "option --balance" -- "$DTRAIN" train --workers 2 --balance yes
expect_error shared_sync_no_lars 1 "--optimizer lars and --exchange shared --schedule sync do not combine" -- "$DTRAIN" train $BASE --workers 2 --exchange shared --schedule sync --optimizer lars
expect_error allreduce_shm_needs_local 2 "option --exchange allreduce:shm needs shared memory: use --comm local" -- "$DTRAIN" train --exchange allreduce:shm --comm mpi
expect_error allreduce_shm_no_net 2 "options --exchange allreduce:shm and --net do not combine" -- "$DTRAIN" train --workers 2 --exchange allreduce:shm --net latency=50us
# dtrain bench allreduce: memcpy and every algorithm (7) verified and timed at 3 sizes, one JSON row each
check bench_allreduce_all_algorithms sh -c "'$DTRAIN' bench allreduce --workers 3 --min-bytes 4KiB --max-bytes 64KiB --iters 3 --json '$TMP/bench.jsonl' >/dev/null && [ \$(wc -l < '$TMP/bench.jsonl') -eq 24 ] && grep -q '\"algo\":\"shm\"' '$TMP/bench.jsonl'"
expect_error bench_shm_needs_local 2 "option --algo shm: needs --comm local without --latency/--bandwidth" -- "$DTRAIN" bench allreduce --workers 2 --algo shm --latency 50us
expect_error shared_sync_needs_local 2 "option --exchange shared needs shared memory: use --comm local" -- "$DTRAIN" train --exchange shared --schedule sync --comm mpi

for p in horovod pytorch-ddp bytescheduler firecaffe naive-ps; do
  check "preset_${p}_runs" sh -c "'$DTRAIN' train $BASE --workers 2 --preset $p --metrics '$TMP/$p.jsonl' >/dev/null && grep -q '\"workers\":2' '$TMP/$p.jsonl'"
done
check preset_option_overrides sh -c "'$DTRAIN' train $BASE --workers 2 --preset firecaffe --exchange allreduce:ring >/dev/null"

# metrics carry the split of compute and communication
"$DTRAIN" train $BASE --batch 8 --workers 2 --net latency=50us,bandwidth=1Gbit --metrics "$TMP/net.jsonl" >/dev/null
check emulated_metrics_labelled $PY -c "
import json; e=json.loads(open('$TMP/net.jsonl').readline())
assert e['emulated'] is True and e['comm_sec'] > 0 and 'comm_hidden_sec' in e and e['compute_sec'] > 0, e"

# ---- invalid combinations and values: one line naming the option ------------
expect_error ssp_with_allreduce 2 "--schedule ssp and --exchange allreduce do not combine" -- "$DTRAIN" train --schedule ssp:3 --exchange allreduce:ring
expect_error zero_workers 2 "option --workers" -- "$DTRAIN" train --workers 0
expect_error bad_bandwidth 2 "'fast' is not a bandwidth" -- "$DTRAIN" train --net bandwidth=fast
expect_error bad_algorithm 2 "option --exchange" -- "$DTRAIN" train --exchange allreduce:butterfly
expect_error straggler_rank 2 "option --straggler: rank 5 does not exist with 2 workers" -- "$DTRAIN" train --workers 2 --straggler rank=5,slowdown=2
expect_error unknown_preset 2 "unknown preset 'horovodd'" -- "$DTRAIN" train --preset horovodd

# ---- options naming ranks are checked against -np under mpi ------------------
if have_mpi; then
  check mpi_straggler_rank_1 sh -c "$MPIRUN -np 2 '$DTRAIN' train $BASE --comm mpi --straggler rank=1,slowdown=2 >/dev/null 2>&1"
  check mpi_straggler_rank_outside_np sh -c "$MPIRUN -np 2 '$DTRAIN' train $BASE --comm mpi --straggler rank=3,slowdown=2 2>&1 | grep -q 'rank 3 does not exist with 2 workers'"
fi

# ---- a rank that dies under mpi does not leave the others hanging ------------
if have_mpi; then
  $MPIRUN -np 2 "$DTRAIN" train --data "$SMALL" --comm mpi --epochs 100000 --quiet >/dev/null 2>"$TMP/die.err" &
  job=$!
  sleep 4
  victim=$(pgrep -f "dtrain train --data $SMALL --comm mpi" | tail -1)
  [ -n "$victim" ] && kill -9 "$victim"
  waited=0
  while kill -0 $job 2>/dev/null && [ $waited -lt 60 ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 $job 2>/dev/null; then kill -9 $job; fail mpi_dead_rank_ends_job "still running after 60 s"; else
    wait $job; rc=$?
    if [ $rc -ne 0 ]; then pass "mpi_dead_rank_ends_job(${waited}s)"; else fail mpi_dead_rank_ends_job "exit 0"; fi
  fi
fi

# communication took at least as long as the compute waited for it: with
# overlap (FIFO and priority order) the wait also holds the hand-off to the
# communication thread, which its busy time does not
for p in pytorch-ddp bytescheduler; do
  rm -f "$TMP/exposed_$p.jsonl"
  "$DTRAIN" train $BASE --batch 32 --workers 2 --preset $p --metrics "$TMP/exposed_$p.jsonl" >/dev/null 2>&1
  check "comm_sec_covers_exposed_$p" $PY -c "
import json; e = json.loads(open('$TMP/exposed_$p.jsonl').readline())
assert e['comm_sec'] >= e['comm_exposed_sec'] >= 0 and e['comm_sec'] > 0 and e['comm_hidden_sec'] >= 0, e"
done
