#!/bin/sh
# Parameter servers and Hogwild end to end: sync equals allreduce data
# parallelism and ssp:0 equals sync, bit for bit, on 1, 2 and 4 servers
# and on both transports; every schedule trains and reports staleness;
# a stopped worker under async and backup:B does not stop the run (and
# under sync does, with the reason); checkpoints gather the shards into
# the usual file, shard folders resume on another number of servers;
# presets; bad combinations.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 512
BASE="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --max-steps 12 --epochs 1 --batch 8"

run() { "$DTRAIN" train "$@" >"$TMP/run.out" 2>"$TMP/run.err"; }

# ---- sync = allreduce data parallelism; ssp:0 = sync --------------------------
# allreduce:naive sums in rank order, as a server does: bitwise. Ring sums in
# another order: equal to float rounding (the tolerance of e2e_dp.sh).
run $BASE --workers 4 --exchange allreduce:naive --checkpoint "$TMP/dp_naive.st"
run $BASE --workers 4 --exchange allreduce:ring --checkpoint "$TMP/dp_ring.st"
for k in 1 2 4; do
  run $BASE --workers 4 --exchange ps:$k --checkpoint "$TMP/sync_$k.st"
  run $BASE --workers 4 --exchange ps:$k --schedule ssp:0 --checkpoint "$TMP/ssp0_$k.st"
  check "ps_${k}_sync_bitwise_equals_allreduce_naive" cmp -s "$TMP/dp_naive.st" "$TMP/sync_$k.st"
  check "ps_${k}_ssp0_bitwise_equals_sync" cmp -s "$TMP/sync_$k.st" "$TMP/ssp0_$k.st"
  if close "$TMP/dp_ring.st" "$TMP/sync_$k.st" 2e-5; then pass "ps_${k}_sync_equals_allreduce_ring($(cat "$TMP/cmp.out"))"; else fail "ps_${k}_sync_equals_allreduce_ring" "$(cat "$TMP/cmp.out")"; fi
done
# two workers: any summation order is the same sum
run $BASE --workers 2 --checkpoint "$TMP/dp2.st"
run $BASE --workers 2 --exchange ps:n --checkpoint "$TMP/psn2.st"
check ps_n_sync_bitwise_equals_allreduce_2_workers cmp -s "$TMP/dp2.st" "$TMP/psn2.st"

# ---- every schedule trains and shows its staleness ------------------------------
for s in async ssp:3 ssp:inf value:0.02 backup:1; do
  if run --data "$SMALL" --workers 4 --exchange ps:2 --schedule $s --epochs 2 --quiet --metrics "$TMP/m.jsonl" &&
     $PY - "$TMP/m.jsonl" "$s" >"$TMP/check.out" 2>&1 <<'PYEOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ep = [l for l in lines if l["event"] == "epoch"]
assert len(ep) == 2 and lines[-1]["event"] == "done", lines
e = ep[-1]
assert e["schedule"] == sys.argv[2] and e["servers"] == 2, e
for k in ("blocked_sec", "bytes_pushed", "bytes_pulled", "batches"):
    assert len(e[k]) == 4, (k, e)
assert all(b > 0 for b in e["bytes_pushed"]) and all(b > 0 for b in e["bytes_pulled"]), e
# two epochs of 2048/64 batches in all (ssp: a fast worker's next-epoch batches count in the epoch it pushed them)
assert sum(sum(x["batches"]) for x in ep) == 64, [x["batches"] for x in ep]
assert e["staleness_max"] >= e["staleness_mean"] >= 0 and e["test_acc"] > 0.3, e
if sys.argv[2] == "backup:1": assert e["staleness_max"] == 0, e
# the done line counts as the epoch lines do: the servers' updates, the samples trained
d = lines[-1]
assert d["steps"] == e["step"], (d["steps"], e["step"])
assert abs(d["samples_per_sec"] * d["total_sec"] - 2 * 2048) < 0.005 * 2 * 2048, d
print("ok")
PYEOF
  then pass "schedule_${s}_trains_and_reports"; else fail "schedule_${s}_trains_and_reports" "$(cat "$TMP/check.out" "$TMP/run.err" | tail -c 400)"; fi
