#!/bin/sh
# --sparse-collective end to end (src/compress/sparse_coll.h): a sparse
# codec's pairs summed by SparCML's recursive doubling (3 ranks: one folds
# in), its split allgather, Kylix's butterfly (4 ranks: degrees by its
# cost). Each trains bitwise the same on local and
# mpi (and Kylix run to run, overlap on and off); the split allgather
# sums in rank order, as the allgather does: the same bits as it; the
# trees sum in another order: within 1e-5 of it after 6 steps. Bad names
# and an option no configuration uses are refused with one line.
# (Bytes: tests/e2e_bytes.sh's bytes_described_sparse_*; each algorithm's
# formula at 2-8 ranks: tests/test_sparse_coll.c.)
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 512
BASE="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --max-steps 6 --epochs 1 --batch 16 --compress topk:0.01"

for np in 3 4; do
  "$DTRAIN" train $BASE --workers $np --checkpoint "$TMP/allgather_$np.st" >/dev/null 2>&1 || fail "sparse_allgather_${np}_trains"
done
for case in sparcml:rd:3 sparcml:split:4 kylix:4; do
  np=${case##*:} a=${case%:*} tag=$(echo "${case%:*}" | tr ':' '_')_$np
  "$DTRAIN" train $BASE --workers $np --sparse-collective $a --checkpoint "$TMP/$tag.a" >"$TMP/out" 2>&1 || fail "sparse_${tag}_trains" "$(tail -c 300 "$TMP/out")"
  if [ "$a" = kylix ]; then
    "$DTRAIN" train $BASE --workers $np --sparse-collective $a --overlap off --checkpoint "$TMP/$tag.b" >/dev/null 2>&1
    check "sparse_${tag}_bitwise_run_to_run" cmp -s "$TMP/$tag.a" "$TMP/$tag.b"
  fi
  if have_mpi; then
    $MPIRUN -np $np "$DTRAIN" train $BASE --comm mpi --sparse-collective $a --checkpoint "$TMP/$tag.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "sparse_${tag}_mpi_bitwise_equals_local" cmp -s "$TMP/$tag.a" "$TMP/$tag.mpi"
  fi
  if [ "$a" = sparcml:split ]; then
    check "sparse_${tag}_bitwise_equals_allgather" cmp -s "$TMP/$tag.a" "$TMP/allgather_$np.st"
  elif close "$TMP/$tag.a" "$TMP/allgather_$np.st" 1e-5; then pass "sparse_${tag}_near_allgather($(cat "$TMP/cmp.out"))"
  else fail "sparse_${tag}_near_allgather" "$(cat "$TMP/cmp.out")"; fi
done

expect_error sparse_collective_bad_name 2 "--sparse-collective: unknown 'sparcl'" -- \
  "$DTRAIN" train $BASE --workers 2 --sparse-collective sparcl
expect_error sparse_collective_needs_sparse_codec 2 "--sparse-collective" -- \
  "$DTRAIN" train --data $SMALL --max-steps 2 --workers 2 --compress fp16 --sparse-collective sparcml
