#!/usr/bin/python3
"""Two builds of dtrain side by side: did a change cost speed?

Runs the same training configurations and allreduce sizes with an OLD and a
NEW dtrain binary, interleaved round after round (this VM's speed drifts by
up to 30% from minute to minute, so back-to-back blocks would measure the
drift), and prints each one's best round, the medians and NEW/OLD.

  training: mlp on Fashion-MNIST, batch 64 per worker, --max-steps STEPS,
            samples/s from the "done" metrics line of each configuration;
  allreduce: `dtrain bench allreduce` on local (2 ranks) and, when mpirun
            is there, on mpi (-np 2): bus bandwidth per algorithm and size,
            with memcpy / MPI_Allreduce measured in the same run as the
            yardstick (the ratio NEW/OLD is of busbw over the yardstick).

usage: bench/ab_compare.py OLD_DTRAIN NEW_DTRAIN [--rounds 5] [--steps 400] [--skip-mpi]
       (e.g. a worktree of the old commit built with make: /tmp/old/build/dtrain)"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile

ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
TRAIN = [
    ("1 worker", ["--workers", "1"]),
    ("2 workers allreduce:ring", ["--workers", "2", "--preset", "pytorch-ddp"]),
    ("2 workers allreduce sharded", ["--workers", "2", "--preset", "pytorch-ddp", "--shard-optimizer", "on"]),
    ("2 workers priority", ["--workers", "2", "--preset", "bytescheduler"]),
    ("2 workers shared sync", ["--workers", "2", "--exchange", "shared"]),
    ("2 workers local SGD tau 4", ["--workers", "2", "--preset", "local-sgd", "--tau", "4"]),
    ("3 workers D-PSGD", ["--workers", "3", "--preset", "d-psgd"]),
    ("2 workers ps:1 sync", ["--workers", "2", "--exchange", "ps:1"]),
]
SIZES = ["1MiB", "16MiB"]


def train(binary, opts, steps):
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        out = subprocess.run([binary, "train", "--quiet", "--model", "mlp", "--data", "fashion-mnist",
                              "--batch", "64", "--epochs", "1", "--max-steps", str(steps), "--seed", "1",
                              "--metrics", m, *opts], env=ENV, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{binary} train {' '.join(opts)} failed: {out.stderr.strip()}")
        done = [json.loads(l) for l in open(m) if '"done"' in l]
        return done[-1]["samples_per_sec"]


def allreduce(binary, comm):
    """{(algo, bytes): busbw / yardstick} of one `dtrain bench allreduce` run."""
    with tempfile.TemporaryDirectory() as d:
        j = os.path.join(d, "a.jsonl")
        args = ["bench", "allreduce", "--min-bytes", SIZES[0], "--max-bytes", SIZES[-1], "--step", "4",
                "--json", j]
        if comm == "mpi":
            cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", binary, *args,
                   "--comm", "mpi", "--algo", "ring,rhd"]
        else:
            cmd = [binary, *args, "--workers", "2", "--algo", "ring,rhd,shm"]
        out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
        rows = [json.loads(l) for l in open(j)]
        return {(r["algo"], r["bytes"]): r["ratio"] for r in rows if "ratio" in r}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--skip-mpi", action="store_true")
    a = ap.parse_args()
    bins = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    comms = ["local"] + ([] if a.skip_mpi or not shutil.which("mpirun") else ["mpi"])
    res = {}  # (what, which) -> [values]
    for r in range(a.rounds):
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for name, opts in TRAIN:
            for which in order:
                res.setdefault((name, which), []).append(train(bins[which], opts, a.steps))
        for comm in comms:
            for which in order:
                for key, ratio in allreduce(bins[which], comm).items():
                    res.setdefault((f"allreduce {comm} {key[0]} {key[1] >> 20} MiB", which), []).append(ratio)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"NEW {a.new} against OLD {a.old}, {a.rounds} interleaved rounds (best round; median)")
    print(f"{'':40} {'old best':>10} {'new best':>10} {'new/old':>8} {'median new/old':>15}")
    names = list(dict.fromkeys(k[0] for k in res))
    for n in names:
        o, w = res[(n, "old")], res[(n, "new")]
        unit = "x" if n.startswith("allreduce") else ""
        print(f"{n:40} {max(o):>10.3f}{unit} {max(w):>9.3f}{unit} {max(w) / max(o):>8.3f} "
              f"{statistics.median(w) / statistics.median(o):>15.3f}"
              if unit else
              f"{n:40} {max(o):>10.0f} {max(w):>10.0f} {max(w) / max(o):>8.3f} "
              f"{statistics.median(w) / statistics.median(o):>15.3f}")
    print("training rows: samples/s; allreduce rows: busbw over memcpy (local) or MPI_Allreduce (mpi) "
          "in the same run")


if __name__ == "__main__":
    main()
