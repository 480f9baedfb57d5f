#!/bin/sh
# Runs every unit-test binary, every fuzz corpus replay and every
# end-to-end script, counts the PASS/FAIL lines, and ends with
# "N passed, N failed".
BUILD=${BUILD:-build}
export DTRAIN="$PWD/$BUILD/dtrain" BUILD
log=$(mktemp)
status=0
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  echo "== $t"
  "$t" 2>&1 | tee -a "$log" || status=1
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
for s in tests/e2e_*.sh; do
  [ -f "$s" ] || continue
  echo "== $s"
  sh "$s" 2>&1 | tee -a "$log" || status=1
done
passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
[ "$failed" -eq 0 ] || grep -h '^FAIL ' "$log"
rm -f "$log"
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; echo "FAIL a test program exited non-zero without a FAIL line"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
