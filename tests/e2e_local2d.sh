#!/bin/sh
# DistBelief's model parallelism end to end (src/nn/local2d.c, split=rows):
# a model of two locally connected layers and dense layers
# (models/distbelief-local.model) split by bands of output rows over 2 and
# 3 ranks (uneven bands: 12 and 10 rows over 3) gives one worker's weights
# to rounding, local and mpi; the distbelief-mp preset runs it so (and stays
# the layer split on a model without local2d layers); each rank's bytes per
# step are the halo formula (rows x width x channels x 4 bytes a boundary,
# each way, forward and backward) plus the bands' gather, computed here from
# the shapes alone, equal to describe_step and to the transport's count;
# bad input is one line and exit 2; and the layer's loss and gradients
# equal PyTorch's (unfold + einsum) where torch is installed
# (tests/local2d_torch.py).
. tests/lib.sh
export DTRAIN_GEMM=openblas # one worker's products in the same order as a band's
SMALL="$TMP/small"
make_small_fashion "$SMALL" 512 64
MODEL=models/distbelief-local.model
BASE="--data $SMALL --model $MODEL --lr 0.05 --momentum 0.9 --seed 3 --quiet --batch 16 --epochs 1 --max-steps 16 --exchange allreduce:ring"

"$DTRAIN" train $BASE --checkpoint "$TMP/one.st" >/dev/null 2>&1 || fail local2d_reference_run
for T in 2 3; do
  "$DTRAIN" train $BASE --workers $T --tp $T --checkpoint "$TMP/tp$T.st" >"$TMP/out" 2>&1 || fail "local2d_tp${T}_runs" "$(head -c 300 "$TMP/out")"
  echo "local2d_rows_${T}_ranks_equal_one_worker $TMP/tp$T.st" >>"$TMP/same"
  if have_mpi; then
    $MPIRUN -np $T "$DTRAIN" train $BASE --comm mpi --tp $T --checkpoint "$TMP/mpi$T.st" >"$TMP/out" 2>&1 || fail "local2d_mpi_tp${T}_runs" "$(head -c 300 "$TMP/out")"
    echo "local2d_rows_${T}_ranks_mpi_equal_one_worker $TMP/mpi$T.st" >>"$TMP/same"
  fi
done

# Three banded layers with padding and a stride (halos of 1-2 rows, bands of 7, then
# 4, 4, 3, 3 rows), tanh and relu between, over 4 ranks.
printf 'local2d filters=3 kernel=3 pad=1 split=rows\ntanh\nlocal2d filters=4 kernel=4 stride=2 pad=1 split=rows\nrelu\nlocal2d filters=2 kernel=3 pad=2 split=rows\ndense units=10\n' >"$TMP/pads.model"
"$DTRAIN" train $BASE --model "$TMP/pads.model" --checkpoint "$TMP/pads1.st" >/dev/null 2>&1 || fail local2d_pads_reference
"$DTRAIN" train $BASE --model "$TMP/pads.model" --workers 4 --tp 4 --checkpoint "$TMP/pads4.st" >"$TMP/out" 2>&1 || fail local2d_pads_tp4_runs "$(head -c 300 "$TMP/out")"
check local2d_pad_stride_4_ranks_equal_one_worker close "$TMP/pads1.st" "$TMP/pads4.st" 1e-6

# A split layer after a whole one (a conv2d): its input gradient, partial on each rank,
# summed over the group.
printf 'conv2d filters=3 kernel=3\nrelu\nlocal2d filters=4 kernel=3 stride=2 split=rows\nrelu\ndense units=10\n' >"$TMP/after.model"
"$DTRAIN" train $BASE --model "$TMP/after.model" --checkpoint "$TMP/after1.st" >/dev/null 2>&1 || fail local2d_after_reference
"$DTRAIN" train $BASE --model "$TMP/after.model" --workers 3 --tp 3 --checkpoint "$TMP/after3.st" >"$TMP/out" 2>&1 || fail local2d_after_tp3_runs "$(head -c 300 "$TMP/out")"
check local2d_after_whole_conv_3_ranks_equal_one_worker close "$TMP/after1.st" "$TMP/after3.st" 1e-6

