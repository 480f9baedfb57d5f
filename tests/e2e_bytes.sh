#!/bin/sh
# Bytes on the wire in every strategy's metrics, against each method's
# formula: the transport counts the payload each rank sends and receives
# (comm_bytes), the driver takes the epoch's training traffic, and rank 0
# reports it ("bytes_sent", "bytes_received", per step, and the run's total
# in the "done" line). With S = 4 x params bytes and T steps, on rank 0:
#   allreduce:ring, 2 ranks    T x S each way (2(n-1)/n x S)
#   allreduce:ring, 4 ranks    T x 3/2 x S, to the rounding of the ring's
#                              blocks (at most 8 bytes a bucket)
#   allreduce:tree, 4 ranks    T x 2 x S (the root: ceil(log2 4) children)
#   allreduce:naive, 3 ranks   T x 2 x S (the root: (n-1) x S each way)
#   ZeRO-1, overlap            the same bytes as the plain ring
#   D-PSGD, 3 ranks            T x 2 x S (its model to both ring neighbours)
#   AD-PSGD, 2 ranks           rank 0 (passive) receives a model and replies
#                              one for each average: sent = received =
#                              exchanges x S + 8 (the drain's count to rank
#                              1), 1 <= exchanges <= T (timing decides how
#                              many; one request in flight at a time)
#   local SGD, tau 4           T/4 x S (one ring average every tau steps)
#   async EASGD, tau 4 (deepspark)  T/4 x S each way on worker 0 (its model
#                              to the master, the centre back), whatever the
#                              moving rate's decay
#   allreduce:hier, hosts 2+2  T x 3/2 x S: the ring inside the host (S) and
#                              rhd of the rank's half between hosts (S/2)
#   allreduce:hier, hosts 3+2  T x 5/2 x S on rank 0: that, plus S each way
#                              for rank 2, which folds into it
#   shared sync, Hogwild, 1 worker   0 (shared memory; nothing sent)
#   ps:1 sync, 2 workers       T x S pushed and pulled, plus the requests
#                              and replies (under 1 KiB a step)
#   pipeline, stage 0 = mlp's first layer (512 outputs), batch 16:
#     pp 2                     T x 16 x 512 x 4 each way (activations out,
#                              their gradients back), whatever M
#     dp 2 x pp 2              that, plus the ring allreduce of the stage's
#                              parameters between its 2 replicas: 4 x 401,920
#     4 equal layers (64 outputs), pp 2, M 2: 1F1B crosses one boundary
#                              (T x 16 x 64 x 4 each way on rank 0);
#                              interleaved:2 (chunks 0 and 2 on rank 0)
#                              three, 3 x that: a micro-batch crosses P V - 1
#                              boundaries instead of P - 1, V times the
#                              messages of a middle rank, 2V - 1 of rank 0's
# and the same counts under mpi as on local. Then each strategy against its
# own describe_step (one source of truth for the formula): `described`,
# rank 0's bytes exactly T steps and the epochs' drains of the description;
# `counted`, where a coin or timing decides (GoSGD, AD-PSGD), the runs the
# metrics count of rank 0 times the description's bytes a run, exactly;
# `pooled`, the parameter servers' shared pool (async, backup), worker 0's
# batches times the bytes a batch, to the calls at an epoch's close.
. tests/lib.sh
SMALL="$TMP/small"
make_small_fashion "$SMALL" 2048 512
T=12
BASE="--data $SMALL --batch 16 --epochs 1 --max-steps $T --seed 3 --quiet"

cat >"$TMP/bytes.py" <<'PYEOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
kind, T = sys.argv[2], int(sys.argv[3])
done = lines[-1]
ep = [l for l in lines if l["event"] == "epoch"]
S = 4 * done["params"]
sent, recv = done["bytes_sent"], done["bytes_received"]
assert sum(e["bytes_sent"] for e in ep) == sent and sum(e["bytes_received"] for e in ep) == recv, (ep, done)
for e in ep:
    steps = e["step"] if len(ep) == 1 and not kind.startswith("pooled:") else None  # pool: servers' steps
    if steps:
        assert abs(e["bytes_sent_per_step"] - e["bytes_sent"] / steps) < 0.1, e
        assert abs(e["bytes_received_per_step"] - e["bytes_received"] / steps) < 0.1, e
if kind.startswith("exact:"):
    want = round(float(kind[6:]) * T * S)
    assert sent == want and recv == want, f"sent {sent} received {recv}, expected {want} (S {S}, T {T})"
elif kind.startswith("near:"):
    want = float(kind[5:]) * T * S
    assert abs(sent - want) <= 64 * T and abs(recv - want) <= 64 * T, f"sent {sent} received {recv}, expected {want:.0f} +- {64 * T}"
elif kind.startswith("step:"):
    want = int(kind[5:]) * T
    assert sent == want and recv == want, f"sent {sent} received {recv}, expected {want} ({kind[5:]} a step)"
