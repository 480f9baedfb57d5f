#!/bin/sh
# Replicated parameter servers (--ps-replicas 2), two figures:
#
# 1. Accuracy after a server's death: async, 4 workers, ps:2, mlp, EPOCHS
#    epochs of Fashion-MNIST. An undisturbed replicated run against one
#    whose server 1 is killed (--kill-server, mid-epoch 2 with the default
#    KILL_AT) -- the yardstick is the undisturbed run of the same command;
#    the target is |difference| <= 0.5 point. Every acknowledged push
#    applied once is checked from the servers' and workers' "ps:" lines.
# 2. The cost of replication: samples/s (and so the step time) with
#    --ps-replicas 2 against --ps-replicas 1, sync and async, STEPS steps,
#    interleaved ROUNDS times; the median round of each is kept.
#
#   sh bench/ps_replicas.sh      (EPOCHS=5 KILL_AT=1400 KILL_INDEX=1 STEPS=300
#                                 ROUNDS=3 PARTS="accuracy cost")
#
# KILL_INDEX=0 kills the coordinator (server 0): its standby takes over
# shard 0 and the batches and epochs (ps_coord_repl.c); the check adds that
# every batch of the epochs was computed once (the workers' sums of the
# batch numbers).
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
EPOCHS=${EPOCHS:-5}
KILL_AT=${KILL_AT:-1400}
KILL_INDEX=${KILL_INDEX:-1}
STEPS=${STEPS:-300}
ROUNDS=${ROUNDS:-3}
PARTS=${PARTS:-accuracy cost}
export OPENBLAS_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
ACC="--model mlp --workers 4 --exchange ps:2 --schedule async --epochs $EPOCHS --seed 1 --quiet --ps-replicas 2"

case " $PARTS " in *" accuracy "*)
echo "# accuracy: $DTRAIN train $ACC [--kill-server index=$KILL_INDEX,at-push=$KILL_AT]"
"$DTRAIN" train $ACC --metrics "$TMP/calm.jsonl" >/dev/null 2>"$TMP/calm.err" ||
  { echo "undisturbed run failed: $(tail -1 "$TMP/calm.err")"; exit 1; }
"$DTRAIN" train $ACC --kill-server index=$KILL_INDEX,at-push=$KILL_AT --metrics "$TMP/kill.jsonl" >/dev/null 2>"$TMP/kill.err" ||
  { echo "killed run failed: $(tail -1 "$TMP/kill.err")"; exit 1; }
$PY - "$TMP" "$KILL_INDEX" <<'PYEOF' || exit 1
import json, re, sys
tmp, victim = sys.argv[1], int(sys.argv[2])
def last(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if '"event":"epoch"' in l][-1]
calm, kill = last("calm"), last("kill")
text = open(f"{tmp}/kill.err").read()
assert "(taken over)" in text, "server %d was not taken over" % victim
acked = sum(int(n) for n in re.findall(r"ps: worker \d+: (\d+) pushes acknowledged", text))
applied = [int(m[1]) for m in re.finditer(r"shard \d+ (?:\(taken over\) )?applied (\d+) updates", text)]
dup = sum(int(n) for n in re.findall(r"(\d+) duplicates", text))
diff = 100 * (kill["test_acc"] - calm["test_acc"])
sums = [sum(float(m[i]) for m in re.findall(r"batches computed: sum (\d+), of squares (\d+)", text)) for i in (0, 1)]
once = sums == [sum(range(acked)), sum(b * b for b in range(acked))]
print(f"each batch computed once: {once}")
print(f"undisturbed test_acc {100 * calm['test_acc']:.2f}%, server {victim} killed {100 * kill['test_acc']:.2f}%: "
      f"{diff:+.2f} points (target |d| <= 0.5); pushes acknowledged {acked}, updates applied per shard "
      f"{applied}, duplicates taken once {dup}")
print(json.dumps({"bench": "ps_replicas_accuracy", "victim": victim, "once": once,
                  "undisturbed": calm["test_acc"], "killed": kill["test_acc"],
                  "points": round(diff, 2), "acked": acked, "applied": applied, "duplicates": dup}))
assert all(a == acked for a in applied), (acked, applied)
assert once, ("batches computed (sum, squares)", sums)
PYEOF
;; esac

case " $PARTS " in *" cost "*) ;; *) exit 0 ;; esac
COST="--model mlp --workers 4 --exchange ps:2 --max-steps $STEPS --epochs 1 --seed 1 --quiet"
echo "# cost: $DTRAIN train $COST --schedule S --ps-replicas R   (median of $ROUNDS interleaved rounds)"
printf "%-8s %16s %16s %10s\n" schedule "R=1 samples/s" "R=2 samples/s" "R=2 / R=1"
for s in sync async; do
  for r in $(seq "$ROUNDS"); do
    for R in 1 2; do
      "$DTRAIN" train $COST --schedule $s --ps-replicas $R --metrics "$TMP/$s.$R.$r.jsonl" >/dev/null 2>"$TMP/err" ||
        { echo "$s --ps-replicas $R: failed: $(tail -1 "$TMP/err")"; exit 1; }
    done
  done
  $PY - "$TMP" "$s" "$ROUNDS" <<'PYEOF'
import json, statistics, sys
tmp, s, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def sps(R, r): return [json.loads(l) for l in open(f"{tmp}/{s}.{R}.{r}.jsonl") if '"event":"epoch"' in l][0]["samples_per_sec"]
one = statistics.median(sps(1, r) for r in range(1, rounds + 1))
two = statistics.median(sps(2, r) for r in range(1, rounds + 1))
print(f"{s:<8} {one:16.0f} {two:16.0f} {two / one:9.2f}x")
print(json.dumps({"bench": "ps_replicas_cost", "schedule": s, "replicas_1": round(one), "replicas_2": round(two),
                  "ratio": round(two / one, 3), "step_time_ratio": round(one / two, 3)}))
PYEOF
done
