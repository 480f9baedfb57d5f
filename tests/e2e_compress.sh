#!/bin/sh
# Gradient compression end to end (--compress, src/compress/): every codec
# trains, bitwise the same run to run and on local and mpi; none and fp32
# are bitwise the uncompressed runs; the bytes on the wire in the metrics
# are each codec's formula (mlp: buckets of 535,818 floats cut into two,
# [fc3, fc2] = 133,898 floats and [fc1] = 401,920; 2 ranks: each rank sends
# each bucket's other half and then its own half, encoded); DGC and top-k
# at R = 0.001 move over 100x fewer bytes than the ring; bad values and
# combinations are refused with one line.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 512
BASE="--data $SMALL --lr 0.05 --momentum 0.9 --seed 3 --quiet --max-steps 12 --epochs 1 --batch 16"
# the value of a field of the metrics' epoch line
field() { $PY -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if '\"epoch\"' in l][0][sys.argv[2]])" "$1" "$2"; }

# none and fp32: the plain allreduce, bit for bit
"$DTRAIN" train $BASE --workers 2 --exchange allreduce:ring --metrics "$TMP/dense.jsonl" --checkpoint "$TMP/dense.st" >/dev/null
for c in none fp32; do
  "$DTRAIN" train $BASE --workers 2 --exchange allreduce:ring --compress $c --checkpoint "$TMP/$c.st" >/dev/null
  check "compress_${c}_bitwise_uncompressed" cmp -s "$TMP/dense.st" "$TMP/$c.st"
done
DENSE=$(field "$TMP/dense.jsonl" bytes_sent_per_step)

# every codec: deterministic, local = mpi bit for bit (3 ranks: uneven blocks)
for c in fp16 bf16 int8 int8:sr fp16:sr onebit qsgd:7 terngrad terngrad:2.5 terngrad-chunked topk:0.01 randomk:0.01 threshold:0.01 strom:0.01 dgc:0.001 powersgd:2; do
  tag=$(echo $c | tr ':.' '__')
  "$DTRAIN" train $BASE --workers 3 --compress $c --checkpoint "$TMP/$tag.a" >"$TMP/out" 2>&1 || fail "compress_${tag}_trains" "$(tail -c 300 "$TMP/out")"
  "$DTRAIN" train $BASE --workers 3 --compress $c --overlap off --checkpoint "$TMP/$tag.b" >/dev/null 2>&1
  check "compress_${tag}_bitwise_overlap_on_off" cmp -s "$TMP/$tag.a" "$TMP/$tag.b"
  if have_mpi; then
    $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --compress $c --checkpoint "$TMP/$tag.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "compress_${tag}_mpi_bitwise_equals_local" cmp -s "$TMP/$tag.a" "$TMP/$tag.mpi"
  fi
done

# bytes a step, from the transport (2 ranks, the two buckets B1 = 133,898
# and B2 = 401,920 floats, halves h1 = 66,949 and h2 = 200,960)
bytes_of() { "$DTRAIN" train $BASE --workers 2 --compress "$1" $2 --metrics "$TMP/b.jsonl" >/dev/null && field "$TMP/b.jsonl" bytes_sent_per_step; }
check "bytes_dense_ring_is_4n" [ "$DENSE" = "2143272.0" ]
check "bytes_fp16_half_the_ring" [ "$(bytes_of fp16)" = "1071636.0" ]
check "bytes_bf16_half_the_ring" [ "$(bytes_of bf16)" = "1071636.0" ]
# a block goes as one encoding a piece, the block cut where a tensor
# starts: B1's first half is fc2's weights (66,949), its second the rest of
# them (64,123), fc2's bias (256), fc3's weights (2,560) and bias (10); B2's
# halves are fc1's weights (200,960), and the rest of them (200,448) and
# its bias (512). Each rank sends every block once (the other's half, then
# its own, encoded).
# int8: n + a 4-byte scale a piece (8 pieces)
check "bytes_int8_quarter_plus_scales" [ "$(bytes_of int8)" = "$((535818 + 8 * 4)).0" ]
# onebit: the biases (266 floats, 512) by the ring, which on 2 ranks sends
# 4 bytes a float; the weights transposed, a pair of means a column, blocks
# cut at a column: B1's first half is 261 of fc2's 512 columns of 256
# values, its second the other 251 and fc3's 256 columns of 10; B2's halves
# are 392 of fc1's 784 columns of 512 each; ceil(m/8) + 8 columns a piece
# of m values
check "bytes_onebit_1_32_plus_means" [ "$(bytes_of onebit)" = "$((8352 + 8 * 261 + 8032 + 8 * 251 + 320 + 8 * 256 + 4 * 266 + 2 * (25088 + 8 * 392) + 4 * 512)).0" ]
# top-k R: to the other rank one message a bucket, of 4 + 8 ceil(R S) a
# tensor of S values (1024 or more, not a vector: fc2's weights, 131,072,
# and fc3's, 2,560; fc1's, 401,408); the biases by the ring
TOPK="$((4 + 8 * 132 + 4 + 8 * 3 + 4 * 266 + 4 + 8 * 402 + 4 * 512)).0"
check "bytes_topk_pairs" [ "$(bytes_of topk:0.001)" = "$TOPK" ]
if have_mpi; then
  $MPIRUN -np 2 "$DTRAIN" train $BASE --comm mpi --compress topk:0.001 --metrics "$TMP/bm.jsonl" >/dev/null 2>"$TMP/mpi.err"
  check "bytes_topk_pairs_mpi" [ "$(field "$TMP/bm.jsonl" bytes_sent_per_step)" = "$TOPK" ]
