#!/bin/sh
# Runs every unit-test binary, every fuzz corpus replay and every
# end-to-end script, counts the PASS/FAIL lines, and ends with
# "N passed, N failed".
BUILD=${BUILD:-build}
export DTRAIN="$PWD/$BUILD/dtrain" BUILD
log=$(mktemp)
rcfile=$(mktemp)
# Runs "$@" with its output shown and logged; a non-zero exit (a crash
# prints no FAIL line of its own) becomes a FAIL line naming it. The
# status is read from a file: in sh a pipeline's is tee's.
run_logged() {
  name=$1
  shift
  { "$@" 2>&1; echo $? >"$rcfile"; } | tee -a "$log"
  rc=$(cat "$rcfile")
  [ "$rc" -eq 0 ] || echo "FAIL $name: exit status $rc" | tee -a "$log"
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  echo "== $t"
  run_logged "${t##*/}" "$t"
done
# Every input in fuzz/corpus/<name>/ through the fuzz target <name>.
for r in "$BUILD"/fuzz/replay_*; do
  [ -x "$r" ] || continue
  name=${r##*/replay_}
  echo "== $r fuzz/corpus/$name"
  out=$("$r" "fuzz/corpus/$name" 2>&1); rc=$?
  printf '%s\n' "$out" | tee -a "$log"
  # a crash prints no line of its own: count it here
  [ "$rc" -eq 0 ] || printf '%s\n' "$out" | grep -q '^FAIL ' ||
    echo "FAIL fuzz_replay_$name: exit status $rc" | tee -a "$log"
done
for s in ${E2E:-tests/e2e_*.sh}; do # E2E=none: the unit tests alone (e2e_build.sh's check of this runner)
  [ -f "$s" ] || continue
  echo "== $s"
  t0=$(date +%s)
  sh "$s" 2>&1 | tee -a "$log" # its checks print its PASS and FAIL lines
  echo "== $s took $(($(date +%s) - t0)) s" # where CI's time goes
done
passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
[ "$failed" -eq 0 ] || grep -h '^FAIL ' "$log"
rm -f "$log" "$rcfile"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
