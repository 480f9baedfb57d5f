#!/bin/sh
# End-to-end checks of what a hostile user found (issue 23): crashes under
# failure, outputs that must never clobber what is not dtrain's own,
# divergence, write errors, hangs past --comm-timeout, signals.
. tests/lib.sh
SYN="--data synthetic --quiet"
TINY="$TMP/tiny"
make_small_fashion "$TINY" 256 128
SMALLQ="--data $TINY --quiet"

# ---- a failing rank must not free what the others still use --------------
# rank 1 is 1000x slower, so the others time out in a barrier and fail
# while it still pushes into their parameters (shared sync) or reads their
# buffers (allreduce:shm): a use-after-free crash (exit 139) before.
# The ranks that time out fail the world before their teardown (driver_run),
# so the straggler's 1000x sleep ends with them: allreduce:shm's ran out
# (9-15 s) while its peers waited in the table's teardown.
for ex in shared allreduce:shm; do
  for i in 1 2; do
    t0=$(date +%s)
    expect_error "straggler_timeout_no_crash_${ex}_$i" 1 "timed out after 1 s" -- \
      "$DTRAIN" train $SYN --max-steps 60 --workers 3 --exchange $ex \
      --straggler rank=1,slowdown=1000 --comm-timeout 1
    check "straggler_timeout_ends_soon_${ex}_$i" test $(($(date +%s) - t0)) -lt 8
  done
done

# ---- outputs: only regular files dtrain wrote itself are replaced ----------
# (as root, --checkpoint /dev/null used to replace /dev/null with a file)
echo "a user's notes" >"$TMP/notes.txt"
ln -s "$TMP/notes.txt" "$TMP/link.st"
mkfifo "$TMP/fifo"
mkdir "$TMP/folder"
# a device node of our own (the null device's numbers), never /dev/null
# itself: a regression must not replace the machine's
if mknod "$TMP/nulldev" c 1 3 2>/dev/null; then
  expect_error output_device_refused 2 "nulldev: exists and is a device" -- "$DTRAIN" train $SMALLQ --max-steps 2 --checkpoint "$TMP/nulldev"
  check output_device_kept test -c "$TMP/nulldev"
else
  echo "SKIP output_device_refused: mknod needs root"
fi
expect_error output_symlink_refused 2 "link.st: exists and is a symbolic link" -- "$DTRAIN" train $SMALLQ --max-steps 2 --checkpoint "$TMP/link.st"
check output_symlink_kept test -L "$TMP/link.st"
expect_error output_fifo_refused 2 "fifo: exists and is a pipe" -- timeout 60 "$DTRAIN" train $SMALLQ --max-steps 2 --metrics "$TMP/fifo"
expect_error output_folder_refused 2 "folder: exists and is a folder" -- "$DTRAIN" train $SMALLQ --max-steps 2 --checkpoint "$TMP/folder"
expect_error output_foreign_checkpoint_refused 2 "notes.txt: exists and is not dtrain's own output" -- "$DTRAIN" train $SMALLQ --max-steps 2 --checkpoint "$TMP/notes.txt"
expect_error output_foreign_metrics_refused 2 "notes.txt: exists and is not dtrain's own output" -- "$DTRAIN" train $SMALLQ --max-steps 2 --metrics "$TMP/notes.txt"
check output_foreign_kept grep -q "a user's notes" "$TMP/notes.txt"
expect_error output_same_twice 2 "name the same file" -- "$DTRAIN" train $SMALLQ --max-steps 2 --checkpoint "$TMP/o.out" --metrics "$TMP/./o.out"
"$DTRAIN" train $SMALLQ --max-steps 2 --checkpoint "$TMP/own.st" --metrics "$TMP/own.jsonl" >/dev/null
check output_own_replaced sh -c "\"$DTRAIN\" train $SMALLQ --max-steps 2 --checkpoint \"$TMP/own.st\" --metrics \"$TMP/own.jsonl\" >/dev/null"
expect_error output_metrics_over_resume 2 "own.st: exists and is not dtrain.s own output" -- "$DTRAIN" train $SMALLQ --epochs 2 --max-steps 4 --resume "$TMP/own.st" --metrics "$TMP/own.st"
check output_no_temporaries sh -c "! ls '$TMP' | grep -q tmp"
expect_error bench_json_foreign_refused 1 "notes.txt: exists and is not dtrain's own output" -- "$DTRAIN" bench allreduce --workers 2 --max-bytes 4096 --json "$TMP/notes.txt"

