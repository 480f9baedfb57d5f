#!/bin/sh
# End-to-end checks of what runs may write (issue 37): --checkpoint-dir and
# compare's folder replace only dtrain's own files, checked before anything
# runs; compare's options read as train's do.
. tests/lib.sh
TINY="$TMP/tiny"
make_small_fashion "$TINY" 256 128
SYN="--data $TINY --quiet"
PS="$SYN --max-steps 2 --workers 2 --exchange ps:1"

# mpi_refused NAME TEXT -- COMMAND...: exit 2 with TEXT on stderr (every
# rank of mpirun prints the line, and mpirun adds its own)
mpi_refused() {
  name=$1 text=$2; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
  if [ "$rc" -ne 2 ]; then fail "$name" "exit $rc, expected 2: $(head -c 300 "$TMP/err")"
  elif ! grep -q -- "$text" "$TMP/err"; then fail "$name" "stderr lacks '$text': $(head -c 300 "$TMP/err")"
  else pass "$name"; fi
}

# ---- --checkpoint-dir: --checkpoint's rule for every file of the folder ------
# (a user's manifest.json and shard file were replaced, exit 0; a file,
# /dev/null and symlinks were found only after training, exit 1)
C="$TMP/ckdir"
mkdir -p "$C/manifest" "$C/shard" "$C/link" "$C/buffers"
echo '{"my":"notes"}' >"$C/manifest/manifest.json"
echo "a user's shard" >"$C/shard/shard-0-of-2.e1.safetensors"
echo "a user's buffers" >"$C/buffers/buffers.e1.safetensors"
echo "a user's notes" >"$C/notes.txt"
ln -s "$C/notes.txt" "$C/link/manifest.json"
expect_error ckdir_foreign_manifest_refused 2 "manifest/manifest.json: exists and is not dtrain's own output" -- \
  "$DTRAIN" train $PS --checkpoint-dir "$C/manifest"
check ckdir_foreign_manifest_kept grep -q '"my"' "$C/manifest/manifest.json"
expect_error ckdir_foreign_shard_refused 2 "shard-0-of-2.e1.safetensors: exists and is not dtrain's own output" -- \
  "$DTRAIN" train $PS --exchange ps:2 --checkpoint-dir "$C/shard"
check ckdir_foreign_shard_kept grep -q "user's shard" "$C/shard/shard-0-of-2.e1.safetensors"
expect_error ckdir_foreign_buffers_refused 2 "buffers.e1.safetensors: exists and is not dtrain's own output" -- \
  "$DTRAIN" train $PS --checkpoint-dir "$C/buffers"
expect_error ckdir_symlink_refused 2 "link/manifest.json: exists and is a symbolic link" -- \
  "$DTRAIN" train $PS --checkpoint-dir "$C/link"
check ckdir_symlink_kept test -L "$C/link/manifest.json"
expect_error ckdir_file_refused 2 "notes.txt: exists and is a file; --checkpoint-dir takes a folder" -- \
  "$DTRAIN" train $PS --checkpoint-dir "$C/notes.txt"
expect_error ckdir_dev_null_refused 2 "/dev/null: exists and is a device" -- \
  "$DTRAIN" train $PS --checkpoint-dir /dev/null
expect_error ckdir_no_parent_refused 2 "cannot be written: the folder" -- \
  "$DTRAIN" train $PS --checkpoint-dir "$C/none/shards"
# dtrain's own folder (shards, manifest, batch-norm buffers) is replaced,
# also through a symlink to it
printf 'conv2d filters=2 kernel=3 pad=1\nbatchnorm\nrelu\nflatten\ndense units=10\n' >"$TMP/bn.model"
check ckdir_own_replaced sh -c "\"$DTRAIN\" train $PS --model '$TMP/bn.model' --checkpoint-dir '$C/own' >/dev/null &&
  \"$DTRAIN\" train $PS --model '$TMP/bn.model' --checkpoint-dir '$C/own' >/dev/null && ln -s '$C/own' '$C/own.link' &&
  \"$DTRAIN\" train $PS --model '$TMP/bn.model' --checkpoint-dir '$C/own.link' >/dev/null && ls '$C/own' | grep -q buffers.e1"
