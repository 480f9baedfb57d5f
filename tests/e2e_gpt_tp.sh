#!/bin/sh
# Megatron's tensor parallelism on a GPT (issue 34; src/nn/attention.c,
# linear.c, src/strategy/tensor/plan.c): attention split by heads, the MLP's
# two linear layers by columns then rows, embeddings, norms and the head
# replicated. tp 2 and tp 4, dp 2 x pp 2 x tp 2, and the pipelines on a
# GPT (interleaved too) equal one worker within 1e-5 after 20 AdamW steps,
# local and mpi (mpi the same bits as local); the head tied to the
# embedding across pipeline stages; --clip-grad-norm by the global norm
# over tp shards and stages; bytes per step are the four
# sums a block (two forward, two backward) exactly, as described; the
# checkpoint of a tp 2 run holds one worker's tensors and resumes on tp 1
# and on dp 2; --tp that does not divide the heads is one line, exit 2.
. tests/lib.sh
# OpenBLAS, as tests/e2e_tensor.sh says why: a column split keeps one
# worker's dot products, so the row splits' sums are the only rounding.
export DTRAIN_GEMM=openblas
TEXT="$TMP/cookie.txt"
head -c 40000 /usr/share/games/fortunes/cookie >"$TEXT"
cat >"$TMP/tied.model" <<'MODEL'
# a GPT of width 32: 2 blocks of 4 heads over 32 positions, head tied
embedding vocab=256 units=32 name=tok
posembed positions=32 name=x0
layernorm
attention heads=4
add with=x0 name=a0
layernorm
linear units=128
gelu
linear units=32
add with=a0 name=x1
layernorm
attention heads=4
add with=x1 name=a1
layernorm
linear units=128
gelu
linear units=32
add with=a1 name=x2
layernorm
lmhead vocab=256 tie=tok
MODEL
sed 's/lmhead vocab=256 tie=tok/lmhead vocab=256/' "$TMP/tied.model" >"$TMP/untied.model"
RUN="--data text:$TEXT --seq-len 32 --optimizer adamw --lr 1e-3 --seed 3 --quiet --epochs 1 --max-steps 20"
TIED="$RUN --model $TMP/tied.model --batch 16"
UNTIED="$RUN --model $TMP/untied.model --batch 16"

# equal NAME TOL REF -- command: the run's weights within TOL of REF
equal() {
  name=$1 tol=$2 ref=$3; shift 4
  rm -f "$TMP/$name.st"
  if ! "$@" --checkpoint "$TMP/$name.st" >"$TMP/out" 2>&1; then fail "$name" "$(tail -c 300 "$TMP/out")"; return; fi
  if close "$ref" "$TMP/$name.st" "$tol"; then pass "$name"; else fail "$name" "$(cat "$TMP/cmp.out")"; fi
}

"$DTRAIN" train $TIED --checkpoint "$TMP/one.st" >/dev/null
"$DTRAIN" train $UNTIED --checkpoint "$TMP/one_untied.st" >/dev/null
# a split run that is not one worker's would differ by far more: the
# split model is not the unsplit one's when it starts from other weights
"$DTRAIN" train $TIED --seed 4 --checkpoint "$TMP/other.st" >/dev/null
check gpt_tp_test_can_fail sh -c "! $PY tests/ckpt_diff.py '$TMP/one.st' '$TMP/other.st' 1e-3 >/dev/null"

equal gpt_tp2_equals_one_worker 1e-5 "$TMP/one.st" -- "$DTRAIN" train $TIED --workers 2 --tp 2
equal gpt_tp4_equals_one_worker 1e-5 "$TMP/one.st" -- "$DTRAIN" train $TIED --workers 4 --tp 4
equal gpt_dp2_pp2_tp2_equals_one_worker 1e-5 "$TMP/one_untied.st" -- \
  "$DTRAIN" train $UNTIED --batch 8 --workers 8 --tp 2 --pp 2 --micro-batches 2
