#!/bin/sh
# Decentralized optimization end to end, on both transports: every preset
# trains and reports its consensus model and the spread of the replicas;
# local SGD with tau = 1 equals synchronous data parallelism; synchronous
# methods are bitwise repeatable and give the same weights on local and
# mpi, and so is MPCA-SGD, whose overlapped rounds are taken at fixed steps
# (asynchronous ones - easgd-async, ad-psgd, gosgd, tree-easgd - may differ run
# to run, by design); bad values and combinations give one line naming the
# option. The 85% / 5-epoch figures are bench/decentral_accuracy.sh's.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 512
BASE="--data $SMALL --lr 0.05 --momentum 0.9 --lr-schedule cosine --seed 3 --quiet --batch 16"
ranks_for() { case $1 in easgd*|deepspark|mpca-sgd) echo 5 ;; *) echo 4 ;; esac; } # EASGD, MPCA-SGD: 4 workers + a master


# the last epoch line: consensus named, spread present, accuracy at least $2
cat >"$TMP/metrics.py" <<'PYEOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ep = [l for l in lines if l["event"] == "epoch"]
want = {"sparknet": "average", "local-sgd": "average", "easgd": "centre", "easgd-async": "centre",
        "deepspark": "centre",
        "d-psgd": "average", "ad-psgd": "average", "gosgd": "weighted-average",
        "tree-easgd": "root", "mpca-sgd": "centre"}[sys.argv[3]]
last = ep[-1]
assert all(e["consensus"] == want and e["replica_spread"] >= 0 for e in ep), last
assert last["workers"] == 4 and lines[-1]["event"] == "done", lines[-1]
assert last["test_acc"] >= float(sys.argv[2]), f"test acc {last['test_acc']:.4f} < {sys.argv[2]}"
if sys.argv[3] == "gosgd":
    assert all(abs(e["alpha_sum"] - 1) < 1e-12 and abs(e["alpha_sum_before_drain"] + e["alpha_in_flight"] - 1) < 1e-12 for e in ep), last