if have_mpi; then
  mpi_refused ckdir_foreign_manifest_refused_mpi "manifest/manifest.json: exists and is not dtrain's own output" -- \
    $MPIRUN -np 3 "$DTRAIN" train --comm mpi $PS --checkpoint-dir "$C/manifest"
  check ckdir_foreign_manifest_kept_mpi grep -q '"my"' "$C/manifest/manifest.json"
  mpi_refused ckdir_dev_null_refused_mpi "/dev/null: exists and is a device" -- \
    $MPIRUN -np 3 "$DTRAIN" train --comm mpi $PS --checkpoint-dir /dev/null
fi

# ---- compare --force: the report's own files are checked too, before any run
# (a user's report.html and report.json were replaced, exit 0; a failed
# --force left the marker, so the next comparison took the folder as its own)
CQ="--data $TINY --workers 2 --max-steps 2"
F="$TMP/force"
mkdir -p "$F/html" "$F/json" "$F/fifo" "$F/runslink" "$F/runsfile/runs" "$F/elsewhere"
echo "<p>my page</p>" >"$F/html/report.html"
echo '{"mine":1}' >"$F/json/report.json"
ln -s "$F/json/report.json" "$F/elsewhere/report.json"
mkfifo "$F/fifo/report.html"
ln -s "$F/elsewhere" "$F/runslink/runs"
echo '{"mine":1}' >"$F/runsfile/runs/horovod-seed1.jsonl"
expect_error cmp_force_foreign_html_refused 2 "html/report.html: exists and is not dtrain's own output" -- \
  $DTRAIN compare --presets horovod $CQ --out "$F/html" --force
check cmp_force_foreign_html_kept grep -q "my page" "$F/html/report.html"
check cmp_force_refused_writes_nothing sh -c "[ \"\$(ls -A '$F/html')\" = report.html ]"
expect_error cmp_force_refused_no_marker 2 "is not an earlier report (add --force" -- \
  $DTRAIN compare --presets horovod $CQ --out "$F/html"
expect_error cmp_force_foreign_json_refused 2 "json/report.json: exists and is not dtrain's own output" -- \
  $DTRAIN compare --presets horovod $CQ --out "$F/json" --force
check cmp_force_foreign_json_kept grep -q mine "$F/json/report.json"
expect_error cmp_force_json_link_refused 2 "elsewhere/report.json: exists and is a symbolic link" -- \
  $DTRAIN compare --presets horovod $CQ --out "$F/elsewhere" --force
expect_error cmp_force_html_pipe_refused 2 "report.html: exists and is a pipe" -- \
  timeout 60 $DTRAIN compare --presets horovod $CQ --out "$F/fifo" --force
expect_error cmp_force_runs_link_refused 2 "runs exists and is a symbolic link" -- \
  $DTRAIN compare --presets horovod $CQ --out "$F/runslink" --force
expect_error cmp_force_foreign_run_refused 2 "horovod-seed1.jsonl: exists and is not dtrain's own output" -- \
  $DTRAIN compare --presets horovod $CQ --out "$F/runsfile" --force
check cmp_force_foreign_run_no_marker test ! -e "$F/runsfile/.dtrain-compare"

# ---- an interrupted comparison into an earlier report leaves no old report
# beside its partly rewritten runs (the earlier one is removed before the first run)
mkdir "$TMP/real" && ln -s "$TMP/real" "$TMP/out.link"
R="$TMP/out.link"
$DTRAIN compare --presets horovod $CQ --out "$R" >/dev/null 2>&1
# (a symlink to a folder is that folder, not "not a folder")
check cmp_out_link_to_folder sh -c "[ $? -eq 0 ] && [ -s '$TMP/real/report.json' ]"
# (another preset: a runs/ file of its own, made once the handler is set)
$DTRAIN compare --presets pytorch-ddp --data $TINY --workers 2 --epochs 100000 --out "$R" >/dev/null 2>"$TMP/int.err" &
pid=$!
for i in $(seq 1 300); do
  [ -e "$R/runs/pytorch-ddp-seed1.jsonl" ] && break
  sleep 0.1
