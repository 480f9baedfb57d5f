#!/bin/sh
# How failures are reported (issue 37, second round): ranks named in world
# numbering under --tp/--pp, the trace kept on SIGINT and divergence, the
# `diverged` record wherever a NaN is found, resume shapes named.
. tests/lib.sh
SYN="--data synthetic --quiet"

# ---- a resumed tensor of another shape names both shapes ---------------------
"$DTRAIN" train $SYN --max-steps 2 --checkpoint "$TMP/shape.st" >/dev/null 2>&1
$PY - "$TMP/shape.st" <<'PYEOF'
import sys
p = sys.argv[1]; b = open(p, "rb").read()
open(p, "wb").write(b.replace(b'"shape":[512,784]', b'"shape":[784,512]', 1))
PYEOF
expect_error resume_names_shapes 1 "tensor 'layers.0.weight' has shape \[784,512\] in the file but \[512,784\] in the model" -- \
  "$DTRAIN" train $SYN --max-steps 2 --resume "$TMP/shape.st"
