#!/bin/sh
# Project Adam end to end (src/strategy/ps/ps_group.c): parameter servers
# whose workers are tensor-parallel groups (--exchange ps:K --tp T).
# Synchronous: one replica of tp ranks equals one worker (mlp; lenet with
# its convolutions whole), and R replicas x tp 2 equal R plain workers and
# dp R x tp 2 by allreduce (within 1e-6, the tensor-parallel runs' stated
# tolerance; bit for bit where the arithmetic is the same), local = mpi;
# each tp rank pushes and pulls exactly its keys (bytes asserted from the
# metrics), and the keys of a group cover the model once; the
# project-adam preset (async, 2 replicas x tp 2) trains mlp past 85%;
# its checkpoint is one worker's file and resumes onto another --tp, and
# a tp 1 checkpoint resumes onto tp 2; unsupported combinations give one
# line naming the option.
# Project Adam's two server-side traits: --ps-push factors (dense layers
# pushed as activations and error terms, dW = dY^T X computed at the
# server) equals gradient pushes bit for bit under sync, 1..4 workers,
# with and without tp, local and mpi; the bytes pushed are the factors'
# formula; --ps-server-threads T equals one thread bit for bit under sync,
# and trains under async.
# The paper's worker-side threads (--worker-threads T, ps_worker_threads.c):
# T = 1 is today's worker bit for bit (sync and async); T = 2, 3 sum to the
# worker's gradient (sync, small lr: within 5e-5 of one thread, measured
# 4e-6 from the racing local steps, where a thread's images lost would
# differ by 4e-4), with gradient and factor pushes, the factor bytes those
# of one thread (and under mpi); async T = 2 trains as T = 1 does. T > 1
# races by design: skipped under ThreadSanitizer, as Hogwild is.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 1024 256
SYNC="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16 --epochs 1 --max-steps 24 --schedule sync"
run() { "$DTRAIN" train "$@" >"$TMP/run.out" 2>"$TMP/run.err"; }

# ---- equivalence (sync) ---------------------------------------------------------------
run $SYNC --workers 1 --exchange allreduce:ring --checkpoint "$TMP/one.st" || fail adam_reference_run
run $SYNC --workers 2 --tp 2 --exchange ps:2 --checkpoint "$TMP/ps_tp2.st"
check adam_one_replica_tp2_equals_one_worker close "$TMP/one.st" "$TMP/ps_tp2.st" 1e-6
run $SYNC --workers 3 --tp 3 --exchange ps:3 --checkpoint "$TMP/ps_tp3.st"
check adam_one_replica_tp3_odd_split_equals_one_worker close "$TMP/one.st" "$TMP/ps_tp3.st" 1e-6
run $SYNC --workers 4 --tp 2 --exchange ps:2 --checkpoint "$TMP/ps_r2.st"
run $SYNC --workers 2 --exchange ps:1 --checkpoint "$TMP/ps_plain2.st"
run $SYNC --workers 4 --tp 2 --exchange allreduce:ring --checkpoint "$TMP/dp2tp2.st"
check adam_two_replicas_tp2_equal_two_ps_workers close "$TMP/ps_plain2.st" "$TMP/ps_r2.st" 1e-6
check adam_two_replicas_tp2_bitwise_dp2_tp2_allreduce cmp -s "$TMP/dp2tp2.st" "$TMP/ps_r2.st"
ADAM="--data $SMALL --seed 3 --quiet --batch 16 --epochs 1 --max-steps 24 --schedule sync --optimizer adam --lr 0.001"
run $ADAM --workers 4 --tp 2 --exchange ps:2 --checkpoint "$TMP/ps_adam.st"
run $ADAM --workers 2 --exchange ps:2 --checkpoint "$TMP/plain_adam.st"
check adam_optimizer_state_gathered_as_one_worker cmp -s "$TMP/plain_adam.st" "$TMP/ps_adam.st"
# lenet: the convolutions stay whole on every rank (tp rank 0's keys), the
# dense pair is split
LENET=$(echo "$SYNC" | sed 's/--max-steps 24/--max-steps 12 --model lenet/')
run $LENET --workers 1 --exchange allreduce:ring --checkpoint "$TMP/lenet_one.st"
run $LENET --workers 2 --tp 2 --exchange ps:2 --checkpoint "$TMP/lenet_ps.st"
check adam_lenet_one_replica_tp2_equals_one_worker close "$TMP/lenet_one.st" "$TMP/lenet_ps.st" 1e-6
check adam_push_every_fetch_every_run sh -c "'$DTRAIN' train --data '$SMALL' --quiet --epochs 2 --workers 4 --tp 2 --exchange ps:2 --schedule async --push-every 2 --fetch-every 3 | grep -q 'done: 2 epochs'"
check adam_ssp_runs sh -c "'$DTRAIN' train $SYNC --workers 4 --tp 2 --exchange ps:2 --schedule ssp:1 | grep -q 'done: 1 epochs'"

