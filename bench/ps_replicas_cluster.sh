#!/bin/sh
# Replicated parameter servers on the namespace cluster (scripts/cluster.sh,
# root): 2 hosts x 3 ranks, workers 0-3 and servers 4-5 (both on host 1),
# TCP between the hosts. Server 1 is killed (--kill-server: SIGKILL in its
# process) mid-epoch; the run must finish its epochs with every
# acknowledged push applied once on each shard's surviving copy.
#
# Open MPI 4.1.4 here: with --enable-recovery the ranks left train on,
# pass their own end barrier and return from MPI_Finalize, but on a job of
# several hosts (one daemon each) mpirun itself then never exits -- the
# same with an 8-line C program whose rank 2 of 4 raises SIGKILL. So the
# script waits for the run's last lines (the "done" metrics line and every
# rank's count), then stops mpirun, and the cluster is taken down.
#   sh bench/ps_replicas_cluster.sh     (SCHEDULE=async KILL_AT=25 EPOCHS=2)
DTRAIN=$(cd "$(dirname "$0")/.." && pwd)/${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
SCHEDULE=${SCHEDULE:-async}
KILL_AT=${KILL_AT:-25}
EPOCHS=${EPOCHS:-2}
NAME=rp$$
TMP=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)"; exit 1; }
mkdir -p "$TMP/small"
$PY - "$TMP/small" <<'PYEOF'   # the first 2048 / 512 samples (tests/lib.sh's make_small_fashion)
import gzip, os, sys
d, src = sys.argv[1], "/usr/share/datasets/fashion-mnist"
for split, n in (("train", 2048), ("t10k", 512)):
    for kind, hdr, per in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
        b = gzip.open(f"{src}/{split}-{kind}-ubyte.gz").read()
        head = bytearray(b[:hdr]); head[4:8] = n.to_bytes(4, "big")
        open(os.path.join(d, f"{split}-{kind}-ubyte"), "wb").write(bytes(head) + b[hdr:hdr + n * per])
PYEOF
RUN="$DTRAIN train --comm mpi --data $TMP/small --workers 4 --exchange ps:2 --schedule $SCHEDULE --epochs $EPOCHS --quiet --ps-replicas 2 --comm-timeout 30 --kill-server index=1,at-push=$KILL_AT --metrics $TMP/m.jsonl"
echo "# scripts/cluster.sh with $NAME 2 -- \$CLUSTER_RUN 3 -- --enable-recovery $RUN"
export RUN TMP
scripts/cluster.sh with "$NAME" 2 -- sh -c '
  $CLUSTER_RUN 3 -- --enable-recovery $RUN >"$TMP/out" 2>"$TMP/err" & mp=$!
  for i in $(seq 240); do
    n=$(grep -c "ps: worker [0-9]*: .* pushes acknowledged\|ps: server [0-9]*: replication" "$TMP/err")
    if [ "$n" -ge 5 ] && grep -q "\"event\":\"done\"" "$TMP/m.jsonl" 2>/dev/null; then break; fi
    kill -0 $mp 2>/dev/null || break
    sleep 0.5
  done
  sleep 2; kill $mp 2>/dev/null; wait $mp 2>/dev/null; exit 0' || { echo "cluster run failed"; exit 1; }
$PY - "$TMP/err" "$TMP/m.jsonl" "$SCHEDULE" <<'PYEOF'
import json, re, sys
text, sched = open(sys.argv[1]).read(), sys.argv[3]
lines = [json.loads(l) for l in open(sys.argv[2])]
assert lines[-1]["event"] == "done", lines[-1]
acked = sum(int(n) for n in re.findall(r"ps: worker \d+: (\d+) pushes acknowledged", text))
shards = [(int(m[2]), int(m[3])) for m in re.finditer(r"shard \d+ (\(taken over\) )?applied (\d+) updates \((\d+) pushes", text)]
assert "(taken over)" in text, "no takeover"
assert all(p == acked for _, p in shards), (acked, shards)
if sched == "async": assert all(u == acked for u, _ in shards), (acked, shards)
acc = [l for l in lines if l["event"] == "epoch"][-1]["test_acc"]
print(f"cluster 2 hosts x 3 ranks, {sched}, server 1 killed at its push: test_acc {100 * acc:.2f}%, "
      f"pushes acknowledged {acked}, per shard (updates, pushes held) {shards}")
print(json.dumps({"bench": "ps_replicas_cluster", "schedule": sched, "acked": acked, "shards": shards, "test_acc": acc}))
PYEOF
