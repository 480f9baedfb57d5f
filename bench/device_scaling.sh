#!/bin/sh
# Issue 35's 16-core figures on a lent device host (16 Intel cores, PyTorch
# in its python3, no package archive): bench/scaling_cores.py at 2, 4, 8, 16
# workers against 16 independent processes and PyTorch DDP (gloo).
# Here, after committing:   ../shared/tools/device-prep.sh
# then the device tool's run with carry [".devcarry"] and the command
#   sh bench/device_scaling.sh            (about 5 minutes; timeout_s 540)
# Debian's OpenBLAS 0.3.21 does not know Sapphire Rapids: Cooperlake's
# AVX-512 kernels are named for it (device-prep.sh's header).
set -e
[ -f .devcarry/env.sh ] || { echo "no .devcarry/: run ../shared/tools/device-prep.sh here and carry .devcarry" >&2; exit 2; }
. .devcarry/env.sh
cd .devcarry/src
make -j16 build/dtrain >/dev/null
export OPENBLAS_CORETYPE=Cooperlake
DTRAIN_PY=$(command -v python3) python3 bench/scaling_cores.py "$@"
