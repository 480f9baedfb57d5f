#!/bin/sh
# End-to-end checks of what a hostile user found (issue 23): crashes under
# failure, outputs that must never clobber what is not dtrain's own,
# divergence, write errors, hangs past --comm-timeout, signals.
. tests/lib.sh
SYN="--data synthetic --quiet"

# ---- a failing rank must not free what the others still use --------------
# rank 1 is 1000x slower, so the others time out in a barrier and fail
# while it still pushes into their parameters (shared sync) or reads their
# buffers (allreduce:shm): a use-after-free crash (exit 139) before.
for ex in shared allreduce:shm; do
  for i in 1 2; do
    expect_error "straggler_timeout_no_crash_${ex}_$i" 1 "timed out after 1 s" -- \
      "$DTRAIN" train $SYN --max-steps 60 --workers 3 --exchange $ex \
      --straggler rank=1,slowdown=1000 --comm-timeout 1
  done
done

# ---- outputs: only regular files dtrain wrote itself are replaced ----------
# (as root, --checkpoint /dev/null used to replace /dev/null with a file)
echo "a user's notes" >"$TMP/notes.txt"
ln -s "$TMP/notes.txt" "$TMP/link.st"
mkfifo "$TMP/fifo"
mkdir "$TMP/folder"
expect_error output_device_refused 2 "/dev/null: exists and is a device" -- "$DTRAIN" train $SYN --max-steps 2 --checkpoint /dev/null
check output_device_kept test -c /dev/null
expect_error output_symlink_refused 2 "link.st: exists and is a symbolic link" -- "$DTRAIN" train $SYN --max-steps 2 --checkpoint "$TMP/link.st"
check output_symlink_kept test -L "$TMP/link.st"
expect_error output_fifo_refused 2 "fifo: exists and is a pipe" -- "$DTRAIN" train $SYN --max-steps 2 --metrics "$TMP/fifo"
expect_error output_folder_refused 2 "folder: exists and is a folder" -- "$DTRAIN" train $SYN --max-steps 2 --checkpoint "$TMP/folder"
expect_error output_foreign_checkpoint_refused 2 "notes.txt: exists and is not dtrain's own output" -- "$DTRAIN" train $SYN --max-steps 2 --checkpoint "$TMP/notes.txt"
expect_error output_foreign_metrics_refused 2 "notes.txt: exists and is not dtrain's own output" -- "$DTRAIN" train $SYN --max-steps 2 --metrics "$TMP/notes.txt"
check output_foreign_kept grep -q "a user's notes" "$TMP/notes.txt"
expect_error output_same_twice 2 "name the same file" -- "$DTRAIN" train $SYN --max-steps 2 --checkpoint "$TMP/o.out" --metrics "$TMP/./o.out"
"$DTRAIN" train $SYN --max-steps 2 --checkpoint "$TMP/own.st" --metrics "$TMP/own.jsonl" >/dev/null
check output_own_replaced sh -c "\"$DTRAIN\" train $SYN --max-steps 2 --checkpoint \"$TMP/own.st\" --metrics \"$TMP/own.jsonl\" >/dev/null"
expect_error output_metrics_over_resume 2 "own.st: exists and is not dtrain.s own output" -- "$DTRAIN" train $SYN --epochs 2 --max-steps 4 --resume "$TMP/own.st" --metrics "$TMP/own.st"
check output_no_temporaries sh -c "! ls '$TMP' | grep -q tmp"
expect_error bench_json_foreign_refused 1 "notes.txt: exists and is not dtrain's own output" -- "$DTRAIN" bench allreduce --workers 2 --max-bytes 4096 --json "$TMP/notes.txt"
