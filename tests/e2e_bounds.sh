#!/bin/sh
# End-to-end checks of issue 37 (items 1, 9, 10): options that size memory
# are bounded before anything is allocated, the refusals that need the
# model are usage errors (exit 2) made before the ranks start, and a
# pipeline's refusals name the pipeline.
. tests/lib.sh
TINY="$TMP/tiny"
make_small_fashion "$TINY" 256 128
Q="--data $TINY --quiet --max-steps 1"

# refused (exit 2, one line) in under a second of CPU under ulimit -v 2
# GiB (CPU time, the run's own: a loaded machine stretches the wall clock,
# not the work; a refusal that allocated or looped first would take more)
bounded() {
  name=$1; shift
  expect_error "$name" 2 "$@"
  shift 2 # the message and --
  check "${name}_under_a_second" $PY -c "
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.exit(0 if r.ru_utime + r.ru_stime < 1.0 else 1)" "$@"
}
# under mpirun: exit 2 and the line, before MPI starts (no rank aborts)
mpi_refused() {
  name=$1 text=$2; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
  if [ "$rc" -ne 2 ]; then fail "$name" "exit $rc, expected 2: $(head -c 300 "$TMP/err")"
  elif ! grep -q -- "$text" "$TMP/err"; then fail "$name" "stderr lacks '$text': $(head -c 300 "$TMP/err")"
  elif grep -q "MPI_ABORT" "$TMP/err"; then fail "$name" "a rank started and aborted"
  else pass "$name"; fi
}
LIMIT="ulimit -v 2000000;"
# A sanitizer build reserves terabytes of shadow memory and cannot start
# under ulimit -v: the checks that need the limit are skipped there.
if sh -c "$LIMIT exec \"$DTRAIN\" train --help" >/dev/null 2>&1; then LIMITED=1; else LIMITED=; fi
[ -z "$LIMITED" ] && echo "SKIP the ulimit -v checks of $(basename "$0"): $DTRAIN cannot start under ulimit -v (a sanitizer build)" && LIMIT=

# ---- item 1: memory-sizing options ----------------------------------------
# before: one schedule for every m = 1..M (M = 4096: 2 GB in 5 s)
if [ -n "$LIMITED" ]; then
  check pipe_many_micro_batches_fit sh -c "$LIMIT \"$DTRAIN\" train $Q --batch 4096 --micro-batches 4096 --workers 2 --pp 2 --partition 0,1 >/dev/null 2>&1"
  bounded bound_batch_pipeline "option --batch 1048576: the activations of a batch" -- \
    sh -c "$LIMIT exec \"$DTRAIN\" train $Q --batch 1048576 --micro-batches 65536 --workers 2 --pp 2 --partition 0,1"
  bounded bound_batch "under ulimit -v: give a smaller --batch" -- \
    sh -c "$LIMIT exec \"$DTRAIN\" train $Q --batch 1048576"
  bounded bound_workers "option --workers 4096: 4096 ranks" -- \
    sh -c "$LIMIT exec \"$DTRAIN\" train $Q --workers 4096"
fi
bounded bound_pp_against_model "option --pp 1024: the model has 3 layers that can start a stage (at most --pp 3)" -- \
  sh -c "$LIMIT exec \"$DTRAIN\" train $Q --workers 1024 --pp 1024"
bounded bound_interleave_against_model "4 chunks, but the model has 3 layers that can start one" -- \
  sh -c "$LIMIT exec \"$DTRAIN\" train $Q --workers 2 --pp 2 --micro-batches 2 --pipe-schedule interleaved:2"
if have_mpi && [ -n "$LIMITED" ]; then
  mpi_refused bound_batch_mpi "option --batch 1048576: the activations of a batch" -- \
    sh -c "$LIMIT exec $MPIRUN -np 2 \"$DTRAIN\" train $Q --comm mpi --batch 1048576 --micro-batches 65536 --pp 2 --partition 0,1"
fi
if have_mpi; then
  mpi_refused bound_pp_against_model_mpi "option --pp 4: the model has 3 layers" -- \
    $MPIRUN -np 4 "$DTRAIN" train $Q --comm mpi --pp 4
fi

# ---- item 9: refusals that need the model: exit 2 before the ranks start ---
cat >"$TMP/badsplit.txt" <<'M'
dense units=64 split=across
dense units=10
M
expect_error model_partition_past_layers 2 "option --partition 0,99: the model has 3 layers (0..2)" -- \
  "$DTRAIN" train $Q --workers 2 --pp 2 --partition 0,99
expect_error model_sync_bn_without_batchnorm 2 "option --sync-bn on: builtin:mlp has no batchnorm layer" -- \
  "$DTRAIN" train $Q --workers 2 --sync-bn on
expect_error model_file_split_error 2 "badsplit.txt:1: split=across" -- \
  "$DTRAIN" train $Q --workers 2 --tp 2 --model "$TMP/badsplit.txt"
if have_mpi; then
  mpi_refused model_partition_past_layers_mpi "option --partition 0,99: the model has 3 layers" -- \
    $MPIRUN -np 2 "$DTRAIN" train $Q --comm mpi --pp 2 --partition 0,99
  mpi_refused model_sync_bn_without_batchnorm_mpi "has no batchnorm layer" -- \
    $MPIRUN -np 2 "$DTRAIN" train $Q --comm mpi --sync-bn on
fi

# ---- item 10: a pipeline's refusals name the pipeline -----------------------
for o in "time-budget 5" "overlap on" "bucket-mb 1" "sufficient-factors on"; do
  set -- $o
  expect_error "pipe_refuses_$1_naming_the_pipeline" 2 "option --$1: not used by a pipeline (--pp 2 --micro-batches 1)" -- \
    "$DTRAIN" train $Q --workers 2 --pp 2 --$1 $2
done
expect_error pipe_tp_compress_suggests_workers 2 "use --workers 8 for two replicas" -- \
  "$DTRAIN" train $Q --workers 4 --tp 2 --pp 2 --partition macs --compress int8
