#!/bin/sh
# dtrain launch (issue 35: elastic restarts) and train --checkpoint-every.
# A real fault at a random step: on local, SIGUSR1 to one rank's thread
# (tgkill: the rank stops at its next step, a lost rank); on mpi, kill -9
# of one rank's process. The run must end with its epochs and exit 0, lose
# at most STEPS steps (from its metrics: the restart resumes from the last
# checkpoint written, and checkpoints come every STEPS steps), and end with
# the weights of a run resumed by hand from that checkpoint on 3 workers,
# bit for bit. A second loss below --min-np ends with one line saying so.
# Bad input: one line, exit 2. tests/launch_kill.py sends the signals.
# DTRAIN_LAUNCH_LONG=1 repeats the kills at 5 random steps each.
. tests/lib.sh

SMALL="$TMP/small"
make_small_fashion "$SMALL" 1024 256
EVERY=8
E=4
# the ring, named: --exchange's default differs between local and mpi
B="--data $SMALL --batch 16 --seed 3 --quiet --exchange allreduce:ring"
RUN="$B --epochs $E"
RUN2="$B --epochs 2"

# ---- --checkpoint-every alone: a mid-epoch checkpoint resumes exactly ----------
"$DTRAIN" train $RUN2 --workers 4 --checkpoint-every $EVERY --checkpoint "$TMP/straight.st" >/dev/null
"$DTRAIN" train $RUN2 --workers 4 --checkpoint-every $EVERY --max-steps 20 --checkpoint "$TMP/half.st" --metrics "$TMP/half.jsonl" >/dev/null
"$DTRAIN" train $RUN2 --workers 4 --checkpoint-every $EVERY --resume "$TMP/half.st" --checkpoint "$TMP/resumed.st" >/dev/null
check checkpoint_every_resume_bit_exact cmp -s "$TMP/straight.st" "$TMP/resumed.st"
check checkpoint_every_records $PY -c "
import json
c = [json.loads(l) for l in open('$TMP/half.jsonl') if '\"checkpoint\"' in l]
# 16 steps an epoch: step 8 mid-epoch, 16 the epoch's end, then the
# --max-steps stop at 20, 256 samples into the second epoch
assert [(d['step'], d['epochs_done'], d['epoch_samples']) for d in c] == [(8, 0, 512), (16, 1, 0), (20, 1, 256)], c"
# without it the mid-epoch stop is not a place to resume from exactly: the
# option is what makes the difference
"$DTRAIN" train $RUN2 --workers 4 --max-steps 12 --checkpoint "$TMP/old.st" >/dev/null
"$DTRAIN" train $RUN2 --workers 4 --resume "$TMP/old.st" --checkpoint "$TMP/old_resumed.st" >/dev/null
check checkpoint_without_every_not_exact sh -c "[ -s '$TMP/old_resumed.st' ] && ! cmp -s '$TMP/straight.st' '$TMP/old_resumed.st'"

