#!/bin/sh
# models/gpt-small.model (the README's sample model): it parses, has the
# parameter count its header states, its tensors carry gpt's names (so
# docs/MODEL_FORMAT.md's PyTorch mapping holds) at width 128, and
# dtrain sample generates from its checkpoint. One step on 40 KB of text.
. tests/lib.sh
TEXT="$TMP/cookie.txt"
head -c 40000 /usr/share/games/fortunes/cookie >"$TEXT"
RUN="--data text:$TEXT --seq-len 32 --batch 4 --optimizer adamw --lr 1e-3 --max-steps 1 --quiet"
"$DTRAIN" train --model models/gpt-small.model $RUN --metrics "$TMP/s.jsonl" --checkpoint "$TMP/small.st" >/dev/null
"$DTRAIN" train --model gpt $RUN --checkpoint "$TMP/gpt.st" >/dev/null
check gpt_small_parameters $PY -c "
import json
d = [json.loads(l) for l in open('$TMP/s.jsonl') if '\"event\":\"done\"' in l][0]
print('  gpt-small parameters', d['params'])
assert d['params'] == 842496, d['params']"
check gpt_small_names_are_gpts $PY -c "
import json, struct
def header(p):
    f = open(p, 'rb'); n = struct.unpack('<Q', f.read(8))[0]
    return {k: v['shape'] for k, v in json.loads(f.read(n)).items() if k != '__metadata__'}
s, g = header('$TMP/small.st'), header('$TMP/gpt.st')
assert sorted(s) == sorted(g), set(s) ^ set(g)
half = lambda k: [256, 128] if k.endswith('layers.0.weight') else [x // 2 if x in (256, 768, 1024) else x for x in g[k]]
bad = [k for k in s if s[k] != half(k)]
assert not bad, [(k, s[k], g[k]) for k in bad]"
check gpt_small_samples sh -c "'$DTRAIN' sample --checkpoint '$TMP/small.st' --prompt 'The ' --tokens 20 --temperature 0 | grep -q '^The '"