# A one-worker checkpoint resumed onto bands of rows: each rank takes its rows' weights.
R24=$(echo "$BASE" | sed 's/--epochs 1 --max-steps 16/--epochs 2 --max-steps 24/')
"$DTRAIN" train $R24 --resume "$TMP/one.st" --checkpoint "$TMP/one24.st" >/dev/null 2>&1 || fail local2d_resume_reference
"$DTRAIN" train $R24 --workers 3 --tp 3 --resume "$TMP/one.st" --checkpoint "$TMP/tp3_24.st" >"$TMP/out" 2>&1 || fail local2d_resume_tp3_runs "$(head -c 300 "$TMP/out")"
check local2d_resume_onto_tp3_equals_one_worker close "$TMP/one24.st" "$TMP/tp3_24.st" 1e-6

# Pipeline stages of banded layers: pp 2 x tp 2, cut between the two local2d layers
# (a stage sends its band to the next stage's rank of the same band).
"$DTRAIN" train $BASE --workers 4 --tp 2 --pp 2 --partition 0,1 --micro-batches 2 --checkpoint "$TMP/pp.st" >"$TMP/out" 2>&1 || fail local2d_pp2_tp2_runs "$(head -c 300 "$TMP/out")"
echo "local2d_pp2_tp2_cut_between_bands_equals_one_worker $TMP/pp.st" >>"$TMP/same"

# The preset: the spatial split on this model, the layer split on mlp.
"$DTRAIN" train $BASE --preset distbelief-mp --checkpoint "$TMP/preset.st" --metrics "$TMP/preset.jsonl" >"$TMP/out" 2>&1 || fail local2d_preset_runs "$(head -c 300 "$TMP/out")"
echo "local2d_preset_distbelief_mp_equals_one_worker $TMP/preset.st" >>"$TMP/same"
# each run's weights against one worker's (ckpt_diff.py's rule), in one python
$PY - "$TMP/one.st" "$TMP/same" <<'PYEOF'
import json, struct, sys
import numpy as np
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]], dtype="<f4")
            for k, v in h.items() if not k.startswith("optimizer.")}
one = load(sys.argv[1])
for line in open(sys.argv[2]):
    name, path = line.split()
    try:
        other = load(path)
        d = max(float(np.abs(one[k] - other[k]).max()) for k in one) if other.keys() == one.keys() else 1e9
    except OSError:
        d = 1e9
    print(f"PASS {name}" if d <= 1e-6 else f"FAIL {name}: max abs difference {d:.3g} (tolerance 1e-6)")
PYEOF
check local2d_preset_distbelief_mp_splits_rows grep -q '"tp_rank":1' "$TMP/preset.jsonl"
"$DTRAIN" describe $BASE --preset distbelief-mp --model mlp --partition macs >"$TMP/mlp.json" 2>"$TMP/err"
check local2d_preset_distbelief_mp_keeps_layers_on_mlp grep -q '"strategy":"pipeline parallelism"' "$TMP/mlp.json"
"$DTRAIN" describe $BASE --preset distbelief-mp >"$TMP/rows.json" 2>"$TMP/err"
check local2d_preset_distbelief_mp_describes_rows grep -q '"pattern":"halo"' "$TMP/rows.json"

