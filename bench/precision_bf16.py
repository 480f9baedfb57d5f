#!/usr/bin/python3
"""--precision bf16 against fp32, the same run: samples/s of one worker on
lenet and mlp (batch 64) in interleaved rounds, the ratio of the best
rounds and of the medians; with --epochs E, the test accuracy of both after
E epochs (lenet, cosine, fixed seed).
needs: make (with libdnnl-dev), a CPU with AVX512_BF16 or AMX
usage: bench/precision_bf16.py [--rounds 5] [--epochs 0]"""
import argparse, json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_vs_pytorch import dtrain, rate  # noqa: E402

STEPS = {"lenet": 300, "mlp": 900}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=0)
    args = ap.parse_args()
    rows = []
    for model in ("lenet", "mlp"):
        common = ["--model", model, "--batch", 64, "--lr", 0.05, "--momentum", 0.9, "--max-steps", STEPS[model]]
        got = {"fp32": [], "bf16": []}
        for _ in range(args.rounds):
            for p in got:
                got[p].append(rate(dtrain(*common, "--precision", p)))
        b = {p: max(v) for p, v in got.items()}
        m = {p: statistics.median(v) for p, v in got.items()}
        print(f"{model}: 1 worker, batch 64, {STEPS[model]} steps, {args.rounds} interleaved rounds: "
              f"fp32 {b['fp32']:.0f}, bf16 {b['bf16']:.0f} samples/s (best rounds) = {b['bf16'] / b['fp32']:.2f}x; "
              f"medians {m['bf16'] / m['fp32']:.2f}x  (fp32 {[round(x) for x in got['fp32']]}, "
              f"bf16 {[round(x) for x in got['bf16']]})")
        rows.append({"bench": "precision_bf16", "model": model, "fp32": round(b["fp32"]), "bf16": round(b["bf16"]),
                     "ratio": round(b["bf16"] / b["fp32"], 3), "median_ratio": round(m["bf16"] / m["fp32"], 3)})
    if args.epochs:
        acc = {}
        for p in ("fp32", "bf16"):
            runs = dtrain("--model", "lenet", "--epochs", args.epochs, "--lr", 0.05, "--momentum", 0.9,
                          "--lr-schedule", "cosine", "--seed", 1, "--precision", p)
            acc[p] = [r["test_acc"] for r in runs if r["event"] == "epoch"]
        print(f"lenet, {args.epochs} epochs, test accuracy per epoch: fp32 {acc['fp32']}, bf16 {acc['bf16']}; "
              f"difference after the last: {100 * (acc['bf16'][-1] - acc['fp32'][-1]):+.2f} points")
        rows.append({"bench": "precision_bf16_accuracy", "epochs": args.epochs, "fp32": acc["fp32"], "bf16": acc["bf16"]})
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
