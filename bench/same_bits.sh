#!/bin/sh
# Two builds of dtrain, the same bits? Trains each configuration below for
# a few steps with an OLD and a NEW binary and compares the checkpoints
# byte for byte (a refactoring must change none). Asynchronous schedules
# (parameter servers async or ssp, Project Adam) are left out: their
# result depends on timing and differs run to run in either build.
#
# usage: bench/same_bits.sh OLD_DTRAIN NEW_DTRAIN
#        (e.g. a worktree of the old commit built with make: /tmp/old/build/dtrain)
# prints SAME or DIFF per configuration, then "N of M the same"; exit 1 on any DIFF.
OLD=$1 NEW=$2
[ -x "$OLD" ] && [ -x "$NEW" ] || { echo "usage: bench/same_bits.sh OLD_DTRAIN NEW_DTRAIN" >&2; exit 2; }
. tests/lib.sh
make_small_fashion "$TMP/small" 512 128
B="--data $TMP/small --batch 16 --epochs 1 --max-steps 6 --seed 5 --quiet"
n=0 same=0
while IFS='|' read -r name opts; do
  n=$((n + 1))
  rm -f "$TMP/a.st" "$TMP/b.st"
  "$OLD" train $B $opts --checkpoint "$TMP/a.st" >/dev/null 2>"$TMP/ea"
  "$NEW" train $B $opts --checkpoint "$TMP/b.st" >/dev/null 2>"$TMP/eb"
  if [ -s "$TMP/a.st" ] && cmp -s "$TMP/a.st" "$TMP/b.st"; then echo "SAME $name"; same=$((same + 1))
  else echo "DIFF $name: $(head -c 200 "$TMP/ea") $(head -c 200 "$TMP/eb")"; fi
done <<'LIST'
dp ring 4|--workers 4 --exchange allreduce:ring
dp rhd 3|--workers 3 --exchange allreduce:rhd
dp tree 3 lenet|--workers 3 --model lenet --exchange allreduce:tree
dp auto 4|--workers 4 --exchange allreduce:auto
ZeRO-1|--workers 2 --exchange allreduce:ring --shard-optimizer on
priority order|--workers 2 --exchange allreduce:ring --comm-order priority
shared sync|--workers 2 --exchange shared
horovod-fp16|--workers 2 --preset horovod-fp16
dgc|--workers 2 --preset dgc
powersgd|--workers 2 --preset powersgd
ps:1 sync|--workers 2 --exchange ps:1
local SGD|--workers 2 --preset local-sgd
SparkNet|--workers 2 --optimization decentral --exchange master
EASGD sync|--workers 2 --optimization decentral --exchange master --alpha 0.1
D-PSGD|--workers 3 --preset d-psgd
MPCA-SGD|--workers 2 --preset mpca-sgd
gpipe|--workers 2 --preset gpipe
1f1b dp 2|--workers 4 --pp 2 --micro-batches 2 --pipe-schedule 1f1b
pipedream-2bw|--workers 2 --preset pipedream-2bw
megatron|--workers 4 --preset megatron
one weird trick|--workers 2 --model lenet --preset one-weird-trick
LIST
echo "$same of $n the same"
[ "$same" -eq "$n" ]
