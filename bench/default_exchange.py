#!/usr/bin/python3
"""dtrain train --workers 2 with default options against one worker, and
against the machine's ceiling, in interleaved rounds:
  - 1 worker (batch 64);
  - 2 workers, no --exchange (the default: shared sync on --comm local);
  - 2 workers --exchange allreduce:auto (the default before issue 21);
  - 2 independent 1-worker processes at once: what the cores give with no
    exchange at all (the ceiling).
For each model, the best round and the median of each, the ratios to one
worker, and the default's share of the ceiling. Weak scaling: batch 64 per
worker, the same number of steps.
needs: make (build/dtrain), make bench (build/bench/sgemm_roof)
usage: bench/default_exchange.py [--rounds 5] [--models mlp,lenet]"""
import argparse, json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_vs_pytorch import dtrain, dtrain_concurrently, rate, sgemm_roof  # noqa: E402

STEPS = {"mlp": 900, "lenet": 150}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="mlp,lenet")
    args = ap.parse_args()
    rows = []
    for model in args.models.split(","):
        common = ["--model", model, "--batch", 64, "--lr", 0.05, "--momentum", 0.9,
                  "--max-steps", STEPS[model]]
        configs = {
            "1 worker": lambda: rate(dtrain(*common)),
            "2 workers, default": lambda: rate(dtrain(*common, "--workers", 2)),
            "2 workers, allreduce:auto": lambda: rate(dtrain(*common, "--workers", 2, "--exchange",
                                                             "allreduce:auto")),
            "2 x 1 worker, concurrently": lambda: sum(map(rate, dtrain_concurrently(2, *common))),
        }
        got = {k: [] for k in configs}
        roof = []
        for _ in range(args.rounds):
            roof.append(sgemm_roof())
            for k, f in configs.items():
                got[k].append(f())
        best = {k: max(v) for k, v in got.items()}
        med = {k: statistics.median(v) for k, v in got.items()}
        one, ceil = best["1 worker"], best["2 x 1 worker, concurrently"]
        print(f"{model}, batch 64 per worker, {STEPS[model]} steps, {args.rounds} interleaved rounds "
              f"(samples/s, best round; ratio to 1 worker, best and median):")
        for k in configs:
            print(f"  {k:28s} {best[k]:8.0f}  {best[k] / one:5.2f}x  median {med[k] / med['1 worker']:5.2f}x"
                  f"   (rounds: {' '.join('%.0f' % x for x in got[k])})")
        d = best["2 workers, default"]
        print(f"  default 2 workers / 1 worker: {d / one:.2f}x (median {med['2 workers, default'] / med['1 worker']:.2f}x); "
              f"ceiling {ceil / one:.2f}x; the default reaches {d / ceil:.0%} of the ceiling "
              f"(median {med['2 workers, default'] / med['2 x 1 worker, concurrently']:.0%})")
        print("  sgemm roof of one core before each round, GFLOP/s: " + " ".join("%.0f" % x for x in roof))
        rows.append({"bench": "default_exchange", "model": model, "rounds": args.rounds,
                     "one": round(one), "default_2": round(d),
                     "allreduce_auto_2": round(best["2 workers, allreduce:auto"]), "ceiling_2": round(ceil),
                     "scaling": round(d / one, 3), "ceiling": round(ceil / one, 3),
                     "share_of_ceiling": round(d / ceil, 3),
                     "median_scaling": round(med["2 workers, default"] / med["1 worker"], 3),
                     "sgemm_gflops_per_round": roof})
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
