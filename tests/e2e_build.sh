#!/bin/sh
# The build follows its configuration: every object of a build folder
# depends on BUILD/flags.stamp, which holds the compiler, the flags, the
# libraries and whether MPI was found, and is rewritten only when they
# change. So a changed flag rebuilds, an unchanged configuration rebuilds
# nothing, and a folder built before Open MPI was installed is rebuilt with
# MPI once it is (it used to keep a dtrain "built without MPI"). Two objects
# (src/core/rng.o, src/comm/mpi.o) in a build folder of their own under
# $TMP, in an environment of its own (not the MAKEFLAGS, SAN or CFLAGS of a
# calling make).
. tests/lib.sh
B="$TMP/build"
OBJS="$B/src/core/rng.o $B/src/comm/mpi.o"
# mk [MAKE-ARGS...]: builds the two objects; CFLAGS from $XCFLAGS (the
# environment's CFLAGS, which the Makefile adds to); the output in $TMP/make.out
mk() {
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u SAN -u TSAN -u LDFLAGS CFLAGS="$XCFLAGS" \
    make --no-print-directory BUILD="$B" "$@" $OBJS >"$TMP/make.out" 2>&1
}
# built NAME N [MAKE-ARGS...]: after mk, exactly N objects were compiled
built() {
  name=$1 want=$2; shift 2
  if ! mk "$@"; then fail "$name" "make failed: $(tail -c 300 "$TMP/make.out")"; return; fi
  got=$(grep -c -- " -c src/.*\.c -o " "$TMP/make.out")
  if [ "$got" -eq "$want" ]; then pass "$name"; else fail "$name" "$got objects compiled, expected $want: $(tail -c 300 "$TMP/make.out")"; fi
}
XCFLAGS=
built build_first_compiles 2
built build_unchanged_rebuilds_nothing 0
check build_stamp_per_folder test -f "$B/flags.stamp"
XCFLAGS=-DDTRAIN_BUILD_TEST
built build_flag_added_rebuilds 2
check build_stamp_holds_the_flag grep -q -- "-DDTRAIN_BUILD_TEST" "$B/flags.stamp"
built build_same_flag_rebuilds_nothing 0
XCFLAGS=
built build_flag_removed_rebuilds 2
built build_extra_cflags_rebuilds 2 EXTRA_CFLAGS=-DDTRAIN_BUILD_TEST
XCFLAGS=
built build_back_to_default_rebuilds 2
# MPI installed after the first build: MPICC=false stands for no mpicc
if command -v mpicc >/dev/null 2>&1; then
  built build_without_mpi_rebuilds 2 MPICC=false
  check build_without_mpi_has_no_mpi sh -c "! nm '$B/src/comm/mpi.o' | grep -q ' U MPI_Init' && grep -q 'HAVE_MPI= ' '$B/flags.stamp'"
  built build_mpi_installed_rebuilds 2
  check build_mpi_installed_has_mpi sh -c "nm '$B/src/comm/mpi.o' | grep -q ' U MPI_Init' && grep -q 'HAVE_MPI=1 ' '$B/flags.stamp'"
  built build_mpi_unchanged_rebuilds_nothing 0
else
  echo "SKIP build_mpi_installed_rebuilds: no mpicc"
fi

# tests/run.sh counts a unit-test binary that crashes (no FAIL line of its
# own; a pipeline's status in sh is tee's) as a failure naming it.
R="$TMP/runner"
mkdir -p "$R/tests"
printf '#!/bin/sh\necho "PASS before_the_crash"\nkill -ILL $$\n' >"$R/tests/test_crash"
printf '#!/bin/sh\necho "PASS fine"\n' >"$R/tests/test_fine"
chmod +x "$R/tests/test_crash" "$R/tests/test_fine"
BUILD="$R" E2E=none sh tests/run.sh >"$TMP/runner.out" 2>&1
rc=$?
check runner_counts_a_crashed_binary grep -q '^FAIL test_crash: exit status 132' "$TMP/runner.out"
check runner_crash_fails_the_run sh -c "[ $rc -ne 0 ] && grep -q '^2 passed, 1 failed' '$TMP/runner.out'"
