#!/bin/sh
# The comm and coll checks on the mpi transport: tests/mpi_coll_check.c
# under mpirun with K = 1..9 processes (more processes than cores, hence
# --oversubscribe), the bytes-on-the-wire checks with 2, 3 and 4, the
# hierarchical allreduce on hosts given to the transport (all processes
# share this one node, so the test names the hosts: 2+2, 3+2, 2+2+2), plus
# a timeout check and a fail-fast check.
# Prints PASS/FAIL lines for tests/run.sh, or one SKIP line when MPI is not
# usable here. Extra mpirun flags: DTRAIN_MPIRUN_FLAGS (for example
# "--mca btl_vader_single_copy_mechanism none" where CMA is not allowed).
BUILD=${BUILD:-build}
bin=$BUILD/tests/mpi_coll_check
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP mpi_coll: no mpirun (install openmpi-bin libopenmpi-dev)"
  exit 0
fi
if [ "$TSAN" = 1 ]; then
  echo "SKIP mpi_coll: Open MPI is not built for ThreadSanitizer (the local transport is checked by test_comm/test_coll)"
  exit 0
fi
if [ ! -x "$bin" ]; then
  echo "FAIL mpi_coll: $bin was not built"
  exit 1
fi
# Open MPI's own allocations are not ours to report.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run="timeout 120 mpirun --oversubscribe $DTRAIN_MPIRUN_FLAGS"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

if ! $run -np 1 "$bin" >"$log" 2>&1; then
  if grep -q "built without MPI" "$log"; then
    echo "SKIP mpi_coll: dtrain was built without MPI"
    exit 0
  fi
fi

status=0
for k in 1 2 3 4 5 6 7 8 9; do
  if $run -np $k "$bin" >"$log" 2>&1 && grep -q "mpi_coll_check: ok ($k ranks" "$log"; then
    echo "PASS mpi_coll_np$k"
  else
    echo "FAIL mpi_coll_np$k"
    tail -n 20 "$log"
    status=1
  fi
done

# Bytes on the wire: each rank's bytes sent and received by every
# collective equal its formula (mpi counts payload, not its headers).
for k in 2 3 4; do
  if $run -np $k "$bin" bytes >"$log" 2>&1 && grep -q "mpi_coll_check: bytes ok ($k ranks)" "$log"; then
    echo "PASS mpi_bytes_np$k"
  else
    echo "FAIL mpi_bytes_np$k"
    tail -n 20 "$log"
    status=1
  fi
done

# Hosts: comm_host and its splits, hier and auto (which picks it) correct,
# bitwise repeatable and equal to local with the same hosts, and the bytes
# of every collective on those hosts.
for kh in "4 2" "5 2" "6 3"; do
  set -- $kh
  if $run -np $1 "$bin" hosts $2 >"$log" 2>&1 && grep -q "mpi_coll_check: hosts ok ($1 ranks, $2 hosts)" "$log"; then
    echo "PASS mpi_hosts_np$1_hosts$2"
  else
    echo "FAIL mpi_hosts_np$1_hosts$2"
    tail -n 20 "$log"
    status=1
  fi
done

# A wait on a message never sent gives up after the timeout (0.5 s).
if $run -np 3 "$bin" timeout >"$log" 2>&1; then
  echo "PASS mpi_timeout"
else
  echo "FAIL mpi_timeout"
  tail -n 20 "$log"
  status=1
fi

# One rank fails: the run stops at once with that rank's message, while
# the others are blocked waiting for it.
start=$(date +%s)
if $run -np 3 "$bin" fail >"$log" 2>&1; then
  echo "FAIL mpi_fail_fast (the run succeeded)"
  status=1
elif grep -q "rank 1: deliberate failure on rank 1" "$log" && [ $(($(date +%s) - start)) -lt 30 ]; then
  echo "PASS mpi_fail_fast"
else
  echo "FAIL mpi_fail_fast"
  tail -n 20 "$log"
  status=1
fi
exit $status
