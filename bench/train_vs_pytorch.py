#!/usr/bin/python3
"""Side-by-side training speed: dtrain against PyTorch 1.13 on the same
models, batch, optimizer and IDX files, measured in the same run.

For each model it prints training samples/s for both and the ratio, on one
core (both single-threaded) and on two cores (each side's best setting:
PyTorch over torch threads x OPENBLAS_NUM_THREADS; dtrain over BLAS threads
and 2 data-parallel workers with half the batch each, i.e. the same global
batch); each setting in fp32 and in bf16 mixed precision (dtrain
--precision bf16, PyTorch torch.autocast on the CPU), compared fp32 against
fp32 and each side's best against the other's (PyTorch's settings also
under OPENBLAS_CORETYPE set to this CPU's core type, where the environment
sets none: Debian's OpenBLAS runs old kernels on CPUs newer than itself);
the GFLOP/s each reaches against the cblas_sgemm roof measured
here, and the peak memory of an mlp run.

usage: bench/train_vs_pytorch.py [--steps N] [--models mlp,lenet] [--precisions fp32,bf16]
                                 [--rounds R] [--json FILE]
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


def dtrain(model, steps, threads=1, workers=1, batch=64, precision="fp32"):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        run([DTRAIN, "train", "--model", model, "--batch", str(batch), "--lr", "0.05",
             "--momentum", "0.9", "--lr-schedule", "cosine", "--epochs", "1", "--quiet",
             "--max-steps", str(steps), "--threads", str(threads), "--workers", str(workers),
             "--precision", precision, "--metrics", m.name])
        for line in open(m.name):
            rec = json.loads(line)
            if rec["event"] == "epoch":
                return rec["samples_per_sec"]


def best_coretype():
    """The OpenBLAS core type for this CPU's widest instructions, as dtrain
    picks it (src/core/blas_check.c): Debian's OpenBLAS 0.3.21 falls back to
    old kernels on CPUs newer than itself, which PyTorch 1.13 then runs."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    for flag, core in (("avx512_bf16", "Cooperlake"), ("avx512f", "SkylakeX"), ("avx2", "Haswell")):
        if flag in flags:
            return core
    return None


def pytorch(model, steps, threads=1, blas=1, precision="fp32", coretype=None):
    env = {"OPENBLAS_NUM_THREADS": str(blas), "OMP_NUM_THREADS": str(threads)}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    out = run(PYTORCH + ["--model", model, "--max-steps", str(steps), "--threads", str(threads),
                         "--precision", precision], env)
    return json.loads(out.strip().splitlines()[-1])["samples_per_sec"]


def peak_rss_mib(cmd, env_extra=None):
    """Peak resident memory of one command, via GNU time."""
    env = dict(os.environ)
    env.update(env_extra or {})
    out = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, env=env, capture_output=True, text=True)
    return int(out.stderr.strip().splitlines()[-1]) / 1024.0


def settings(model, steps, precisions, coretypes):
    """Each side's settings on 1 and 2 cores: name -> a function timing it.
    PyTorch's are also tried under each OpenBLAS core type of coretypes."""
    d = {1: {}, 2: {}}
    p = {1: {}, 2: {}}
    for pr in precisions:
        d[1][f"{pr} --threads 1"] = lambda pr=pr: dtrain(model, steps, precision=pr)
        d[2][f"{pr} --threads 2"] = lambda pr=pr: dtrain(model, steps, threads=2, precision=pr)
        d[2][f"{pr} --workers 2 --batch 32"] = \
            lambda pr=pr: dtrain(model, steps * 2, workers=2, batch=32, precision=pr)
        for ct in coretypes:
            tag = f" OPENBLAS_CORETYPE={ct}" if ct else ""
            p[1][f"{pr} torch 1 / openblas 1{tag}"] = \
                lambda pr=pr, ct=ct: pytorch(model, steps, precision=pr, coretype=ct)
            for t in (1, 2):
                for b in (1, 2):
                    p[2][f"{pr} torch {t} / openblas {b}{tag}"] = \
                        lambda t=t, b=b, pr=pr, ct=ct: pytorch(model, steps, t, b, precision=pr, coretype=ct)
    return d, p