equal gpt_pp2_interleaved_equals_one_worker 1e-5 "$TMP/one_untied.st" -- \
  "$DTRAIN" train $UNTIED --workers 2 --pp 2 --micro-batches 4 --pipe-schedule interleaved:2
equal gpt_pp4_1f1b_equals_one_worker 1e-5 "$TMP/one_untied.st" -- \
  "$DTRAIN" train $UNTIED --workers 4 --pp 4 --micro-batches 4 --pipe-schedule 1f1b
# ---- the head tied to the embedding across stages: the head's stage sends
# the table's gradient to the embedding's and gets the stepped table back
equal gpt_tied_micro_batches_equal_one_worker 1e-5 "$TMP/one.st" -- \
  "$DTRAIN" train $TIED --micro-batches 2
equal gpt_tied_pp2_1f1b_equals_one_worker 1e-5 "$TMP/one.st" -- \
  "$DTRAIN" train $TIED --workers 2 --pp 2 --micro-batches 4 --pipe-schedule 1f1b
equal gpt_tied_pp4_gpipe_equals_one_worker 1e-5 "$TMP/one.st" -- \
  "$DTRAIN" train $TIED --workers 4 --pp 4 --micro-batches 4
equal gpt_tied_pp2_interleaved_equals_one_worker 1e-5 "$TMP/one.st" -- \
  "$DTRAIN" train $TIED --workers 2 --pp 2 --micro-batches 4 --pipe-schedule interleaved:2
equal gpt_tied_dp2_pp2_tp2_equals_one_worker 1e-5 "$TMP/one.st" -- \
  "$DTRAIN" train $TIED --batch 8 --workers 8 --tp 2 --pp 2 --micro-batches 2
expect_error gpt_tied_pipedream_refused 2 "only gpipe, 1f1b and interleaved:V share the table between stages" -- \
  "$DTRAIN" train $TIED --workers 2 --pp 2 --micro-batches 1 --pipe-schedule pipedream

# ---- --clip-grad-norm by the global norm: the squared norms summed over the
# tp shards (replicated tensors once) and the stages; a bound that clips
# every step moves one worker far (the check can fail), the grids follow it
"$DTRAIN" train $TIED --clip-grad-norm 0.3 --checkpoint "$TMP/clip1.st" >/dev/null
check gpt_clip_bound_bites sh -c "! $PY tests/ckpt_diff.py '$TMP/one.st' '$TMP/clip1.st' 1e-3 >/dev/null"
equal gpt_clip_tp2_equals_one_worker 1e-5 "$TMP/clip1.st" -- "$DTRAIN" train $TIED --clip-grad-norm 0.3 --workers 2 --tp 2
equal gpt_clip_dp2_pp2_tp2_equals_one_worker 1e-5 "$TMP/clip1.st" -- \
  "$DTRAIN" train $TIED --clip-grad-norm 0.3 --batch 8 --workers 8 --tp 2 --pp 2 --micro-batches 2
"$DTRAIN" describe $TIED --clip-grad-norm 0.3 --batch 8 --workers 8 --tp 2 --pp 2 --micro-batches 2 --partition macs >"$TMP/desc_grid.json"
"$DTRAIN" train $TIED --clip-grad-norm 0.3 --batch 8 --workers 8 --tp 2 --pp 2 --micro-batches 2 --partition macs \
  --max-steps 3 --metrics "$TMP/grid.jsonl" >/dev/null
check gpt_grid_tied_clip_bytes_described_counted $PY -c "
import json
d = [r['sent'] for r in json.load(open('$TMP/desc_grid.json'))['bytes_per_step']]
e = {l['rank']: l['bytes_sent'] / 3 for l in map(json.loads, open('$TMP/grid.jsonl')) if l['event'] == 'rank'}
print('  bytes a step by rank: described', d, 'counted', [e[r] for r in range(8)])
assert all(d[r] == e[r] for r in range(8)), (d, e)"