done
kill -INT $pid; wait $pid; rc=$?
check cmp_interrupted_no_old_report sh -c "[ $rc -eq 130 ] && [ ! -e '$R/report.json' ] && [ ! -e '$R/report.html' ] && [ -e '$R/.dtrain-compare' ]"

# ---- compare's options read as train's ----------------------------------------
# a later --presets overrides (was "'B' is named twice" or a check of A)
$DTRAIN compare --presets horovod --presets local-sgd --tau 2 $CQ --out "$TMP/ovr" >/dev/null 2>"$TMP/ovr.err"
check cmp_presets_later_overrides sh -c "[ $? -eq 0 ] && [ \"\$(ls '$TMP/ovr/runs')\" = local-sgd-seed1.jsonl ]"
expect_error cmp_presets_trailing_comma 2 "--presets horovod,: an empty name" -- $DTRAIN compare --presets horovod, $CQ --out "$TMP/none"
expect_error cmp_presets_double_comma 2 "an empty name" -- $DTRAIN compare --presets horovod,,petuum $CQ --out "$TMP/none"
expect_error cmp_target_acc_zero 2 "option --target-acc: 0 is out of range (expected a fraction, 0 < X <= 1)" -- \
  $DTRAIN compare --presets horovod --target-acc 0 --out "$TMP/none"
expect_error cmp_target_acc_negative 2 "option --target-acc: -0.1 is out of range (expected a fraction, 0 < X <= 1)" -- \
  $DTRAIN compare --presets horovod --target-acc -0.1 --out "$TMP/none"
expect_error cmp_empty_value 2 "option --out: empty value" -- $DTRAIN compare --presets horovod --out=
expect_error cmp_missing_value 2 "option --presets: missing value (found the option --out" -- \
  $DTRAIN compare --presets --out x
expect_error train_empty_value_same_words 2 "option --data: empty value" -- $DTRAIN train --data=
# on/off switches take on or off, as the help says (1 was taken by some)
for o in sync-bn vertical-sync overlap; do
  expect_error "switch_${o}_one_refused" 2 "option --$o: '1' (expected on or off)" -- $DTRAIN train $SYN --$o 1
done
# the number's grammar: "1 stage", "1 layer", "1 filter"
refused() { # NAME TEXT -- COMMAND...: fails, saying TEXT (whatever the exit code)
  name=$1 text=$2; shift 3
  if "$@" >"$TMP/out" 2>"$TMP/err"; then fail "$name" "exit 0"
  elif grep -q -- "$text" "$TMP/err"; then pass "$name"
  else fail "$name" "stderr lacks '$text': $(head -c 300 "$TMP/err")"; fi
}
printf 'dense units=10\n' >"$TMP/one.model"
printf 'conv2d filters=1 kernel=3\nrelu\nconv2d filters=1 kernel=3\nflatten\ndense units=10\n' >"$TMP/f1.model"
refused plural_one_stage "the partition names 1 stage (give 2)" -- $DTRAIN train $SYN --max-steps 1 --workers 2 --pp 2 --partition 0
refused plural_one_layer "the model has 1 layer that can start a stage" -- $DTRAIN train $SYN --max-steps 1 --workers 2 --pp 2 --model "$TMP/one.model"
refused plural_one_layer_partition "the model has 1 layer (0..0)" -- $DTRAIN train $SYN --max-steps 1 --workers 2 --pp 2 --partition 0,5 --model "$TMP/one.model"
refused plural_one_filter "has 1 filter, too few" -- $DTRAIN train $SYN --max-steps 1 --workers 2 --tp 2 --model "$TMP/f1.model"