done
# --max-steps 10 under the pool: 10 x 4 batches of 64 over the 2 epochs of 32
# (before, the done line counted worker 0's last batch index as its steps
# and the samples of 2 whole epochs)
for s in async backup:1; do
  if run --data "$SMALL" --workers 4 --exchange ps:2 --schedule $s --epochs 2 --max-steps 10 --quiet --metrics "$TMP/m.jsonl" &&
     $PY -c "
import json; lines = [json.loads(l) for l in open('$TMP/m.jsonl')]
ep = [l for l in lines if l['event'] == 'epoch']; d = lines[-1]
assert d['event'] == 'done' and d['steps'] == ep[-1]['step'] and len(ep) == 2, (d, ep)
assert sum(sum(e['batches']) for e in ep) == 40, [e['batches'] for e in ep]
assert abs(d['samples_per_sec'] * d['total_sec'] - 40 * 64) < 0.01 * 40 * 64, d
assert abs(sum(e['samples_per_sec'] * e['epoch_sec'] for e in ep) - 40 * 64) < 0.01 * 40 * 64, ep" >"$TMP/check.out" 2>&1
  then pass "pool_done_line_counts_max_steps_${s}"; else fail "pool_done_line_counts_max_steps_${s}" "$(cat "$TMP/check.out" "$TMP/run.err" | tail -c 400)"; fi
done
# ---- ssp:S, Bosen's lazy SSP cache against ESSP's eager refresh ---------------------
# 4 workers, ssp:3, 2 epochs of 32 clocks (batch 16). Eager pulls every
# clock: 64 models per worker. Lazy pulls only when the parameters held
# are older than 3 clocks; a pull's clock is at most the puller's own, so
# one pull serves at most 4 clocks: 16 to 63 (fewer than eager). Worker 0
# is left out (its reports pull the model too).
cat >"$TMP/refresh.py" <<'PYEOF'
import json, sys
runs = {}
for path in sys.argv[1:3]:
    lines = [json.loads(l) for l in open(path)]
    ep = [l for l in lines if l["event"] == "epoch"]
    S = 4 * lines[-1]["params"]
    pulls = [round(sum(e["bytes_pulled"][w] for e in ep) / S) for w in range(1, 4)]
    runs[ep[-1]["ps_refresh"]] = (pulls, ep[-1])
eager, lazy = runs["eager"][0], runs["lazy"][0]
assert eager == [64, 64, 64], eager
assert all(16 <= p < 64 for p in lazy), lazy
assert all(r[1]["test_acc"] > 0.5 and r[1]["staleness_mean"] >= 0 for r in runs.values()), runs
print(f"pulls eager {eager} lazy {lazy}, staleness eager {runs['eager'][1]['staleness_mean']} lazy {runs['lazy'][1]['staleness_mean']}")
PYEOF
REFRESH="--data $SMALL --exchange ps:2 --schedule ssp:3 --batch 16 --epochs 2 --lr 0.05 --quiet"
for r in eager lazy; do run $REFRESH --workers 4 --ps-refresh $r --metrics "$TMP/refresh_$r.jsonl"; done
if $PY "$TMP/refresh.py" "$TMP/refresh_eager.jsonl" "$TMP/refresh_lazy.jsonl" >"$TMP/check.out" 2>&1; then pass "ssp_lazy_cache_pulls_less($(cat "$TMP/check.out"))"; else fail ssp_lazy_cache_pulls_less "$(cat "$TMP/check.out" "$TMP/run.err" | tail -c 400)"; fi
if have_mpi; then
  for r in eager lazy; do $MPIRUN -np 6 "$DTRAIN" train $REFRESH --comm mpi --ps-refresh $r --metrics "$TMP/mpi_refresh_$r.jsonl" >/dev/null 2>"$TMP/mpi.err"; done
  if $PY "$TMP/refresh.py" "$TMP/mpi_refresh_eager.jsonl" "$TMP/mpi_refresh_lazy.jsonl" >"$TMP/check.out" 2>&1; then pass "mpi_ssp_lazy_cache_pulls_less($(cat "$TMP/check.out"))"; else fail mpi_ssp_lazy_cache_pulls_less "$(cat "$TMP/check.out" "$TMP/mpi.err" | tail -c 400)"; fi
fi