fi
RATIO=$($PY -c "print($DENSE / $(bytes_of topk:0.001))")
check "bytes_topk_0.001_over_100x_fewer($RATIO)" $PY -c "import sys; sys.exit(0 if $RATIO >= 100 else 1)"
# the dgc preset is the paper's momentum SGD (momentum 0.9): its momentum
# correction has a velocity to correct; without one it would be top-k's
# residual alone
P="--data $SMALL --lr 0.05 --seed 3 --quiet --max-steps 6 --epochs 1 --batch 16 --workers 2"
"$DTRAIN" train $P --preset dgc --checkpoint "$TMP/dgc_preset.st" >/dev/null 2>&1
"$DTRAIN" train $P --preset dgc --momentum 0.9 --checkpoint "$TMP/dgc_m9.st" >/dev/null 2>&1
"$DTRAIN" train $P --preset dgc --momentum 0 --checkpoint "$TMP/dgc_m0.st" >/dev/null 2>&1
check "dgc_preset_is_momentum_sgd" sh -c "cmp -s '$TMP/dgc_preset.st' '$TMP/dgc_m9.st' && [ -s '$TMP/dgc_m0.st' ] && ! cmp -s '$TMP/dgc_preset.st' '$TMP/dgc_m0.st'"
"$DTRAIN" train $BASE --workers 2 --compress dgc:0.001 --metrics "$TMP/dgc.jsonl" >/dev/null
check "dgc_reports_ratio_and_memory" $PY -c "
import json
e = [json.loads(l) for l in open('$TMP/dgc.jsonl') if '\"epoch\"' in l][0]
assert e['compress'] == 'dgc:0.001' and e['error_feedback'] is True, e
assert e['compress_ratio'] >= 100 and e['ef_residual_norm'] > 0 and e['encode_sec'] > 0, e"
"$DTRAIN" train $BASE --workers 2 --compress qsgd:7 --metrics "$TMP/q.jsonl" >/dev/null
check "unbiased_codec_has_no_memory" $PY -c "
import json
e = [json.loads(l) for l in open('$TMP/q.jsonl') if '\"epoch\"' in l][0]
assert e['error_feedback'] is False and e['ef_residual_norm'] == 0, e"
# clipped TernGrad is biased but, as in the paper, has no memory unless asked
"$DTRAIN" train $BASE --workers 2 --compress terngrad:2.5 --metrics "$TMP/t.jsonl" >/dev/null
check "terngrad_clipped_no_memory_by_default" $PY -c "
import json
e = [json.loads(l) for l in open('$TMP/t.jsonl') if '\"epoch\"' in l][0]
assert e['compress'] == 'terngrad:2.5' and e['error_feedback'] is False, e"
# dense warm-up: the first steps are the ring's
"$DTRAIN" train $BASE --workers 2 --compress topk:0.001 --compress-warmup-steps 12 --metrics "$TMP/w.jsonl" >/dev/null
check "warmup_steps_go_dense" [ "$(field "$TMP/w.jsonl" bytes_sent_per_step)" = "$DENSE" ]

# --momentum-correction shared (1-bit Adam's): the momentum step is what is
# compressed and its decoded sum the next momentum. Its dense warm-up is
# momentum SGD (to rounding: the ranks' shares of m M summed); every step
# compressed: bitwise run to run, overlap on = off, local = mpi, and the
# bytes of the codec alone
"$DTRAIN" train $BASE --workers 3 --checkpoint "$TMP/ms_dense.st" >/dev/null
"$DTRAIN" train $BASE --workers 3 --compress onebit --momentum-correction shared --compress-warmup-steps 100 --checkpoint "$TMP/ms_warm.st" >/dev/null
if close "$TMP/ms_dense.st" "$TMP/ms_warm.st" 1e-5; then pass "shared_momentum_warmup_is_momentum_sgd($(cat "$TMP/cmp.out"))"; else fail shared_momentum_warmup_is_momentum_sgd "$(cat "$TMP/cmp.out")"; fi
for c in onebit int8; do
  "$DTRAIN" train $BASE --workers 3 --compress $c --momentum-correction shared --checkpoint "$TMP/ms_$c.a" >/dev/null
  "$DTRAIN" train $BASE --workers 3 --compress $c --momentum-correction shared --overlap off --checkpoint "$TMP/ms_$c.b" >/dev/null
  check "shared_momentum_${c}_bitwise_overlap_on_off" cmp -s "$TMP/ms_$c.a" "$TMP/ms_$c.b"
  if have_mpi; then
    $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --compress $c --momentum-correction shared --checkpoint "$TMP/ms_$c.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "shared_momentum_${c}_mpi_bitwise_equals_local" cmp -s "$TMP/ms_$c.a" "$TMP/ms_$c.mpi"
  fi
done
check "shared_momentum_same_bytes_as_onebit" [ "$(bytes_of onebit "--momentum-correction shared")" = "$(bytes_of onebit)" ]
# velocity (DGC's form) on a dense codec: nothing is masked, it trains
"$DTRAIN" train $BASE --workers 3 --compress onebit --momentum-correction velocity >/dev/null 2>"$TMP/err"
check "velocity_momentum_onebit_trains" [ $? -eq 0 ]
expect_error shared_momentum_sparse 2 "would drop the momentum of what it does not send" -- "$DTRAIN" train --workers 2 --compress topk:0.01 --momentum-correction shared
expect_error shared_momentum_dgc 2 "DGC is top-k with its velocity corrected" -- "$DTRAIN" train --workers 2 --compress dgc:0.01 --momentum-correction shared
expect_error momentum_correction_value 2 "expected off, velocity or shared" -- "$DTRAIN" train --workers 2 --compress onebit --momentum-correction on
expect_error momentum_correction_unbiased 2 "use a biased codec with --error-feedback on" -- "$DTRAIN" train --workers 2 --compress qsgd:4 --momentum-correction shared
expect_error momentum_correction_adam 2 "without --nesterov" -- "$DTRAIN" train --workers 2 --compress onebit --momentum-correction shared --optimizer adam
expect_error momentum_correction_nesterov 2 "without --nesterov" -- "$DTRAIN" train --workers 2 --compress onebit --momentum-correction shared --momentum 0.9 --nesterov
# with --momentum 0 the velocity is the gradient: accepted before, bit for bit the run without it
expect_error velocity_without_momentum 2 "option --momentum-correction velocity: corrects SGD's momentum, and --momentum is 0" -- "$DTRAIN" train --workers 2 --compress topk:0.01 --momentum-correction velocity --max-steps 1
expect_error momentum_correction_ps 2 "synchronous data parallelism's gradients" -- "$DTRAIN" train --workers 2 --exchange ps:1 --compress onebit --momentum-correction shared
expect_error velocity_warmup 2 "would go without momentum" -- "$DTRAIN" train --workers 2 --compress onebit --momentum-correction velocity --compress-warmup-steps 5
expect_error momentum_correction_without_codec 2 "option --momentum-correction" -- "$DTRAIN" train --workers 2 --momentum-correction shared

