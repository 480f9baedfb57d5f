#!/bin/sh
# Training speed of gpt (4 blocks, 4 heads, width 256, T 128; fp32) in
# tokens/s: dtrain against karpathy/llm.c's train_gpt2.c (the C reference
# for GPT-2 training on CPU), built here from its public source, on the
# same model shape, batch, T, text and AdamW, measured in the same run on
# 1 thread and on 2 (llm.c: OMP_NUM_THREADS; dtrain: its best of 2 BLAS
# threads and 2 data-parallel workers with half the batch each, as
# bench/gpt_vs_pytorch.py). Prints both sides' tokens/s and the ratio
# dtrain/llm.c (the yardstick), the median of ROUNDS rounds.
#
# llm.c's source: $LLMC_DIR (a checkout: git clone
# https://github.com/karpathy/llm.c), else the mirror the `fetch` tool
# leaves under /work/.mirror/karpathy+llm.c. Nothing of it is copied into
# dtrain: a build copy of train_gpt2.c is patched with sed in a temporary
# directory — its checkpoint and token paths, B = BATCH, T = 128, STEPS+1
# steps, no validation or sampling inside the timed loop, AdamW at lr 1e-3
# with dtrain's weight decay 0.01 — and built with llm.c's own flags
# (-Ofast -march=native -fopenmp -DOMP). bench/llmc_files.py writes its
# checkpoint (the same 3,257,856 parameters) and token files (the text's
# bytes, vocabulary 256).
#
# Both sides time all STEPS+1 steps, the first (which touches its memory
# first) included: llm.c from its per-step "took X ms", dtrain from its
# epoch time (its held-out evaluation is outside it).
#
# Differences (the model is the same: GELU tanh, weight-tied head, layer
# norm eps 1e-5, pre-norm blocks, biases everywhere): llm.c decays every
# tensor, dtrain not norms and biases (time: the same); llm.c's weights
# are random N(0, 0.02) from llmc_files.py, dtrain's its own init (speed
# does not depend on them); llm.c computes its forward's attention and
# loss loops in plain C, dtrain through GEMMs.
#
# usage: [STEPS=5] [ROUNDS=3] [BATCH=32] [LLMC_DIR=...] sh bench/gpt_vs_llmc.sh
# Run from the repository root after `make`.
set -eu
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-32}
T=128
DTRAIN=${DTRAIN:-$PWD/build/dtrain}
PY=${PYTHON:-/usr/bin/python3}
MIRROR=/work/.mirror/karpathy+llm.c/repo
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

if [ -n "${LLMC_DIR:-}" ]; then
  cp "$LLMC_DIR/train_gpt2.c" "$W/" && cp -r "$LLMC_DIR/llmc" "$W/"
  SRC=$LLMC_DIR
elif [ -d "$MIRROR" ]; then
  git --git-dir="$MIRROR" archive HEAD train_gpt2.c llmc | tar -x -C "$W"
  SRC="$MIRROR at $(git --git-dir="$MIRROR" rev-parse --short HEAD)"
else
  echo "gpt_vs_llmc: no llm.c source: set LLMC_DIR to a checkout (git clone https://github.com/karpathy/llm.c)" >&2
  exit 2
fi

head -c 200000 /usr/share/games/fortunes/cookie > "$W/text.txt"
"$PY" bench/llmc_files.py --text "$W/text.txt" --out "$W" >/dev/null
sed -e "s|\"gpt2_124M.bin\"|\"$W/gpt_llmc.bin\"|" \
    -e "s|\"dev/data/tinyshakespeare/tiny_shakespeare_train.bin\"|\"$W/train.bin\"|" \
    -e "s|\"dev/data/tinyshakespeare/tiny_shakespeare_val.bin\"|\"$W/val.bin\"|" \
    -e "s|int B = 4;|int B = $BATCH;|" -e "s|int T = 64;|int T = $T;|" \
    -e "s|step <= 40;|step <= $STEPS;|" \
    -e "s|if (step % 10 == 0) {|if (0) {|" -e "s|if (step > 0 \&\& step % 20 == 0) {|if (0) {|" \
    -e "s|gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, step+1);|gpt2_update(\&model, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step+1);|" \
    "$W/train_gpt2.c" > "$W/train_gpt2_bench.c"
for want in "$W/gpt_llmc.bin" "$W/train.bin" "int B = $BATCH;" "int T = $T;" "step <= $STEPS;" "1e-3f, 0.9f"; do
  grep -qF "$want" "$W/train_gpt2_bench.c" || { echo "gpt_vs_llmc: llm.c's train_gpt2.c changed: the patch for '$want' did not apply" >&2; exit 1; }
done
(cd "$W" && cc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I. train_gpt2_bench.c -lm -o train_gpt2_bench)

llmc() { # threads -> tokens/s over all steps; its first step's loss goes to $W/llmc_loss
  (cd "$W" && OMP_NUM_THREADS=$1 ./train_gpt2_bench) |
    awk -v bt=$((BATCH * T)) -v lf="$W/llmc_loss" '/^step [0-9]+: train loss/ {
          ms += $(NF - 1); if (n++ == 0) print $5 > lf }
        END { if (n == 0) exit 1; printf "%.1f\n", n * bt / (ms / 1000) }'
}
dtrain() { # threads workers -> tokens/s
  rm -f "$W/m.jsonl"
  "$DTRAIN" train --model gpt --data "text:$W/text.txt" --seq-len $T --batch $((BATCH / $2)) \
    --workers "$2" --threads "$1" --optimizer adamw --lr 1e-3 --max-steps $((STEPS + 1)) \
    --quiet --metrics "$W/m.jsonl" >/dev/null
  "$PY" -c 'import json,sys
print(next(r["tokens_per_sec"] for r in map(json.loads, open(sys.argv[1])) if r.get("event") == "epoch"))' "$W/m.jsonl"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "llm.c: $SRC; batch $BATCH, T $T, $((STEPS + 1)) steps a run"
for cores in 1 2; do
  : > "$W/rows"
  r=0
  while [ $r -lt "$ROUNDS" ]; do
    l=$(llmc $cores)
    if [ $cores = 1 ]; then d=$(dtrain 1 1); else
      d=$(printf '%s\n%s\n' "$(dtrain 2 1)" "$(dtrain 1 2)" | sort -g | tail -1); fi
    echo "$d $l $(awk -v d="$d" -v l="$l" 'BEGIN { printf "%.2f", d / l }')" >> "$W/rows"
    r=$((r + 1))
  done
  echo "gpt fp32 $cores thread(s): dtrain $(cut -d' ' -f1 "$W/rows" | median) tokens/s, llm.c" \
       "$(cut -d' ' -f2 "$W/rows" | median) tokens/s, ratio $(cut -d' ' -f3 "$W/rows" | median)" \
       "(median of $ROUNDS; ratios $(cut -d' ' -f3 "$W/rows" | tr '\n' ' ' | sed 's/ $//'))"
  echo "llm.c's first-step loss $(cat "$W/llmc_loss") (a fresh model on 256 bytes: about ln 256 = 5.55)"
done