check downpour_fetch_push_every run --data "$SMALL" --workers 3 --exchange ps:2 --schedule async --fetch-every 3 --push-every 2 --epochs 1 --quiet
# one worker pulling every 3rd batch computes on a model 0, 1, 2 updates old
# (before, a worker whose pull was not due pulled anyway: staleness 0)
if run --data "$SMALL" --workers 1 --exchange ps:1 --schedule async --fetch-every 3 --epochs 1 --quiet --metrics "$TMP/fe.jsonl" &&
   $PY -c "
import json; e = [json.loads(l) for l in open('$TMP/fe.jsonl') if '\"epoch\"' in l][-1]
assert e['staleness_max'] == 2 and abs(e['staleness_mean'] - 31 / 32) < 1e-3, e" >"$TMP/check.out" 2>&1
then pass fetch_every_computes_on_older_models; else fail fetch_every_computes_on_older_models "$(cat "$TMP/check.out" "$TMP/run.err" | tail -c 400)"; fi
check staleness_lr_and_dc_asgd run --data "$SMALL" --workers 3 --exchange ps:1 --schedule async --staleness-lr --dc-asgd 0.04 --epochs 1 --quiet
check dc_asgd_adaptive_trains run --data "$SMALL" --workers 3 --exchange ps:2 --schedule async --dc-asgd a:2 --epochs 1 --quiet
# negative momentum: 4 workers, --momentum 0.5 total: the servers step with 0.5 - 0.75 = -0.25;
# with 0.75, momentum 0 and no momentum buffer (worker 0's checkpoint agrees with the servers)
check implicit_momentum_negative_trains run --data "$SMALL" --workers 4 --exchange ps:2 --schedule async --momentum 0.5 --implicit-momentum on --epochs 1 --quiet --checkpoint "$TMP/im.st"
check implicit_momentum_zero_checkpoint sh -c "'$DTRAIN' train --data '$SMALL' --workers 4 --exchange ps:1 --schedule value:0.05 --momentum 0.75 --implicit-momentum on --max-steps 6 --quiet --checkpoint '$TMP/im0.st' >/dev/null 2>&1 && ! grep -q momentum_buffer '$TMP/im0.st' && grep -q momentum_buffer '$TMP/im.st'"
# --drop-stale S: a 4x straggler's pushes come ~10 updates late and are dropped, the run goes on
if run --data "$SMALL" --workers 4 --exchange ps:1 --schedule async --drop-stale 3 --straggler rank=1,slowdown=4 --epochs 1 --quiet --metrics "$TMP/ds.jsonl" &&
   $PY -c "
import json; e = [json.loads(l) for l in open('$TMP/ds.jsonl') if '\"epoch\"' in l][-1]
assert e['dropped'] > 0 and e['staleness_max'] <= 3 and sum(e['batches']) == 32 and e['test_acc'] > 0.3, e" >"$TMP/check.out" 2>&1
then pass drop_stale_drops_the_straggler; else fail drop_stale_drops_the_straggler "$(cat "$TMP/check.out" "$TMP/run.err" | tail -c 400)"; fi
# --epoch-fraction 0.75 (Project Adam): 24 of the 32 batches are pushed each
# epoch, whatever the 4x straggler does; the batches in flight at the cut are dropped
for s in async value:0.02; do
  if run --data "$SMALL" --workers 4 --exchange ps:2 --schedule $s --epoch-fraction 0.75 --straggler rank=1,slowdown=4 --epochs 3 --quiet --metrics "$TMP/ef.jsonl" &&
     $PY -c "
import json; ep = [json.loads(l) for l in open('$TMP/ef.jsonl') if '\"epoch\"' in l]
assert len(ep) == 3 and all(sum(e['batches']) == 24 and e['dropped'] <= 3 for e in ep), [(e['batches'], e['dropped']) for e in ep]
assert ep[-1]['test_acc'] > 0.3, ep[-1]" >"$TMP/check.out" 2>&1
  then pass "epoch_fraction_cuts_each_epoch_${s}"; else fail "epoch_fraction_cuts_each_epoch_${s}" "$(cat "$TMP/check.out" "$TMP/run.err" | tail -c 400)"; fi