elif kind.startswith("describe:"):  # the strategy's own describe_step, rank 0
    d = json.load(open(kind[9:]))
    r0, e0 = d["bytes_per_step"][0], d["bytes_per_epoch"][0]  # the steady state; a warm-up's steps in all first
    assert not r0.get("expected"), f"rank 0's bytes are an expectation, not a count: {r0}"
    W = d.get("warmup_steps", 0)
    w0 = d["warmup_bytes"][0] if W else dict.fromkeys(r0, 0)
    assert W <= T, f"a warm-up of {W} steps, longer than the run's {T}"
    def over_run(key):
        return round(w0.get(key, 0) + (T - W) * r0[key] + len(ep) * e0.get(key.replace("_min", ""), 0))
    want_s, want_r = over_run("sent"), over_run("received")
    if d["exact"]:
        assert sent == want_s and recv == want_r, f"sent {sent} received {recv}, describe_step says {want_s} and {want_r} (T {T}, warm-up {W}, {len(ep)} epochs)"
    else:  # bytes that depend on the values (threshold:T): within the description's bounds
        lo_s, lo_r = over_run("sent_min"), over_run("received_min")
        assert lo_s <= sent <= want_s and lo_r <= recv <= want_r, f"sent {sent} received {recv}, describe_step bounds them by {lo_s}..{want_s} and {lo_r}..{want_r} (T {T}, warm-up {W})"
    if "messages_up" in ep[-1]:  # TreeEASGD: every rank's models sent, against the metrics' count
        models = round(T * sum(1 / t.get("every", 1) for t in d["tasks"] if t.get("pattern") == "send"))
        counted = ep[-1]["messages_up"] + ep[-1]["messages_down"]
        assert models == counted, f"all ranks sent {counted} models, describe_step says {models}"
    # every rank, where the run reports each (tensor parallelism's "rank" lines, one epoch)
    ranks = [l for l in lines if l["event"] == "rank"]
    for l in ranks:
        rd, ed = d["bytes_per_step"][l["rank"]], d["bytes_per_epoch"][l["rank"]]
        want_s = round(T * rd["sent"] + len(ep) * ed["sent"])
        want_r = round(T * rd["received"] + len(ep) * ed["received"])
        assert (l["bytes_sent"], l["bytes_received"]) == (want_s, want_r), f"rank {l['rank']}: sent {l['bytes_sent']} received {l['bytes_received']}, describe_step says {want_s} and {want_r}"
elif kind.startswith("counted:") or kind.startswith("pooled:"):
    # expected bytes (a coin, timing, a shared pool): rank 0's counted runs
    # of its expected tasks times their bytes a run, plus the exact rest
    mode, path, *fields = kind.split(":")
    d = json.load(open(path))
    tasks = [t for t in d["tasks"] if t["rank"] == 0 and t["kind"] == "comm"]
    e0 = d["bytes_per_epoch"][0]
    exact = [t for t in tasks if not t.get("expected") and not t.get("per_epoch")]
    runs = [t for t in tasks if t.get("expected")]
    assert runs, "no expected task on rank 0"
    base_s = T * sum(t["sent"] / t.get("every", 1) for t in exact) + len(ep) * e0["sent"]
    base_r = T * sum(t["received"] / t.get("every", 1) for t in exact) + len(ep) * e0["received"]
    if mode == "counted":  # each count field counts the runs of the tasks that send / receive
        fs, fr, bound = fields
        got = {}
        for way, field, base, v in (("sent", fs, base_s, sent), ("received", fr, base_r, recv)):
            size = {t[way] for t in runs if t[way] > 0}
            assert len(size) == 1, f"rank 0's expected tasks {way} {size} bytes a run"
            n, per = ep[-1][field], size.pop()
            want = round(base + n * per)
            assert v == want, f"{way} {v}, expected {want}: {n} runs ({field}) x {per} + {base:.0f} (T {T})"
            c = sum(t["chance"] for t in runs if t[way] > 0)
            if bound == "near":  # a coin per step: within 3 sd of the mean
                assert abs(n - T * c) <= 3 * (T * c) ** 0.5 + 2, f"{n} runs ({field}), expected {T * c:.1f}"
            else:  # at most one run of each task a step, where timing lets it
                assert 1 <= n <= T * len([t for t in runs if t[way] > 0]), f"{n} runs ({field}), at most {T}"
            got[way] = n
        print(f"runs {got}", end=" ")
    else:  # the pool: "batches" drawn by worker 0; the close of an epoch adds a few calls and
        # rounds the periods up: within one run of each task and 8 calls
        n = sum(e["batches"][0] for e in ep)
        for way, base, v in (("sent", base_s, sent), ("received", base_r, recv)):
            per = sum(t[way] * t["chance"] / t.get("every", 1) for t in runs)
            call = max(t[way] for t in runs if t["pattern"] == "call")
            closes = int(fields[0]) if fields else 1  # the pulls after an epoch's waits
            slack = closes * sum(t[way] for t in runs) + 8 * call
            want = base + n * per
            assert abs(v - want) <= slack, f"{way} {v}, expected {want:.0f} +- {slack}: {n} batches x {per:.0f}"
        print(f"batches {n}", end=" ")
elif kind == "adpsgd":
    n = ep[-1]["exchanges"]
    assert 1 <= n <= T and sent == recv == n * S + 8, f"sent {sent} received {recv}, expected {n} x S + 8 (S {S}, T {T})"
elif kind == "ps":
    for v in (sent, recv):
        assert T * S <= v <= T * (S + 1024), f"sent {sent} received {recv}, expected {T * S} .. {T * (S + 1024)}"