# ---- a rank lost at a random step, restarted on 3 ------------------------------
elastic_case() { # MODE TAG STEP MID [OPTIONS]: the run, the fault, the checks
  # (MID 1: the restart must resume mid-epoch)
  mode=$1 tag=$2 at=$3 mid=$4
  shift 4
  comm=; [ "$mode" = mpi ] && comm="--comm mpi"
  rm -f "$TMP/$tag.st" "$TMP/$tag.jsonl"
  DTRAIN_MPIRUN="$MPIRUN" "$DTRAIN" launch --np 4 --min-np 3 --max-restarts 2 --checkpoint-every $EVERY -- \
    $RUN $comm "$@" --checkpoint "$TMP/$tag.st" --metrics "$TMP/$tag.jsonl" >/dev/null 2>"$TMP/$tag.err" &
  lp=$!
  $PY tests/launch_kill.py $lp "$TMP/$tag.jsonl" "$mode" 2 "$at" >"$TMP/$tag.kill" || fail "${tag}_kill" "no checkpoint at step $at within 60 s"
  wait $lp
  rc=$?
  check "${tag}_exit_0" [ $rc -eq 0 ]
  check "${tag}_one_restart_line" [ "$(grep -c '^dtrain launch: rank 2.* lost .*restart 1 of 2 on 3 ranks (was 4) from' "$TMP/$tag.err")" -eq 1 ]
  # from the metrics: the restart resumed from the last checkpoint written
  # before it, checkpoints came every EVERY steps, the epochs all ran
  check "${tag}_at_most_${EVERY}_steps_lost" $PY -c "
import json
recs = [json.loads(l) for l in open('$TMP/$tag.jsonl')]
i = [k for k, d in enumerate(recs) if d['event'] == 'restart']
assert len(i) == 1, i
r = recs[i[0]]
assert r['lost_rank'] == 2 and r['workers'] == 3 and r['was_workers'] == 4, r
assert r['signal'] == ('SIGUSR1' if '$mode' == 'local' else 'SIGKILL'), r
before = [d['step'] for d in recs[:i[0]] if d['event'] == 'checkpoint']
assert before and r['resumed_step'] == before[-1] >= $at, (r, before)
assert all(b - a <= $EVERY for a, b in zip([0] + before, before)), before
if r['stopped_step'] is not None: assert 0 <= r['stopped_step'] - r['resumed_step'] <= $EVERY, r
assert r['epoch_samples'] > 0 or not $mid, r  # resumed mid-epoch: the kill follows such a checkpoint
done = recs[-1]
assert done['event'] == 'done' and done['epochs'] == $E and done['workers'] == 3, done
open('$TMP/$tag.resumed', 'w').write(str(r['resumed_step']))"
  s=$(cat "$TMP/$tag.resumed" 2>/dev/null || echo 0)
  # by hand: the same run stopped at that step on 4 workers, resumed on 3
  "$DTRAIN" train $RUN "$@" --workers 4 --checkpoint-every $EVERY --max-steps "$s" --checkpoint "$TMP/$tag.h4" >/dev/null
  "$DTRAIN" train $RUN "$@" --workers 3 --checkpoint-every $EVERY --resume "$TMP/$tag.h4" --checkpoint "$TMP/$tag.h3" >/dev/null
  check "${tag}_equals_resumed_by_hand_bitwise" cmp -s "$TMP/$tag.st" "$TMP/$tag.h3"
}
random_step() { $PY -c "import random; print(random.randrange($EVERY, 20))"; }
# on local with what the reducer completes before a mid-epoch checkpoint:
# priority order's updates (left to the next forward pass) and ZeRO-1's
# sharded optimizer state (a hand run's --max-steps stop completes them
# anyway, so a launch that resumed from an incomplete one would differ;
# the kill follows a mid-epoch checkpoint, as an epoch's end completes
# them too)
elastic_case local launch_priority "$(random_step)" 1 --comm-order priority --overlap on
elastic_case local launch_zero1 "$(random_step)" 1 --shard-optimizer on --momentum 0.9
if have_mpi; then
  elastic_case mpi launch_mpi "$(random_step)" 0
fi
if [ -n "$DTRAIN_LAUNCH_LONG" ]; then
  for k in 1 2 3 4 5; do
    elastic_case local "long_local_$k" "$(random_step)" 1
    have_mpi && elastic_case mpi "long_mpi_$k" "$(random_step)" 0
  done
fi

# ---- the whole child killed: no rank named, restarted on as many ---------------
"$DTRAIN" launch --np 4 --max-restarts 1 --checkpoint-every $EVERY -- \
  $RUN2 --checkpoint "$TMP/whole.st" --metrics "$TMP/whole.jsonl" >/dev/null 2>"$TMP/whole.err" &
