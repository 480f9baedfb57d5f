#!/usr/bin/python3
"""Pipeline parallelism against one worker and data parallelism, in the same run.

The `deep` builtin (8 dense layers, 10.5 M parameters) on Fashion-MNIST,
batch 64 per replica, --max-steps STEPS: samples/s of one worker, of 2
data-parallel workers (allreduce:ring, what two cores give with whole
replicas), and of pp = 2 pipelines (GPipe and 1F1B, M micro-batches each),
interleaved round after round (this VM drifts), best round and median.
Each pipeline row also gives the bubble measured from its metrics (idle
over idle + compute, summed over stages) beside GPipe's formula
(P - 1) / (M + P - 1), the idle fraction of total time when the stages
take equal time.

usage: bench/pipeline.py [--rounds 5] [--steps 60] [--micro 8] [--model deep]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def run(model, steps, opts):
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        out = subprocess.run([DTRAIN, "train", "--quiet", "--model", model, "--data", "fashion-mnist",
                              "--batch", "64", "--epochs", "1", "--max-steps", str(steps), "--seed", "1",
                              "--metrics", m, *opts], env=ENV, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"dtrain {' '.join(opts)} failed: {out.stderr.strip()}")
        lines = [json.loads(l) for l in open(m)]
        ep = [l for l in lines if l["event"] == "epoch"][-1]
        return ep["samples_per_sec"], ep.get("bubble_fraction")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--model", default="deep")
    a = ap.parse_args()
    M = a.micro
    rows = [
        ("1 worker", ["--workers", "1"]),
        ("2 workers data parallel (ring)", ["--workers", "2", "--exchange", "allreduce:ring"]),
        (f"pp 2, GPipe, M {M}", ["--workers", "2", "--pp", "2", "--micro-batches", str(M)]),
        (f"pp 2, 1F1B, M {M}", ["--workers", "2", "--pp", "2", "--micro-batches", str(M),
                                "--pipe-schedule", "1f1b"]),
        ("pp 2, M 1 (layer split)", ["--workers", "2", "--pp", "2", "--micro-batches", "1"]),
    ]
    sps = {n: [] for n, _ in rows}
    bub = {n: [] for n, _ in rows}
    for r in range(a.rounds):
        for name, opts in (rows if r % 2 == 0 else rows[::-1]):
            s, b = run(a.model, a.steps, opts)
            sps[name].append(s)
            if b is not None:
                bub[name].append(b)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    one = max(sps["1 worker"])
    one_med = statistics.median(sps["1 worker"])
    print(f"{a.model}, batch 64 per replica, {a.steps} steps, best of {a.rounds} interleaved rounds (samples/s):")
    for name, _ in rows:
        v = sps[name]
        line = (f"  {name:34} {max(v):8.0f} = {max(v) / one:.2f}x 1 worker "
                f"(median {statistics.median(v) / one_med:.2f}x)")
        if bub[name]:
            P = 2
            m = M if "M 1 " not in name else 1
            line += (f"; bubble measured {statistics.median(bub[name]):.2f} (median), "
                     f"GPipe formula (P-1)/(M+P-1) = {(P - 1) / (m + P - 1):.2f}")
        print(line)


if __name__ == "__main__":
    main()