done
check value_bound_staleness_queue_trains run --data "$SMALL" --workers 4 --exchange ps:2 --schedule value:0.02 --ps-queue staleness --straggler rank=1,slowdown=4 --epochs 1 --quiet
check dc_asgd_adaptive_under_value_bound run --data "$SMALL" --workers 3 --exchange ps:2 --schedule value:0.02 --dc-asgd a:2 --epochs 1 --quiet
# Hogwild's unsynchronised updates are the algorithm: ThreadSanitizer would
# report every one of them (and run for many minutes), so it is not run there.
if [ -n "$TSAN" ]; then
  echo "SKIP hogwild_trains_and_reports: lock-free races by design (ThreadSanitizer)"
elif run --data "$SMALL" --workers 4 --exchange shared --schedule async --epochs 2 --quiet --metrics "$TMP/h.jsonl" &&
   grep -q '"exchange":"shared".*"staleness_mean"' "$TMP/h.jsonl" && grep -q 'test acc' "$TMP/run.out" &&
   $PY -c "
import json; lines = [json.loads(l) for l in open('$TMP/h.jsonl')]
e = [l for l in lines if l['event'] == 'epoch'][-1]; d = lines[-1]
assert d['steps'] == e['step'] == 2 * 32 // 4, (d, e)  # updates per worker, in both lines" >"$TMP/check.out" 2>&1; then
  pass hogwild_trains_and_reports; else fail hogwild_trains_and_reports "$(tail -c 300 "$TMP/run.err")"; fi

# ---- a worker that stops ----------------------------------------------------------
# A first step longer than the 3 s lease is no death (a GPT's on two cores:
# before, the coordinator gave up on worker 1 after its first pull): the
# lease waits for a push, which measures a step, else --comm-timeout.
if run --data "$SMALL" --workers 2 --exchange ps:1 --max-steps 1 --epochs 1 --batch 256 --straggler rank=1,slowdown=150 &&
   ! grep -q "has stopped" "$TMP/run.err"
then pass ps_long_first_step_is_no_death; else fail ps_long_first_step_is_no_death "$(tail -c 300 "$TMP/run.err")"; fi
KILL="--data $SMALL --workers 4 --exchange ps:2 --epochs 3 --quiet --kill rank=3,at-step=10"
if run $KILL --schedule async --metrics "$TMP/k.jsonl" && grep -q "worker 3 has stopped" "$TMP/run.err" &&
   grep -q "done: 3 epochs" "$TMP/run.out"; then pass async_goes_on_without_a_stopped_worker; else fail async_goes_on_without_a_stopped_worker "$(tail -c 300 "$TMP/run.err")"; fi
if run $KILL --schedule backup:1 && grep -q "done: 3 epochs" "$TMP/run.out"; then pass backup_goes_on_without_a_stopped_worker; else fail backup_goes_on_without_a_stopped_worker "$(tail -c 300 "$TMP/run.err")"; fi
expect_kill_fails() {
  run $KILL --schedule sync; rc=$?
  if [ $rc -eq 1 ] && grep -q "worker 3 has stopped.*--schedule sync needs every worker" "$TMP/run.err"; then pass sync_stops_with_the_reason; else fail sync_stops_with_the_reason "exit $rc: $(tail -c 300 "$TMP/run.err")"; fi
}
expect_kill_fails