print(f"sent {sent} received {recv} (S {S}, T {T})" + (f", {len(ranks)} rank lines" if kind.startswith("describe:") and ranks else ""))
PYEOF

# run NAME FORMULA -- dtrain options...: one run's bytes against FORMULA
run() {
  name=$1 formula=$2; shift 3
  rm -f "$TMP/$name.jsonl"
  if ! "$@" --metrics "$TMP/$name.jsonl" >"$TMP/out" 2>&1; then fail "$name" "$(tail -c 300 "$TMP/out")"; return; fi
  if $PY "$TMP/bytes.py" "$TMP/$name.jsonl" "$formula" "$T" >"$TMP/py.out" 2>&1; then pass "$name"
  else fail "$name" "$(tail -c 300 "$TMP/py.out")"; fi
}
L="$DTRAIN train $BASE"
# described NAME NP OPTIONS...: the bytes of rank 0 equal describe_step's,
# exactly, on local and (as NAME_mpi) under mpirun with the ranks the
# description counts (servers, a master): one source of truth for the
# formula, the strategy's own description.
described() {
  name=$1 np=$2; shift 2
  if ! "$DTRAIN" describe $BASE --workers "$np" "$@" >"$TMP/$name.step.json" 2>"$TMP/err"; then
    fail "$name" "describe: $(head -c 300 "$TMP/err")"; return
  fi
  run "$name" "describe:$TMP/$name.step.json" -- $L --workers "$np" "$@"
  ranks=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["ranks"])' "$TMP/$name.step.json")
  have_mpi && run "${name}_mpi" "describe:$TMP/$name.step.json" -- $MPIRUN -np "$ranks" $DTRAIN train $BASE --comm mpi --workers "$np" "$@"
}
run bytes_one_worker_zero exact:0 -- $L --workers 1
run bytes_ring_2_ranks exact:1 -- $L --workers 2 --exchange allreduce:ring
run bytes_ring_4_ranks near:1.5 -- $L --workers 4 --exchange allreduce:ring
run bytes_tree_4_ranks_root exact:2 -- $L --workers 4 --exchange allreduce:tree
run bytes_naive_3_ranks_root exact:2 -- $L --workers 3 --exchange allreduce:naive
run bytes_zero1_equals_ring exact:1 -- $L --workers 2 --exchange allreduce:ring --shard-optimizer on
run bytes_overlap_equals_ring exact:1 -- $L --workers 2 --exchange allreduce:ring --overlap on --bucket-mb 0
run bytes_no_overlap_equals_ring exact:1 -- $L --workers 2 --exchange allreduce:ring --overlap off
run bytes_dpsgd_two_neighbours exact:2 -- $L --workers 3 --preset d-psgd
run bytes_adpsgd_one_model_each_way adpsgd -- $L --workers 2 --preset ad-psgd
run bytes_deepspark_worker exact:0.25 -- $L --workers 2 --preset deepspark
run bytes_local_sgd_tau_4 exact:0.25 -- $L --workers 2 --preset local-sgd --tau 4 --exchange allreduce:ring
run bytes_hier_hosts_2x2_auto near:1.5 -- $L --workers 4 --net hosts=2 --exchange allreduce:auto
run bytes_hier_hosts_3+2_fold near:2.5 -- $L --workers 5 --net hosts=2 --exchange allreduce:hier
# auto and hier described as the run decides them (step.c: the hosts, the
# link auto reads, the segment): auto's pick per bucket on one host, on
# mpi (its own link and 1 MiB segments), hier's phases with hosts (the
# ring inside, the flat allreduce across) and with a host's third rank
# folded into its first, hier on one host (groups of ceil(sqrt P)).
described_here() { # NAME DESCRIBE-OPTIONS... -- RUN...: rank 0's bytes equal the description's
  name=$1; shift
  d=""
  while [ "$1" != -- ]; do d="$d $1"; shift; done
  shift
  if ! "$DTRAIN" describe $BASE $d >"$TMP/$name.step.json" 2>"$TMP/err"; then
    fail "$name" "describe: $(head -c 300 "$TMP/err")"; return
  fi
  run "$name" "describe:$TMP/$name.step.json" -- "$@"
}
described_here bytes_auto_4_described --workers 4 --exchange allreduce:auto -- $L --workers 4 --exchange allreduce:auto
described_here bytes_hier_2x2_described --workers 4 --net hosts=2 --exchange allreduce:hier -- $L --workers 4 --net hosts=2 --exchange allreduce:hier
described_here bytes_auto_hosts_described --workers 4 --net hosts=2 --exchange allreduce:auto -- $L --workers 4 --net hosts=2 --exchange allreduce:auto
described_here bytes_hier_3+2_fold_described --workers 5 --net hosts=2 --exchange allreduce:hier -- $L --workers 5 --net hosts=2 --exchange allreduce:hier
described_here bytes_hier_one_host_described --workers 6 --exchange allreduce:hier -- $L --workers 6 --exchange allreduce:hier
# hier and auto over a group of some of the ranks, on hosts: the replicas
# of each tp rank (stride T), a stage's replicas; each group's hosts
# numbered as its communicator numbers them, uneven hosts folding; every
# rank checked where the run reports each (tp)
for spec in "8 --tp 2 --net hosts=2 --exchange allreduce:hier" "8 --tp 2 --net hosts=3+5 --exchange allreduce:hier" \
            "6 --tp 2 --net hosts=2+4 --exchange allreduce:auto" \
            "8 --pp 2 --micro-batches 2 --partition 0,2 --net hosts=2 --exchange allreduce:auto" \
            "12 --pp 2 --tp 2 --micro-batches 2 --partition macs --net hosts=2 --exchange allreduce:hier"; do
  np=${spec%% *}; opts=${spec#* }
  name="bytes_group_$(echo "$spec" | tr -c 'a-z0-9\n' '_' | sed 's/__*/_/g; s/_$//')_described"
  described_here "$name" --workers $np $opts -- $L --workers $np $opts
done
if have_mpi; then
  described_here bytes_auto_4_described_mpi --workers 4 --comm mpi --exchange allreduce:auto -- $MPIRUN -np 4 $DTRAIN train $BASE --comm mpi --workers 4 --exchange allreduce:auto
  described_here bytes_hier_one_host_described_mpi --workers 6 --comm mpi --exchange allreduce:hier -- $MPIRUN -np 6 $DTRAIN train $BASE --comm mpi --workers 6 --exchange allreduce:hier
fi
run bytes_shared_sync_zero exact:0 -- $L --workers 2 --exchange shared
[ -z "$TSAN" ] && run bytes_hogwild_zero exact:0 -- $L --workers 2 --preset hogwild
run bytes_ps_sync ps -- $L --workers 2 --exchange ps:1
run bytes_pipeline_pp2 step:32768 -- $L --workers 2 --pp 2 --partition 0,1
run bytes_pipeline_pp2_m4 step:32768 -- $L --workers 2 --pp 2 --partition 0,1 --micro-batches 4 --pipe-schedule 1f1b
run bytes_pipeline_dp2_pp2 step:1640448 -- $L --workers 4 --pp 2 --partition 0,1 --micro-batches 2
printf 'dense units=64\nrelu\n%.0s' 1 2 3 >"$TMP/four.model"
echo 'dense units=10' >>"$TMP/four.model"
run bytes_pipeline_four_1f1b step:4096 -- $L --model "$TMP/four.model" --workers 2 --pp 2 --micro-batches 2 --pipe-schedule 1f1b
run bytes_pipeline_four_interleaved step:12288 -- $L --model "$TMP/four.model" --workers 2 --pp 2 --micro-batches 2 --pipe-schedule interleaved:2 --partition macs

for np in 2 3 4 5; do
  for algo in ring rhd tree naive; do
    described "bytes_described_${algo}_${np}" "$np" --exchange "allreduce:$algo"
  done
done
described bytes_described_ring_buckets_per_layer 3 --exchange allreduce:ring --bucket-mb 0
described bytes_described_rhd_no_overlap 3 --exchange allreduce:rhd --overlap off --bucket-mb 0.5
described bytes_described_zero1 4 --exchange allreduce:ring --shard-optimizer on
described bytes_described_auto_2 2 --exchange allreduce:auto
described bytes_described_lenet_tree 3 --model lenet --exchange allreduce:tree --bucket-mb 0
described bytes_described_dpsgd_3 3 --preset d-psgd
described bytes_described_dpsgd_2 2 --preset d-psgd
described bytes_described_local_sgd_tau_4 3 --preset local-sgd --tau 4 --exchange allreduce:ring
described bytes_described_sparknet_tau_2 3 --optimization decentral --exchange master --tau 2
described bytes_described_local_sgd_lenet_tree 3 --model lenet --preset local-sgd --tau 3 --exchange allreduce:tree
described bytes_described_easgd_sync_tau_2 3 --optimization decentral --exchange master --alpha 0.1 --tau 2
described bytes_described_deepspark_worker 2 --preset deepspark
described bytes_described_pipe_pp2 2 --pp 2 --partition 0,1
described bytes_described_pipe_pp2_m4_1f1b 2 --pp 2 --partition 0,1 --micro-batches 4 --pipe-schedule 1f1b
described bytes_described_pipe_dp2_pp2 4 --pp 2 --partition 0,1 --micro-batches 2
described bytes_described_pipe_dp3_pp2_ring 6 --pp 2 --partition macs --micro-batches 2 --exchange allreduce:ring
described bytes_described_pipe_lenet_pp3_gpipe 3 --model lenet --pp 3 --partition macs --micro-batches 4 --pipe-schedule gpipe
described bytes_described_pipe_m3 2 --pp 2 --partition 0,1 --micro-batches 3 --batch 12
described bytes_described_pipe_four_interleaved 2 --model "$TMP/four.model" --pp 2 --micro-batches 2 --pipe-schedule interleaved:2 --partition macs
described bytes_described_pipe_four_interleaved_dp2 4 --model "$TMP/four.model" --pp 2 --micro-batches 4 --pipe-schedule interleaved:2 --exchange allreduce:tree --partition macs
# the streams without flush: their steady step (every unit's activation and
# gradient once; an epoch's first steps send fewer, its drain the rest)
described bytes_described_pipe_2bw 2 --pp 2 --partition 0,1 --micro-batches 4 --pipe-schedule 2bw
described bytes_described_pipe_pipedream_dp2 4 --pp 2 --partition 0,1 --micro-batches 1 --pipe-schedule pipedream
described bytes_described_pipe_ddg_lenet_pp3 3 --model lenet --pp 3 --partition macs --micro-batches 1 --pipe-schedule ddg
# compressed: each stage's replicas sum a chunk as a bucket through the
# compressor (the warm-up's dense steps, then the codec's, each at its steps)
described bytes_described_pipe_dp2_fp16 4 --pp 2 --partition 0,1 --micro-batches 2 --compress fp16
described bytes_described_pipe_dp2_powersgd_1f1b 4 --pp 2 --partition 0,1 --micro-batches 2 --pipe-schedule 1f1b --compress powersgd:2
described bytes_described_pipe_dp2_topk_warmup 4 --pp 2 --partition 0,1 --micro-batches 2 --compress topk:0.01 --compress-warmup-steps 3
described bytes_described_pipe_dp2_int8_2bw 4 --pp 2 --partition 0,1 --micro-batches 2 --pipe-schedule 2bw --compress int8
# --compress: every codec at 2 and 3 or 4 workers, error feedback off where
# a codec has it on by default (the same bytes), the warm-up (its dense
# steps, DGC's ramp, the shared momentum's exact steps), top-k past the
# break-even density (the dense allreduce instead), threshold's bytes
# within the description's bounds; --sufficient-factors; the decentralized
# methods' compressed averages and messages
described bytes_described_compress_fp32_2 2 --compress fp32
described bytes_described_compress_fp32_3_ring 3 --compress fp32 --exchange allreduce:ring
described bytes_described_compress_fp16_2 2 --compress fp16
described bytes_described_compress_fp16_sr_4_ring 4 --compress fp16:sr --exchange allreduce:ring
described bytes_described_compress_bf16_3_tree 3 --compress bf16 --exchange allreduce:tree --bucket-mb 0
described bytes_described_compress_bf16_sr_2_no_overlap 2 --compress bf16:sr --overlap off
described bytes_described_compress_int8_2 2 --compress int8
described bytes_described_compress_int8_sr_4_rhd 4 --compress int8:sr --exchange allreduce:rhd
described bytes_described_compress_int8_no_feedback_3 3 --compress int8 --error-feedback off --exchange allreduce:ring
described bytes_described_compress_onebit_2 2 --compress onebit
described bytes_described_compress_onebit_3_ring 3 --compress onebit --exchange allreduce:ring
described bytes_described_compress_onebit_no_feedback_3 3 --compress onebit --error-feedback off --exchange allreduce:ring
described bytes_described_compress_qsgd_2 2 --compress qsgd:4
described bytes_described_compress_qsgd_3_ring 3 --compress qsgd:127 --exchange allreduce:ring
described bytes_described_compress_terngrad_2 2 --compress terngrad
described bytes_described_compress_terngrad_clip_4_ring 4 --compress terngrad:2.5 --exchange allreduce:ring
described bytes_described_compress_terngrad_chunked_3_ring 3 --compress terngrad-chunked --exchange allreduce:ring
described bytes_described_compress_topk_2 2 --compress topk:0.01
described bytes_described_compress_topk_3_ring 3 --compress topk:0.01 --exchange allreduce:ring
described bytes_described_compress_topk_no_feedback_2 2 --compress topk:0.01 --error-feedback off
described bytes_described_compress_topk_past_break_even_4 4 --compress topk:0.3 --exchange allreduce:ring
described bytes_described_compress_randomk_2 2 --compress randomk:0.05
described bytes_described_compress_randomk_3_naive 3 --compress randomk:0.05 --exchange allreduce:naive --bucket-mb 0
described bytes_described_compress_threshold_2 2 --compress threshold:0.01
described bytes_described_compress_threshold_3_ring 3 --compress threshold:0.002 --exchange allreduce:ring
described bytes_described_compress_strom_2 2 --compress strom:0.01
described bytes_described_compress_strom_3_ring 3 --compress strom:0.002 --exchange allreduce:ring
described bytes_described_compress_dgc_2 2 --compress dgc:0.01
described bytes_described_compress_dgc_4_ring 4 --compress dgc:0.001 --exchange allreduce:ring --dgc-clip 5
described bytes_described_compress_powersgd_2 2 --compress powersgd:2
described bytes_described_compress_powersgd_3_ring 3 --compress powersgd:1 --exchange allreduce:ring
described bytes_described_compress_powersgd_lenet_3_tree 3 --model lenet --compress powersgd:2 --exchange allreduce:tree
described bytes_described_compress_warmup_int8_2 2 --compress int8 --compress-warmup-steps 4
described bytes_described_compress_warmup_powersgd_3 3 --compress powersgd:2 --compress-warmup-steps 3 --exchange allreduce:ring
described bytes_described_compress_warmup_dgc_ramp_3 3 --compress dgc:0.01 --compress-warmup-steps 8 --exchange allreduce:ring
described bytes_described_compress_warmup_shared_momentum_3 3 --compress fp16 --momentum 0.9 --momentum-correction shared --compress-warmup-steps 5 --exchange allreduce:ring
# --sparse-collective: the merging collectives' bytes depend on how the
# ranks' index sets overlap: within the description's bounds (the pairs
# each tensor's selection takes, from all ranks alike to none shared)
described bytes_described_sparse_sparcml_rd_3 3 --compress topk:0.01 --exchange allreduce:ring --sparse-collective sparcml:rd
described bytes_described_sparse_kylix_threshold_4 4 --compress threshold:0.01 --exchange allreduce:ring --sparse-collective kylix
described bytes_described_sufficient_factors_2 2 --sufficient-factors on
described bytes_described_sufficient_factors_3_ring 3 --sufficient-factors on --exchange allreduce:ring
described bytes_described_sufficient_factors_4_tree 4 --sufficient-factors on --exchange allreduce:tree --overlap off
described bytes_described_local_sgd_int8_2 2 --preset local-sgd --tau 4 --exchange allreduce:ring --compress int8
described bytes_described_local_sgd_topk_3 3 --preset local-sgd --tau 3 --exchange allreduce:ring --compress topk:0.01
described bytes_described_local_sgd_powersgd_3_tree 3 --preset local-sgd --tau 2 --exchange allreduce:tree --compress powersgd:1
described bytes_described_local_sgd_threshold_2 2 --preset local-sgd --tau 4 --exchange allreduce:ring --compress threshold:0.001
described bytes_described_sparknet_fp16_3 3 --optimization decentral --exchange master --tau 2 --compress fp16
described bytes_described_choco_int8_3 3 --preset d-psgd --compress int8
described bytes_described_choco_topk_2 2 --preset d-psgd --compress topk:0.05 --consensus-step 0.2
described bytes_described_choco_fp32_4 4 --preset d-psgd --compress fp32
described bytes_described_easgd_sync_qsgd_3 3 --optimization decentral --exchange master --alpha 0.1 --tau 2 --compress qsgd:4
described bytes_described_easgd_sync_fp32_2 2 --optimization decentral --exchange master --alpha 0.1 --tau 2 --compress fp32
described bytes_described_deepspark_onebit_2 2 --preset deepspark --compress onebit
described bytes_described_easgd_async_terngrad_3 3 --preset deepspark --compress terngrad
run bytes_described_shm_zero exact:0 -- $L --workers 3 --exchange allreduce:shm
check bytes_described_shm_says_zero sh -c "\"$DTRAIN\" describe $BASE --workers 3 --exchange allreduce:shm | grep -q '\"rank\":0,\"sent\":0,\"received\":0'"
described bytes_described_tree_easgd_3 3 --preset tree-easgd
described bytes_described_tree_easgd_3_tau_3_6 3 --preset tree-easgd --tau-up 3 --tau-down 6
described bytes_described_tree_easgd_7 7 --preset tree-easgd
described bytes_described_tree_easgd_7_levels 7 --preset tree-easgd --tau-up 2,3 --tau-down 4,2
described bytes_described_tree_easgd_7_fanout_3 7 --preset tree-easgd --exchange tree:3 --tau-up 3 --tau-down 4
described bytes_described_tree_easgd_int8 3 --preset tree-easgd --compress int8
described bytes_described_mpca_3 3 --preset mpca-sgd
described bytes_described_mpca_2_tau_3 2 --preset mpca-sgd --tau 3
described bytes_described_ps1_sync_2 2 --exchange ps:1
described bytes_described_ps1_sync_3 3 --exchange ps:1
described bytes_described_ps2_sync_2 2 --exchange ps:2
described bytes_described_ps2_sync_3 3 --exchange ps:2
described bytes_described_psn_sync_3 3 --exchange ps:n
described bytes_described_ps2_ssp_2_eager 3 --exchange ps:2 --schedule ssp:2
# --ps-replicas 2: a worker's bytes are unchanged (the servers forward;
# their replication bytes are checked in e2e_ps_replicas.sh)
described bytes_described_ps2_replicas_3 3 --exchange ps:2 --ps-replicas 2
# --ps-push factors: each shard's part is its dense layers' factors (16
# rows) and the rest's gradient (ps_describe.c); lenet's convolutions as
# gradients; server threads change no byte
described bytes_described_ps2_factors_2 2 --exchange ps:2 --ps-push factors
described bytes_described_ps3_factors_lenet_3 3 --exchange ps:3 --ps-push factors --model lenet
described bytes_described_ps2_factors_threads_3 3 --exchange ps:2 --ps-push factors --ps-server-threads 2
# priority order (ps_prio.c): each layer in --partition-kb parts, a part
# split at the shards' edges, pulls and pushes alike; TicTac's order moves
# the same parts; --compress: a push's part is its codec's encoding (int8
# exact, threshold bounded), --compress-pulls: the first pull whole, then
# the encoded changes
described bytes_described_ps2_priority_parts_2 2 --exchange ps:2 --comm-order priority --partition-kb 64
described bytes_described_bytescheduler_ps_lenet_3 3 --preset bytescheduler-ps --model lenet --partition-kb 4
described bytes_described_tictac_2 2 --preset tictac
described bytes_described_ps2_int8_2 2 --exchange ps:2 --compress int8
described bytes_described_psn_topk_3 3 --exchange ps:n --compress topk:0.01
described bytes_described_ps2_int8_pulls_2 2 --exchange ps:2 --compress int8 --compress-pulls on
described bytes_described_ps1_threshold_ssp_2 2 --exchange ps:1 --compress threshold:0.001 --schedule ssp:2

# counted NAME NP SENT_FIELD RECEIVED_FIELD near|atmost OPTIONS...: a description
# whose rank 0 bytes are expected (a coin, timing): the bytes equal the runs
# counted in the metrics times the bytes a run, exactly, on local and mpi;
# near: the runs are within 3 sd of the expectation; atmost: 1 to one a step.
counted() {
  name=$1 np=$2 fs=$3 fr=$4 bound=$5; shift 5
  if ! "$DTRAIN" describe $BASE --workers "$np" "$@" >"$TMP/$name.step.json" 2>"$TMP/err"; then
    fail "$name" "describe: $(head -c 300 "$TMP/err")"; return
  fi
  run "$name" "counted:$TMP/$name.step.json:$fs:$fr:$bound" -- $L --workers "$np" "$@"
  have_mpi && run "${name}_mpi" "counted:$TMP/$name.step.json:$fs:$fr:$bound" -- $MPIRUN -np "$np" $DTRAIN train $BASE --comm mpi --workers "$np" "$@"
}
counted bytes_counted_gosgd_2 2 rank0_messages_sent rank0_messages_received near --preset gosgd
counted bytes_counted_gosgd_3_p_half 3 rank0_messages_sent rank0_messages_received near --preset gosgd --exchange gossip:0.5
counted bytes_counted_gosgd_3_int8 3 rank0_messages_sent rank0_messages_received near --preset gosgd --exchange gossip:0.5 --compress int8
counted bytes_counted_adpsgd_2 2 rank0_exchanges rank0_exchanges atmost --preset ad-psgd
counted bytes_counted_adpsgd_4 4 rank0_exchanges rank0_exchanges atmost --preset ad-psgd

# pooled NAME NP OPTIONS...: the parameter servers' pool (async): worker 0's
# batches drawn times the description's bytes a batch, within the calls and
# the periods' rounding at the close of an epoch
pooled() {
  name=$1 np=$2; shift 2
  if ! "$DTRAIN" describe $BASE --workers "$np" "$@" >"$TMP/$name.step.json" 2>"$TMP/err"; then
    fail "$name" "describe: $(head -c 300 "$TMP/err")"; return
  fi
  ranks=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["ranks"])' "$TMP/$name.step.json")
  run "$name" "pooled:$TMP/$name.step.json${CLOSES:+:$CLOSES}" -- $L --workers "$np" "$@"
  have_mpi && run "${name}_mpi" "pooled:$TMP/$name.step.json${CLOSES:+:$CLOSES}" -- $MPIRUN -np "$ranks" $DTRAIN train $BASE --comm mpi --workers "$np" "$@"
}
pooled bytes_pooled_distbelief 2 --preset distbelief
pooled bytes_pooled_distbelief_every_2 2 --preset distbelief --fetch-every 2 --push-every 2
pooled bytes_pooled_backup_3 3 --exchange ps:2 --schedule backup:1
pooled bytes_pooled_distbelief_priority 2 --preset distbelief --comm-order priority --partition-kb 256
pooled bytes_pooled_distbelief_int8 2 --preset distbelief --compress int8
# an epoch of 75% of its batches (--epoch-fraction) closes with waits, each
# followed by a pull of the model and its broadcast in the group: two
CLOSES=2 pooled bytes_pooled_project_adam 4 --preset project-adam
unset CLOSES
# shared memory (local only): nothing on a wire, as described
for opts in "--exchange shared --schedule sync" "--exchange shared --schedule sync --balance on" "--exchange shared --schedule async"; do
  name="bytes_described_$(echo "$opts" | tr -c 'a-z0-9\n' '_' | sed 's/__*/_/g; s/^_//')"
  if "$DTRAIN" describe $BASE --workers 3 $opts >"$TMP/$name.step.json" 2>"$TMP/err"; then
    run "$name" "describe:$TMP/$name.step.json" -- $L --workers 3 $opts
  else fail "$name" "describe: $(head -c 300 "$TMP/err")"; fi
