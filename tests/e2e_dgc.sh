#!/bin/sh
# DGC's two corrections in a real run, read from the checkpoints (mlp, 2
# ranks, 2 steps, --momentum 0.9). At dgc:1 every value is sent, so factor
# masking clears every compressed tensor's velocity after each step: its
# weights take the plain step, u = g (momentum SGD with --momentum 0); the
# biases go whole by the allreduce, keep their velocity and take momentum
# SGD's step, u = 0.9 u + g (docs/COMPRESSION.md). The first step's update
# is the same in all runs, so the second step's gradient is too, and after
# two steps
#   weights(dgc:1)  = weights(sgd, momentum 0)    (masking on; else momentum 0.9's)
#   biases(dgc:1)   = biases(sgd, momentum 0.9)   (momentum correction on; else momentum 0's)
# while each differs from the other run by far more than rounding. The
# rule at a density below 1, by hand: test_compress's test_dgc_rule_by_hand.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 256 64
BASE="--data $SMALL --lr 0.1 --seed 5 --quiet --max-steps 2 --epochs 1 --batch 16 --workers 2 --exchange allreduce:ring"
"$DTRAIN" train $BASE --momentum 0.9 --compress dgc:1 --checkpoint "$TMP/dgc.st" >"$TMP/out" 2>&1 || fail dgc_trains "$(tail -c 300 "$TMP/out")"
"$DTRAIN" train $BASE --momentum 0 --checkpoint "$TMP/m0.st" >/dev/null
"$DTRAIN" train $BASE --momentum 0.9 --checkpoint "$TMP/m9.st" >/dev/null
# the largest |a - b| over the weights (2-d tensors) or the biases (1-d) of
# two checkpoints; safetensors read by hand (no NumPy needed)
cat >"$TMP/diff.py" <<'PYEOF'
import json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        if k.startswith(("optimizer.", "balance.", "compress.")): continue
        a, b = v["data_offsets"]
        out[k] = (len(v["shape"]), struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a: 8 + n + b]))
    return out
a, b, kind = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
want = 1 if kind == "bias" else 2
print(max(abs(x - y) for k in a if a[k][0] == want for x, y in zip(a[k][1], b[k][1])))
PYEOF
d() { $PY "$TMP/diff.py" "$1" "$2" "$3"; }
small() { $PY -c "import sys; sys.exit(0 if $1 <= 1e-6 else 1)"; }
large() { $PY -c "import sys; sys.exit(0 if $1 >= 1e-4 else 1)"; }
W0=$(d "$TMP/dgc.st" "$TMP/m0.st" weight) W9=$(d "$TMP/dgc.st" "$TMP/m9.st" weight)
B0=$(d "$TMP/dgc.st" "$TMP/m0.st" bias) B9=$(d "$TMP/dgc.st" "$TMP/m9.st" bias)
check "dgc_masking_weights_take_the_plain_step($W0)" small "$W0"
check "dgc_masking_weights_not_momentum_sgd($W9)" large "$W9"
check "dgc_momentum_correction_biases_take_momentum_step($B9)" small "$B9"
check "dgc_momentum_correction_biases_not_plain_sgd($B0)" large "$B0"