if sys.argv[3] == "deepspark": # alpha = 0.9/4 halved every 50 exchanges, twice at most; 8 an epoch (32 steps, tau 4)
    assert all(e["alpha_now"] == round(0.225 * 0.5 ** min(8 * e["epoch"] // 50, 2), 6) for e in ep), last
if sys.argv[3] == "mpca-sgd": # 32 steps an epoch, a round every 4: rank 0 (a leaf of both trees) sends and receives S a round
    S = 4 * lines[-1]["params"]
    assert all(e["rounds"] == 8 * e["epoch"] and e["bytes_sent"] == 8 * S and e["bytes_received"] == 8 * S for e in ep), last
if sys.argv[3] == "ad-psgd": # 2 active workers, at most one average each a step
    assert all(e["active_workers"] == 2 and 0 < e["exchanges"] <= 2 * e["step"] for e in ep), last
print(f"acc {last['test_acc']:.4f} spread {last['replica_spread']:.3g}")
PYEOF
metrics_ok() { $PY "$TMP/metrics.py" "$1" "$2" "$3" >"$TMP/m.out" 2>&1; }

# ---- every preset, both transports: 3 epochs of 2048 samples, >= 72% ------------
for p in sparknet local-sgd easgd easgd-async deepspark d-psgd ad-psgd gosgd tree-easgd mpca-sgd; do
  "$DTRAIN" train $BASE --epochs 3 --workers 4 --preset $p --metrics "$TMP/$p.jsonl" --checkpoint "$TMP/$p.local" >/dev/null 2>"$TMP/err"
  if metrics_ok "$TMP/$p.jsonl" 0.72 $p; then pass "local_${p}_trains_consensus_reported($(cat "$TMP/m.out"))"; else fail "local_${p}_trains_consensus_reported" "$(cat "$TMP/m.out") $(tail -c 300 "$TMP/err")"; fi
  if have_mpi; then
    $MPIRUN -np "$(ranks_for $p)" "$DTRAIN" train $BASE --epochs 3 --comm mpi --preset $p --metrics "$TMP/$p.mpi.jsonl" --checkpoint "$TMP/$p.mpi" >/dev/null 2>"$TMP/err"
    if metrics_ok "$TMP/$p.mpi.jsonl" 0.72 $p; then pass "mpi_${p}_trains_consensus_reported($(cat "$TMP/m.out"))"; else fail "mpi_${p}_trains_consensus_reported" "$(cat "$TMP/m.out") $(tail -c 300 "$TMP/err")"; fi
  else
    echo "SKIP mpi_${p}: no mpirun"
  fi
done

# ---- TreeEASGD's periods per level of the tree, both transports ------------------
# 4 workers, fan-out 2: level 1 = the root and ranks 1, 2; level 2 = rank 3
# under rank 1. --tau-up 4,2 --tau-down 2,1: ranks 1 and 2 send up every 4
# steps, rank 3 every 2; the root sends down every 2, rank 1 every step. So
# in each epoch of 32 steps the root (whose bytes the metrics report) sends
# 2 x 32/2 models and receives 2 x 32/4, plus the drain's end counts (8
# bytes to and from each of 3 peers). All ranks together, after epoch e,
# have sent e x 32 x (2/4 + 1/2) models up (ranks 1, 2; rank 3) and
# e x 32 x (2/2 + 1/1) down (the root; rank 1): 32 and 64 an epoch, where
# one global period (4 up, 2 down) gives 24 and 48. 3 epochs, >= 72% as
# the preset.
cat >"$TMP/levels.py" <<'PYEOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ep = [l for l in lines if l["event"] == "epoch"]
S = 4 * lines[-1]["params"]
for e in ep:
    assert e["levels"] == 2 and e["tau_up"] == [4, 2] and e["tau_down"] == [2, 1], e
    assert e["step"] % 32 == 0, e
    want_sent, want_recv = 2 * (32 // 2) * S + 24, 2 * (32 // 4) * S + 24
    assert e["bytes_sent"] == want_sent and e["bytes_received"] == want_recv, \
        f"epoch {e['epoch']}: root sent {e['bytes_sent']} received {e['bytes_received']}, expected {want_sent} and {want_recv} (S {S})"
    assert e["messages_up"] == 32 * e["epoch"] and e["messages_down"] == 64 * e["epoch"], e
assert len(ep) == 3 and ep[-1]["test_acc"] >= 0.72, ep[-1]
print(f"acc {ep[-1]['test_acc']:.4f}")
PYEOF
LEVELS="--preset tree-easgd --tau-up 4,2 --tau-down 2,1"
"$DTRAIN" train $BASE --epochs 3 --workers 4 $LEVELS --metrics "$TMP/levels.jsonl" >/dev/null 2>"$TMP/err"
if $PY "$TMP/levels.py" "$TMP/levels.jsonl" >"$TMP/m.out" 2>&1; then pass "local_tree-easgd_periods_per_level($(cat "$TMP/m.out"))"; else fail "local_tree-easgd_periods_per_level" "$(tail -c 300 "$TMP/m.out") $(tail -c 300 "$TMP/err")"; fi
if have_mpi; then
  $MPIRUN -np 4 "$DTRAIN" train $BASE --epochs 3 --comm mpi $LEVELS --metrics "$TMP/levels.mpi.jsonl" >/dev/null 2>"$TMP/err"
  if $PY "$TMP/levels.py" "$TMP/levels.mpi.jsonl" >"$TMP/m.out" 2>&1; then pass "mpi_tree-easgd_periods_per_level($(cat "$TMP/m.out"))"; else fail "mpi_tree-easgd_periods_per_level" "$(tail -c 300 "$TMP/m.out") $(tail -c 300 "$TMP/err")"; fi
else
  echo "SKIP mpi_tree-easgd_periods_per_level: no mpirun"
fi

# ---- DeepSpark's moving rate, both transports: --alpha-decay 0.5,8,2 halves ------
# alpha (0.9/4) after each epoch's 8 exchanges, twice at most: 0.1125 after
# epoch 1, 0.05625 after epochs 2 and 3 (the last exchange's factor is
# that of the exchanges made before it: 7, 15, 23 -> 0.225, 0.1125,
# 0.05625; alpha_now is the next one's)
cat >"$TMP/decay.py" <<'PYEOF'
import json, sys
ep = [json.loads(l) for l in open(sys.argv[1])]
ep = [e for e in ep if e["event"] == "epoch"]
assert [e["alpha_now"] for e in ep] == [0.1125, 0.05625, 0.05625] and ep[-1]["test_acc"] >= 0.72, ep
print(f"acc {ep[-1]['test_acc']:.4f}")
PYEOF
DECAY="--preset deepspark --alpha-decay 0.5,8,2"
"$DTRAIN" train $BASE --epochs 3 --workers 4 $DECAY --metrics "$TMP/decay.jsonl" >/dev/null 2>"$TMP/err"
if $PY "$TMP/decay.py" "$TMP/decay.jsonl" >"$TMP/m.out" 2>&1; then pass "local_deepspark_alpha_decay($(cat "$TMP/m.out"))"; else fail "local_deepspark_alpha_decay" "$(tail -c 300 "$TMP/m.out") $(tail -c 300 "$TMP/err")"; fi
if have_mpi; then
  $MPIRUN -np 5 "$DTRAIN" train $BASE --epochs 3 --comm mpi $DECAY --metrics "$TMP/decay.mpi.jsonl" >/dev/null 2>"$TMP/err"
  if $PY "$TMP/decay.py" "$TMP/decay.mpi.jsonl" >"$TMP/m.out" 2>&1; then pass "mpi_deepspark_alpha_decay($(cat "$TMP/m.out"))"; else fail "mpi_deepspark_alpha_decay" "$(tail -c 300 "$TMP/m.out") $(tail -c 300 "$TMP/err")"; fi
fi

# ---- synchronous methods: repeatable, and the same weights on both transports ----
for p in local-sgd sparknet easgd d-psgd mpca-sgd; do
  "$DTRAIN" train $BASE --epochs 3 --workers 4 --preset $p --checkpoint "$TMP/$p.again" >/dev/null
  check "${p}_bitwise_repeatable" cmp -s "$TMP/$p.local" "$TMP/$p.again"
  if have_mpi; then check "mpi_${p}_bitwise_equals_local" cmp -s "$TMP/$p.local" "$TMP/$p.mpi"; fi
done
# 7 ranks, where auto's pick differs between the transports' link
# estimates: D-PSGD's consensus mean (the checkpoint) on a fixed algorithm
"$DTRAIN" train $BASE --epochs 1 --max-steps 2 --workers 7 --preset d-psgd --checkpoint "$TMP/dpsgd7.local" >/dev/null
if have_mpi; then
  $MPIRUN -np 7 "$DTRAIN" train $BASE --epochs 1 --max-steps 2 --comm mpi --preset d-psgd --checkpoint "$TMP/dpsgd7.mpi" >/dev/null 2>&1
  check mpi_d-psgd_7_bitwise_equals_local cmp -s "$TMP/dpsgd7.local" "$TMP/dpsgd7.mpi"
fi

# ---- local SGD, tau = 1, plain SGD = synchronous allreduce data parallelism -------
# (the same sums in another order: measured max |diff| ~1e-7 on weights ~0.1)
PLAIN="--data $SMALL --lr 0.05 --seed 3 --quiet --batch 8 --epochs 1 --max-steps 40"
TOL=2e-6
"$DTRAIN" train $PLAIN --workers 4 --exchange allreduce:auto --checkpoint "$TMP/dp.st" >/dev/null
for p in local-sgd sparknet; do
  "$DTRAIN" train $PLAIN --workers 4 --preset $p --tau 1 --checkpoint "$TMP/$p.tau1" >/dev/null
  if close "$TMP/dp.st" "$TMP/$p.tau1" $TOL; then pass "local_${p}_tau1_equals_data_parallel($(cat "$TMP/cmp.out"))"; else fail "local_${p}_tau1_equals_data_parallel" "$(cat "$TMP/cmp.out")"; fi
done
if have_mpi; then
  $MPIRUN -np 4 "$DTRAIN" train $PLAIN --comm mpi --preset local-sgd --tau 1 --checkpoint "$TMP/mpi.tau1" >/dev/null 2>"$TMP/err"
  if close "$TMP/dp.st" "$TMP/mpi.tau1" $TOL; then pass "mpi_local-sgd_tau1_equals_data_parallel($(cat "$TMP/cmp.out"))"; else fail "mpi_local-sgd_tau1_equals_data_parallel" "$(cat "$TMP/cmp.out") $(tail -c 300 "$TMP/err")"; fi
else
  echo "SKIP mpi_local-sgd_tau1_equals_data_parallel: no mpirun"
fi

# ---- the emulated network: labelled, and the exchanges cost time ---------------------
"$DTRAIN" train $BASE --epochs 1 --max-steps 16 --workers 4 --preset gosgd --net latency=50us,bandwidth=100Mbit --metrics "$TMP/net.jsonl" >/dev/null
check gosgd_under_emulated_network $PY -c "
import json; e=json.loads(open('$TMP/net.jsonl').readline())
assert e['emulated'] is True and e['consensus'] == 'weighted-average', e"

# ---- bad values and combinations: one line naming the option ------------------------
expect_error tau_zero 2 "option --tau" -- "$DTRAIN" train --preset local-sgd --tau 0
expect_error alpha_unstable 2 "option --alpha: alpha = 0.9 is outside the stable range" -- "$DTRAIN" train --preset easgd --workers 4 --alpha 0.9
expect_error alpha_unstable_bare 2 "outside the stable range" -- "$DTRAIN" train --alpha 0.9
expect_error alpha_times_workers 2 "beta = 1.2 is outside the stable range 0 < beta < 1" -- "$DTRAIN" train --optimization decentral --exchange master --schedule async --workers 4 --alpha 0.3
expect_error gossip_probability 2 "option --exchange gossip:1.5" -- "$DTRAIN" train --preset gosgd --exchange gossip:1.5
expect_error tree_fanout 2 "option --exchange tree:0" -- "$DTRAIN" train --preset tree-easgd --exchange tree:0
expect_error tree_periods_past_the_levels 2 "option --tau-up: 3 periods given, .* the tree of 4 workers with fan-out 2 has 2 levels" -- "$DTRAIN" train --preset tree-easgd --workers 4 --tau-up 1,2,4
expect_error tree_periods_list 2 "option --tau-down: '2,,4' is not a list of periods" -- "$DTRAIN" train --preset tree-easgd --tau-down 2,,4
if have_mpi; then
  $MPIRUN -np 3 "$DTRAIN" train --data "$SMALL" --quiet --comm mpi --preset tree-easgd --tau-down 1,2 --max-steps 2 >/dev/null 2>"$TMP/np.err"
  check mpi_tree_periods_past_the_levels grep -q "option --tau-down: 2 periods given, .* the tree of 3 workers with fan-out 2 has 1 level" "$TMP/np.err"
fi
expect_error gossip_needs_async 2 "--schedule sync --exchange gossip do not combine" -- "$DTRAIN" train --optimization decentral --exchange gossip:0.5
expect_error neighbor_weight 2 "option --neighbor-weight" -- "$DTRAIN" train --preset d-psgd --neighbor-weight 0.7
expect_error alpha_decay_growth 2 "option --alpha-decay: 1.5 is out of range" -- "$DTRAIN" train --preset deepspark --alpha-decay 1.5,10
expect_error alpha_decay_form 2 "option --alpha-decay: '0.5' (expected G,S or G,S,L" -- "$DTRAIN" train --preset deepspark --alpha-decay 0.5
expect_error alpha_decay_period 2 "option --alpha-decay: 0 is out of range" -- "$DTRAIN" train --preset deepspark --alpha-decay 0.5,0
expect_error alpha_decay_not_easgd 2 "option --alpha-decay: not used with" -- "$DTRAIN" train --preset sparknet --alpha-decay 0.5,10
expect_error adpsgd_neighbor_weight 2 "option --neighbor-weight: not used with --optimization decentral --schedule async --exchange neighbors" -- "$DTRAIN" train --preset ad-psgd --neighbor-weight 0.25
expect_error adpsgd_compress 2 "option --compress fp16: not with AD-PSGD" -- "$DTRAIN" train --preset ad-psgd --compress fp16
expect_error adpsgd_ssp 2 "schedule ssp --exchange neighbors do not combine" -- "$DTRAIN" train --preset ad-psgd --schedule ssp:2
expect_error mpca_rho 2 "option --rho: lr x rho = 1.5 (expected below 1" -- "$DTRAIN" train --preset mpca-sgd --lr 0.05 --rho 30
expect_error mpca_beta 2 "option --beta: 1.5 (MPCA-SGD" -- "$DTRAIN" train --preset mpca-sgd --beta 1.5
expect_error mpca_alpha 2 "option --alpha: MPCA-SGD's pull is its penalty --rho" -- "$DTRAIN" train --preset mpca-sgd --alpha 0.1
expect_error mpca_extrapolation_range 2 "option --extrapolation: 3 is out of range" -- "$DTRAIN" train --preset mpca-sgd --extrapolation 3
expect_error extrapolation_not_mpca 2 "option --extrapolation: not used with" -- "$DTRAIN" train --preset easgd --extrapolation 1
expect_error soft_central 2 "option --schedule soft: MPCA-SGD's rounds" -- "$DTRAIN" train --schedule soft --exchange ps:1
expect_error soft_neighbors 2 "master + soft = MPCA-SGD" -- "$DTRAIN" train --optimization decentral --schedule soft --exchange neighbors
expect_error mpca_compress_variable_size 2 "option --compress threshold:0.1: MPCA-SGD sends messages of a fixed size" -- "$DTRAIN" train --preset mpca-sgd --compress threshold:0.1
if have_mpi; then
  $MPIRUN -np 4 "$DTRAIN" train --data "$SMALL" --quiet --comm mpi --preset mpca-sgd --workers 4 --max-steps 2 >/dev/null 2>"$TMP/np.err"
  check mpi_mpca_wrong_np_names_the_fix grep -q "run mpirun -np 5" "$TMP/np.err"
  $MPIRUN -np 4 "$DTRAIN" train --data "$SMALL" --quiet --comm mpi --preset easgd --workers 4 --max-steps 2 >/dev/null 2>"$TMP/np.err"
  check mpi_easgd_wrong_np_names_the_fix grep -q "run mpirun -np 5" "$TMP/np.err"
fi
