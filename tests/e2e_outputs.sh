#!/bin/sh
# End-to-end checks of what runs may write (issue 37): --checkpoint-dir and
# compare's folder replace only dtrain's own files, checked before anything
# runs; compare's options read as train's do.
. tests/lib.sh
SYN="--data synthetic --quiet"
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
