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
if command -v make >/dev/null; then
  make -j16 build/dtrain >/dev/null
else  # a host without make: the Makefile's flags, one compiler run per file
  mkdir -p build/obj
  CF="-std=c11 -D_GNU_SOURCE -O3 -march=native -fno-math-errno -Iinclude -Isrc"
  ls src/*/*.c src/strategy/*/*.c | xargs -P 16 -I{} sh -c 'cc '"$CF"' -c {} -o build/obj/$(echo {} | tr / _).o'
  cc -o build/dtrain build/obj/*.o -lopenblas -lz -lm -lpthread
fi
export OPENBLAS_CORETYPE=Cooperlake
# The host's topology: whether 16 vCPUs are 16 cores or 8 with two threads
# each, and how many NUMA nodes they span, says where a loss past 4 workers comes from.
lscpu | grep -iE '^(model name|thread|core|socket|numa|l2|l3)' || true
for n in /sys/devices/system/node/node*; do [ -f "$n/cpulist" ] && echo "$(basename "$n"): cpus $(cat "$n/cpulist")"; done
DTRAIN_PY=$(command -v python3) python3 bench/scaling_cores.py "$@"