lp=$!
$PY tests/launch_kill.py $lp "$TMP/whole.jsonl" child 0 $EVERY >/dev/null
wait $lp
check launch_whole_child_killed_exit_0 [ $? -eq 0 ]
check launch_whole_child_killed_restarts_on_4 $PY -c "
import json
r = [json.loads(l) for l in open('$TMP/whole.jsonl') if '\"restart\"' in l]
assert len(r) == 1 and r[0]['lost_rank'] is None and r[0]['signal'] == 'SIGKILL' and r[0]['workers'] == 4, r"
# the same 4 ranks from the checkpoint: the run that was never stopped, bit for bit
check launch_whole_child_killed_equals_straight_run cmp -s "$TMP/whole.st" "$TMP/straight.st"

# ---- a second loss below --min-np ----------------------------------------------
"$DTRAIN" launch --np 4 --min-np 3 --max-restarts 5 --checkpoint-every $EVERY -- \
  $RUN --checkpoint "$TMP/twice.st" --metrics "$TMP/twice.jsonl" >/dev/null 2>"$TMP/twice.err" &
lp=$!
$PY tests/launch_kill.py $lp "$TMP/twice.jsonl" local 2 $EVERY >/dev/null
$PY tests/launch_kill.py $lp "$TMP/twice.jsonl" local 1 0 1 >/dev/null
wait $lp
rc=$?
check launch_below_min_np_fails [ $rc -eq 1 ]
check launch_below_min_np_says_so sh -c "tail -n 1 '$TMP/twice.err' | grep -q '^dtrain launch: rank 1 lost (SIGUSR1): 2 ranks remain, below --min-np 3: giving up after 1 restart$'"

# --min-np equal to --np: the first loss ends it ("1 rank remains")
"$DTRAIN" launch --np 2 --min-np 2 --checkpoint-every 4 -- $RUN --checkpoint "$TMP/two.st" \
  --metrics "$TMP/two.jsonl" >/dev/null 2>"$TMP/two.err" &
lp=$!
$PY tests/launch_kill.py $lp "$TMP/two.jsonl" local 1 4 >/dev/null
wait $lp
check launch_min_np_equal_np_fails [ $? -eq 1 ]
check launch_min_np_equal_np_says_so sh -c "tail -n 1 '$TMP/two.err' | grep -q '^dtrain launch: rank 1 lost (SIGUSR1): 1 rank remains, below --min-np 2: giving up after 0 restarts$'"

# ---- a restart from the start keeps the metrics -------------------------------
# No --checkpoint: the restart begins again, and its metrics continue after
# the first attempt's lines and the restart record (train made the file
# anew, so the record and the first attempt's epochs were lost).
"$DTRAIN" launch --np 3 -- $B --epochs 30 --metrics "$TMP/scratch.jsonl" >/dev/null 2>"$TMP/scratch.err" &
lp=$!
$PY tests/launch_kill.py $lp "$TMP/scratch.jsonl" local 2 e1 >/dev/null || fail launch_scratch_kill "no epoch within 60 s"
wait $lp
check launch_from_start_exit_0 [ $? -eq 0 ]
check launch_from_start_keeps_the_metrics $PY -c "
import json
ev = [json.loads(l) for l in open('$TMP/scratch.jsonl')]
i = [k for k, d in enumerate(ev) if d['event'] == 'restart']
assert len(i) == 1 and ev[i[0]]['workers'] == 2 and ev[i[0]]['checkpoint'] is None, ev[i[0]] if i else [d['event'] for d in ev]
before, after = ev[:i[0]], ev[i[0] + 1:]
assert any(d['event'] == 'epoch' and d['workers'] == 3 for d in before), before
assert after[0]['event'] == 'epoch' and after[0]['epoch'] == 1 and after[0]['workers'] == 2, after[0]
assert after[-1]['event'] == 'done' and after[-1]['epochs'] == 30, after[-1]"

