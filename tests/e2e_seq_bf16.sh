#!/bin/sh
# End-to-end checks of --precision bf16 on the sequence layers (linear,
# attention, lmhead, lstm: every product in bf16 -- the done line counts
# them, none left to fp32 -- fp32 master weights): a
# small GPT trains in bf16 to within 0.03 nats of fp32 after the same
# steps, recomputation changes no bit in bf16 either, and a CPU without
# bf16 refuses it with one line, exit 2.
. tests/lib.sh
Q="--quiet"
TEXT="$TMP/cookie.txt"
head -c 40000 /usr/share/games/fortunes/cookie >"$TEXT"
{
  echo "embedding vocab=256 units=32 name=tok"
  echo "posembed positions=32 name=x0"
  for b in 0 1; do
    printf 'layernorm\nattention heads=2\nadd with=x%d name=a%d\nlayernorm\nlinear units=128\ngelu\nlinear units=32\nadd with=a%d name=x%d\n' $b $b $b $((b + 1))
  done
  printf 'layernorm\nlmhead vocab=256 tie=tok\n'
} >"$TMP/small.model"
RUN="--model $TMP/small.model --data text:$TEXT --seq-len 32 --optimizer adamw --lr 3e-3 --seed 3 --batch 16 --max-steps 30 --epochs 1 $Q"
expect_error seq_bf16_refused_without_cpu_support 2 "option --precision bf16: this CPU has no bf16 instructions" -- \
  env DTRAIN_CPU_DISABLE=avx512_bf16,amx_bf16 "$DTRAIN" train $RUN --precision bf16
if ! "$DTRAIN" train --data synthetic --max-steps 1 $Q --precision bf16 >/dev/null 2>&1; then
  echo "SKIP seq bf16 runs: no bf16 on this CPU or no oneDNN in this build"
  exit 0
fi
"$DTRAIN" train $RUN --metrics "$TMP/fp32.jsonl" >/dev/null
"$DTRAIN" train $RUN --precision bf16 --metrics "$TMP/bf16.jsonl" --checkpoint "$TMP/bf16.st" >/dev/null
check seq_bf16_runs_on_onednn grep -q '"gemm":"bf16 onednn"' "$TMP/bf16.jsonl"
check seq_bf16_no_product_left_to_fp32 $PY -c "
import json
d = [json.loads(l) for l in open('$TMP/bf16.jsonl') if '\"event\":\"done\"' in l][0]
assert d['bf16_products'] > 0 and d['fp32_products'] == 0, d"
check seq_bf16_learns_as_fp32 $PY -c "
import json, math
t = [[json.loads(l)['test_loss'] for l in open(f) if '\"event\":\"epoch\"' in l][0] for f in ('$TMP/fp32.jsonl', '$TMP/bf16.jsonl')]
print('  validation nats/token after 30 steps: fp32 %.4f bf16 %.4f' % tuple(t))
assert t[1] < math.log(256) - 1.5 and abs(t[1] - t[0]) < 0.03, t"
"$DTRAIN" train $RUN --precision bf16 --recompute blocks --checkpoint "$TMP/bf16_blocks.st" >/dev/null
check seq_bf16_recompute_same_bits cmp -s "$TMP/bf16.st" "$TMP/bf16_blocks.st"