done
# Project Adam's replicas (--tp with ps:K): tp rank t's keys on its slice
# of the servers, the replicated tensors broadcast in the group after a
# pull, the split layers' sums; every rank checked (the run's rank lines)
described bytes_described_ps2_tp2 4 --exchange ps:2 --tp 2
described bytes_described_ps4_tp2_lenet_ssp 6 --exchange ps:4 --tp 2 --model lenet --schedule ssp:1
described bytes_described_ps2_tp2_factors 4 --exchange ps:2 --tp 2 --ps-push factors
# tensor parallelism: the split layers' sums over the group, each rank's
# own blocks (3 ranks: 512, 20 and 50 do not divide), the data-parallel
# ring over each block's replicas, a split=channels convolution's
# allgather, pipelines of tensor-parallel stages; every rank's bytes are
# checked (the run's "rank" lines)
described bytes_described_tp2_mlp 2 --tp 2
described bytes_described_tp3_mlp_ring 3 --tp 3 --exchange allreduce:ring
described bytes_described_tp2_lenet 2 --model lenet --tp 2
described bytes_described_tp3_lenet_tree 3 --model lenet --tp 3 --exchange allreduce:tree
described bytes_described_dp2_tp2 4 --tp 2 --exchange allreduce:ring
described bytes_described_local2d_rows_tp3 3 --model models/distbelief-local.model --tp 3 --exchange allreduce:ring  # halos + the bands' gather (e2e_local2d.sh: the formula)
described bytes_described_local2d_rows_dp2_tp2 4 --model models/distbelief-local.model --tp 2 --exchange allreduce:ring
printf 'conv2d filters=5 kernel=3 split=channels\nrelu\nmaxpool kernel=2\nflatten\ndense units=10\n' >"$TMP/channels.model"
described bytes_described_tp3_channels_allgather 3 --model "$TMP/channels.model" --tp 3 --exchange allreduce:ring
described bytes_described_pp2_tp2 4 --pp 2 --tp 2 --micro-batches 2 --partition macs
described bytes_described_pp2_tp2_lenet_1f1b 4 --model lenet --pp 2 --tp 2 --micro-batches 2 --partition 0,3 --pipe-schedule 1f1b
described bytes_described_dp2_pp2_tp2 8 --pp 2 --tp 2 --micro-batches 2 --partition macs --exchange allreduce:ring
# the one weird trick: (a) the features' allgather and their gradients'
# reduce-scatter, the split layers' sums on K x batch, the convolutions'
# allreduce; (b, the default) a broadcast and a reduce per worker's batch
# and the sums on batch; (c) an allgather and reduce-scatter per K-th;
# mlp exchanges the input
described bytes_described_owt_lenet_2 2 --model lenet --tp-conv data
described bytes_described_owt_lenet_3 3 --model lenet --tp-conv data --exchange allreduce:ring
described bytes_described_owt_lenet_3a 3 --model lenet --tp-conv data --owt-scheme a --exchange allreduce:ring
described bytes_described_owt_lenet_3c 3 --model lenet --tp-conv data --owt-scheme c --exchange allreduce:ring
described bytes_described_owt_mlp_3 3 --tp-conv data --exchange allreduce:tree
described bytes_described_owt_mlp_3c 3 --tp-conv data --owt-scheme c --exchange allreduce:tree
described bytes_described_owt_preset 4 --preset one-weird-trick --model lenet
# synchronized batch norm's sums (C + 1 and C forward, 2C backward, but
# for a first layer), alone and beside tensor parallelism
printf 'conv2d filters=4 kernel=3 pad=1\nbatchnorm\nrelu\nmaxpool kernel=2\nflatten\ndense units=32\nbatchnorm\nrelu\ndense units=10\n' >"$TMP/bn.model"
printf 'dense units=64\nrelu\ndense units=32\nbatchnorm\nrelu\ndense units=10\n' >"$TMP/bn_tp.model"
described bytes_described_sync_bn_3 3 --model "$TMP/bn.model" --sync-bn on --exchange allreduce:ring
described bytes_described_sync_bn_dp2_tp2 4 --model "$TMP/bn_tp.model" --tp 2 --sync-bn on --exchange allreduce:ring
# priority order: buckets in parts of --partition-kb, each after the
# ranks' agreement (an allgather of a float a rank); --balance: the step
# times' tree allreduce
described bytes_described_priority_64k 3 --comm-order priority --partition-kb 64 --exchange allreduce:ring
described bytes_described_priority_lenet_rhd 4 --model lenet --comm-order priority --partition-kb 8 --exchange allreduce:rhd --bucket-mb 0
described bytes_described_balance 3 --balance on --exchange allreduce:ring
run bytes_described_shm_zero exact:0 -- $L --workers 3 --exchange allreduce:shm
check bytes_described_shm_says_zero sh -c "\"$DTRAIN\" describe $BASE --workers 3 --exchange allreduce:shm | grep -q '\"rank\":0,\"sent\":0,\"received\":0'"