# Bytes: the formula from the shapes, describe_step, and the transport.
bytes_check() {
  T=$1 comm=$2 name="local2d_bytes_${1}_ranks_$2"
  "$DTRAIN" describe $BASE --workers $T --tp $T >"$TMP/d$T.json" 2>"$TMP/err" || { fail "$name" "describe: $(head -c 300 "$TMP/err")"; return; }
  rm -f "$TMP/b.jsonl"
  if [ "$comm" = mpi ]; then
    $MPIRUN -np $T "$DTRAIN" train $BASE --comm mpi --tp $T --max-steps 4 --metrics "$TMP/b.jsonl" >"$TMP/out" 2>&1
  else
    "$DTRAIN" train $BASE --workers $T --tp $T --max-steps 4 --metrics "$TMP/b.jsonl" >"$TMP/out" 2>&1
  fi || { fail "$name" "run: $(head -c 300 "$TMP/out")"; return; }
  if $PY - "$T" "$TMP/d$T.json" "$TMP/b.jsonl" >"$TMP/py" 2>&1 <<'PYEOF'; then pass "$name"; else fail "$name" "$(cat "$TMP/py")"; fi
import json, sys
T, n = int(sys.argv[1]), 16
def bands(H):
    return [(t * (H // T) + min(t, H % T), H // T + (t < H % T)) for t in range(T)]
# models/distbelief-local.model: local2d k5 s2 on 28x28x1 -> 12x12x4 (reads the
# whole input: no halo, no input gradient); local2d k3 s1 on 12x12x4 -> 10x10x8
H, W, C, k, s, p, OH = 12, 12, 4, 3, 1, 0, 10
ib, ob = bands(H), bands(OH)
def reads(t):
    o0, no = ob[t]
    return max(0, o0 * s - p), min(H, (o0 + no - 1) * s - p + k)
def rows_from(t, q):  # input rows rank t reads that rank q holds
    r0, r1 = reads(t); q0, q1 = ib[q][0], ib[q][0] + ib[q][1]
    return max(0, min(r1, q1) - max(r0, q0))
halo = []
for t in range(T):  # each boundary, each way, forward (rows) and backward (their gradients)
    rows = sum(rows_from(q, t) + rows_from(t, q) for q in (t - 1, t + 1) if 0 <= q < T)
    halo.append(rows * W * C * 4 * n)
gather = (T - 1) * n * max(b[1] for b in ob) * 10 * 8 * 4  # ring allgather of the padded bands
want = [h + gather for h in halo]
d = json.load(open(sys.argv[2]))
described = {r["rank"]: r["sent"] for r in d["bytes_per_step"]}
recv = {r["rank"]: r["received"] for r in d["bytes_per_step"]}
lines = [json.loads(l) for l in open(sys.argv[3])]
steps = [l for l in lines if l["event"] == "epoch"][-1]["step"]
counted = {l["rank"]: (l["bytes_sent"] / steps, l["bytes_received"] / steps) for l in lines if l["event"] == "rank"}
ok = True
for t in range(T):
    ok &= described[t] == want[t] == recv[t] == counted[t][0] == counted[t][1]
    print(f"rank {t}: formula {want[t]} (halo {halo[t]}), described {described[t]}/{recv[t]}, counted {counted[t]}")
assert ok
PYEOF
}
# (under mpi, tests/e2e_bytes.sh checks describe_step against the count)
for T in 2 3; do bytes_check $T local; done

# The timeline shows each rank's halo exchanges as communication slices.
"$DTRAIN" train $BASE --workers 2 --tp 2 --max-steps 2 --trace "$TMP/trace.json" >/dev/null 2>&1
check local2d_trace_halo_slices $PY -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
sys.exit(0 if {e["pid"] for e in ev if e.get("name") == "halo"} == {0, 1} else 1)' "$TMP/trace.json"

# Bad input: one line naming the layer, exit 2.
expect_error local2d_more_ranks_than_rows 2 "12 output rows cannot be split over 13 tensor-parallel ranks" -- \
  "$DTRAIN" train $BASE --workers 13 --tp 13
printf 'local2d filters=2 kernel=29 split=rows\nflatten\ndense units=10\n' >"$TMP/big.model"
expect_error local2d_kernel_larger_than_input 2 "kernel 29 larger than the padded input 28x28" -- \
  "$DTRAIN" train $BASE --model "$TMP/big.model" --workers 2 --tp 2
printf 'local2d filters=2 kernel=2 stride=2 split=rows\nlocal2d filters=2 kernel=7 split=rows\nflatten\ndense units=10\n' >"$TMP/thin.model"
expect_error local2d_halo_past_the_neighbours 2 "too thin for kernel 7" -- \
  "$DTRAIN" train $BASE --model "$TMP/thin.model" --workers 7 --tp 7
expect_error local2d_rows_under_ps 2 "split=rows does not combine with --exchange ps:K" -- \
  "$DTRAIN" train $BASE --workers 2 --tp 2 --exchange ps:2 --schedule sync
printf 'dense units=10 split=rows\n' >"$TMP/dense.model"
expect_error local2d_split_rows_on_dense 2 "split=rows splits a local2d" -- \
  "$DTRAIN" train $BASE --model "$TMP/dense.model" --workers 2 --tp 2

# Against PyTorch (unfold + einsum) on dtrain's own weights.
$PY tests/local2d_torch.py "$DTRAIN" "$TMP" >"$TMP/torch.out" 2>&1; rc=$?
if [ $rc -eq 77 ]; then echo "SKIP local2d_matches_pytorch: torch is not installed"
elif [ $rc -eq 0 ]; then pass local2d_matches_pytorch
else fail local2d_matches_pytorch "$(cat "$TMP/torch.out")"; fi
