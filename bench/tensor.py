#!/usr/bin/python3
"""Tensor parallelism against one worker, and the one weird trick against data parallelism.

Part 1 (--part wide): a wide dense model (784-H-H-10, H = 4096 by
default: 20 M parameters, a column/row pair of H features), batch 64, on
Fashion-MNIST: samples/s of one worker on one core (the yardstick), one
worker with 2 BLAS threads (both cores in one process), tp = 2 (Megatron's
pair split over 2 ranks, one core each: one allreduce of 64 x H floats a
step) and 2 data-parallel workers.

Part 2 (--part owt): lenet (its dense layers hold 405 k of its 431 k
parameters) on 4 workers of 16 samples under an emulated 1 Gbit/s link
(--net bandwidth=1Gbit): data parallelism (ring allreduce of every
gradient) against the one weird trick in each of its schemes (--tp-conv
data --owt-scheme a|b|c: convolutions data-parallel, dense layers split,
the batch exchanged all at once, a worker's batch at a time, a K-th of
each at a time): samples/s and the bytes rank 0 sends a step.

Part 3 (--part accuracy, not in both): lenet, 3 epochs, momentum 0.9,
--lr-schedule cosine (--schedule constant for the other), one
worker of 64 samples against the one weird trick's schemes a, b, c on 4
workers of 16 (the same global batch; (b) and (c) step the dense layers
after each batch of 16): test accuracy after each epoch.

Rows are interleaved round after round (this VM drifts and is shared):
best round and median. usage: bench/tensor.py [--part wide|owt|both|accuracy]
[--rounds 3] [--steps 20] [--hidden 4096]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def run(model, batch, steps, opts):
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        out = subprocess.run([DTRAIN, "train", "--quiet", "--model", model, "--data", "fashion-mnist",
                              "--batch", str(batch), "--epochs", "1", "--max-steps", str(steps),
                              "--seed", "1", "--lr", "0.01", "--metrics", m, *opts],
                             env=ENV, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"dtrain {' '.join(opts)} failed: {out.stderr.strip()}")
        # the epoch line (tensor-parallel runs also write per-rank lines that name the epoch)
        ep = [e for e in map(json.loads, open(m)) if e["event"] == "epoch"][-1]
        return ep["samples_per_sec"], ep["bytes_sent_per_step"], ep["compute_sec"] / ep["step"]


def table(title, rows, model, batch, steps, rounds, yardstick):
    sps = {n: [] for n, _ in rows}
    comp = {n: [] for n, _ in rows}
    sent = {}
    for r in range(rounds):
        for name, opts in (rows if r % 2 == 0 else rows[::-1]):
            s, b, c = run(model, batch, steps, opts)
            sps[name].append(s)
            comp[name].append(c)
            sent[name] = b
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    one, one_med = max(sps[yardstick]), statistics.median(sps[yardstick])
    print(f"{title}, best of {rounds} interleaved rounds (samples/s):")
    for name, _ in rows:
        v = sps[name]
        print(f"  {name:44} {max(v):8.0f} = {max(v) / one:.2f}x {yardstick} "
              f"(median {statistics.median(v) / one_med:.2f}x); rank 0 sends {sent[name] / 1e6:.3f} MB a step, "
              f"computes {1e3 * min(comp[name]):.0f} ms a step (best)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", default="both", choices=["wide", "owt", "both", "accuracy"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--schedule", default="cosine", help="--part accuracy: the learning-rate schedule")
    a = ap.parse_args()
    if a.part == "accuracy":
        return accuracy(a)
    if a.part in ("wide", "both"):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(f"dense units={a.hidden}\nrelu\ndense units={a.hidden}\nrelu\ndense units=10\n")
            wide = f.name
        rows = [("1 worker, 1 thread", ["--workers", "1", "--threads", "1"]),
                ("1 worker, 2 BLAS threads", ["--workers", "1", "--threads", "2"]),
                ("tp 2 (1 thread each)", ["--workers", "2", "--tp", "2", "--exchange", "allreduce:ring"]),
                ("2 workers data parallel (batch 32 each)",
                 ["--workers", "2", "--batch", "32", "--exchange", "allreduce:ring"])]
        table(f"784-{a.hidden}-{a.hidden}-10, batch 64 a step, {a.steps} steps", rows, wide, 64,
              a.steps, a.rounds, "1 worker, 1 thread")
        os.unlink(wide)
    if a.part in ("owt", "both"):
        net = ["--net", "bandwidth=1Gbit", "--exchange", "allreduce:ring"]
        rows = [("4 workers data parallel, 1 Gbit/s", ["--workers", "4", *net])] + [
            (f"4 workers one weird trick ({sc}), 1 Gbit/s",
             ["--workers", "4", "--tp-conv", "data", "--owt-scheme", sc, *net]) for sc in "abc"]
        table(f"lenet, 4 workers x 16 samples, {a.steps * 3} steps, emulated 1 Gbit/s", rows, "lenet", 16,
              a.steps * 3, a.rounds, "4 workers data parallel, 1 Gbit/s")


def accuracy(a):
    runs = [("1 worker x 64", ["--workers", "1", "--batch", "64"])] + [
        (f"one weird trick ({sc}), 4 workers x 16", ["--workers", "4", "--batch", "16", "--tp-conv", "data",
                                                   "--owt-scheme", sc, "--exchange", "allreduce:ring"])
        for sc in "abc"]
    for name, opts in runs:
        with tempfile.TemporaryDirectory() as d:
            m = os.path.join(d, "m.jsonl")
            out = subprocess.run([DTRAIN, "train", "--quiet", "--model", "lenet", "--data", "fashion-mnist",
                                  "--epochs", "3", "--momentum", "0.9", "--lr", "0.05", "--seed", "1",
                                  "--lr-schedule", a.schedule,
                                  "--metrics", m, *opts], env=ENV, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"dtrain {' '.join(opts)} failed: {out.stderr.strip()}")
            acc = [100 * e["test_acc"] for e in map(json.loads, open(m)) if e["event"] == "epoch"]
            print(f"  {name:34} test accuracy by epoch: {', '.join(f'{a:.2f}%' for a in acc)}")


if __name__ == "__main__":
    main()
