#!/bin/sh
# The projection's own time (issue 33: under 10 s for the built-in models):
# `dtrain plan --cluster docs/clusters/this-machine-4x8.json --project
# 8:1024` for mlp, lenet, deep and gpt, each layer measured on this CPU
# (the file's device is this machine at speed 1), 8 worker counts x 7
# strategies, with the page written. The yardstick, measured in the same
# run: one `dtrain plan --predict` of the same model at 8 workers on local
# (the simulator's single prediction, the same layers measured), so the
# ratio says what projecting 56 configurations to 1024 workers costs over
# predicting one at 8. Prints wall seconds and the ratio; exits 0 whatever
# the time (a slow or shared machine is not a failure), saying which
# models took 10 s or more.
#
# usage: bench/plan_project.sh   (DTRAIN: the binary, default build/dtrain)
DTRAIN=${DTRAIN:-build/dtrain}
CL=docs/clusters/this-machine-4x8.json
TMP=$(mktemp -d /tmp/plan-project.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
SMALL=$TMP/small
/usr/bin/python3 - "$SMALL" <<'PY'
import gzip, os, struct, sys
d = sys.argv[1]; os.makedirs(d)
def idx(name, magic, dims, data):
    with gzip.open(os.path.join(d, name), 'wb') as f:
        f.write(struct.pack('>I', magic) + b''.join(struct.pack('>I', x) for x in dims) + data)
for split, n in (('train', 256), ('t10k', 64)):
    idx('%s-images-idx3-ubyte.gz' % split, 0x803, (n, 28, 28), bytes((i * 7) % 251 for i in range(n * 784)))
    idx('%s-labels-idx1-ubyte.gz' % split, 0x801, (n,), bytes(i % 10 for i in range(n)))
PY
wall() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load avg $(cut -d' ' -f1 /proc/loadavg) (shared)"
printf '%-6s %12s %12s %8s\n' model project_s predict_s ratio
slow=
for m in mlp lenet deep gpt; do
  case $m in
    gpt) opts="--data fortunes --seq-len 64 --batch 8" ;;
    *) opts="--data $SMALL --batch 32" ;;
  esac
  p=$(wall $DTRAIN plan --cluster $CL --project 8:1024 --model $m $opts --plot "$TMP/$m.html")
  q=$(wall $DTRAIN plan --predict --workers 8 --model $m $opts)
  printf '%-6s %12s %12s %8s\n' $m "$p" "$q" "$(awk -v a="$p" -v b="$q" 'BEGIN {printf "%.2f", a / b}')"
  awk -v a="$p" 'BEGIN {exit !(a >= 10)}' && slow="$slow $m"
done
[ -n "$slow" ] && echo "10 s or more:$slow" || echo "every model under 10 s"
