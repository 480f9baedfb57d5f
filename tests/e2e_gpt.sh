#!/bin/sh
# End-to-end checks of sequence models on text: a small GPT (the model
# file format) learns bytes of the fortunes corpus on one worker, the
# validation loss falls and is reported in nats per token and bits per
# byte; synchronous data parallelism on the same model (allreduce, local
# and mpi) follows one worker; --clip-grad-norm; bad input (an empty or
# too short text file, --seq-len past the position table, heads that do not
# divide the width, a residual add of two shapes) is one line, exit 2.
. tests/lib.sh
Q="--quiet"
make_small_fashion "$TMP/fm" 256 64
"$DTRAIN" train --data "$TMP/fm" --max-steps 1 $Q --checkpoint "$TMP/mlp.st" >/dev/null
TEXT="$TMP/cookie.txt"
head -c 40000 /usr/share/games/fortunes/cookie >"$TEXT"
cat >"$TMP/small.model" <<'MODEL'
# a GPT of width 32: 2 blocks of 2 heads over 32 positions, head tied
embedding vocab=256 units=32 name=tok
posembed positions=32 name=x0
layernorm
attention heads=2
add with=x0 name=a0
layernorm
linear units=128
gelu
linear units=32
add with=a0 name=x1
layernorm
attention heads=2
add with=x1 name=a1
layernorm
linear units=128
gelu
linear units=32
add with=a1 name=x2
layernorm
lmhead vocab=256 tie=tok
MODEL
RUN="--model $TMP/small.model --data text:$TEXT --seq-len 32 --optimizer adamw --lr 3e-3 --seed 3 $Q"
field() { $PY -c "
import json, sys
lines = [json.loads(l) for l in open('$1') if '\"epoch\"' in l and '\"event\":\"epoch\"' in l]
print(lines[$2]['$3'])"; }

# ---- one worker learns: validation loss falls, in nats and bits ----------
"$DTRAIN" train $RUN --batch 16 --epochs 2 --metrics "$TMP/one.jsonl" --checkpoint "$TMP/one.st" >/dev/null 2>"$TMP/one.err"
check one_worker_runs grep -q '"event":"done"' "$TMP/one.jsonl"
check validation_loss_falls $PY -c "
import json, math
e = [json.loads(l) for l in open('$TMP/one.jsonl') if '\"event\":\"epoch\"' in l]
a, b = e[0]['test_loss'], e[1]['test_loss']
print('  validation nats/token', a, '->', b, ' bits/byte', e[1]['test_bits_per_byte'])
assert b < a < math.log(256) - 1, (a, b)
assert abs(e[1]['test_bits_per_byte'] - b / math.log(2)) < 1e-5
assert abs(e[1]['test_nats_per_token'] - b) < 1e-9 and e[1]['tokens_per_sec'] > 0"

# ---- an LSTM (torch.nn.LSTM's layout; 2 layers) learns the same text ------
printf 'embedding vocab=256 units=32\nlstm units=48 layers=2\nlmhead vocab=256\n' >"$TMP/lstm.model"
"$DTRAIN" train $RUN --model "$TMP/lstm.model" --batch 16 --lr 1e-2 --metrics "$TMP/lstm.jsonl" --checkpoint "$TMP/lstm.st" >/dev/null
check lstm_learns $PY -c "
import json, math
e = [json.loads(l) for l in open('$TMP/lstm.jsonl') if '\"event\":\"epoch\"' in l]
print('  lstm validation nats/token', e[0]['test_loss'])
assert e[0]['test_loss'] < math.log(256) - 1.5"
check lstm_samples sh -c "'$DTRAIN' sample --checkpoint '$TMP/lstm.st' --prompt 'A ' --tokens 20 --temperature 0 | grep -q '^A '"

# ---- dtrain sample: the prompt and N bytes after it; temperature 0 is the argmax
"$DTRAIN" sample --checkpoint "$TMP/one.st" --prompt "The " --tokens 40 --temperature 0 >"$TMP/s1.txt"
"$DTRAIN" sample --checkpoint "$TMP/one.st" --prompt "The " --tokens 40 --temperature 0 --seed 9 >"$TMP/s2.txt"
"$DTRAIN" sample --checkpoint "$TMP/one.st" --prompt "The " --tokens 40 --seed 5 >"$TMP/s3.txt"
check sample_prompt_then_tokens $PY -c "
b = open('$TMP/s1.txt', 'rb').read(); c = open('$TMP/s3.txt', 'rb').read()
print('  sample:', b[:44])
assert b.startswith(b'The ') and len(b) == 4 + 40 + 1 and c.startswith(b'The ') and len(c) == 45"
check sample_greedy_ignores_seed cmp -s "$TMP/s1.txt" "$TMP/s2.txt"
expect_error sample_needs_checkpoint 2 "--checkpoint FILE is required" -- "$DTRAIN" sample --prompt x --tokens 3
expect_error sample_not_a_sequence_model 2 "model mlp is not a sequence model (its last layer is dense, not lmhead)" -- "$DTRAIN" sample --checkpoint "$TMP/mlp.st" --prompt x --tokens 3

# ---- data parallelism on the same model: 2 x 8 follows 1 x 16 -----------
S="--max-steps 12 --epochs 1"
"$DTRAIN" train $RUN --batch 16 $S --checkpoint "$TMP/w1.st" >/dev/null
"$DTRAIN" train $RUN --batch 8 --workers 2 --exchange allreduce:ring $S --checkpoint "$TMP/w2.st" >/dev/null
check dp_local_follows_one_worker close "$TMP/w1.st" "$TMP/w2.st" 1e-4
if have_mpi; then
  $MPIRUN -np 2 "$DTRAIN" train $RUN --batch 8 --comm mpi --exchange allreduce:ring $S --checkpoint "$TMP/wm.st" >/dev/null
  check dp_mpi_same_bits_as_local cmp -s "$TMP/w2.st" "$TMP/wm.st"
fi

# ---- pipelines by blocks (the residual stream crosses a cut): an untied
# head here (a tied one across stages: tests/e2e_gpt_tp.sh) ---------------
sed 's/lmhead vocab=256 tie=tok/lmhead vocab=256/' "$TMP/small.model" >"$TMP/untied.model"
U="--model $TMP/untied.model --batch 16 $S"
"$DTRAIN" train $RUN $U --checkpoint "$TMP/u1.st" >/dev/null
"$DTRAIN" train $RUN $U --workers 2 --pp 2 --micro-batches 4 --pipe-schedule 1f1b --checkpoint "$TMP/u2.st" >/dev/null
check pp2_1f1b_follows_one_worker close "$TMP/u1.st" "$TMP/u2.st" 1e-5
"$DTRAIN" train $RUN $U --workers 4 --pp 4 --micro-batches 4 --checkpoint "$TMP/u4.st" >/dev/null
check pp4_gpipe_follows_one_worker close "$TMP/u1.st" "$TMP/u4.st" 1e-5
"$DTRAIN" train $RUN --model "$TMP/untied.model" --batch 8 $S --workers 4 --pp 2 --micro-batches 2 --checkpoint "$TMP/u22.st" >/dev/null
check dp2_pp2_follows_one_worker close "$TMP/u1.st" "$TMP/u22.st" 1e-5
expect_error pp_tied_head_async_refused 2 "only gpipe, 1f1b and interleaved:V share the table between stages" -- "$DTRAIN" train $RUN --workers 2 --pp 2 --micro-batches 1 --pipe-schedule pipedream

# ---- describe_step's bytes are the transport's on the new model ----------
"$DTRAIN" describe $RUN --batch 8 --workers 2 --exchange allreduce:ring >"$TMP/desc.json"
"$DTRAIN" train $RUN --batch 8 --workers 2 --exchange allreduce:ring --max-steps 3 --metrics "$TMP/bytes.jsonl" >/dev/null
check described_bytes_are_counted $PY -c "
import json
d = json.load(open('$TMP/desc.json'))['bytes_per_step'][0]['sent']
e = [json.loads(l) for l in open('$TMP/bytes.jsonl') if '\"event\":\"epoch\"' in l][0]
assert d == e['bytes_sent_per_step'] > 0, (d, e['bytes_sent_per_step'])"

# ---- resume: one epoch, then the second from the checkpoint (AdamW's
# state in it) = two epochs straight, bit for bit ---------------------------
head -c 12000 "$TEXT" >"$TMP/small.txt"
R2="$RUN --data text:$TMP/small.txt --batch 16"
"$DTRAIN" train $R2 --epochs 2 --checkpoint "$TMP/r2.st" >/dev/null
"$DTRAIN" train $R2 --epochs 1 --checkpoint "$TMP/r1.st" >/dev/null
"$DTRAIN" train $R2 --epochs 2 --resume "$TMP/r1.st" --checkpoint "$TMP/r1.st" >/dev/null
check resume_bit_exact cmp -s "$TMP/r2.st" "$TMP/r1.st"

# ---- --clip-grad-norm: a bound above the norm changes no bit, a small one does
"$DTRAIN" train $RUN --batch 16 $S --clip-grad-norm 1e9 --checkpoint "$TMP/c_big.st" >/dev/null
"$DTRAIN" train $RUN --batch 16 $S --clip-grad-norm 0.05 --checkpoint "$TMP/c_small.st" >/dev/null
check clip_above_norm_is_identity cmp -s "$TMP/w1.st" "$TMP/c_big.st"
check clip_small_changes_the_run sh -c "! cmp -s '$TMP/w1.st' '$TMP/c_small.st'"
expect_error clip_needs_allreduce 2 "option --clip-grad-norm: not used with" -- "$DTRAIN" train $RUN --clip-grad-norm 1 --workers 2 --exchange shared
# ---- bad input -------------------------------------------------------------
: >"$TMP/empty.txt"
expect_error text_empty 2 "0 bytes make 0 windows of --seq-len 32" -- "$DTRAIN" train $RUN --data "text:$TMP/empty.txt"
head -c 200 "$TEXT" >"$TMP/short.txt"
expect_error text_too_short 2 "use a longer file (at least 321 bytes) or a smaller --seq-len" -- "$DTRAIN" train $RUN --data "text:$TMP/short.txt"
expect_error seq_len_past_table 2 "small.model:3: posembed: sequences of 64 tokens are longer than the position table (positions=32)" -- "$DTRAIN" train $RUN --seq-len 64
sed 's/heads=2/heads=3/' "$TMP/small.model" >"$TMP/heads.model"
expect_error heads_divide_width 2 "heads.model:5: attention: heads=3 does not divide the width 32" -- "$DTRAIN" train $RUN --model "$TMP/heads.model"
sed '8s/linear units=128/linear units=128 name=wide/; s/add with=a0 name=x1/add with=wide name=x1/' "$TMP/small.model" >"$TMP/addshape.model"
expect_error add_shapes_differ 2 "addshape.model:11: add: its inputs differ in shape" -- "$DTRAIN" train $RUN --model "$TMP/addshape.model"
expect_error seq_len_needs_text 2 "option --seq-len: not used" -- "$DTRAIN" train --data synthetic --seq-len 16