# ---- sufficient factors at the servers, lock-free server threads ----------------------
for n in 1 2 3 4; do
  run $SYNC --workers $n --exchange ps:2 --checkpoint "$TMP/g$n.st"
  run $SYNC --workers $n --exchange ps:2 --ps-push factors --checkpoint "$TMP/f$n.st"
  check adam_factors_equal_gradients_${n}_workers cmp -s "$TMP/g$n.st" "$TMP/f$n.st"
done
# a whole epoch whose last step is short (1024 = 14 x 72 + 16: rows split unevenly)
SHORT="--data $SMALL --lr 0.05 --seed 3 --quiet --batch 24 --epochs 1 --workers 3 --exchange ps:2 --schedule sync"
run $SHORT --checkpoint "$TMP/short_g.st"
run $SHORT --ps-push factors --checkpoint "$TMP/short_f.st"
check adam_factors_short_last_step_equal_gradients cmp -s "$TMP/short_g.st" "$TMP/short_f.st"
run $SYNC --workers 4 --tp 2 --exchange ps:2 --ps-push factors --checkpoint "$TMP/f_tp.st"
check adam_factors_tp2_equal_gradients cmp -s "$TMP/ps_r2.st" "$TMP/f_tp.st"
run $LENET --workers 4 --tp 2 --exchange ps:4 --checkpoint "$TMP/lenet_g.st"
run $LENET --workers 4 --tp 2 --exchange ps:4 --ps-push factors --ps-server-threads 2 --checkpoint "$TMP/lenet_f.st"
check adam_lenet_factors_tp2_convs_as_gradients cmp -s "$TMP/lenet_g.st" "$TMP/lenet_f.st"
run $ADAM --workers 2 --exchange ps:2 --ps-server-threads 3 --checkpoint "$TMP/adam_t3.st"
check adam_server_threads_3_equal_one_thread cmp -s "$TMP/plain_adam.st" "$TMP/adam_t3.st"
# bytes: mlp 784-512-256-10 at tp 2, 16 rows a push, one server a tp rank:
# rank 0 sends layer 0's rows (in 784, out 256), layer 1's (in 256 of its
# half, out 256) and layer 2's (256, 10); rank 1 layers 0 and 1 (its
# half of layer 1 holds no bias); 8 bytes of row count each
run $SYNC --workers 4 --tp 2 --exchange ps:2 --ps-push factors --max-steps 12 --metrics "$TMP/fbytes.jsonl"
check adam_factor_bytes_are_the_formula $PY -c "
import json
ep = [json.loads(l) for l in open('$TMP/fbytes.jsonl') if '\"epoch\"' in l][-1]
f = [8 + 4 * 16 * ((784 + 256) + (256 + 256) + (256 + 10)), 8 + 4 * 16 * ((784 + 256) + (256 + 256))]
assert ep['tp_bytes_pushed'] == [12 * b for b in f], (ep['tp_bytes_pushed'], f)"
# async with 2 server threads trains as 1 does (3 epochs: past 60%, within 5
# points; async runs differ by arrival order, measured 2.4 apart)
ASYNC="--data $SMALL --seed 3 --quiet --batch 16 --epochs 3 --workers 2 --exchange ps:2 --schedule async --ps-push factors"
acc_of() { sed -n 's/^done: .* test acc \([0-9.]*\)%.*/\1/p' "$TMP/run.out"; }
run $ASYNC --ps-server-threads 1; A1=$(acc_of)
run $ASYNC --ps-server-threads 2; A2=$(acc_of)
check adam_async_server_threads_2_trains_as_1 $PY -c "import sys; a, b = float('${A1:-0}'), float('${A2:-0}'); print(a, b); sys.exit(0 if b > 60 and abs(a - b) <= 5 else 1)"

