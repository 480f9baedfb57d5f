#!/bin/sh
# The parameter-server coordinator's polling pause, as a build against a
# baseline build: ps:1 sync on mlp (batch 32, 400 steps) at 1 and 2
# workers, on local and under mpirun, interleaved rounds; prints each run's
# samples/s and exposed communication a step, and new / baseline.
#   sh bench/ps_coord_poll.sh BASELINE_BINARY [ROUNDS]
# (DTRAIN: the build measured, default build/dtrain; make the baseline
# from the commit before, e.g. git worktree add /tmp/base HEAD~1 && make -C /tmp/base)
set -e
BASE=${1:?usage: sh bench/ps_coord_poll.sh BASELINE_BINARY [ROUNDS]}
ROUNDS=${2:-2}
NEW=${DTRAIN:-build/dtrain}
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
figures() { # METRICS -> "samples/s comm_ms"
  python3 -c "
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if '\"epoch\"' in l][-1]
print(e['samples_per_sec'], 1e3 * e['comm_sec'] / e['step'])" "$1"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-6s %-7s %5s %10s %10s %10s %10s %6s\n' round comm workers base/s new/s base_ms new_ms new/base
r=1
while [ $r -le "$ROUNDS" ]; do
  for comm in local mpi; do
    for w in 1 2; do
      O="--data fashion-mnist --batch 32 --epochs 1 --max-steps 400 --seed 1 --quiet --model mlp --workers $w --exchange ps:1"
      for b in base new; do
        bin=$BASE; [ $b = new ] && bin=$NEW
        if [ $comm = mpi ]; then $MPIRUN -np $((w + 1)) "$bin" train --comm mpi $O --metrics "$T/$b.jsonl" >/dev/null 2>&1
        else "$bin" train $O --metrics "$T/$b.jsonl" >/dev/null 2>&1; fi
      done
      set -- $(figures "$T/base.jsonl") $(figures "$T/new.jsonl")
      printf '%-6s %-7s %5s %10.0f %10.0f %10.3f %10.3f %6.2f\n' $r $comm $w $1 $3 $2 $4 "$(python3 -c "print($3 / $1)")"
    done
  done
  r=$((r + 1))
done
