#!/usr/bin/python3
"""Which way of costing a layer predicts a step better (issue 33's
calibration: "per-layer measurement, or a fitted GEMM model as Yan et al.
fit cuBLAS; keep whichever predicts better, and say by how much").

For each model and batch, one worker: the measured step (dtrain train,
epoch_sec / steps of one epoch of --max-steps steps) against
  - layers: dtrain plan --predict (each layer timed at the step's sizes);
  - gemm:   dtrain plan --predict --compute-model gemm (dense, linear and
            conv2d layers from the profile's GEMM model, the rest timed).
Each row is the median of --repeats predictions and runs, alternated. The
summary: each model's median and largest |predicted - measured| /
measured, and the better one with the ratio of the medians.

usage: bench/plan_compute_models.py [--profile FILE] [--repeats 3] [--steps 20]
(without --profile, one is calibrated first with --quick into a temporary file)"""
import argparse, json, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_vs_pytorch import cpu_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.environ.get("DTRAIN", os.path.join(ROOT, "build", "dtrain"))
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
ROWS = [(m, b) for m in ("mlp", "lenet", "deep") for b in (16, 64, 256)]


def run(*args):
    out = subprocess.run([DTRAIN, *map(str, args)], env=ENV, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"dtrain {' '.join(map(str, args[:3]))} failed: {out.stderr[-500:]}")
    return out.stdout


def measured(model, batch, steps):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        run("train", "--model", model, "--batch", batch, "--max-steps", steps, "--quiet", "--metrics", m.name)
        ep = [json.loads(l) for l in open(m.name) if '"event":"epoch"' in l][0]
        return ep["epoch_sec"] / ep["step"]


def predicted(model, batch, steps, profile, how):
    line = run("plan", "--predict", "--profile", profile, "--compute-model", how, "--model", model,
               "--batch", batch, "--max-steps", steps).strip().splitlines()[-1]
    return json.loads(line)["step_sec"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    tmp = None
    if not args.profile:
        tmp = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
        tmp.close()
        os.unlink(tmp.name)
        run("plan", "--calibrate", "--quick", "--out", tmp.name)
        args.profile = tmp.name
    fit = json.load(open(args.profile)).get("gemm_fit")
    if not fit:
        sys.exit(f"{args.profile} has no gemm_fit: calibrate again (dtrain plan --calibrate --out FILE)")
    print(f"CPU: {cpu_name()}; load average {open('/proc/loadavg').read().split()[0]}; GEMM model "
          f"ln t = {fit['c0']:.3f} + {fit['c1']:.3f} ln m + {fit['c2']:.3f} ln n + {fit['c3']:.3f} ln k "
          f"({fit['points']} shapes, largest error {fit['max_error']:.0%})")
    print(f"{'model':6s} {'batch':>5s} {'measured ms':>11s} {'layers ms':>9s} {'err':>5s} {'gemm ms':>8s} {'err':>5s}")
    err = {"layers": [], "gemm": []}
    for model, batch in ROWS:
        got = {"measured": [], "layers": [], "gemm": []}
        for _ in range(args.repeats):
            got["layers"].append(predicted(model, batch, args.steps, args.profile, "layers"))
            got["gemm"].append(predicted(model, batch, args.steps, args.profile, "gemm"))
            got["measured"].append(measured(model, batch, args.steps))
        med = {k: statistics.median(v) for k, v in got.items()}
        e = {k: abs(med[k] - med["measured"]) / med["measured"] for k in err}
        for k in err:
            err[k].append(e[k])
        print(f"{model:6s} {batch:5d} {med['measured'] * 1e3:11.2f} {med['layers'] * 1e3:9.2f} {e['layers']:5.0%} "
              f"{med['gemm'] * 1e3:8.2f} {e['gemm']:5.0%}")
    summary = {k: {"median_error": round(statistics.median(v), 4), "max_error": round(max(v), 4)}
               for k, v in err.items()}
    best = min(summary, key=lambda k: summary[k]["median_error"])
    other = "gemm" if best == "layers" else "layers"
    ratio = summary[other]["median_error"] / max(summary[best]["median_error"], 1e-9)
    for k, v in summary.items():
        print(f"{k:6s}: median error {v['median_error']:.1%}, largest {v['max_error']:.1%}")
    print(f"better: {best} (its median error {ratio:.1f}x smaller than {other}'s)")
    print(json.dumps({"bench": "plan_compute_models", "cpu": cpu_name(), **summary, "better": best,
                      "median_error_ratio": round(ratio, 2)}))
    if tmp:
        os.unlink(args.profile)


if __name__ == "__main__":
    main()
