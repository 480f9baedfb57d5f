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