# ---- worker threads: Project Adam's lock-free threads on each worker -----------------
run $SYNC --workers 2 --exchange ps:2 --worker-threads 1 --checkpoint "$TMP/wt1.st"
check adam_worker_threads_1_bitwise_sync cmp -s "$TMP/g2.st" "$TMP/wt1.st"
WA="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16 --epochs 1 --max-steps 30 --workers 1 --exchange ps:2 --schedule async"
run $WA --checkpoint "$TMP/wa.st"
run $WA --worker-threads 1 --checkpoint "$TMP/wa1.st"
check adam_worker_threads_1_bitwise_async cmp -s "$TMP/wa.st" "$TMP/wa1.st"
if [ -n "$TSAN" ]; then
  echo "SKIP adam_worker_threads_*: lock-free races by design (ThreadSanitizer)"
else
  WS="--data $SMALL --lr 0.001 --seed 3 --quiet --batch 16 --epochs 1 --max-steps 24 --schedule sync --workers 2 --exchange ps:2"
  run $WS --checkpoint "$TMP/ws1.st"
  run $WS --worker-threads 2 --checkpoint "$TMP/ws2.st"
  check adam_worker_threads_2_sum_to_the_gradient close "$TMP/ws1.st" "$TMP/ws2.st" 5e-5
  run $WS --ps-push factors --metrics "$TMP/wf1.jsonl"
  run $WS --ps-push factors --worker-threads 3 --checkpoint "$TMP/wf3.st" --metrics "$TMP/wf3.jsonl"
  check adam_worker_threads_3_factors_sum_to_the_gradient close "$TMP/ws1.st" "$TMP/wf3.st" 5e-5
  check adam_worker_threads_factor_bytes_as_one_thread $PY -c "
import json
a, b = ([json.loads(l) for l in open(f) if '\"epoch\"' in l][-1] for f in ('$TMP/wf1.jsonl', '$TMP/wf3.jsonl'))
assert a['bytes_pushed'] == b['bytes_pushed'] and a['bytes_pushed'][0] > 0, (a['bytes_pushed'], b['bytes_pushed'])"
  # async, 3 epochs: T = 1 and 2 measured 71.1% and 71.5% (T = 4: 72.3%)
  WT="--data $SMALL --seed 3 --quiet --batch 16 --epochs 3 --workers 2 --exchange ps:2 --schedule async"
  run $WT; W1=$(acc_of)
  run $WT --worker-threads 2; W2=$(acc_of)
  check adam_async_worker_threads_2_trains_as_1 $PY -c "import sys; a, b = float('${W1:-0}'), float('${W2:-0}'); print(a, b); sys.exit(0 if b > 60 and abs(a - b) <= 5 else 1)"
fi

