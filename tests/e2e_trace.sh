#!/bin/sh
# --trace FILE.json: a Chrome trace-event timeline of every rank
# (tests/trace_check.py checks each file): slices with rank, start and
# duration; communication beside compute with overlap on and after it with
# overlap off; --trace-steps; the parameter-server and decentralized
# tracks; a pipeline's sends, receives and bubble, tensor parallelism's sums;
# under mpi one file with each rank's events in order. Bad input:
# one line each.
. tests/lib.sh
RUN="--data synthetic --workers 2 --max-steps 6 --quiet"
TC="$PY tests/trace_check.py"

$DTRAIN train $RUN --bucket-mb 0 --net bandwidth=1Gbit --trace "$TMP/on.json" >/dev/null 2>&1
check trace_overlap_on_overlaps $TC "$TMP/on.json" overlap
$DTRAIN train $RUN --bucket-mb 0 --net bandwidth=1Gbit --overlap off --trace "$TMP/off.json" >/dev/null 2>&1
check trace_overlap_off_apart $TC "$TMP/off.json" no-overlap
check trace_dp_tracks $TC "$TMP/on.json" tracks compute,communication,waiting,optimizer,evaluation,steps
check trace_bytes_in_flight $TC "$TMP/on.json" counters
$DTRAIN train $RUN --trace-steps 2:4 --trace "$TMP/steps.json" >/dev/null 2>&1
check trace_steps_window $TC "$TMP/steps.json" steps 2:4
$DTRAIN train $RUN --preset distbelief --trace "$TMP/ps.json" >/dev/null 2>&1
check trace_ps_push_pull $TC "$TMP/ps.json" tracks compute,"parameter server",steps
check trace_ps_server_updates $PY -c "
import json
ev = json.load(open('$TMP/ps.json'))['traceEvents']
servers = {e['pid'] for e in ev if e.get('name') == 'server update'}
assert servers == {2, 3}, servers
"
# pipelines: every stage's sends and receives (M of each a step, bytes
# matching across the link) and its idle slices on the bubble track; a
# tensor-parallel run: each of its sums, alike on every rank
$DTRAIN train $RUN --pp 2 --micro-batches 4 --trace "$TMP/pipe2.json" >/dev/null 2>&1
check trace_pipeline_sends_receives_bubble $TC "$TMP/pipe2.json" pipeline 2 4
$DTRAIN train --data synthetic --max-steps 4 --quiet --workers 3 --pp 3 --micro-batches 4 \
  --pipe-schedule 1f1b --trace "$TMP/pipe3.json" >/dev/null 2>&1
check trace_pipeline_3_stages_1f1b $TC "$TMP/pipe3.json" pipeline 3 4
check trace_pipeline_tracks $TC "$TMP/pipe3.json" tracks compute,communication,steps
$DTRAIN train $RUN --tp 2 --trace "$TMP/tp.json" >/dev/null 2>&1
check trace_tensor_parallel_sums $TC "$TMP/tp.json" tp-sums
$DTRAIN train $RUN --preset gosgd --trace "$TMP/gossip.json" >/dev/null 2>&1
check trace_decentral $TC "$TMP/gossip.json" tracks compute,waiting,steps
check trace_rewrites_own sh -c "$DTRAIN train $RUN --trace '$TMP/steps.json' >/dev/null"

if have_mpi; then
  $MPIRUN -np 2 $DTRAIN train --comm mpi --data synthetic --max-steps 6 --quiet --bucket-mb 0 \
    --trace "$TMP/mpi.json" >/dev/null 2>&1
  check trace_mpi_merged_in_order $TC "$TMP/mpi.json" order
  check trace_mpi_overlaps $TC "$TMP/mpi.json" overlap
fi

echo '{"not": "a trace"}' >"$TMP/foreign.json"
expect_error trace_foreign_file 2 "option --trace: $TMP/foreign.json: exists and is not dtrain's own" -- \
  $DTRAIN train $RUN --trace "$TMP/foreign.json"
expect_error trace_unwritable 2 "option --trace: $TMP/nowhere/t.json: cannot be written" -- \
  $DTRAIN train $RUN --trace "$TMP/nowhere/t.json"
expect_error trace_steps_without_trace 2 "option --trace-steps: not used" -- \
  $DTRAIN train $RUN --trace-steps 1:3
expect_error trace_steps_backwards 2 "B must be above A" -- \
  $DTRAIN train $RUN --trace "$TMP/x.json" --trace-steps 5:3
expect_error trace_same_as_metrics 2 "is also another output" -- \
  $DTRAIN train $RUN --trace "$TMP/m.jsonl" --metrics "$TMP/m.jsonl"