# ---- checkpoints -------------------------------------------------------------------
CK="--data $SMALL --workers 2 --lr 0.05 --momentum 0.9 --seed 7 --quiet --lr-schedule step --lr-step-epochs 1 --lr-gamma 0.5"
run $CK --epochs 3 --exchange ps:2 --checkpoint "$TMP/full.st"
run $CK --epochs 3 --exchange allreduce:naive --checkpoint "$TMP/full_dp.st"
check checkpoint_file_same_as_allreduce cmp -s "$TMP/full.st" "$TMP/full_dp.st"
run $CK --epochs 2 --exchange ps:2 --checkpoint "$TMP/half.st"
run $CK --epochs 3 --exchange ps:2 --resume "$TMP/half.st" --checkpoint "$TMP/half.st"
check resume_file_bit_exact cmp -s "$TMP/full.st" "$TMP/half.st"
run $CK --epochs 2 --exchange ps:2 --checkpoint-dir "$TMP/shards"
check shard_folder_written $PY -c "
import json, os; m = json.load(open('$TMP/shards/manifest.json'))
assert m['epoch'] == 2 and m['servers'] == 2 and len(m['shards']) == 2, m
assert all(os.path.exists('$TMP/shards/' + s['file']) for s in m['shards'])
assert m['shards'][0]['begin'] == 0 and m['shards'][0]['end'] == m['shards'][1]['begin'] and m['shards'][1]['end'] == m['nparams']
assert not [f for f in os.listdir('$TMP/shards') if '.e1.' in f]"
run $CK --epochs 3 --exchange ps:3 --resume "$TMP/shards" --checkpoint "$TMP/from_dir.st"
check resume_folder_on_3_servers_bit_exact cmp -s "$TMP/full.st" "$TMP/from_dir.st"
# batch-norm statistics live with worker 0, not on the servers: the folder keeps them too
printf 'conv2d filters=4 kernel=3 pad=1\nbatchnorm\nrelu\nmaxpool kernel=2\nflatten\ndense units=10\n' >"$TMP/bn.model"
BN="$CK --model $TMP/bn.model --exchange ps:2"
run $BN --epochs 3 --checkpoint "$TMP/bn_full.st"
run $BN --epochs 2 --checkpoint-dir "$TMP/bn_shards"
run $BN --epochs 3 --resume "$TMP/bn_shards" --checkpoint "$TMP/bn_resumed.st"
check resume_folder_with_batchnorm_buffers_bit_exact sh -c "ls '$TMP/bn_shards' | grep -q buffers.e2 && cmp -s '$TMP/bn_full.st' '$TMP/bn_resumed.st'"
# DC-ASGD-a's MeanSquare is saved with the shards: one worker (so the run is
# repeatable) pulling every 2nd batch (so its pushes are stale and the
# MeanSquare weighs the compensation) resumes bit for bit, from a file or a
# folder; the same file without the MeanSquare resumes differently (it did
# before it was saved)
DCA="--data $SMALL --workers 1 --exchange ps:2 --schedule async --dc-asgd a:2 --fetch-every 2 --lr 0.05 --momentum 0.9 --seed 7 --quiet"
run $DCA --epochs 3 --checkpoint "$TMP/dca_full.st"
run $DCA --epochs 2 --checkpoint "$TMP/dca_half.st" --checkpoint-dir "$TMP/dca_shards"
cp "$TMP/dca_half.st" "$TMP/dca_noms.st"
run $DCA --epochs 3 --resume "$TMP/dca_half.st" --checkpoint "$TMP/dca_half.st"
check resume_dc_asgd_adaptive_file_bit_exact cmp -s "$TMP/dca_full.st" "$TMP/dca_half.st"
run $DCA --epochs 3 --resume "$TMP/dca_shards" --checkpoint "$TMP/dca_dir.st"
check resume_dc_asgd_adaptive_folder_bit_exact cmp -s "$TMP/dca_full.st" "$TMP/dca_dir.st"
$PY - "$TMP/dca_noms.st" <<'PYEOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data, out, blob = json.loads(raw[8:8 + n]), raw[8 + n:], {}, b""
for k, v in hdr.items():
    if k.startswith("dc_asgd."): continue
    if k != "__metadata__":
        b, e = v["data_offsets"]; v = dict(v, data_offsets=[len(blob), len(blob) + e - b]); blob += data[b:e]
    out[k] = v