# resume: every rank's memory (DGC's velocity, PowerSGD's Q) is in the
# checkpoint, so 1 + 1 epochs are the 2-epoch run bit for bit (3 ranks;
# mpi resumes what local wrote). 16 steps an epoch: a memory built over
# an epoch is what the checkpoint must carry, not many epochs' worth.
make_small_fashion "$TMP/res" 768 128
RES="--data $TMP/res --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16"
for c in dgc:0.001 topk:0.01 onebit powersgd:2 "onebit --momentum-correction shared"; do
  tag=$(echo $c | tr ':. -' '____')
  "$DTRAIN" train $RES --workers 3 --compress $c --epochs 2 --checkpoint "$TMP/r_$tag.a" >/dev/null
  "$DTRAIN" train $RES --workers 3 --compress $c --epochs 1 --checkpoint "$TMP/r_$tag.h" >/dev/null
  "$DTRAIN" train $RES --workers 3 --compress $c --epochs 2 --resume "$TMP/r_$tag.h" --checkpoint "$TMP/r_$tag.b" >/dev/null
  check "compress_${tag}_resume_bit_exact" cmp -s "$TMP/r_$tag.a" "$TMP/r_$tag.b"
done
if have_mpi; then
  $MPIRUN -np 3 "$DTRAIN" train $RES --comm mpi --compress dgc:0.001 --epochs 2 --resume "$TMP/r_dgc_0_001.h" --checkpoint "$TMP/r_mpi.b" >/dev/null 2>"$TMP/mpi.err"
  check "compress_dgc_mpi_resume_bit_exact" cmp -s "$TMP/r_dgc_0_001.a" "$TMP/r_mpi.b"
fi
check "compress_checkpoint_names_memory" $PY -c "
import json, struct
b = open('$TMP/r_dgc_0_001.a', 'rb').read()
h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
assert h['__metadata__']['compress'] == 'dgc:0.001 over 3 ranks', h['__metadata__']
names = {k for k in h if k.startswith('compress.')}
assert names == {f'compress.{a}.rank{r}' for a in ('residual', 'velocity') for r in range(3)}, names"
# another codec or world size: trains on from an empty memory, and says so
"$DTRAIN" train $RES --workers 2 --compress dgc:0.001 --epochs 2 --resume "$TMP/r_dgc_0_001.h" >/dev/null 2>"$TMP/r.err"
check "compress_resume_other_world_starts_empty" grep -q "holds the compression state of dgc:0.001 over 3 ranks, not of dgc:0.001 over 2 ranks: this run starts with an empty memory" "$TMP/r.err"
# a file that claims a memory it does not hold is refused, naming the tensor
$PY -c "
b = open('$TMP/r_dgc_0_001.h', 'rb').read()
open('$TMP/r_bad.st', 'wb').write(b.replace(b'compress.velocity.rank2', b'compress.velocity.rankX', 1))"
expect_error compress_resume_missing_memory 1 "no tensor 'compress.velocity.rank2', though the file says it holds the state of dgc:0.001 over 3 ranks" -- "$DTRAIN" train $RES --workers 3 --compress dgc:0.001 --epochs 2 --resume "$TMP/r_bad.st"

# parameter-server pushes (every schedule): encoded, one message a shard;
# sync servers sum in rank order, so local = mpi bit for bit
PSN=$("$DTRAIN" train $BASE --workers 2 --exchange ps:2 --metrics "$TMP/psn.jsonl" >/dev/null && field "$TMP/psn.jsonl" bytes_sent_per_step)
PSF=$("$DTRAIN" train $BASE --workers 2 --exchange ps:2 --compress fp16 --metrics "$TMP/psf.jsonl" >/dev/null && field "$TMP/psf.jsonl" bytes_sent_per_step)
check "ps_push_fp16_half_the_values($PSN,$PSF)" $PY -c "import sys; sys.exit(0 if $PSN - $PSF == 2 * 535818 else 1)"
for sch in sync async ssp:2 backup:1; do
  tag=$(echo $sch | tr ':' '_')
  "$DTRAIN" train $BASE --workers 3 --exchange ps:2 --schedule $sch --compress topk:0.01 --metrics "$TMP/ps_$tag.jsonl" >"$TMP/out" 2>&1
  check "ps_${tag}_topk_trains" [ $? -eq 0 ]
done
"$DTRAIN" train $BASE --workers 3 --exchange ps:2 --compress int8 --checkpoint "$TMP/ps_int8.st" >/dev/null 2>&1
if have_mpi; then
  $MPIRUN -np 5 "$DTRAIN" train $BASE --workers 3 --comm mpi --exchange ps:2 --compress int8 --checkpoint "$TMP/ps_int8.mpi" >/dev/null 2>"$TMP/mpi.err"
  check "ps_sync_int8_mpi_bitwise_equals_local" cmp -s "$TMP/ps_int8.st" "$TMP/ps_int8.mpi"