# ---- bytes: each tp rank pushes and pulls its own keys --------------------------------
# mlp 784-512-256-10, tp 2: rank t holds rows of layer 0 (256 x 784 + 256)
# and columns of layer 1 (256 x 256); rank 0 also the replicated bias of
# layer 1 (256) and layer 2 (256 x 10 + 10). 12 steps: 12 pushes, 12 pulls
# and replica 0's pull for its evaluation.
run $SYNC --workers 4 --tp 2 --exchange ps:2 --max-steps 12 --metrics "$TMP/bytes.jsonl"
check adam_bytes_per_tp_rank_are_its_keys $PY -c "
import json
ev = [json.loads(l) for l in open('$TMP/bytes.jsonl')]
ep = [e for e in ev if e.get('event') == 'epoch'][-1]; done = [e for e in ev if e.get('event') == 'done'][0]
blk = 256 * 784 + 256 + 256 * 256
keys = [blk + 256 + 256 * 10 + 10, blk]
assert ep['tp_keys'] == keys and sum(keys) == done['params'], (ep['tp_keys'], done['params'])
assert ep['tp_bytes_pushed'] == [12 * 4 * k for k in keys], ep['tp_bytes_pushed']
assert ep['tp_bytes_pulled'] == [13 * 4 * k for k in keys], ep['tp_bytes_pulled']
assert ep['workers'] == 2, ep['workers']
"

# ---- the preset: accuracy and resume onto another tp ----------------------------------
FULL="--preset project-adam --workers 4 --quiet"
if run $FULL --epochs 5 --checkpoint "$TMP/adam.st" &&
   $PY -c "
import re, sys; acc = float(re.search(r'done: 5 epochs, test acc ([0-9.]+)%', open('$TMP/run.out').read()).group(1))
print(acc); sys.exit(0 if acc >= 85 else 1)" >"$TMP/acc.out"
then pass adam_preset_mlp_4_workers_85_percent_in_5_epochs; else fail adam_preset_mlp_4_workers_85_percent_in_5_epochs "$(cat "$TMP/acc.out") $(tail -c 300 "$TMP/run.err")"; fi
if run $FULL --epochs 6 --tp 1 --resume "$TMP/adam.st" && grep -q "done: 6 epochs" "$TMP/run.out"; then
  pass adam_checkpoint_resumes_on_tp1; else fail adam_checkpoint_resumes_on_tp1 "$(tail -c 300 "$TMP/run.err")"; fi
if "$DTRAIN" train --workers 4 --tp 4 --epochs 6 --quiet --resume "$TMP/adam.st" >"$TMP/run.out" 2>"$TMP/run.err" &&
   grep -q "done: 6 epochs" "$TMP/run.out"; then
  pass adam_checkpoint_resumes_on_allreduce_tp4; else fail adam_checkpoint_resumes_on_allreduce_tp4 "$(tail -c 300 "$TMP/run.err")"; fi
# sync, exact: two epochs unbroken on tp 2 = one on tp 1 then one on tp 2
# (the servers cut their blocks out of the whole tensors), and the reverse
CK="--data $SMALL --lr 0.05 --momentum 0.9 --seed 5 --quiet --batch 32 --schedule sync --exchange ps:2 --workers 4"
run $CK --tp 2 --epochs 2 --checkpoint "$TMP/full.st"
run $CK --tp 1 --epochs 1 --workers 2 --checkpoint "$TMP/half1.st"
run $CK --tp 2 --epochs 2 --resume "$TMP/half1.st" --checkpoint "$TMP/resumed2.st"
check adam_tp1_checkpoint_resumes_on_tp2 close "$TMP/full.st" "$TMP/resumed2.st" 1e-6
run $CK --tp 2 --epochs 1 --checkpoint "$TMP/half2.st"
run $CK --tp 1 --epochs 2 --workers 2 --resume "$TMP/half2.st" --checkpoint "$TMP/resumed1.st"
check adam_tp2_checkpoint_resumes_on_tp1 close "$TMP/full.st" "$TMP/resumed1.st" 1e-6

