#!/usr/bin/python3
"""dtrain's fp32 products on oneDNN's sgemm (the default where built with
libdnnl-dev) against OpenBLAS's (DTRAIN_GEMM=openblas), the same run: one
worker, batch 64, samples/s on mlp and lenet in interleaved rounds, the
ratio of the best rounds and of the medians; and with --bf16 the same for
--precision bf16 against each, since a faster fp32 moves that ratio too.
needs: make (with libdnnl-dev)
usage: bench/gemm_library.py [--rounds 5] [--bf16]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
STEPS = {"lenet": 300, "mlp": 900}


def rate(lib, model, *extra):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", DTRAIN_GEMM=lib)
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        out = subprocess.run([DTRAIN, "train", "--quiet", "--metrics", m.name, "--model", model, "--batch", "64",
                              "--lr", "0.05", "--momentum", "0.9", "--max-steps", str(STEPS[model]), *extra],
                             env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"dtrain failed: {out.stderr}")
        rows = [json.loads(l) for l in open(m.name)]
    gemm = rows[-1]["gemm"]
    if lib not in gemm and "bf16" not in gemm:
        sys.exit(f"asked for {lib} but the run says gemm '{gemm}'")
    return rows[0]["samples_per_sec"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    runs = {"openblas": ("openblas",), "onednn": ("onednn",)}
    if args.bf16:
        runs["bf16"] = ("onednn", "--precision", "bf16")
    rows = []
    for model in ("lenet", "mlp"):
        got = {k: [] for k in runs}
        for _ in range(args.rounds):
            for k, (lib, *extra) in runs.items():
                got[k].append(rate(lib, model, *extra))
        best = {k: max(v) for k, v in got.items()}
        med = {k: statistics.median(v) for k, v in got.items()}
        line = (f"{model}: 1 worker, batch 64, {STEPS[model]} steps, {args.rounds} interleaved rounds: "
                f"openblas {best['openblas']:.0f}, onednn {best['onednn']:.0f} samples/s: "
                f"onednn/openblas {best['onednn'] / best['openblas']:.2f}x (medians "
                f"{med['onednn'] / med['openblas']:.2f}x)")
        row = {"bench": "gemm_library", "model": model, **{k: round(v) for k, v in best.items()},
               "onednn_over_openblas": round(best["onednn"] / best["openblas"], 3),
               "median_ratio": round(med["onednn"] / med["openblas"], 3)}
        if args.bf16:
            line += (f"; bf16 {best['bf16']:.0f}: bf16/onednn {best['bf16'] / best['onednn']:.2f}x "
                     f"(medians {med['bf16'] / med['onednn']:.2f}x), bf16/openblas "
                     f"{best['bf16'] / best['openblas']:.2f}x (medians {med['bf16'] / med['openblas']:.2f}x)")
            row.update(bf16_over_onednn=round(best["bf16"] / best["onednn"], 3),
                       bf16_over_openblas=round(best["bf16"] / best["openblas"], 3))
        print(line)
        rows.append(row)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