if have_mpi; then
  M="$MPIRUN -np 2 $DTRAIN train $BASE --comm mpi"
  run bytes_ring_2_ranks_mpi exact:1 -- $M --exchange allreduce:ring
  run bytes_ps_sync_mpi ps -- $MPIRUN -np 3 $DTRAIN train $BASE --comm mpi --workers 2 --exchange ps:1
  run bytes_dpsgd_two_neighbours_mpi exact:2 -- $MPIRUN -np 3 $DTRAIN train $BASE --comm mpi --preset d-psgd
  run bytes_adpsgd_one_model_each_way_mpi adpsgd -- $MPIRUN -np 2 $DTRAIN train $BASE --comm mpi --preset ad-psgd
  run bytes_deepspark_worker_mpi exact:0.25 -- $MPIRUN -np 3 $DTRAIN train $BASE --comm mpi --preset deepspark
  run bytes_pipeline_pp2_mpi step:32768 -- $MPIRUN -np 2 $DTRAIN train $BASE --comm mpi --pp 2 --partition 0,1 --micro-batches 4
  run bytes_pipeline_four_interleaved_mpi step:12288 -- $MPIRUN -np 2 $DTRAIN train $BASE --comm mpi --model "$TMP/four.model" --pp 2 --micro-batches 2 --pipe-schedule interleaved:2 --partition macs
  run bytes_tree_4_ranks_root_mpi exact:2 -- $MPIRUN -np 4 $DTRAIN train $BASE --comm mpi --exchange allreduce:tree
fi
