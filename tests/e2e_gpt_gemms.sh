#!/bin/sh
# bench/gpt_gemms.c, the replay of gpt's products that bench/gpt_vs_pytorch.py
# measures dtrain's GEMM-only step and FLOPs with: at batch 1 its sum of
# 2·m·n·k over the products it ran equals the formula of gpt_vs_pytorch.py
# (gpt_flops, causal blocks) -- two derivations, one from the layers'
# calls, one from the shapes -- and bad arguments are refused with one line.
. tests/lib.sh
GEMMS=${BUILD:-build}/bench/gpt_gemms
"$GEMMS" onednn 1 1 1 >"$TMP/out" 2>"$TMP/err" || "$GEMMS" openblas 1 1 1 >"$TMP/out" 2>>"$TMP/err"
check gpt_gemms_flops_equal_the_formula $PY -c '
import json, sys
sys.path.insert(0, "bench")
from gpt_vs_pytorch import gpt_flops
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["flops_per_step"] == gpt_flops(1, True) and r["roof_1024_gflops"] > 0 else 1)' "$TMP/out"
expect_error gpt_gemms_refuses_a_library 2 "not openblas or onednn" -- "$GEMMS" mkl 1 1 1
expect_error gpt_gemms_refuses_zero_threads 2 "threads and batch must be >= 1" -- "$GEMMS" openblas 0 1 1