fi

# parameter-server pulls (--compress-pulls on): each pull after a worker's
# first (dense) is the change since its last, encoded, the server keeping
# the copy the worker holds; fp32 sends the values, bit for bit the plain
# pulls. Bytes received by worker 0 = those with dense pulls less, for each
# of its P - 1 later pulls, 4n - E: int8 on 2 shards E = n + 2 x 4 (a
# scale a shard), top-k 1% on 1 shard E = 4 + 8 ceil(0.01 n)
"$DTRAIN" train $BASE --workers 3 --exchange ps:2 --checkpoint "$TMP/psd.st" >/dev/null 2>&1
"$DTRAIN" train $BASE --workers 3 --exchange ps:2 --compress fp32 --compress-pulls on --checkpoint "$TMP/psp.st" >/dev/null 2>&1
check "ps_pulls_fp32_bitwise_uncompressed" cmp -s "$TMP/psd.st" "$TMP/psp.st"
pull_bytes() { # K CODEC E: the pulls' bytes as the formula says
  "$DTRAIN" train $BASE --workers 3 --exchange ps:$1 --compress $2 --metrics "$TMP/pa.jsonl" >/dev/null 2>&1
  "$DTRAIN" train $BASE --workers 3 --exchange ps:$1 --compress $2 --compress-pulls on --metrics "$TMP/pb.jsonl" >/dev/null 2>&1
  $PY -c "
import json, sys
a, b = ([json.loads(l) for l in open(f) if '\"epoch\"' in l][0] for f in ('$TMP/pa.jsonl', '$TMP/pb.jsonl'))
n = 535818
pulls = round(a['bytes_pulled'][0] / (4 * n))  # bytes_pulled: 6 digits
want = a['bytes_received'] - (pulls - 1) * (4 * n - ($3))
sys.exit(0 if pulls > 2 and b['bytes_received'] == want else 1)"
}
check "ps_pulls_int8_bytes" pull_bytes 2 int8 "n + 8"
check "ps_pulls_topk_bytes" pull_bytes 1 topk:0.01 "4 + 8 * 5359"
for sch in async ssp:2 backup:1; do
  tag=$(echo $sch | tr ':' '_')
  "$DTRAIN" train $BASE --workers 3 --exchange ps:2 --schedule $sch --compress topk:0.01 --compress-pulls on >"$TMP/out" 2>&1
  check "ps_pulls_${tag}_topk_trains" [ $? -eq 0 ]
done
"$DTRAIN" train $BASE --workers 3 --exchange ps:2 --schedule ssp:2 --ps-refresh lazy --compress int8 --compress-pulls on >/dev/null 2>&1
check "ps_pulls_lazy_refresh_trains" [ $? -eq 0 ]
for c in int8 qsgd:7 topk:0.01; do
  tag=$(echo $c | tr ':.' '__')
  "$DTRAIN" train $BASE --workers 3 --exchange ps:2 --compress $c --compress-pulls on --checkpoint "$TMP/pp_$tag.st" >/dev/null 2>&1
  check "ps_pulls_${tag}_trains" [ $? -eq 0 ]
  if have_mpi; then
    $MPIRUN -np 5 "$DTRAIN" train $BASE --workers 3 --comm mpi --exchange ps:2 --compress $c --compress-pulls on --checkpoint "$TMP/pp_$tag.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "ps_pulls_${tag}_mpi_bitwise_equals_local" cmp -s "$TMP/pp_$tag.st" "$TMP/pp_$tag.mpi"
  fi
done
if have_mpi; then
  "$DTRAIN" train $BASE --workers 3 --exchange ps:1 --compress topk:0.01 --compress-pulls on --metrics "$TMP/ppl.jsonl" >/dev/null 2>&1
  $MPIRUN -np 4 "$DTRAIN" train $BASE --workers 3 --comm mpi --exchange ps:1 --compress topk:0.01 --compress-pulls on --metrics "$TMP/ppm.jsonl" >/dev/null 2>"$TMP/mpi.err"
  check "ps_pulls_topk_bytes_mpi_equal_local" [ "$(field "$TMP/ppl.jsonl" bytes_received)" = "$(field "$TMP/ppm.jsonl" bytes_received)" ]
fi