if have_mpi; then
  $MPIRUN -np 2 "$DTRAIN" train $TIED --comm mpi --tp 2 --checkpoint "$TMP/tp2_mpi.st" >/dev/null
  check gpt_tp2_mpi_same_bits_as_local cmp -s "$TMP/gpt_tp2_equals_one_worker.st" "$TMP/tp2_mpi.st"
  $MPIRUN -np 8 "$DTRAIN" train $UNTIED --batch 8 --comm mpi --tp 2 --pp 2 --micro-batches 2 \
    --checkpoint "$TMP/grid_mpi.st" >/dev/null
  check gpt_dp2_pp2_tp2_mpi_same_bits_as_local cmp -s "$TMP/gpt_dp2_pp2_tp2_equals_one_worker.st" "$TMP/grid_mpi.st"
fi

# ---- bytes: a block's four sums of n.T.c floats (attention's projection
# and the MLP's second linear forward, their input gradients backward),
# each a ring allreduce over the group; described = counted = the formula
"$DTRAIN" describe $TIED --workers 2 --tp 2 >"$TMP/desc.json"
"$DTRAIN" train $TIED --workers 2 --tp 2 --max-steps 3 --metrics "$TMP/bytes.jsonl" >/dev/null
check gpt_tp2_bytes_described_counted_megatron $PY -c "
import json
S, P = 16 * 32 * 32, 2
b = [S // P + (i < S % P) for i in range(P)]
want = 2 * 4 * 4 * (2 * S - b[0] - b[1])   # 2 blocks x 4 sums x a ring's bytes
d = json.load(open('$TMP/desc.json'))['bytes_per_step'][0]['sent']
e = [json.loads(l) for l in open('$TMP/bytes.jsonl') if '\"event\":\"epoch\"' in l][0]
print('  bytes a step: described', d, 'counted', e['bytes_sent_per_step'], 'Megatron', want)
assert d == e['bytes_sent_per_step'] == want, (d, e['bytes_sent_per_step'], want)"

# ---- resume on another grid: half the steps at tp 2, the rest at tp 1 or dp 2;
# half on one worker, the rest at pp 2 x tp 2 (the tied table on both stages)
R="--data text:$TMP/small.txt --seq-len 32 --optimizer adamw --lr 1e-3 --seed 3 --quiet --model $TMP/tied.model"
head -c 12000 "$TEXT" >"$TMP/small.txt"
"$DTRAIN" train $R --batch 16 --epochs 2 --checkpoint "$TMP/two.st" >/dev/null
"$DTRAIN" train $R --batch 16 --epochs 1 --workers 2 --tp 2 --checkpoint "$TMP/half.st" >/dev/null
equal gpt_resume_tp2_onto_one_worker 1e-5 "$TMP/two.st" -- "$DTRAIN" train $R --batch 16 --epochs 2 --resume "$TMP/half.st"
equal gpt_resume_tp2_onto_dp2 1e-5 "$TMP/two.st" -- "$DTRAIN" train $R --batch 8 --epochs 2 --workers 2 --resume "$TMP/half.st"
"$DTRAIN" train $R --batch 16 --epochs 1 --checkpoint "$TMP/half1.st" >/dev/null
equal gpt_resume_one_worker_onto_pp2_tp2 1e-5 "$TMP/two.st" -- \
  "$DTRAIN" train $R --batch 16 --epochs 2 --workers 4 --tp 2 --pp 2 --micro-batches 2 --resume "$TMP/half1.st"

# ---- bad values --------------------------------------------------------------
expect_error gpt_tp_not_dividing_heads 2 "option --tp 3: the attention layer on line 5 of builtin:gpt has 4 heads, which 3 ranks cannot share" -- \
  "$DTRAIN" train --model gpt --data text:$TEXT --workers 3 --tp 3
