#!/bin/sh
# --trace FILE.json: a Chrome trace-event timeline of every rank
# (tests/trace_check.py checks each file): slices with rank, start and
# duration; communication beside compute with overlap on and after it with
# overlap off; --trace-steps; the parameter-server and decentralized
# tracks; under mpi one file with each rank's events in order. Bad input:
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
