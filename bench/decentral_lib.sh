# Shared by bench/decentral_*.sh: run one dtrain training, optionally stop
# it once the test accuracy reaches a target, and summarise its metrics.
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# run_until METRICS TARGET STOP -- dtrain train options...
# STOP=1: kill the run (our own child, by its pid) once an epoch line has
# test_acc >= TARGET, so that slow baselines do not run all their epochs.
run_until() {
  metrics=$1 target=$2 stop=$3; shift 4
  rm -f "$metrics"
  "$DTRAIN" train --quiet --metrics "$metrics" "$@" >/dev/null 2>"$metrics.err" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$stop" = 1 ] && [ -f "$metrics" ] && $PY - "$metrics" "$target" <<'PYEOF'
import json, sys
ok = any(json.loads(l).get("test_acc", 0) >= float(sys.argv[2]) for l in open(sys.argv[1]) if l.strip())
sys.exit(0 if ok else 1)
PYEOF
    then kill "$pid" 2>/dev/null; break; fi
    sleep 1
  done
  wait "$pid" 2>/dev/null
  return 0
}

# summary METRICS TARGET: "final_acc best_acc train_sec time_to_target epoch_reached"
summary() {
  $PY - "$1" "$2" <<'PYEOF'
import json, sys
ep = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ep = [e for e in ep if e.get("event") == "epoch"]
target, t, hit, at = float(sys.argv[2]), 0.0, None, None
for e in ep:
    t += e["epoch_sec"]
    if hit is None and e["test_acc"] >= target:
        hit, at = t, e["epoch"]
fin = ep[-1]["test_acc"] if ep else 0
best = max((e["test_acc"] for e in ep), default=0)
print(f"{fin:.4f} {best:.4f} {t:.1f} {'%.1f' % hit if hit is not None else 'never'} {at if at else '-'}")
PYEOF
}