# ---- a grid the ranks left cannot form: one line, exit 1 -----------------------
# dp 2 x pp 2 losing a rank: 3 ranks make no pipeline of 2 stages. (The
# pipeline's step ignored the lost-rank signal, and a restart train then
# refused ended launch with "unknown error", exit 2, after a restart record.)
"$DTRAIN" launch --np 4 -- $B --epochs 100 --pp 2 --micro-batches 2 --checkpoint "$TMP/pp.st" \
  --metrics "$TMP/pp.jsonl" >/dev/null 2>"$TMP/pp.err" &
lp=$!
$PY tests/launch_kill.py $lp "$TMP/pp.jsonl" local 3 e1 >/dev/null || fail launch_pipeline_kill "no epoch within 60 s"
wait $lp
check launch_pipeline_cannot_shrink_exit_1 [ $? -eq 1 ]
check launch_pipeline_rank_lost grep -q '^dtrain train: rank 3: .*stopped by SIGUSR1 at step [0-9]*: this rank is lost' "$TMP/pp.err"
check launch_pipeline_cannot_shrink_one_line sh -c "[ \$(grep -c '^dtrain launch' '$TMP/pp.err') -eq 1 ] &&
  grep -q '^dtrain launch: rank 3 lost (SIGUSR1): the run cannot go on on 3 ranks (options --workers 3 and --pp 2: .*): giving up after 0 restarts$' '$TMP/pp.err'"
check launch_pipeline_no_restart_record sh -c "! grep -q '\"restart\"' '$TMP/pp.jsonl'"

# lose_rank NAME NP RANK WORKERS -- TRAIN OPTIONS: launch --np NP, SIGUSR1 to
# rank RANK's thread once epoch 1's line is written; the run ends with exit
# 0 after one restart record naming RANK, on WORKERS workers.
lose_rank() {
  lr=$1 np=$2 rank=$3 after=$4  # not "name": check() sets it
  shift 5
  "$DTRAIN" launch --np "$np" -- "$@" --metrics "$TMP/$lr.jsonl" >/dev/null 2>"$TMP/$lr.err" &
  lp=$!
  $PY tests/launch_kill.py $lp "$TMP/$lr.jsonl" local "$rank" e1 >/dev/null || fail "${lr}_kill" "no epoch within 60 s"
  wait $lp
  check "${lr}_exit_0" [ $? -eq 0 ]
  check "${lr}_restarts_on_$after" $PY -c "
import json
r = [json.loads(l) for l in open('$TMP/$lr.jsonl') if '\"restart\"' in l]
assert len(r) == 1 and r[0]['lost_rank'] == $rank and r[0]['workers'] == $after and r[0]['signal'] == 'SIGUSR1', r"
}

# ---- a parameter server's rank lost --------------------------------------------
# SIGUSR1 to the server's thread (rank 3: 3 workers, then ps:1's server)
# fails the run naming it (the server ignored it: the run went on as if
# nothing had happened); launch restarts on 2 workers and 1 server.
lose_rank launch_ps_server_lost 3 3 2 -- $B --epochs 30 --exchange ps:1 --checkpoint "$TMP/psl.st"
check launch_ps_server_lost_ends_on_2 $PY -c "
import json
recs = [json.loads(l) for l in open('$TMP/launch_ps_server_lost.jsonl')]
assert recs[-1]['event'] == 'done' and recs[-1]['epochs'] == 30 and recs[-1]['workers'] == 2, recs[-1]"

