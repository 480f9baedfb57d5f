#!/bin/sh
# Runs every unit-test binary and every end-to-end script, counts the
# PASS/FAIL lines, and ends with "N passed, N failed".
BUILD=${BUILD:-build}
export DTRAIN="$PWD/$BUILD/dtrain" BUILD
log=$(mktemp)
status=0
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  echo "== $t"
  "$t" 2>&1 | tee -a "$log" || status=1
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
