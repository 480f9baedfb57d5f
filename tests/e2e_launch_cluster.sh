#!/bin/sh
# dtrain launch on the namespace cluster (scripts/cluster.sh): 2 hosts x 2
# ranks over real TCP, a rank of host 1 killed (kill -9) at a random
# checkpoint, and in a second run host 1's link cut; launch drops host 1
# and restarts on host 0's 2 ranks; in a third, host 2 is added to the
# hostfile mid-run and the restart after the kill runs on hosts 0 and 2's
# 4 ranks: exit 0, one restart naming the host,
# the weights of a run resumed by hand on 2 (4) workers, bit for bit; nothing
# left running, no namespace left. Needs
# root (CI runs as root); skipped otherwise, and under TSan (no mpi).
# About 60 s (mpirun takes some 2-5 s to start on the cluster, 6 times), over
# what make test may add: it runs only with DTRAIN_LAUNCH_CLUSTER=1.
. tests/lib.sh
if [ -z "$DTRAIN_LAUNCH_CLUSTER" ]; then
  echo "SKIP e2e_launch_cluster.sh: set DTRAIN_LAUNCH_CLUSTER=1 to run it (about 60 s)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1 ||
  ! have_mpi; then
  echo "SKIP e2e_launch_cluster.sh: needs root, ip, unshare and mpirun"
  exit 0
fi
if ! ip netns add "dtprobe$$" 2>"$TMP/probe"; then
  echo "SKIP e2e_launch_cluster.sh: this machine cannot make a network namespace ($(head -c 200 "$TMP/probe"))"
  exit 0
fi
ip netns del "dtprobe$$"
CL="scripts/cluster.sh"
NAME="el$(($$ % 10000))"
cleanup() { $CL down "$NAME" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 256
EVERY=8
RUN="--data $SMALL --batch 16 --seed 3 --quiet --exchange allreduce:ring --epochs 2"
check launch_cluster_up "$CL" up "$NAME" 3
printf '%s slots=2\n%s slots=2\n' "$NAME-h0" "$NAME-h1" >"$TMP/hosts"
# FAULT TAG: kill (rank 2's process, on host 1, kill -9), cut (host 1's
# link down: mpirun finds its daemon unreachable in about 5 s, by the
# cluster's keepalives, before the ranks' --comm-timeout 10 ends them
# with no host named) or grow (host 2 added to the file, then the kill)
cluster_case() {
  fault=$1 tag=$2
  at=$($PY -c "import random; print(random.randrange($EVERY, 40))")
  DTRAIN_MPIRUN="$CL mpirun $NAME" DTRAIN_KNOWN_HOSTS="$NAME-h0 $NAME-h1 $NAME-h2" \
    "$DTRAIN" launch --np 4 --min-np 2 --max-restarts 1 --checkpoint-every $EVERY --hostfile "$TMP/hosts" -- \
    $RUN --comm mpi --comm-timeout 10 --checkpoint "$TMP/$tag.st" --metrics "$TMP/$tag.jsonl" >/dev/null 2>"$TMP/$tag.err" &
  lp=$!
  if [ "$fault" = grow ]; then # a third host appears in the file mid-run
    i=0
    while ! grep -q '"checkpoint"' "$TMP/$tag.jsonl" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    printf '%s slots=2\n' "$NAME-h2" >>"$TMP/hosts"
  fi
  if [ "$fault" != cut ]; then
    $PY tests/launch_kill.py $lp "$TMP/$tag.jsonl" mpi 2 "$at" >/dev/null || fail "${tag}_kill" "no checkpoint at step $at within 60 s"
    line="rank 2 and host $NAME-h1 lost (SIGKILL)"
  else
    i=0
    while ! grep -q '"checkpoint"' "$TMP/$tag.jsonl" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    ip link set "dc${NAME}h1" down
    line="host $NAME-h1 lost (host unreachable)"
  fi
  wait $lp
  rc=$?
  ip link set "dc${NAME}h1" up 2>/dev/null
  if [ $rc -eq 0 ]; then pass "${tag}_exit_0"; else fail "${tag}_exit_0" "exit $rc: $(tail -n 3 "$TMP/$tag.err")"; fi
  w=2; [ "$fault" = grow ] && w=4 # host 1's 2 ranks lost, host 2's 2 joined
  check "${tag}_drops_host" $PY -c "
import json
recs = [json.loads(l) for l in open('$TMP/$tag.jsonl')]
r = [d for d in recs if d['event'] == 'restart']
assert len(r) == 1 and r[0]['lost_host'] == '$NAME-h1' and r[0]['workers'] == $w and r[0]['was_workers'] == 4, r
assert recs[-1]['event'] == 'done' and recs[-1]['epochs'] == 2 and recs[-1]['workers'] == $w, recs[-1]
open('$TMP/$tag.resumed', 'w').write(str(r[0]['resumed_step']))"
  check "${tag}_one_line" grep -q "^dtrain launch: $line; restart 1 of 1 on $w ranks (was 4)" "$TMP/$tag.err"
  s=$(cat "$TMP/$tag.resumed" 2>/dev/null || echo 0)
  "$DTRAIN" train $RUN --workers 4 --checkpoint-every $EVERY --max-steps "$s" --checkpoint "$TMP/$tag.h4" >/dev/null
  "$DTRAIN" train $RUN --workers $w --checkpoint-every $EVERY --resume "$TMP/$tag.h4" --checkpoint "$TMP/$tag.h2" >/dev/null
  check "${tag}_equals_resumed_by_hand_bitwise" cmp -s "$TMP/$tag.st" "$TMP/$tag.h2"
  # host 1's daemon, cut off from mpirun, finds it gone by its keepalive
  i=0
  left() { ip netns pids "dc-$NAME-h0"; ip netns pids "dc-$NAME-h1"; ip netns pids "dc-$NAME-h2"; }
  while [ -n "$(left)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  check "${tag}_nothing_left" [ -z "$(left)" ]
}
cluster_case kill launch_cluster
cluster_case cut launch_cluster_cut
printf '%s slots=2\n%s slots=2\n' "$NAME-h0" "$NAME-h1" >"$TMP/hosts"
cluster_case grow launch_cluster_grow
$CL down "$NAME"
check launch_cluster_down_leaves_nothing sh -c "! ip netns list | grep -q 'dc-$NAME-'"
