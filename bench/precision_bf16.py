#!/usr/bin/python3
"""--precision bf16 against fp32, the same run: samples/s of one worker on
lenet and mlp (batch 64) in interleaved rounds, the ratio of the best
rounds and of the medians; with --epochs E, the test accuracy of both after
E epochs (lenet, cosine) at each seed of --seeds, the difference per seed
and its mean (one seed's difference is within the seed-to-seed spread of
fp32 itself, which is printed beside it).
needs: make (with libdnnl-dev), a CPU with AVX512_BF16 or AMX
usage: bench/precision_bf16.py [--rounds 5] [--epochs 0] [--seeds 1,2,3]"""
import argparse, json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_vs_pytorch import dtrain, rate  # noqa: E402

STEPS = {"lenet": 300, "mlp": 900}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--seeds", default="1", help="seeds of the accuracy runs (--epochs)")
    ap.add_argument("--models", default="lenet,mlp", help="models of the speed rounds")
    args = ap.parse_args()
    rows = []
    for model in (args.models.split(",") if args.rounds else []):
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
        diffs, finals = [], {"fp32": [], "bf16": []}
        for seed in map(int, args.seeds.split(",")):
            acc = {}
            for p in ("fp32", "bf16"):
                runs = dtrain("--model", "lenet", "--epochs", args.epochs, "--lr", 0.05, "--momentum", 0.9,
                              "--lr-schedule", "cosine", "--seed", seed, "--precision", p)
                acc[p] = [r["test_acc"] for r in runs if r["event"] == "epoch"]
                finals[p].append(acc[p][-1])
            diffs.append(100 * (acc["bf16"][-1] - acc["fp32"][-1]))
            print(f"lenet, {args.epochs} epochs, seed {seed}, test accuracy per epoch: fp32 {acc['fp32']}, "
                  f"bf16 {acc['bf16']}; difference after the last: {diffs[-1]:+.2f} points")
            rows.append({"bench": "precision_bf16_accuracy", "epochs": args.epochs, "seed": seed,
                         "fp32": acc["fp32"], "bf16": acc["bf16"]})
        spread = 100 * (max(finals["fp32"]) - min(finals["fp32"]))
        print(f"lenet, {args.epochs} epochs, {len(diffs)} seeds: bf16 - fp32 mean {statistics.mean(diffs):+.2f} "
              f"points (each: {', '.join(f'{d:+.2f}' for d in diffs)}); fp32's own spread over the seeds "
              f"{spread:.2f} points; means fp32 {100 * statistics.mean(finals['fp32']):.2f}%, "
              f"bf16 {100 * statistics.mean(finals['bf16']):.2f}%")
        rows.append({"bench": "precision_bf16_accuracy_mean", "epochs": args.epochs, "seeds": len(diffs),
                     "mean_difference_points": round(statistics.mean(diffs), 3),
                     "fp32_spread_points": round(spread, 3)})
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