def best(runs, prefix=""):
    """The setting with the highest best-round rate, among those named prefix..."""
    keys = [k for k in runs if k.startswith(prefix)]
    k = max(keys, key=lambda k: max(runs[k]))
    return k, max(runs[k])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=0, help="steps timed per run (default: 900 mlp, 300 lenet)")
    ap.add_argument("--models", default="mlp,lenet")
    ap.add_argument("--precisions", default="fp32,bf16",
                    help="settings tried on each side (bf16: dtrain --precision bf16, torch.autocast)")
    ap.add_argument("--json", help="append the results as JSON Lines")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; each setting keeps its best")
    args = ap.parse_args()
    precisions = args.precisions.split(",")
    # PyTorch under the environment as it is, and (unless the user set one)
    # under the core type that uses all of this CPU: its best setting
    coretypes = [None]
    if not os.environ.get("OPENBLAS_CORETYPE") and best_coretype():
        coretypes.append(best_coretype())
    print(f"environment: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"{os.cpu_count()} cores; both sides run under it")
    roof = {t: json.loads(run([ROOF, str(t)]))["gflops"] for t in (1, 2)}
    print(f"cblas_sgemm roof (1024^3): {roof[1]:.1f} GFLOP/s on 1 core, {roof[2]:.1f} on 2")
    rows = []
    for model in args.models.split(","):
        steps = args.steps or (900 if model == "mlp" else 300)
        dset, pset = settings(model, steps, precisions, coretypes)
        # every setting once a round, the rounds interleaved; each keeps its best
        druns = {c: {k: [] for k in dset[c]} for c in (1, 2)}
        pruns = {c: {k: [] for k in pset[c]} for c in (1, 2)}
        for _ in range(args.rounds):
            for c in (1, 2):
                for k, f in dset[c].items():
                    druns[c][k].append(f())
                for k, f in pset[c].items():
                    pruns[c][k].append(f())
        for c in (1, 2):
            print(f"  {model}, {c} core(s), every round: dtrain "
                  f"{json.dumps({k: [round(x) for x in v] for k, v in druns[c].items()})}; pytorch "
                  f"{json.dumps({k: [round(x) for x in v] for k, v in pruns[c].items()})}")
            # fp32 against fp32, then each side's best setting whatever its precision
            for kind, prefix in (("fp32", "fp32"), ("best", "")):
                if prefix and prefix not in precisions:
                    continue
                dk, d = best(druns[c], prefix)
                pk, p = best(pruns[c], prefix)
                rows.append({"bench": "train_vs_pytorch", "model": model, "cores": c, "compare": kind,
                             "dtrain_samples_per_sec": round(d), "pytorch_samples_per_sec": round(p),
                             "ratio": round(d / p, 3), "dtrain_setting": dk, "pytorch_setting": pk,
                             "dtrain_gflops": round(d * FLOPS[model] / 1e9, 1),
                             "pytorch_gflops": round(p * FLOPS[model] / 1e9, 1),
                             "sgemm_roof_gflops": roof[c]})
    print(f"\n{'model':6} {'cores':>5} {'compare':>7} {'dtrain/s':>9} {'pytorch/s':>9} {'ratio':>6}  "
          f"{'dtrain GF':>9} {'torch GF':>8} {'roof GF':>7}  settings")
    for r in rows:
        print(f"{r['model']:6} {r['cores']:>5} {r['compare']:>7} {r['dtrain_samples_per_sec']:>9} "
              f"{r['pytorch_samples_per_sec']:>9} {r['ratio']:>6.2f}  {r['dtrain_gflops']:>9} "
              f"{r['pytorch_gflops']:>8} {r['sgemm_roof_gflops']:>7}  "
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