# ---- outputs get the mode a plain create of a new file gets: 0666 & ~umask --
# (a checkpoint, metrics, --checkpoint-dir shards and manifest, bench --json;
# the folder 0777 & ~umask), also over an earlier output or a leftover
# PATH.dtrain-tmp written under another umask, whose mode is not kept
# (they kept 0600 after a run under umask 077)
P="$TMP/perm"
mkdir "$P"
outputs() { # UMASK: one run of each kind that writes outputs, under UMASK
  (umask "$1"
   "$DTRAIN" train $SMALLQ --max-steps 2 --checkpoint "$P/c.st" --metrics "$P/m.jsonl" >/dev/null &&
   "$DTRAIN" train $SMALLQ --max-steps 2 --workers 2 --exchange ps:1 --checkpoint-dir "$P/shards" --metrics "$P/ps.jsonl" >/dev/null &&
   "$DTRAIN" bench allreduce --workers 2 --max-bytes 4096 --algo ring --json "$P/b.json" >/dev/null)
}
modes() { # FILE-MODE FOLDER-MODE: every output has these (else the first that differs in $TMP/perm.out)
  for f in "$P/c.st" "$P/m.jsonl" "$P/ps.jsonl" "$P/b.json" "$P"/shards/* "$P/shards"; do
    want=$1; [ -d "$f" ] && want=$2
    [ "$(stat -c %a "$f")" = "$want" ] || { echo "${f#$P/} has mode $(stat -c %a "$f"), expected $want" >"$TMP/perm.out"; return 1; }
  done
  [ "$(ls "$P"/shards | grep -c safetensors)" -ge 1 ] && [ -f "$P/shards/manifest.json" ] || { ls -R "$P" >"$TMP/perm.out"; return 1; }
}
perm_case() { # NAME UMASK FILE-MODE FOLDER-MODE
  if ! outputs "$2" 2>"$TMP/perm.out"; then fail "$1" "a run failed: $(tail -c 300 "$TMP/perm.out")"
  elif modes "$3" "$4"; then pass "$1"; else fail "$1" "$(cat "$TMP/perm.out")"; fi
}
perm_case outputs_mode_umask_022 022 644 755
rm -rf "$P"/*
perm_case outputs_mode_umask_077 077 600 700
perm_case outputs_mode_umask_022_over_077_outputs 022 644 700
(umask 077; : >"$P/c.st.dtrain-tmp"; : >"$P/shards/manifest.json.dtrain-tmp")
perm_case outputs_mode_umask_022_over_077_temporaries 022 644 700
check outputs_mode_no_temporaries sh -c "! ls -R '$P' | grep -q dtrain-tmp"

# ---- divergence: never written over the last good checkpoint --------------
"$DTRAIN" train $SMALLQ --epochs 1 --checkpoint "$TMP/good.st" --metrics "$TMP/good.jsonl" >/dev/null
cp "$TMP/good.st" "$TMP/good.orig"
expect_error diverged_loss_stops 1 "epoch 2: the train loss is .* (above --max-loss): training diverged; .*good.st keeps the last good epoch" -- \
  "$DTRAIN" train $SMALLQ --epochs 2 --resume "$TMP/good.st" --checkpoint "$TMP/good.st" --metrics "$TMP/good.jsonl" --max-loss 0.01
check diverged_checkpoint_kept cmp -s "$TMP/good.st" "$TMP/good.orig"
# every line of the metrics file is JSON (no NaN, no half line)
jsonl_ok() { $PY -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$1" 2>/dev/null; }
check diverged_metrics_valid sh -c "$(printf '%s' "$PY -c \"import json,sys; L=[json.loads(l) for l in open(sys.argv[1])]; assert L[-1]['event']=='diverged'\" '$TMP/good.jsonl'")"
for opt in adam rmsprop sgd; do
  expect_error "diverged_${opt}_huge_lr_fails" 1 "diverged\|training loss is NaN" -- \
    "$DTRAIN" train $SMALLQ --epochs 2 --optimizer $opt --lr 1e6 --checkpoint "$TMP/$opt.st" --metrics "$TMP/$opt.jsonl"
  check "diverged_${opt}_no_checkpoint" test ! -e "$TMP/$opt.st"
  check "diverged_${opt}_metrics_valid" jsonl_ok "$TMP/$opt.jsonl"
done
# a checkpoint holding a NaN is refused on --resume
$PY - "$TMP/good.orig" "$TMP/nan.st" <<'PYEOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = next(k for k in h if k != "__metadata__")
off = 8 + n + h[name]["data_offsets"][0]
b[off + 4:off + 8] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(bytes(b))
PYEOF
expect_error resume_refuses_nan 1 "nan.st: tensor '.*' holds NaN or infinity" -- "$DTRAIN" train $SMALLQ --epochs 2 --resume "$TMP/nan.st"

# ---- metrics write errors are run-time errors; the file stays whole lines --
# a file-size limit stands in for a full disk (SIGXFSZ ignored: write fails with EFBIG)
expect_error metrics_write_error 1 "--metrics .*m.jsonl: write failed" -- \
  sh -c "trap '' XFSZ; ulimit -f 1; exec \"$DTRAIN\" train --data $TINY --quiet --epochs 4 --metrics \"$TMP/m.jsonl\""
check metrics_write_error_whole_lines jsonl_ok "$TMP/m.jsonl"

# ---- emulated waits obey --comm-timeout (latency=1e30s used to hang; such
# values are refused now, e2e_options.sh): the largest latency and smallest
# bandwidth accepted, each longer than the timeout
for net in latency=10s bandwidth=1kbit; do
  expect_error "emulated_${net%%=*}_times_out" 1 "past the 2 s timeout" -- \
    timeout 120 "$DTRAIN" train $SMALLQ --max-steps 3 --workers 2 --net $net --comm-timeout 2
done
# a straggler's emulated compute is cut short once the others have failed
t0=$(date +%s)
expect_error straggler_sleep_cut_short 1 "timed out after 1 s" -- \
  timeout 120 "$DTRAIN" train $SMALLQ --model lenet --batch 128 --epochs 20 --workers 2 --straggler rank=1,slowdown=1000 --comm-timeout 1
check straggler_sleep_cut_short_fast test $(( $(date +%s) - t0 )) -lt 30

# ---- a dead or stopped rank ends every family within --comm-timeout ---------
# ends_soon NAME LIMIT -- COMMAND...: the command ends within LIMIT seconds,
# and unless it succeeded (an asynchronous schedule may write the rank off
# and finish), its last stderr line names a rank.
ends_soon() {
  name=$1 limit=$2; shift 3
  t0=$(date +%s)
  timeout $((limit + 60)) "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
  dt=$(( $(date +%s) - t0 ))
  if [ "$dt" -gt "$limit" ]; then fail "$name" "took ${dt} s (limit $limit), exit $rc"; return; fi
  if [ "$rc" -ne 0 ] && ! grep -v "^\[\|^---\|^ \|^$\|^MPI_ABORT\|^with errorcode\|^NOTE\|^You may\|^exactly" "$TMP/err" | tail -1 | grep -q "rank"; then
    fail "$name" "exit $rc without naming the rank: $(tail -c 300 "$TMP/err")"; return
  fi
  pass "$name"
}
STALL="--model lenet --batch 128 --epochs 50 --straggler rank=1,slowdown=1000 --comm-timeout 1"
for fam in "allreduce --exchange allreduce:ring" "ps_sync --exchange ps:1" \
           "ps_async --exchange ps:1 --schedule async" "local_sgd --preset local-sgd" \
           "d_psgd --preset d-psgd" "easgd --preset easgd" "gosgd --preset gosgd" \
           "tree_easgd --preset tree-easgd" "ad_psgd --preset ad-psgd" "deepspark --preset deepspark" \
           "mpca_sgd --preset mpca-sgd"; do
  set -- $fam; name=$1; shift
  ends_soon "stalled_rank_ends_local_$name" 40 -- "$DTRAIN" train $SMALLQ --workers 3 $STALL "$@"
done
# the peer mailbox's end-of-epoch drain names the rank whose count has not
# come (AD-PSGD: rank 1, the only active worker, is the straggler)
"$DTRAIN" train $SMALLQ --workers 3 $STALL --preset ad-psgd >/dev/null 2>"$TMP/err"
check stalled_rank_named_by_the_drain grep -q "drain of peer models: no progress for 1 s (rank 1 has not reached the end of the epoch" "$TMP/err"
# mpi: one process is stopped (SIGSTOP) mid-run
stop_one_rank() { # NAME [CONT-AFTER-SECONDS] -- dtrain options
  name=$1; cont=0; [ "$2" != "--" ] && { cont=$2; shift; }; shift 2
  t0=$(date +%s)
  rm -f "$TMP/stop.jsonl"
  $MPIRUN -np 4 "$DTRAIN" train --comm mpi --quiet --comm-timeout 2 --metrics "$TMP/stop.jsonl" "$@" >"$TMP/out" 2>"$TMP/err" &
  mp=$!
  # mid-run: once the first epoch is reported (the data is loaded before
  # MPI starts, and a rank stopped inside MPI_Init stops its peers there,
  # where no timeout reaches)
  i=0
  while [ ! -s "$TMP/stop.jsonl" ] && [ $i -lt 120 ]; do sleep 0.5; i=$((i + 1)); done
  victim=$(pgrep -P $mp | sort -n | tail -1)
  [ -n "$victim" ] && kill -STOP "$victim"
  [ -n "$victim" ] && [ "$cont" != 0 ] && { sleep "$cont"; kill -CONT "$victim"; }
  # the watchdog's sleep outlives `kill $dog` (its shell): off the script's
  # output, or the runner's pipe stays open 100 s after the script ends
  ( sleep 100; kill -9 $mp 2>/dev/null ) >/dev/null 2>&1 & dog=$!
  wait $mp; rc=$?
  kill $dog 2>/dev/null
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
  dt=$(( $(date +%s) - t0 ))
  if [ "$dt" -gt 60 ]; then fail "$name" "took ${dt} s, exit $rc"
  elif [ "$rc" -ne 0 ] && ! grep -q "^rank [0-9]*: " "$TMP/err"; then fail "$name" "exit $rc, no rank named: $(tail -c 300 "$TMP/err")"
  else pass "$name"; fi
}
if have_mpi; then
  # one of each family (GoSGD stands for the peer-mailbox methods: TreeEASGD
  # too; AD-PSGD for its own wait on a reply)
  for fam in "allreduce --exchange allreduce:ring" "ps_sync --exchange ps:1" \
             "ps_async --exchange ps:1 --schedule async" "local_sgd --preset local-sgd" \
             "gosgd --preset gosgd" "ad_psgd --preset ad-psgd"; do
    set -- $fam; name=$1; shift
    # tiny epochs without end: the first is reported at once, and the run
    # cannot finish before the stop
    stop_one_rank "stopped_rank_ends_mpi_$name" -- --data "$TINY" --epochs 100000 "$@"
  done
  # a worker that stalls past the timeout and comes back: the job still ends
  # (it used to finish training and then never exit); long epochs, so that
  # the stall falls inside the second
  stop_one_rank stalled_worker_back_ends_mpi_ps_async 4 -- --data synthetic --exchange ps:1 --schedule async --epochs 2
fi

# ---- SIGINT and SIGTERM: one line, what is kept, nothing half-written -------
# (tiny epochs: a checkpoint is being written most of the time)
for sig in INT TERM; do
  for w in 1 2; do
    rm -f "$TMP/sig.st" "$TMP/sig.jsonl"
    "$DTRAIN" train --data "$TINY" --quiet --workers $w --epochs 100000 --checkpoint "$TMP/sig.st" --metrics "$TMP/sig.jsonl" >/dev/null 2>"$TMP/sig.err" &
    p=$!
    sleep 3
    kill -$sig $p
    wait $p; rc=$?
    want=$([ $sig = INT ] && echo 130 || echo 143)
    check "signal_${sig}_${w}w_exit_$want" test "$rc" -eq "$want"
    check "signal_${sig}_${w}w_one_line" sh -c "[ \$(grep -c . '$TMP/sig.err') -eq 1 ] && grep -q 'interrupted by SIG$sig at step .*; the checkpoint holds the last finished epoch; the metrics file ends' '$TMP/sig.err'"
    check "signal_${sig}_${w}w_no_temporaries" sh -c "! ls '$TMP' | grep -q 'sig.st.dtrain-tmp'"
    check "signal_${sig}_${w}w_metrics_valid" jsonl_ok "$TMP/sig.jsonl"
    # the checkpoint left behind resumes
    e=$($PY -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['epoch'] + 1)" "$TMP/sig.jsonl")
    check "signal_${sig}_${w}w_checkpoint_resumes" sh -c "\"$DTRAIN\" train --data '$TINY' --quiet --workers $w --epochs $e --resume '$TMP/sig.st' >/dev/null"
  done
done
# a second signal does not wait for the step: it ends at once, removing the temporary file
"$DTRAIN" train --data "$TINY" --quiet --epochs 100000 --checkpoint "$TMP/sig2.st" >/dev/null 2>"$TMP/sig.err" &
p=$!
sleep 3
kill -INT $p; kill -INT $p
wait $p; rc=$?
check signal_twice_exit_130 test "$rc" -eq 130
check signal_twice_no_temporaries sh -c "! ls '$TMP' | grep -q 'sig2.st.dtrain-tmp'"

# ---- a flatten of a flatten of the input (libFuzzer: segfault) --------------
printf 'flatten\nflatten\ndense units=10\n' >"$TMP/ff.model"
check flatten_of_flatten_trains sh -c "\"$DTRAIN\" train $SMALLQ --model '$TMP/ff.model' --max-steps 3 >/dev/null"
printf 'input shape=1x28x28\nflatten\nflatten\nflatten\ndense units=16\nrelu\ndense units=10\nflatten\n' >"$TMP/fff.model"
check flatten_chain_and_last_flatten_train sh -c "\"$DTRAIN\" train $SMALLQ --model '$TMP/fff.model' --max-steps 3 >/dev/null"
