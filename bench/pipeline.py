#!/usr/bin/python3
"""Pipeline parallelism against one worker and data parallelism, in the same run.

The `deep` builtin (8 dense layers, 11.4 M parameters) on Fashion-MNIST,
--batch B per replica (micro-batches of B / M rows), --max-steps STEPS: samples/s of one worker, of 2
data-parallel workers (allreduce:ring, what two cores give with whole
replicas), and of pp = 2 pipelines (GPipe and 1F1B, M micro-batches each),
interleaved round after round (this VM drifts), best round and median.
Each pipeline row also gives the bubble measured from its metrics (idle
over idle + compute, summed over stages) beside GPipe's formula
(P - 1) / (M + P - 1), the idle fraction of total time when the stages
take equal time.

--bubble measures the bubble alone, on a model of equal layers: a cheap
stem (784 -> 64 -> 1024: about 2% of a stage's work) then 8 dense layers of
1024 units and the 10-way output, cut by --partition into equal chunks
(the stem goes with the first). GPipe's formula holds when every stage's
forward and every stage's backward take equal time; a first layer of
real width breaks that on its own (it computes no input gradient, so
its stage's forward is longer and its backward shorter than the next
stage's, and each phase then waits on the slower one), which a stem
this cheap does not. Batch 1024 (or --batch; micro-batches of 128 rows
keep the messages' fixed cost small beside the GEMMs), pp 2, M
micro-batches: GPipe, 1F1B and interleaved 1F1B with V = 2 and 4. Two definitions: GPipe's, the idle
fraction of the total time, (P - 1) / (M + P - 1) for GPipe and 1F1B and
(P - 1) / (V M + P - 1) interleaved; Megatron's, the idle time over the
ideal (busy) time, (P - 1) / M and (P - 1) / (V M).

usage: bench/pipeline.py [--rounds 5] [--steps 60] [--micro 8] [--batch B] [--model deep] [--bubble]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def run(model, steps, opts, batch=64):
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        out = subprocess.run([DTRAIN, "train", "--quiet", "--model", model, "--data", "fashion-mnist",
                              "--batch", str(batch), "--epochs", "1", "--max-steps", str(steps), "--seed", "1",
                              "--metrics", m, *opts], env=ENV, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"dtrain {' '.join(opts)} failed: {out.stderr.strip()}")
        lines = [json.loads(l) for l in open(m)]
        ep = [l for l in lines if l["event"] == "epoch"][-1]
        return ep["samples_per_sec"], ep.get("bubble_fraction")


def bubble(a):
    P, M = 2, a.micro
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "equal.model")
        with open(model, "w") as f:
            f.write("dense units=64\nrelu\ndense units=1024\nrelu\n" + "dense units=1024\nrelu\n" * 8
                    + "dense units=10\n")
        rows = [("GPipe", "gpipe", 1), ("1F1B", "1f1b", 1), ("interleaved V 2", "interleaved:2", 2),
                ("interleaved V 4", "interleaved:4", 4)]
        got = {n: [] for n, _, _ in rows}
        for r in range(a.rounds):
            for name, sched, V in (rows if r % 2 == 0 else rows[::-1]):
                cuts = ",".join(["0"] + [str(2 + i * 8 // (P * V)) for i in range(1, P * V)])
                _, b = run(model, a.steps, ["--workers", "2", "--pp", "2", "--micro-batches", str(M),
                                            "--pipe-schedule", sched, "--partition", cuts], batch=a.batch)
                got[name].append(b)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"bubble, {P} stages of equal layers, M {M}, batch {a.batch}, {a.steps} steps, median of {a.rounds} rounds:")
    for name, _, V in rows:
        b = statistics.median(got[name])
        total_f = (P - 1) / (V * M + P - 1)
        ideal_f = (P - 1) / (V * M)
        print(f"  {name:16} idle/total {b:.3f} (formula {total_f:.3f}, {b / total_f:.2f}x); "
              f"idle/busy {b / (1 - b):.3f} (Megatron's (P-1)/(VM) {ideal_f:.3f}, {b / (1 - b) / ideal_f:.2f}x)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--batch", type=int, help="batch per replica [64; --bubble: 1024]")
    ap.add_argument("--model", default="deep")
    ap.add_argument("--bubble", action="store_true")
    a = ap.parse_args()
    if a.bubble:
        a.batch = a.batch or 1024
        return bubble(a)
    a.batch = a.batch or 64
    M = a.micro
    rows = [
        ("1 worker", ["--workers", "1"]),
        ("2 workers data parallel (ring)", ["--workers", "2", "--exchange", "allreduce:ring"]),
        (f"pp 2, GPipe, M {M}", ["--workers", "2", "--pp", "2", "--micro-batches", str(M)]),
        (f"pp 2, 1F1B, M {M}", ["--workers", "2", "--pp", "2", "--micro-batches", str(M),
                                "--pipe-schedule", "1f1b"]),
        ("pp 2, M 1 (layer split)", ["--workers", "2", "--pp", "2", "--micro-batches", "1"]),
        (f"pp 2, interleaved V 2, M {M}", ["--workers", "2", "--pp", "2", "--micro-batches", str(M),
                                           "--pipe-schedule", "interleaved:2"]),
        ("pp 2, PipeDream (M 1)", ["--workers", "2", "--pp", "2", "--pipe-schedule", "pipedream"]),
        (f"pp 2, 2BW, M {M}", ["--workers", "2", "--pp", "2", "--micro-batches", str(M),
                               "--pipe-schedule", "2bw"]),
    ]
    sps = {n: [] for n, _ in rows}
    bub = {n: [] for n, _ in rows}
    for r in range(a.rounds):
        for name, opts in (rows if r % 2 == 0 else rows[::-1]):
            s, b = run(a.model, a.steps, opts, batch=a.batch)
            sps[name].append(s)
            if b is not None:
                bub[name].append(b)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    one = max(sps["1 worker"])
    one_med = statistics.median(sps["1 worker"])
    print(f"{a.model}, batch {a.batch} per replica, {a.steps} steps, best of {a.rounds} interleaved rounds (samples/s):")
    for name, _ in rows:
        v = sps[name]
        line = (f"  {name:34} {max(v):8.0f} = {max(v) / one:.2f}x 1 worker "
                f"(median {statistics.median(v) / one_med:.2f}x)")
        if bub[name]:
            P = 2
            m = 1 if "M 1" in name else M
            V = 2 if "interleaved" in name else 1
            line += (f"; bubble measured {statistics.median(bub[name]):.2f} (median)")
            if "PipeDream" not in name and "2BW" not in name:
                line += f", formula (P-1)/(VM+P-1) = {(P - 1) / (V * m + P - 1):.2f}"
        print(line)


if __name__ == "__main__":
    main()