# ---- bad input ----------------------------------------------------------------------
B="--data $SMALL --quiet --epochs 1 --max-steps 2 --workers 4 --tp 2"
expect_error adam_value_refused 2 "option --schedule value: not with --tp 2" -- "$DTRAIN" train $B --exchange ps:2 --schedule value:0.1
expect_error adam_backup_refused 2 "option --schedule backup: not with --tp 2" -- "$DTRAIN" train $B --exchange ps:2 --schedule backup:1
expect_error adam_servers_not_multiple 2 "option --exchange ps:3: with --tp 2 .* multiple of 2 (e.g. ps:4)" -- "$DTRAIN" train $B --exchange ps:3 --schedule async
expect_error adam_checkpoint_dir_refused 2 "option --checkpoint-dir: .* use --checkpoint FILE" -- "$DTRAIN" train $B --exchange ps:2 --checkpoint-dir "$TMP/d"
expect_error adam_compress_refused 2 "option --compress: not with --tp 2" -- "$DTRAIN" train $B --exchange ps:2 --compress qsgd:4
expect_error adam_lazy_refresh_refused 2 "option --ps-refresh lazy: not with --tp 2" -- "$DTRAIN" train $B --exchange ps:2 --schedule ssp:2 --ps-refresh lazy
expect_error adam_pp_refused 2 "option --pp 2 / --micro-batches 1: pipelines run with" -- "$DTRAIN" train $B --workers 8 --exchange ps:2 --pp 2 --partition macs
expect_error adam_tp_conv_data_refused 2 "option --tp-conv data: not with --exchange ps:K" -- "$DTRAIN" train $B --workers 2 --exchange ps:2 --tp-conv data
expect_error adam_factors_push_every_refused 2 "option --ps-push factors: not with --push-every" -- "$DTRAIN" train $B --exchange ps:2 --schedule async --ps-push factors --push-every 2
expect_error adam_factors_compress_refused 2 "option --ps-push factors: not with --compress" -- "$DTRAIN" train --data "$SMALL" --quiet --epochs 1 --max-steps 2 --workers 2 --exchange ps:2 --ps-push factors --compress qsgd:4
expect_error adam_factors_priority_refused 2 "option --ps-push factors: not with --comm-order" -- "$DTRAIN" train --data "$SMALL" --quiet --epochs 1 --max-steps 2 --workers 2 --exchange ps:2 --ps-push factors --comm-order priority
expect_error adam_factors_replicas_refused 2 "option --ps-push factors: not with --ps-replicas 2" -- "$DTRAIN" train --data "$SMALL" --quiet --epochs 1 --max-steps 2 --workers 2 --exchange ps:2 --ps-push factors --ps-replicas 2
expect_error adam_ps_push_bad_word 2 "ps-push" -- "$DTRAIN" train $B --exchange ps:2 --ps-push weights
expect_error adam_server_threads_zero 2 "ps-server-threads" -- "$DTRAIN" train $B --exchange ps:2 --ps-server-threads 0
expect_error adam_server_threads_without_ps 2 "ps-server-threads" -- "$DTRAIN" train --data "$SMALL" --quiet --epochs 1 --workers 2 --ps-server-threads 2
expect_error adam_worker_threads_zero 2 "option --worker-threads: 0 is out of range" -- "$DTRAIN" train $B --exchange ps:2 --worker-threads 0
expect_error adam_worker_threads_without_ps 2 "option --worker-threads: not used with" -- "$DTRAIN" train --data "$SMALL" --quiet --epochs 1 --workers 2 --worker-threads 2
expect_error adam_worker_threads_tp_refused 2 "option --worker-threads 2: not with --tp" -- "$DTRAIN" train $B --exchange ps:2 --worker-threads 2
expect_error adam_worker_threads_priority_refused 2 "option --worker-threads 2: not with --comm-order" -- "$DTRAIN" train --data "$SMALL" --quiet --epochs 1 --max-steps 2 --workers 2 --exchange ps:2 --worker-threads 2 --comm-order priority
expect_error adam_workers_not_multiple 2 "multiple of 2" -- "$DTRAIN" train --preset project-adam --data "$SMALL" --workers 3

# ---- mpi -------------------------------------------------------------------------
if have_mpi; then
  $MPIRUN -np 6 "$DTRAIN" train $SYNC --comm mpi --tp 2 --exchange ps:2 --checkpoint "$TMP/mpi_r2.st" >/dev/null 2>"$TMP/mpi.err"
  check mpi_adam_two_replicas_tp2_bitwise_local cmp -s "$TMP/ps_r2.st" "$TMP/mpi_r2.st"
  $MPIRUN -np 6 "$DTRAIN" train $SYNC --comm mpi --tp 2 --exchange ps:2 --max-steps 12 --metrics "$TMP/mpi_bytes.jsonl" >/dev/null 2>"$TMP/mpi.err"
  check mpi_adam_bytes_per_tp_rank $PY -c "
