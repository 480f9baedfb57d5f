# Shared by the end-to-end scripts: PASS/FAIL lines that tests/run.sh counts.
DTRAIN=${DTRAIN:-build/dtrain}
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/dtrain-e2e.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# Open MPI's own allocations (libmpi and its plugins) are reported by
# LeakSanitizer at exit now and then; leak checks stay on for the rest.
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none -x ASAN_OPTIONS=detect_leaks=0"
# Under ThreadSanitizer the mpi runs are skipped: Open MPI is not
# instrumented, and TSAN reports its own locks (mca_btl_tcp). The threaded
# transport is what TSAN checks.
have_mpi() { [ -z "$TSAN" ] && command -v mpirun >/dev/null 2>&1; }
[ -n "$TSAN" ] && echo "SKIP mpi runs of $(basename "$0"): Open MPI is not built for ThreadSanitizer"
# close A B TOL: two checkpoints' model tensors differ by at most TOL
# (the measured difference is left in $TMP/cmp.out)
close() { $PY tests/ckpt_diff.py "$1" "$2" "$3" >"$TMP/cmp.out" 2>&1; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; }
# check NAME CONDITION-COMMAND...: PASS when the command succeeds
check() { name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
# expect_error NAME EXIT-CODE TEXT -- COMMAND...: the command must exit with
# EXIT-CODE and print exactly one line on stderr containing TEXT
expect_error() {
  name=$1 code=$2 text=$3; shift 4
  "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
  if [ "$rc" -ne "$code" ]; then fail "$name" "exit $rc, expected $code: $(head -c 300 "$TMP/err")"; return; fi
  if ! grep -q -- "$text" "$TMP/err"; then fail "$name" "stderr lacks '$text': $(head -c 300 "$TMP/err")"; return; fi
  if [ "$(grep -c . "$TMP/err")" -ne 1 ]; then fail "$name" "expected one line on stderr, got: $(cat "$TMP/err")"; return; fi
  pass "$name"
}
# A small Fashion-MNIST folder (first N train / M test samples) for fast runs.
make_small_fashion() {
  dir=$1 ntrain=$2 ntest=$3
  mkdir -p "$dir"
  $PY - "$dir" "$ntrain" "$ntest" <<'PYEOF'
import gzip, sys, os
d, ntr, nte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
src = "/usr/share/datasets/fashion-mnist"
for split, n in (("train", ntr), ("t10k", nte)):
    for kind, hdr, per in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
        b = gzip.open(f"{src}/{split}-{kind}-ubyte.gz").read()
        head = bytearray(b[:hdr]); head[4:8] = n.to_bytes(4, "big")
        open(os.path.join(d, f"{split}-{kind}-ubyte"), "wb").write(bytes(head) + b[hdr:hdr + n * per])
PYEOF
}
# A GPT of width 32 over 32 positions, its head tied to the embedding, in
# the model file format: small_gpt FILE HEADS [BLOCKS=2] (MLP of 128).
small_gpt() {
  file=$1 heads=$2 blocks=${3:-2}
  { echo "# a GPT of width 32: $blocks blocks of $heads heads over 32 positions, head tied"
    echo "embedding vocab=256 units=32 name=tok"
    echo "posembed positions=32 name=x0"
    b=0
    while [ $b -lt "$blocks" ]; do
      printf 'layernorm\nattention heads=%s\nadd with=x%s name=a%s\n' "$heads" $b $b
      printf 'layernorm\nlinear units=128\ngelu\nlinear units=32\nadd with=a%s name=x%s\n' $b $((b + 1))
      b=$((b + 1))
    done
    echo "layernorm"
    echo "lmhead vocab=256 tie=tok"; } >"$file"
}