# EASGD (sync and async): each end sends its model as the change since the
# other last heard it (a mirror a link); fp32 is the plain exchange bit for
# bit; worker 0 sends one encoding a round (12 steps, tau 2: 6 rounds), so
# fp16 exactly half the models' bytes, int8 n + 4, top-k 4 + 8 ceil(R n)
"$DTRAIN" train $BASE --workers 3 --preset easgd --tau 2 --checkpoint "$TMP/ea.st" >/dev/null 2>&1
"$DTRAIN" train $BASE --workers 3 --preset easgd --tau 2 --compress fp32 --checkpoint "$TMP/ea32.st" >/dev/null 2>&1
check "easgd_fp32_bitwise_uncompressed" cmp -s "$TMP/ea.st" "$TMP/ea32.st"
for c in fp16:2*n int8:n+4 topk_0.01:4+8*5359; do
  codec=$(echo ${c%%:*} | tr '_' ':') E=${c#*:} tag=$(echo ${c%%:*} | tr '.' '_')
  "$DTRAIN" train $BASE --workers 3 --preset easgd --tau 2 --compress $codec --metrics "$TMP/ea_$tag.jsonl" --checkpoint "$TMP/ea_$tag.st" >"$TMP/out" 2>&1
  check "easgd_${tag}_trains" [ $? -eq 0 ]
  check "easgd_${tag}_bytes" [ "$(field "$TMP/ea_$tag.jsonl" bytes_sent)" = "$($PY -c "n = 535818; print(6 * ($E))")" ]
  if have_mpi; then
    $MPIRUN -np 4 "$DTRAIN" train $BASE --workers 3 --comm mpi --preset easgd --tau 2 --compress $codec --metrics "$TMP/eam_$tag.jsonl" --checkpoint "$TMP/ea_$tag.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "easgd_${tag}_mpi_bitwise_equals_local" cmp -s "$TMP/ea_$tag.st" "$TMP/ea_$tag.mpi"
    check "easgd_${tag}_bytes_mpi" [ "$(field "$TMP/eam_$tag.jsonl" bytes_sent)" = "$(field "$TMP/ea_$tag.jsonl" bytes_sent)" ]
  fi
  "$DTRAIN" train $BASE --workers 3 --preset easgd-async --tau 2 --compress $codec --metrics "$TMP/eaa.jsonl" >"$TMP/out" 2>&1
  check "easgd_async_${tag}_trains" [ $? -eq 0 ]
  check "easgd_async_${tag}_bytes" [ "$(field "$TMP/eaa.jsonl" bytes_sent)" = "$($PY -c "n = 535818; print(6 * ($E))")" ]
done

# MPCA-SGD: its two trees' links each sent as the change since the other
# end last heard it (a mirror a link); fp32 is the plain trees bit for bit;
# 4 workers and the master, a round every 4 steps (12 steps: 3 rounds);
# rank 0, a leaf of both trees, sends one encoding up and receives one
# down a round; local = mpi bitwise (the rounds are fixed by the steps)
"$DTRAIN" train $BASE --workers 4 --preset mpca-sgd --checkpoint "$TMP/mp.st" >/dev/null 2>&1
"$DTRAIN" train $BASE --workers 4 --preset mpca-sgd --compress fp32 --checkpoint "$TMP/mp32.st" >/dev/null 2>&1
check "mpca_fp32_bitwise_uncompressed" cmp -s "$TMP/mp.st" "$TMP/mp32.st"
for c in fp16:2*n int8:n+4 topk_0.01:4+8*5359; do
  codec=$(echo ${c%%:*} | tr '_' ':') E=${c#*:} tag=$(echo ${c%%:*} | tr '.' '_')
  "$DTRAIN" train $BASE --workers 4 --preset mpca-sgd --compress $codec --metrics "$TMP/mp_$tag.jsonl" --checkpoint "$TMP/mp_$tag.st" >"$TMP/out" 2>&1
  check "mpca_${tag}_trains" [ $? -eq 0 ]
  want=$($PY -c "n = 535818; print(3 * ($E))")
  check "mpca_${tag}_bytes" [ "$(field "$TMP/mp_$tag.jsonl" bytes_sent)" = "$want" -a "$(field "$TMP/mp_$tag.jsonl" bytes_received)" = "$want" ]
  "$DTRAIN" train $BASE --workers 4 --preset mpca-sgd --compress $codec --checkpoint "$TMP/mp_$tag.again" >/dev/null 2>&1
  check "mpca_${tag}_bitwise_repeatable" cmp -s "$TMP/mp_$tag.st" "$TMP/mp_$tag.again"
  if have_mpi; then
    $MPIRUN -np 5 "$DTRAIN" train $BASE --workers 4 --comm mpi --preset mpca-sgd --compress $codec --metrics "$TMP/mpm_$tag.jsonl" --checkpoint "$TMP/mp_$tag.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "mpca_${tag}_mpi_bitwise_equals_local" cmp -s "$TMP/mp_$tag.st" "$TMP/mp_$tag.mpi"
    check "mpca_${tag}_bytes_mpi" [ "$(field "$TMP/mpm_$tag.jsonl" bytes_sent)" = "$want" ]
  fi
done

# Pipelines: the replicas of a stage sum their gradients through the
# compressor (4 workers, pp 2: dp 2; mlp's stage 0 is fc1, n = 401,920
# floats; rank 0 also sends its activations, the same in every run). fp32
# is the plain run bit for bit; fp16 saves exactly half the reduce's ring
# bytes, 12 steps x 2n; every codec trains, bitwise run to run, and int8
# and top-k are the same bits on mpi
PIPE="--workers 4 --pp 2 --micro-batches 4"
"$DTRAIN" train $BASE $PIPE --metrics "$TMP/pp_none.jsonl" --checkpoint "$TMP/pp.st" >/dev/null 2>&1
"$DTRAIN" train $BASE $PIPE --compress fp32 --checkpoint "$TMP/pp32.st" >/dev/null 2>&1
check "pipe_fp32_bitwise_uncompressed" cmp -s "$TMP/pp.st" "$TMP/pp32.st"
"$DTRAIN" train $BASE $PIPE --compress fp16 --metrics "$TMP/pp_fp16.jsonl" >/dev/null 2>&1
check "pipe_fp16_saves_half_the_reduce" [ "$(( $(field "$TMP/pp_none.jsonl" bytes_sent) - $(field "$TMP/pp_fp16.jsonl" bytes_sent) ))" = "$((12 * 2 * 401920))" ]
for codec in int8 topk:0.01 dgc:0.01 powersgd:2; do
  tag=$(echo $codec | tr ':.' '__')
  "$DTRAIN" train $BASE $PIPE --compress $codec --checkpoint "$TMP/pp_$tag.st" >"$TMP/out" 2>&1
  check "pipe_${tag}_trains" [ $? -eq 0 ]
  "$DTRAIN" train $BASE $PIPE --compress $codec --checkpoint "$TMP/pp_$tag.again" >/dev/null 2>&1
  check "pipe_${tag}_bitwise_repeatable" cmp -s "$TMP/pp_$tag.st" "$TMP/pp_$tag.again"
done
for s in 1f1b:4 pipedream:1 2bw:4; do
  "$DTRAIN" train $BASE --workers 4 --pp 2 --micro-batches ${s#*:} --pipe-schedule ${s%:*} --compress int8 >"$TMP/out" 2>&1
  check "pipe_${s%:*}_int8_trains" [ $? -eq 0 ]
done
if have_mpi; then
  for codec in int8 topk:0.01; do
    tag=$(echo $codec | tr ':.' '__')
    $MPIRUN -np 4 "$DTRAIN" train $BASE --comm mpi --pp 2 --micro-batches 4 --compress $codec --checkpoint "$TMP/pp_$tag.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "pipe_${tag}_mpi_bitwise_equals_local" cmp -s "$TMP/pp_$tag.st" "$TMP/pp_$tag.mpi"
  done
fi
expect_error pipe_compress_one_replica 2 "this pipeline has one replica of each stage" -- "$DTRAIN" train --workers 2 --pp 2 --compress fp16

# TreeEASGD (asynchronous: runs may differ, so no bitwise checks): a node
# sends the change since its parent, or its children, last heard it; with
# 3 workers and fan-out 2 the root sends 12 messages in 12 steps (2
# children every 2 steps), each one encoding, plus the drain's counts (8
# bytes to each of the 2 others); fp32 is the plain exchange's bytes
for c in none:4*n fp32:4*n fp16:2*n int8:n+4 topk_0.01:4+8*5359; do
  codec=$(echo ${c%%:*} | tr '_' ':') E=${c#*:} tag=$(echo ${c%%:*} | tr '.' '_')
  "$DTRAIN" train $BASE --workers 3 --preset tree-easgd --compress $codec --metrics "$TMP/tr_$tag.jsonl" >"$TMP/out" 2>&1
  check "tree_easgd_${tag}_trains" [ $? -eq 0 ]
  check "tree_easgd_${tag}_bytes" [ "$(field "$TMP/tr_$tag.jsonl" bytes_sent)" = "$($PY -c "n = 535818; print(12 * ($E) + 16)")" ]
done
if have_mpi; then
  $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --preset tree-easgd --compress int8 --metrics "$TMP/trm.jsonl" >/dev/null 2>"$TMP/mpi.err"
  check "tree_easgd_int8_bytes_mpi" [ "$(field "$TMP/trm.jsonl" bytes_sent)" = "$((12 * (535818 + 4) + 16))" ]
fi

# GoSGD (asynchronous: runs may differ): the model goes as the change since
# that peer last heard from the sender, behind the weight (8 bytes); which
# peer gets a message is drawn from the seed, so rank 0 receives the same
# number k of messages whatever the codec: k (8 + E) + the drain's 16 bytes
"$DTRAIN" train $BASE --workers 3 --preset gosgd --exchange gossip:0.5 --metrics "$TMP/go.jsonl" >/dev/null 2>&1
GOK=$($PY -c "print(($(field "$TMP/go.jsonl" bytes_received) - 16) / (8 + 4 * 535818))")
check "gosgd_plain_messages($GOK)" $PY -c "import sys; sys.exit(0 if $GOK >= 2 and $GOK == int($GOK) else 1)"
for c in fp32:4*n fp16:2*n int8:n+4 topk_0.01:4+8*5359; do
  codec=$(echo ${c%%:*} | tr '_' ':') E=${c#*:} tag=$(echo ${c%%:*} | tr '.' '_')
  "$DTRAIN" train $BASE --workers 3 --preset gosgd --exchange gossip:0.5 --compress $codec --metrics "$TMP/go_$tag.jsonl" >"$TMP/out" 2>&1
  check "gosgd_${tag}_trains" [ $? -eq 0 ]
  check "gosgd_${tag}_bytes" [ "$(field "$TMP/go_$tag.jsonl" bytes_received)" = "$($PY -c "n = 535818; print(int(float($GOK)) * (8 + $E) + 16)")" ]
done
if have_mpi; then
  $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --preset gosgd --exchange gossip:0.5 --compress int8 --metrics "$TMP/gom.jsonl" >/dev/null 2>"$TMP/mpi.err"
  check "gosgd_int8_bytes_mpi" [ "$(field "$TMP/gom.jsonl" bytes_received)" = "$(field "$TMP/go_int8.jsonl" bytes_received)" ]
fi

# model averaging (local SGD, SparkNet): the replicas' changes compressed
LSN=$("$DTRAIN" train $BASE --workers 2 --preset local-sgd --tau 4 --exchange allreduce:ring --metrics "$TMP/lsn.jsonl" >/dev/null && field "$TMP/lsn.jsonl" bytes_sent)
LSF=$("$DTRAIN" train $BASE --workers 2 --preset local-sgd --tau 4 --exchange allreduce:ring --compress fp16 --metrics "$TMP/lsf.jsonl" >/dev/null && field "$TMP/lsf.jsonl" bytes_sent)
check "local_sgd_fp16_half_the_bytes($LSN,$LSF)" [ "$($PY -c "print(int($LSN) == 2 * int($LSF))")" = True ]
for c in topk:0.01 powersgd:2; do
  tag=$(echo $c | tr ':.' '__')
  "$DTRAIN" train $BASE --workers 3 --preset local-sgd --tau 2 --compress $c --checkpoint "$TMP/ls_$tag.st" >/dev/null 2>&1
  check "local_sgd_${tag}_trains" [ $? -eq 0 ]
  if have_mpi; then
    $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --preset local-sgd --tau 2 --compress $c --checkpoint "$TMP/ls_$tag.mpi" >/dev/null 2>"$TMP/mpi.err"
    check "local_sgd_${tag}_mpi_bitwise_equals_local" cmp -s "$TMP/ls_$tag.st" "$TMP/ls_$tag.mpi"
  fi
done
"$DTRAIN" train $BASE --workers 2 --preset sparknet --tau 3 --compress int8 >/dev/null 2>&1
check "sparknet_int8_trains" [ $? -eq 0 ]

# sufficient factors (Poseidon): lossless, so the dense run's weights to
# rounding; 4 ranks, batch 16: fc1 (784 -> 512) and fc2 (512 -> 256) send
# their factors, 3 (8 + 4 x 16 (in + out)) bytes each, fc3 goes by the ring
"$DTRAIN" train $BASE --workers 4 --exchange allreduce:ring --checkpoint "$TMP/sfb_dense.st" --metrics "$TMP/sfb_dense.jsonl" >/dev/null
"$DTRAIN" train $BASE --workers 4 --exchange allreduce:ring --sufficient-factors on --checkpoint "$TMP/sfb.st" --metrics "$TMP/sfb.jsonl" >/dev/null
if close "$TMP/sfb_dense.st" "$TMP/sfb.st" 1e-6; then pass "sfb_equals_dense($(cat "$TMP/cmp.out"))"; else fail sfb_equals_dense "$(cat "$TMP/cmp.out")"; fi
"$DTRAIN" train $BASE --workers 4 --exchange allreduce:ring --sufficient-factors on --overlap off --checkpoint "$TMP/sfb_off.st" >/dev/null
check sfb_bitwise_overlap_on_off cmp -s "$TMP/sfb.st" "$TMP/sfb_off.st"
SFB4=$(field "$TMP/sfb.jsonl" bytes_sent_per_step)
# fc3 by the ring: 2,570 floats on 4 ranks in blocks of 643, 643, 642, 642;
# rank 0 sends three blocks in each half, 643 + 642 + 642 floats: 2 x 7,708
check "sfb_bytes_exact($SFB4)" [ "$SFB4" = "$((3 * (8 + 4 * 16 * (784 + 512)) + 3 * (8 + 4 * 16 * (512 + 256)) + 15416)).0" ]
if have_mpi; then
  $MPIRUN -np 4 "$DTRAIN" train $BASE --comm mpi --exchange allreduce:ring --sufficient-factors on --checkpoint "$TMP/sfb.mpi" >/dev/null 2>"$TMP/mpi.err"
  check sfb_mpi_bitwise_equals_local cmp -s "$TMP/sfb.st" "$TMP/sfb.mpi"
fi
expect_error sfb_with_codec 2 "does not combine with --compress" -- "$DTRAIN" train --workers 2 --sufficient-factors on --compress fp16

# D-PSGD with compressed gossip (CHOCO-SGD): each rank sends its change to
# both neighbours, encoded: fp16 exactly half D-PSGD's 2 x 4n bytes a step
DPN=$("$DTRAIN" train $BASE --workers 3 --preset d-psgd --metrics "$TMP/dpn.jsonl" >/dev/null && field "$TMP/dpn.jsonl" bytes_sent_per_step)
DPF=$("$DTRAIN" train $BASE --workers 3 --preset d-psgd --compress fp16 --metrics "$TMP/dpf.jsonl" >/dev/null && field "$TMP/dpf.jsonl" bytes_sent_per_step)
check "choco_fp16_half_dpsgd_bytes($DPN,$DPF)" [ "$DPN" = "$((8 * 535818)).0" -a "$DPF" = "$((4 * 535818)).0" ]
"$DTRAIN" train $BASE --workers 3 --preset d-psgd --compress topk:0.05 --consensus-step 0.2 --checkpoint "$TMP/choco.st" >/dev/null 2>&1
check choco_topk_trains [ $? -eq 0 ]
if have_mpi; then
  $MPIRUN -np 3 "$DTRAIN" train $BASE --comm mpi --preset d-psgd --compress topk:0.05 --consensus-step 0.2 --checkpoint "$TMP/choco.mpi" >/dev/null 2>"$TMP/mpi.err"
  check choco_topk_mpi_bitwise_equals_local cmp -s "$TMP/choco.st" "$TMP/choco.mpi"
fi
# it converges: on 2,048 samples, 3 epochs, the test loss within 0.1 of
# plain D-PSGD's (measured: 0.640 against 0.656) and accuracy within 2 points
"$DTRAIN" train --data "$SMALL" --workers 3 --preset d-psgd --batch 16 --epochs 3 --seed 1 --quiet --metrics "$TMP/dp_acc.jsonl" >/dev/null
"$DTRAIN" train --data "$SMALL" --workers 3 --preset d-psgd --batch 16 --epochs 3 --seed 1 --quiet --compress topk:0.05 --consensus-step 0.2 --metrics "$TMP/choco_acc.jsonl" >/dev/null
last() { $PY -c "import json; e=[json.loads(l) for l in open('$1') if '\"epoch\"' in l][-1]; print(e['test_loss'], e['test_acc'])"; }
set -- $(last "$TMP/dp_acc.jsonl") $(last "$TMP/choco_acc.jsonl")
check "choco_topk_converges(loss $3 acc $4 against $1 $2)" $PY -c "import sys; sys.exit(0 if $3 <= $1 + 0.1 and $4 >= $2 - 0.02 else 1)"

# presets start
for p in horovod-fp16 onebit-sgd ef-sgdm qsgd terngrad dgc powersgd poseidon choco-sgd; do
  "$DTRAIN" train $BASE --workers 2 --preset $p >/dev/null 2>"$TMP/err"; check "preset_${p}_runs" [ $? -eq 0 ]
done

# convergence on the real data, 4 workers (one epoch of 2,048 samples)
"$DTRAIN" train --data "$SMALL" --model mlp --workers 4 --batch 16 --epochs 3 --lr 0.05 --momentum 0.9 --seed 1 --quiet --compress dgc:0.01 --metrics "$TMP/acc.jsonl" >/dev/null
ACC=$($PY -c "import json; print([json.loads(l) for l in open('$TMP/acc.jsonl') if 'epoch' in l][-1]['test_acc'])")
check "dgc_converges_on_fashion_mnist($ACC)" $PY -c "import sys; sys.exit(0 if $ACC >= 0.70 else 1)"

# bad input: one line naming the option
expect_error bad_codec 2 "unknown codec 'zip'" -- "$DTRAIN" train --compress zip
expect_error bad_ratio_zero 2 "ratio R in (0, 1]" -- "$DTRAIN" train --compress topk:0
expect_error bad_ratio_big 2 "ratio R in (0, 1]" -- "$DTRAIN" train --compress dgc:1.5
expect_error compress_shared 2 "not with --exchange shared (shared sync)" -- "$DTRAIN" train --workers 2 --exchange shared --compress fp16
expect_error compress_hogwild 2 "(Hogwild)" -- "$DTRAIN" train --workers 2 --exchange shared --schedule async --compress topk:0.01
expect_error compress_gossip_threshold 2 "GoSGD sends messages of a fixed size" -- "$DTRAIN" train --workers 3 --preset gosgd --compress threshold:0.1
expect_error compress_adpsgd 2 "not with AD-PSGD" -- "$DTRAIN" train --workers 4 --preset ad-psgd --compress fp16
expect_error compress_gossip_strom 2 "GoSGD sends messages of a fixed size" -- "$DTRAIN" train --workers 3 --preset gosgd --compress strom:0.1
expect_error choco_threshold 2 "messages of a fixed size" -- "$DTRAIN" train --workers 3 --preset d-psgd --compress threshold:0.1
expect_error choco_error_feedback 2 "keeps copies of what each end holds" -- "$DTRAIN" train --workers 3 --preset d-psgd --compress topk:0.1 --error-feedback on
expect_error consensus_step_without_codec 2 "option --consensus-step: not used" -- "$DTRAIN" train --workers 3 --preset d-psgd --consensus-step 0.5
expect_error compress_local_sgd_dgc 2 "use topk:R" -- "$DTRAIN" train --workers 2 --preset local-sgd --compress dgc:0.01
expect_error compress_pulls_value_bound 2 "not with --schedule value:V" -- "$DTRAIN" train --workers 2 --exchange ps:1 --schedule value:0.1 --compress int8 --compress-pulls on
expect_error compress_pulls_threshold 2 "use topk:R" -- "$DTRAIN" train --workers 2 --exchange ps:1 --compress threshold:0.1 --compress-pulls on
expect_error compress_pulls_without_codec 2 "option --compress-pulls: not used" -- "$DTRAIN" train --workers 2 --exchange ps:1 --compress-pulls on
expect_error compress_pulls_allreduce 2 "option --compress-pulls: not used" -- "$DTRAIN" train --workers 2 --compress int8 --compress-pulls on
expect_error mpca_threshold 2 "MPCA-SGD sends messages of a fixed size" -- "$DTRAIN" train --workers 4 --preset mpca-sgd --compress threshold:0.1
expect_error mpca_error_feedback 2 "MPCA-SGD keeps copies" -- "$DTRAIN" train --workers 4 --preset mpca-sgd --compress topk:0.1 --error-feedback on
expect_error easgd_threshold 2 "EASGD sends messages of a fixed size" -- "$DTRAIN" train --workers 3 --preset easgd --compress threshold:0.1
expect_error easgd_error_feedback 2 "EASGD keeps copies" -- "$DTRAIN" train --workers 3 --preset easgd-async --compress topk:0.1 --error-feedback on
# off was accepted and changed nothing (the copies carry what was not sent whatever it says)
expect_error choco_error_feedback_off 2 "option --error-feedback off: D-PSGD's compressed gossip (CHOCO-SGD) keeps copies" -- "$DTRAIN" train --workers 3 --preset d-psgd --compress int8 --error-feedback off --max-steps 1
expect_error easgd_error_feedback_off 2 "option --error-feedback off: EASGD keeps copies" -- "$DTRAIN" train --workers 2 --preset easgd --compress int8 --error-feedback off --max-steps 1
expect_error gosgd_error_feedback_off 2 "option --error-feedback off: GoSGD keeps copies" -- "$DTRAIN" train --workers 3 --preset gosgd --compress int8 --error-feedback off --max-steps 1
expect_error tree_easgd_powersgd 2 "TreeEASGD sends messages of a fixed size" -- "$DTRAIN" train --workers 3 --preset tree-easgd --compress powersgd:2
expect_error compress_ps_powersgd 2 "PowerSGD sums its factors" -- "$DTRAIN" train --workers 2 --exchange ps:1 --compress powersgd:2
expect_error ef_unbiased 2 "qsgd:4 is unbiased" -- "$DTRAIN" train --workers 2 --compress qsgd:4 --error-feedback on
expect_error ef_without_codec 2 "--error-feedback: needs --compress" -- "$DTRAIN" train --workers 2 --error-feedback on
expect_error dgc_adam 2 "use --optimizer sgd" -- "$DTRAIN" train --workers 2 --compress dgc:0.01 --optimizer adam
expect_error compress_zero 2 "does not combine with --shard-optimizer" -- "$DTRAIN" train --workers 2 --compress fp16 --shard-optimizer on
expect_error compress_one_weird_trick 2 "not with the one weird trick" -- "$DTRAIN" train --workers 4 --model lenet --tp 4 --tp-conv data --compress fp16
expect_error sfb_with_tp 2 "not with --tp 2" -- "$DTRAIN" train --workers 4 --tp 2 --sufficient-factors on
# compression on the data-parallel slices of a dp x tp grid
"$DTRAIN" train $BASE --workers 4 --tp 2 --exchange allreduce:ring --compress topk:0.05 --checkpoint "$TMP/tp_topk.st" >/dev/null 2>&1
check "dp2_tp2_topk_trains" [ $? -eq 0 ]