import json
a = [json.loads(l) for l in open('$TMP/bytes.jsonl') if '\"epoch\"' in l][-1]
b = [json.loads(l) for l in open('$TMP/mpi_bytes.jsonl') if '\"epoch\"' in l][-1]
assert all(a[k] == b[k] for k in ('tp_keys', 'tp_bytes_pushed', 'tp_bytes_pulled')), (a, b)"
  for n in 1 2 3 4; do
    $MPIRUN -np $((n + 2)) "$DTRAIN" train $SYNC --comm mpi --workers $n --exchange ps:2 --ps-push factors --ps-server-threads 2 --checkpoint "$TMP/mpi_f$n.st" >/dev/null 2>"$TMP/mpi.err"
    check mpi_adam_factors_equal_gradients_${n}_workers cmp -s "$TMP/g$n.st" "$TMP/mpi_f$n.st"
  done
  $MPIRUN -np 6 "$DTRAIN" train $SYNC --comm mpi --tp 2 --exchange ps:2 --ps-push factors --max-steps 12 --metrics "$TMP/mpi_fbytes.jsonl" >/dev/null 2>"$TMP/mpi.err"
  check mpi_adam_factor_bytes_as_local $PY -c "
import json
a = [json.loads(l) for l in open('$TMP/fbytes.jsonl') if '\"epoch\"' in l][-1]
b = [json.loads(l) for l in open('$TMP/mpi_fbytes.jsonl') if '\"epoch\"' in l][-1]
assert a['tp_bytes_pushed'] == b['tp_bytes_pushed'], (a['tp_bytes_pushed'], b['tp_bytes_pushed'])"
  if $MPIRUN -np 6 "$DTRAIN" train --preset project-adam --comm mpi --quiet --epochs 5 --checkpoint "$TMP/mpi_adam.st" >"$TMP/mpi.out" 2>"$TMP/mpi.err" &&
     $PY -c "
import re, sys; acc = float(re.search(r'done: 5 epochs, test acc ([0-9.]+)%', open('$TMP/mpi.out').read()).group(1))
print(acc); sys.exit(0 if acc >= 85 else 1)" >"$TMP/acc.out"
  then pass mpi_adam_preset_mlp_85_percent_in_5_epochs; else fail mpi_adam_preset_mlp_85_percent_in_5_epochs "$(cat "$TMP/acc.out") $(tail -c 300 "$TMP/mpi.err")"; fi
  if $MPIRUN -np 6 "$DTRAIN" train --preset project-adam --comm mpi --quiet --epochs 6 --tp 1 --resume "$TMP/mpi_adam.st" >"$TMP/mpi.out" 2>"$TMP/mpi.err" &&
     grep -q "done: 6 epochs" "$TMP/mpi.out"; then pass mpi_adam_checkpoint_resumes_on_tp1; else fail mpi_adam_checkpoint_resumes_on_tp1 "$(tail -c 300 "$TMP/mpi.err")"; fi
  $MPIRUN -np 4 "$DTRAIN" train $WS --comm mpi --worker-threads 2 --ps-push factors --checkpoint "$TMP/mpi_wt2.st" >/dev/null 2>"$TMP/mpi.err"
  check mpi_adam_worker_threads_2_factors_sum_to_the_gradient close "$TMP/ws1.st" "$TMP/mpi_wt2.st" 5e-5
  $MPIRUN -np 5 "$DTRAIN" train --preset project-adam --comm mpi --data "$SMALL" --quiet >/dev/null 2>"$TMP/np.err"
  check mpi_adam_np_not_fitting grep -q "mpirun -np 5, --tp 2 and --exchange ps: 3 workers besides the 2 servers, .* (e.g. mpirun -np 6)" "$TMP/np.err"
fi
