#!/usr/bin/python3
"""Side-by-side training speed: dtrain against PyTorch 1.13 on the same
models, batch, optimizer and IDX files, measured in the same run.

For each model it prints training samples/s for both and the ratio, on one
core (both single-threaded) and on two cores (each side's best setting:
PyTorch over torch threads x OPENBLAS_NUM_THREADS; dtrain over BLAS threads
and 2 data-parallel workers with half the batch each, i.e. the same global
batch), the GFLOP/s each reaches against the cblas_sgemm roof measured
here, and the peak memory of an mlp run.

usage: bench/train_vs_pytorch.py [--steps N] [--models mlp,lenet] [--rounds R] [--json FILE]
Run from the repository root after `make`."""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
ROOF = os.path.join(ROOT, "build", "bench", "sgemm_roof")
PYTORCH = [sys.executable if sys.executable.startswith("/usr/bin") else "/usr/bin/python3",
           os.path.join(ROOT, "bench", "pytorch_train.py")]

# Training FLOPs per sample: 2 x MACs for forward, weight gradient and input
# gradient, less the input gradient of the first layer (nobody needs it).
FLOPS = {
    "mlp": 2 * (3 * (784 * 512 + 512 * 256 + 256 * 10) - 784 * 512),
    "lenet": 2 * (3 * (24 * 24 * 20 * 25 + 8 * 8 * 50 * 500 + 800 * 500 + 500 * 10) - 24 * 24 * 20 * 25),
}


def run(cmd, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return out.stdout


def dtrain(model, steps, threads=1, workers=1, batch=64):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        run([DTRAIN, "train", "--model", model, "--batch", str(batch), "--lr", "0.05",
             "--momentum", "0.9", "--lr-schedule", "cosine", "--epochs", "1", "--quiet",
             "--max-steps", str(steps), "--threads", str(threads), "--workers", str(workers),
             "--metrics", m.name])
        for line in open(m.name):
            rec = json.loads(line)
            if rec["event"] == "epoch":
                return rec["samples_per_sec"]


def pytorch(model, steps, threads=1, blas=1):
    out = run(PYTORCH + ["--model", model, "--max-steps", str(steps), "--threads", str(threads)],
              {"OPENBLAS_NUM_THREADS": str(blas), "OMP_NUM_THREADS": str(threads)})
    return json.loads(out.strip().splitlines()[-1])["samples_per_sec"]


def peak_rss_mib(cmd, env_extra=None):
    """Peak resident memory of one command, via GNU time."""
    env = dict(os.environ)
    env.update(env_extra or {})
    out = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, env=env, capture_output=True, text=True)
    return int(out.stderr.strip().splitlines()[-1]) / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=0, help="steps timed per run (default: 900 mlp, 300 lenet)")
    ap.add_argument("--models", default="mlp,lenet")
    ap.add_argument("--json", help="append the results as JSON Lines")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; each setting keeps its best")
    args = ap.parse_args()
    print(f"environment: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"{os.cpu_count()} cores; both sides run under it")
    roof = {t: json.loads(run([ROOF, str(t)]))["gflops"] for t in (1, 2)}
    print(f"cblas_sgemm roof (1024^3): {roof[1]:.1f} GFLOP/s on 1 core, {roof[2]:.1f} on 2")
    rows = []
    for model in args.models.split(","):
        steps = args.steps or (900 if model == "mlp" else 300)
        # every setting once a round, the rounds interleaved; each keeps its best
        runs = {"d1": [], "p1": []}
        d2_runs, p2_runs = {}, {}
        for _ in range(args.rounds):
            runs["d1"].append(dtrain(model, steps))
            runs["p1"].append(pytorch(model, steps))
            for k, f in (("--threads 2", lambda: dtrain(model, steps, threads=2)),
                         ("--workers 2 --batch 32", lambda: dtrain(model, steps * 2, workers=2, batch=32))):
                d2_runs.setdefault(k, []).append(f())
            for t in (1, 2):
                for b in (1, 2):
                    p2_runs.setdefault(f"torch {t} / openblas {b}", []).append(pytorch(model, steps, t, b))
        d1, p1 = max(runs["d1"]), max(runs["p1"])
        d2_opts = {k: max(v) for k, v in d2_runs.items()}
        p2_opts = {k: max(v) for k, v in p2_runs.items()}
        print(f"  {model}: 1 core, every round: dtrain {[round(x) for x in runs['d1']]}, "
              f"pytorch {[round(x) for x in runs['p1']]}; medians' ratio "
              f"{statistics.median(runs['d1']) / statistics.median(runs['p1']):.2f}")
        d2k = max(d2_opts, key=d2_opts.get)
        p2k = max(p2_opts, key=p2_opts.get)
        for cores, d, p, dk, pk in ((1, d1, p1, "--threads 1", "torch 1 / openblas 1"),
                                    (2, d2_opts[d2k], p2_opts[p2k], d2k, p2k)):
            row = {"bench": "train_vs_pytorch", "model": model, "cores": cores,
                   "dtrain_samples_per_sec": round(d), "pytorch_samples_per_sec": round(p),
                   "ratio": round(d / p, 3), "dtrain_setting": dk, "pytorch_setting": pk,
                   "dtrain_gflops": round(d * FLOPS[model] / 1e9, 1),
                   "pytorch_gflops": round(p * FLOPS[model] / 1e9, 1),
                   "sgemm_roof_gflops": roof[cores]}
            rows.append(row)
        print(f"  {model}: 2-core settings tried: dtrain {json.dumps({k: round(v) for k, v in d2_opts.items()})}, "
              f"pytorch {json.dumps({k: round(v) for k, v in p2_opts.items()})}")
    print(f"\n{'model':6} {'cores':>5} {'dtrain/s':>9} {'pytorch/s':>9} {'ratio':>6}  "
          f"{'dtrain GF':>9} {'torch GF':>8} {'roof GF':>7}  settings")
    for r in rows:
        print(f"{r['model']:6} {r['cores']:>5} {r['dtrain_samples_per_sec']:>9} {r['pytorch_samples_per_sec']:>9} "
              f"{r['ratio']:>6.2f}  {r['dtrain_gflops']:>9} {r['pytorch_gflops']:>8} {r['sgemm_roof_gflops']:>7}  "
              f"dtrain {r['dtrain_setting']}; pytorch {r['pytorch_setting']}")
    dmem = peak_rss_mib([DTRAIN, "train", "--model", "mlp", "--epochs", "1", "--quiet", "--max-steps", "300"])
    pmem = peak_rss_mib(PYTORCH + ["--model", "mlp", "--max-steps", "300"], {"OPENBLAS_NUM_THREADS": "1"})
    print(f"\npeak memory of an mlp run: dtrain {dmem:.0f} MiB, pytorch {pmem:.0f} MiB")
    rows.append({"bench": "train_peak_memory", "model": "mlp", "dtrain_mib": round(dmem), "pytorch_mib": round(pmem)})
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
