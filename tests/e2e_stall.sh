#!/bin/sh
# The stall inspector: one rank held back (--straggler, 1000x slower) past
# --stall-warning; the warning names the collective, the ranks that joined
# and exactly the one that has not, again every period, and the
# --comm-timeout error names the same. Under mpi a rank knows only the
# rank it waits on: the line names the collective and that rank.
. tests/lib.sh
RUN="--data synthetic --max-steps 3 --quiet --stall-warning 0.3 --comm-timeout 2"

# --batch 512: the straggler's step (1000x a few ms) outlasts --comm-timeout
# whatever the host's speed (with the default batch a fast step made the
# straggler join after 1.8 s, and the run ended without a timeout)
$DTRAIN train $RUN --batch 512 --workers 4 --exchange allreduce:auto --straggler rank=2,slowdown=1000 >"$TMP/out" 2>"$TMP/err"; rc=$?
check stall_local_fails_at_timeout [ "$rc" -eq 1 ]
n=$(grep -c '^dtrain: warning: stall: allreduce #[0-9]* ([0-9]* bytes) on the world: joined ranks 0, 1, 3; not joined: rank 2; waited' "$TMP/err")
check stall_local_names_missing_rank [ "$n" -ge 2 ]
check stall_local_repeats_at_period grep -q 'not joined: rank 2; waited 0\.6 s' "$TMP/err"
check stall_local_one_line_a_period sh -c "[ \$(grep -c 'waited 0\.3 s' '$TMP/err') -eq 1 ]"
check stall_local_timeout_names_same grep -q 'timed out after 2 s .* in allreduce #[0-9]* ([0-9]* bytes) on the world: joined ranks 0, 1, 3; not joined: rank 2$' "$TMP/err"

# shared sync (the default on local): its barrier's messages name the rank waited on
$DTRAIN train $RUN --workers 4 --straggler rank=2,slowdown=1000 >"$TMP/out" 2>"$TMP/err"
check stall_shared_sync_names_rank grep -q 'stall: rank [013] has waited 0\.[0-9] s to \(send to\|receive from\) rank 2' "$TMP/err"

# ring allreduce, gradients in buckets on the progress thread (overlap on)
$DTRAIN train $RUN --workers 3 --preset horovod --bucket-mb 0 --straggler rank=0,slowdown=1000 >"$TMP/out" 2>"$TMP/err"
check stall_local_ring_overlap grep -q 'stall: allreduce #[0-9]* ([0-9]* bytes) on the world: joined ranks 1, 2; not joined: rank 0; waited' "$TMP/err"

# parameter servers: a worker's pull held by the bound is named by the
# coordinator with the slow worker it waits for (a worker's own line names
# only the server): ssp:1 and sync (backup:B's line, the pushes its step
# still lacks and from whom, shows only where B + 1 workers lag: one
# straggler never holds its step)
PS="--data synthetic --max-steps 4 --batch 64 --quiet --stall-warning 0.3 --straggler rank=1,slowdown=300"
$DTRAIN train $PS --workers 3 --exchange ps:1 --schedule ssp:1 >"$TMP/out" 2>"$TMP/err"
check stall_ps_ssp_names_slow_worker grep -Eq 'stall: server 0 \(rank 3\) has held the pull of workers? [02](, [02])? for 0\.[0-9] s for worker 1 \([0-9]+ clocks? pushed\) to push clock [0-9]+ \(--schedule ssp:1; --stall-warning 0\.3\)' "$TMP/err"
$DTRAIN train $PS --workers 3 --exchange ps:2 >"$TMP/out" 2>"$TMP/err"
check stall_ps_sync_names_slow_worker grep -Eq 'stall: server 0 \(rank 3\) has held the pull of workers? [02](, [02])? for [0-9.]+ s for worker 1 \(' "$TMP/err"
check stall_ps_sync_no_line_for_fast_workers sh -c "! grep 'server 0' '$TMP/err' | grep -q 'for worker [02] ('"

if have_mpi; then
  $MPIRUN -np 4 $DTRAIN train --comm mpi $PS --workers 3 --exchange ps:1 --schedule ssp:1 >"$TMP/out" 2>"$TMP/err"
  check stall_ps_mpi_names_slow_worker grep -Eq 'stall: server 0 \(rank 3\) has held the pull of workers? [02](, [02])? for [0-9.]+ s for worker 1 \(' "$TMP/err"
  $MPIRUN -np 3 $DTRAIN train --comm mpi --data synthetic --max-steps 2 --quiet --stall-warning 0.3 \
    --comm-timeout 1 --straggler rank=1,slowdown=1000 >"$TMP/out" 2>"$TMP/err"
  check stall_mpi_names_op_and_rank grep -Eq 'stall: rank [02] has waited 0\.[0-9] s in allreduce #[0-9]+ \([0-9]+ bytes\) to receive from rank 1' "$TMP/err"
fi

expect_error stall_warning_range 2 "option --stall-warning" -- $DTRAIN train --stall-warning 0