# on mpi too (train's parse leaves -np's grid to the run: the restart on 3
# ranks started, and every rank refused it)
if have_mpi; then
  DTRAIN_MPIRUN="$MPIRUN" "$DTRAIN" launch --np 4 -- $B --epochs 100 --comm mpi --pp 2 --micro-batches 2 \
    --checkpoint "$TMP/ppm.st" --metrics "$TMP/ppm.jsonl" >/dev/null 2>"$TMP/ppm.err" &
  lp=$!
  $PY tests/launch_kill.py $lp "$TMP/ppm.jsonl" mpi 3 e1 >/dev/null || fail launch_pipeline_mpi_kill "no epoch within 60 s"
  wait $lp
  check launch_pipeline_mpi_cannot_shrink_exit_1 [ $? -eq 1 ]
  check launch_pipeline_mpi_cannot_shrink_one_line sh -c "[ \$(grep -c '^dtrain launch' '$TMP/ppm.err') -eq 1 ] &&
    grep -q '^dtrain launch: rank 3 .*lost (SIGKILL): the run cannot go on on 3 ranks (mpirun -np 3 and --pp 2: ' '$TMP/ppm.err'"
  expect_error launch_mpi_np_not_fitting_grid 2 "mpirun -np 3 and --pp 2: workers = dp x pp" -- \
    "$DTRAIN" launch --np 3 -- $RUN --comm mpi --pp 2 --checkpoint "$TMP/bad.st"
fi

# ---- Hogwild's rank lost ------------------------------------------------------
# The lost rank waited in comm_shared_free for the others, which waited
# at the epoch's barrier for it: the run hung to --comm-timeout and failed
# without naming the loss. Now the peers stop at once and launch restarts.
if [ -n "$TSAN" ]; then echo "SKIP launch_hogwild_lost: lock-free races by design (ThreadSanitizer)"
else lose_rank launch_hogwild_lost 4 3 3 -- $B --epochs 30 --preset hogwild --exchange shared --comm-timeout 20 --checkpoint "$TMP/hog.st"
fi

# ---- a master's rank lost (EASGD: rank 4, after the 4 workers) -----------------
# (the master computes no gradient, and its step did not check the signal:
# the run went on as if nothing had happened)
lose_rank launch_master_lost 4 4 3 -- $B --epochs 30 --preset easgd --exchange master --checkpoint "$TMP/ea.st"

# ---- bad input: one line, exit 2 -----------------------------------------------
printf 'localhost slots=2\nno-such-host.invalid slots=2\n' >"$TMP/hosts"
expect_error launch_unknown_host 2 "hostfile .*hosts line 2: unknown host 'no-such-host.invalid'" -- \
  "$DTRAIN" launch --np 4 --hostfile "$TMP/hosts" -- $RUN --comm mpi --checkpoint "$TMP/bad.st"
printf 'localhost slots=0\n' >"$TMP/hosts0"
expect_error launch_hostfile_bad_slots 2 "hosts0 line 1: 'slots=0': slots must be a number from 1 to 4096" -- \
  "$DTRAIN" launch --np 4 --hostfile "$TMP/hosts0" -- $RUN --comm mpi --checkpoint "$TMP/bad.st"
expect_error launch_hostfile_needs_mpi 2 "hostfile: needs --comm mpi" -- \
  "$DTRAIN" launch --np 4 --hostfile "$TMP/hosts" -- $RUN --checkpoint "$TMP/bad.st"
expect_error launch_min_np_above_np 2 "min-np 5 is above --np 4" -- \
  "$DTRAIN" launch --np 4 --min-np 5 -- $RUN --checkpoint "$TMP/bad.st"
expect_error launch_every_without_checkpoint 2 "checkpoint-every 8: needs --checkpoint FILE" -- \
  "$DTRAIN" launch --np 4 --checkpoint-every 8 -- $RUN
expect_error train_every_without_checkpoint 2 "checkpoint-every 8: needs --checkpoint FILE" -- \
  "$DTRAIN" train $RUN --checkpoint-every 8
expect_error train_every_not_sync_dp 2 "option --checkpoint-every: not used with .*exchange ps" -- \
  "$DTRAIN" train $B --exchange ps:1 --workers 2 --checkpoint-every 8 --checkpoint "$TMP/bad.st"
expect_error launch_workers_refused 2 "launch sets it" -- \
  "$DTRAIN" launch --np 4 -- $RUN --workers 2
check launch_bad_left_nothing [ ! -e "$TMP/bad.st" ]
check launch_help sh -c "\"$DTRAIN\" launch --help | grep -q -- '--min-np M'"