h = json.dumps(out, separators=(",", ":")).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + blob)
PYEOF
run $DCA --epochs 3 --resume "$TMP/dca_noms.st" --checkpoint "$TMP/dca_noms.st"
check resume_without_mean_square_differs_and_says_so sh -c "! cmp -s '$TMP/dca_full.st' '$TMP/dca_noms.st' && grep -q 'no DC-ASGD-a MeanSquare in it' '$TMP/run.err'"
expect_error resume_folder_needs_ps 2 "a folder of shards needs --exchange ps:K" -- "$DTRAIN" train $CK --epochs 3 --resume "$TMP/shards"
rm -f "$TMP/shards/shard-1-of-2.e2.safetensors"
expect_error resume_folder_missing_shard 1 "shard-1-of-2.e2.safetensors" -- "$DTRAIN" train $CK --epochs 3 --exchange ps:2 --resume "$TMP/shards"
# a checkpoint's epoch must be a whole number (atoi read '2x' as 2)
$PY - "$TMP/full.st" "$TMP/badepoch.st" <<'PYEOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
hdr["__metadata__"]["epoch"] = "2x"
h = json.dumps(hdr, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PYEOF
expect_error resume_ps_bad_epoch 1 "badepoch.st: metadata 'epoch' = '2x' is not an integer" -- "$DTRAIN" train $CK --epochs 3 --exchange ps:2 --resume "$TMP/badepoch.st"

# ---- presets -------------------------------------------------------------------------
presets="distbelief parameter-server petuum bosen-ssp tensorflow-ps mxnet bigdl sync-backup dc-asgd project-adam bytescheduler-ps tictac"
[ -n "$TSAN" ] || presets="$presets hogwild"  # see above
for p in $presets; do
  W=2; [ "$p" = project-adam ] && W=4 # 2 replicas of tp 2 (e2e_project_adam.sh)
  check "preset_${p}_runs" sh -c "'$DTRAIN' train --data '$SMALL' --workers $W --preset $p --max-steps 8 --quiet --metrics '$TMP/$p.jsonl' >/dev/null 2>&1 && grep -q '\"workers\":2' '$TMP/$p.jsonl'"
done

# the taxonomy's Table 1 lists TensorFlow and MXNet as bounded asynchronous:
# tensorflow-ps is its paper's bounded mode (backup workers); mxnet says why it is not
check preset_tensorflow-ps_is_bounded grep -q '"schedule":"backup:1".*"servers":2' "$TMP/tensorflow-ps.jsonl"
check presets_say_what_the_papers_say sh -c "'$DTRAIN' presets >'$TMP/presets.out' &&
  grep -A2 '^tensorflow-ps ' '$TMP/presets.out' | grep -q 'options: .*--schedule backup:1 --exchange ps:n' &&
  grep -A2 '^mxnet ' '$TMP/presets.out' | grep -q 'no staleness bound: the taxonomy.s Table 1 says bounded asynchronous'"

# ---- bad combinations and values: one line naming the option ---------------------------
expect_error shared_needs_async 2 "--schedule ssp and --exchange shared do not combine" -- "$DTRAIN" train --exchange shared --schedule ssp:3
expect_error shared_needs_local 2 "option --exchange shared needs shared memory: use --comm local" -- "$DTRAIN" train --exchange shared --schedule async --comm mpi
expect_error kill_needs_ps 2 "option --kill: needs --exchange ps:K" -- "$DTRAIN" train --workers 4 --kill rank=2,at-step=3
expect_error kill_not_worker_0 2 "worker 0 reports the run" -- "$DTRAIN" train --workers 4 --exchange ps:1 --schedule async --kill rank=0,at-step=3
expect_error fetch_every_needs_async 2 "--fetch-every and --push-every apply to Downpour" -- "$DTRAIN" train --workers 2 --exchange ps:1 --fetch-every 2
expect_error dc_asgd_needs_async 2 "--dc-asgd mitigate stale asynchronous updates" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule backup:1 --dc-asgd 0.1
expect_error dc_asgd_adaptive_needs_async 2 "--dc-asgd mitigate stale asynchronous updates" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule ssp:2 --dc-asgd a:2
expect_error dc_asgd_adaptive_not_allreduce 2 "--dc-asgd mitigate stale asynchronous updates" -- "$DTRAIN" train --workers 2 --dc-asgd a:2
expect_error dc_asgd_adaptive_empty 2 "option --dc-asgd: 'a:' needs a value" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --dc-asgd a:
expect_error dc_asgd_adaptive_zero 2 "option --dc-asgd: a:0: the adaptive lambda0 must be > 0" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --dc-asgd a:0
expect_error dc_asgd_adaptive_junk 2 "option --dc-asgd: '2x' is not a number" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --dc-asgd a:2x
expect_error dc_asgd_unknown_variant 2 "option --dc-asgd: 'b:1' (expected LAMBDA, or a:LAMBDA0 for DC-ASGD-a)" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --dc-asgd b:1
expect_error dc_asgd_negative 2 "option --dc-asgd: -1 is out of range" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --dc-asgd a:-1
expect_error implicit_momentum_needs_async 2 "option --implicit-momentum on: the momentum asynchrony implies comes from updates applied one by one" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule ssp:2 --implicit-momentum on
expect_error implicit_momentum_needs_sgd 2 "option --implicit-momentum on: lowers the servers' sgd momentum by 1 - 1/N: use --optimizer sgd" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --optimizer adam --implicit-momentum on
expect_error implicit_momentum_not_nesterov 2 "which --nesterov does not take" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --momentum 0.9 --nesterov --implicit-momentum on
expect_error implicit_momentum_not_allreduce 2 "option --implicit-momentum: not used with --optimization central --schedule sync --exchange shared (it applies to --exchange ps:K --schedule async or value:V with --optimizer sgd)" -- "$DTRAIN" train --workers 2 --implicit-momentum off
expect_error implicit_momentum_on_or_off 2 "option --implicit-momentum: 'yes' (expected on or off)" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --implicit-momentum yes
expect_error drop_stale_needs_async 2 "option --drop-stale: not used with --optimization central --schedule value --exchange ps (it applies to --exchange ps:K --schedule async (Downpour))" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule value:0.1 --drop-stale 3
expect_error drop_stale_negative 2 "option --drop-stale: -1 is out of range" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --drop-stale -1
expect_error drop_stale_junk 2 "option --drop-stale: '3x' is not an integer" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --drop-stale 3x
expect_error epoch_fraction_needs_async 2 "option --epoch-fraction: not used with --optimization central --schedule backup --exchange ps (it applies to --exchange ps:K --schedule async or value:V)" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule backup:1 --epoch-fraction 0.75
expect_error epoch_fraction_not_sync 2 "option --epoch-fraction: not used with --optimization central --schedule sync" -- "$DTRAIN" train --workers 2 --exchange ps:1 --epoch-fraction 0.75
expect_error epoch_fraction_zero 2 "option --epoch-fraction: 0: an epoch must take some of its batches" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --epoch-fraction 0
expect_error epoch_fraction_above_1 2 "option --epoch-fraction: 1.5 is out of range (expected 0..1)" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --epoch-fraction 1.5
expect_error ps_queue_needs_value 2 "option --ps-queue: not used with --optimization central --schedule async --exchange ps (it applies to --exchange ps:K --schedule value:V (the queue of held pushes))" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --ps-queue staleness
expect_error ps_queue_unknown 2 "option --ps-queue: 'lifo' (expected fifo or staleness)" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule value:0.1 --ps-queue lifo
expect_error ps_refresh_needs_ssp 2 "option --ps-refresh lazy: the SSP cache's rule needs a bound: use --exchange ps:K --schedule ssp:S" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule async --ps-refresh lazy
expect_error ps_refresh_eager_needs_ssp 2 "option --ps-refresh: not used with --optimization central --schedule sync --exchange ps (it applies to --exchange ps:K --schedule ssp:S (S finite))" -- "$DTRAIN" train --workers 2 --exchange ps:1 --ps-refresh eager
expect_error ps_refresh_unknown 2 "option --ps-refresh: 'sometimes' (expected lazy or eager)" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule ssp:2 --ps-refresh sometimes
expect_error ps_refresh_inf 2 "option --ps-refresh lazy: the SSP cache's rule needs a bound" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule ssp:inf --ps-refresh lazy
expect_error backup_too_many 2 "backup:4: needs a whole number 0 <= B < --workers 4" -- "$DTRAIN" train --workers 4 --exchange ps:1 --schedule backup:4
expect_error ssp_fraction 2 "ssp:1.5: the bound is a whole number" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule ssp:1.5
expect_error checkpoint_dir_needs_ps 2 "--checkpoint-dir: one file per server shard needs --exchange ps:K" -- "$DTRAIN" train --checkpoint-dir "$TMP/x"
expect_error too_many_servers_for_lars 1 "LARS keeps tensors whole" -- "$DTRAIN" train --data "$SMALL" --workers 2 --exchange ps:8 --optimizer lars --quiet

# ---- mpi: one process per worker and per server ------------------------------------------
if have_mpi; then
  $MPIRUN -np 6 "$DTRAIN" train $BASE --comm mpi --exchange ps:2 --checkpoint "$TMP/mpi_sync.st" >/dev/null 2>"$TMP/mpi.err"
  check mpi_ps_sync_bitwise_equals_local cmp -s "$TMP/sync_2.st" "$TMP/mpi_sync.st"
  if $MPIRUN -np 5 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:1 --schedule async --epochs 1 --quiet --metrics "$TMP/mpi.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     grep -q '"workers":4.*"schedule":"async"' "$TMP/mpi.jsonl"; then pass mpi_ps_async_4_workers_1_server; else fail mpi_ps_async_4_workers_1_server "$(tail -c 300 "$TMP/mpi.err")"; fi
  if $MPIRUN -np 4 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:1 --schedule async --dc-asgd a:2 --epochs 1 --quiet --metrics "$TMP/mpi_dc.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     grep -q '"workers":3.*"schedule":"async"' "$TMP/mpi_dc.jsonl"; then pass mpi_ps_dc_asgd_adaptive; else fail mpi_ps_dc_asgd_adaptive "$(tail -c 300 "$TMP/mpi.err")"; fi
  if $MPIRUN -np 5 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:1 --schedule async --momentum 0.5 --implicit-momentum on --epochs 1 --quiet --metrics "$TMP/mpi_im.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     grep -q '"workers":4.*"schedule":"async"' "$TMP/mpi_im.jsonl"; then pass mpi_ps_implicit_momentum; else fail mpi_ps_implicit_momentum "$(tail -c 300 "$TMP/mpi.err")"; fi
  if $MPIRUN -np 5 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:1 --schedule async --drop-stale 2 --epochs 1 --quiet --metrics "$TMP/mpi_ds.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     grep -q '"workers":4.*"schedule":"async"' "$TMP/mpi_ds.jsonl"; then pass mpi_ps_drop_stale; else fail mpi_ps_drop_stale "$(tail -c 300 "$TMP/mpi.err")"; fi
  if $MPIRUN -np 5 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:2 --schedule value:0.02 --epochs 1 --quiet --metrics "$TMP/mpi_v.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     grep -q '"workers":3.*"schedule":"value:0.02"' "$TMP/mpi_v.jsonl"; then pass mpi_ps_value_bound; else fail mpi_ps_value_bound "$(tail -c 300 "$TMP/mpi.err")"; fi
  if $MPIRUN -np 6 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:2 --schedule async --epoch-fraction 0.75 --straggler rank=1,slowdown=4 --epochs 2 --quiet --metrics "$TMP/mpi_ef.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     $PY -c "
import json; ep = [json.loads(l) for l in open('$TMP/mpi_ef.jsonl') if '\"epoch\"' in l]
assert len(ep) == 2 and all(sum(e['batches']) == 24 for e in ep), [e['batches'] for e in ep]" >"$TMP/check.out" 2>&1
  then pass mpi_epoch_fraction_cuts_each_epoch; else fail mpi_epoch_fraction_cuts_each_epoch "$(cat "$TMP/check.out" "$TMP/mpi.err" | tail -c 400)"; fi
  $MPIRUN -np 3 "$DTRAIN" train $DCA --comm mpi --epochs 2 --checkpoint-dir "$TMP/mpi_dca" >/dev/null 2>"$TMP/mpi.err" &&
    $MPIRUN -np 3 "$DTRAIN" train $DCA --comm mpi --epochs 3 --resume "$TMP/mpi_dca" --checkpoint "$TMP/mpi_dca.st" >/dev/null 2>>"$TMP/mpi.err"
  check mpi_resume_dc_asgd_adaptive_bit_exact cmp -s "$TMP/dca_full.st" "$TMP/mpi_dca.st"
  if $MPIRUN -np 5 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:2 --schedule value:0.02 --ps-queue staleness --epochs 1 --quiet --metrics "$TMP/mpi_q.jsonl" >/dev/null 2>"$TMP/mpi.err" &&
     grep -q '"workers":3.*"schedule":"value:0.02"' "$TMP/mpi_q.jsonl"; then pass mpi_ps_value_staleness_queue; else fail mpi_ps_value_staleness_queue "$(tail -c 300 "$TMP/mpi.err")"; fi
  $MPIRUN -np 5 "$DTRAIN" train --data "$SMALL" --comm mpi --exchange ps:2 --workers 2 --quiet >/dev/null 2>"$TMP/mpi.err"
  check mpi_wrong_np_says_how grep -q "mpirun -np 5 does not fit.*run mpirun -np 4" "$TMP/mpi.err"
else
  echo "SKIP mpi: no mpirun"
fi
