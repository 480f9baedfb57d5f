#!/usr/bin/python3
"""What OpenBLAS's core type costs dtrain here: for each OPENBLAS_CORETYPE
(unset = OpenBLAS's own choice, then the named ones), in interleaved
rounds, one core's sgemm GFLOP/s (1024^3, bench/sgemm_roof.c) and dtrain's
samples/s on mlp and lenet (1 worker, batch 64), each as a ratio to the
unset run of the same round; and what dtrain says on stderr for it.
dtrain's fp32 products go through oneDNN by default (src/core/gemm_onednn.c),
which the core type does not touch; --gemm openblas measures OpenBLAS's.
needs: make, make bench
usage: bench/coretype.py [--rounds 3] [--gemm onednn|openblas]
                         [--types Cooperlake,SkylakeX,Haswell,Sandybridge,Prescott]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
STEPS = {"mlp": 600, "lenet": 100}
GEMM = {"lib": "onednn"}


def env_for(core):
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", DTRAIN_GEMM=GEMM["lib"])
    e.pop("OPENBLAS_CORETYPE", None)
    e.pop("DTRAIN_CORETYPE", None)
    if core:
        e["OPENBLAS_CORETYPE"] = core
    return e


def sgemm(core):
    out = subprocess.run([os.path.join(ROOT, "build", "bench", "sgemm_roof"), "1"], env=env_for(core),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["gflops"]


def train(core, model):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        out = subprocess.run([DTRAIN, "train", "--quiet", "--model", model, "--batch", "64",
                              "--max-steps", str(STEPS[model]), "--metrics", m.name],
                             env=env_for(core), capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"dtrain failed: {out.stderr}")
        rows = [json.loads(l) for l in open(m.name)]
    return rows[0]["samples_per_sec"], rows[-1]["gemm"], out.stderr.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--types", default="Cooperlake,SkylakeX,Haswell,Sandybridge,Prescott")
    ap.add_argument("--gemm", choices=("onednn", "openblas"), default="onednn")
    args = ap.parse_args()
    GEMM["lib"] = args.gemm
    types = [""] + args.types.split(",")
    got = {t: {"sgemm": [], "mlp": [], "lenet": []} for t in types}
    said, ran = {}, {}
    for _ in range(args.rounds):
        for t in types:
            got[t]["sgemm"].append(sgemm(t))
            for model in ("mlp", "lenet"):
                sps, gemm, err = train(t, model)
                got[t][model].append(sps)
                said[t], ran[t] = err, gemm
    print(f"one core, best of {args.rounds} interleaved rounds; ratios to OpenBLAS's own choice "
          f"({ran['']}); medians in brackets")
    print(f"{'OPENBLAS_CORETYPE':18s} {'sgemm GF':>9s} {'ratio':>6s} {'mlp/s':>8s} {'ratio':>6s} "
          f"{'lenet/s':>8s} {'ratio':>6s}  what dtrain says on stderr")
    rows = []
    for t in types:
        b = {k: max(v) for k, v in got[t].items()}
        r = {k: b[k] / max(got[""][k]) for k in b}
        med = {k: statistics.median(got[t][k]) / statistics.median(got[""][k]) for k in b}
        print(f"{t or '(unset)':18s} {b['sgemm']:9.1f} {r['sgemm']:6.2f} {b['mlp']:8.0f} {r['mlp']:6.2f} "
              f"{b['lenet']:8.0f} {r['lenet']:6.2f}  [{med['sgemm']:.2f} {med['mlp']:.2f} {med['lenet']:.2f}]  "
              f"{said[t] or '(nothing)'}")
        rows.append({"bench": "coretype", "coretype": t, "gemm": ran[t], **{k: round(v, 1) for k, v in b.items()},
                     **{f"{k}_ratio": round(v, 3) for k, v in r.items()}, "stderr": said[t]})
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
