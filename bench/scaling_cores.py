#!/usr/bin/python3
"""Synchronous data parallelism on one many-core host (issue 35's 16-core
figures): for each worker count W (weak scaling, batch 64 per worker, the
same number of steps), in interleaved rounds,
  - dtrain W workers with no --exchange (the default: shared sync on local);
  - the same with --bind core (each rank's thread pinned to a CPU);
  - dtrain W workers --exchange allreduce:auto (the allreduce path);
  - W independent 1-worker dtrain processes at once: what W cores give with
    no exchange at all (the machine's ceiling);
  - PyTorch DDP (gloo, loopback), W processes of one thread each;
and one dtrain worker alone. Prints each one's samples/s (best round, and
the median), its speed-up over one worker and its share of the ceiling;
for dtrain's three, also the share of the epoch rank 0 spent in the exchange
and its barriers (comm_sec / (compute_sec + comm_sec) of the metrics,
median over the rounds), which says whether a loss is the exchange.
The goal is >= 90% of the ceiling at 16 workers.
Data: --data synthetic on both sides (Fashion-MNIST's shapes; speed only),
so that a host without the data set runs it.
Env: DTRAIN_PY, the python with torch (default /usr/bin/python3).
needs: make (build/dtrain)
usage: bench/scaling_cores.py [--workers 2,4,8,16] [--rounds 3] [--model mlp] [--steps 300] [--no-ddp]"""
import argparse, json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_vs_pytorch as dv  # noqa: E402

dv.PY = os.environ.get("DTRAIN_PY", dv.PY)


def timed(metrics, shares):
    """samples/s of a run; its exchange share appended to shares."""
    e = metrics[0]
    shares.append(e["comm_sec"] / max(e["compute_sec"] + e["comm_sec"], 1e-9))
    return dv.rate(metrics)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="2,4,8,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="mlp", choices=["mlp", "lenet"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--no-ddp", action="store_true", help="dtrain only (no torch on this host)")
    args = ap.parse_args()
    common = ["--model", args.model, "--data", "synthetic", "--batch", 64, "--lr", 0.05,
              "--momentum", 0.9, "--max-steps", args.steps]
    one = []
    print(f"CPU: {dv.cpu_name()}, {os.cpu_count()} cores; {args.model}, batch 64 per worker, "
          f"{args.steps} steps, best of {args.rounds} interleaved rounds (samples/s)")
    rows = []
    for w in map(int, args.workers.split(",")):
        configs = {
            "default": lambda: timed(dv.dtrain(*common, "--workers", w), share["default"]),
            "default, bound": lambda: timed(dv.dtrain(*common, "--workers", w, "--bind", "core"),
                                            share["default, bound"]),
            "allreduce:auto": lambda: timed(dv.dtrain(*common, "--workers", w, "--exchange",
                                                      "allreduce:auto"), share["allreduce:auto"]),
            "ceiling": lambda: sum(map(dv.rate, dv.dtrain_concurrently(w, *common))),
        }
        if not args.no_ddp:
            configs["pytorch ddp"] = lambda: dv.pytorch_ddp(
                "--model", args.model, "--procs", w, "--batch", 64, "--max-steps", args.steps,
                "--synthetic")["samples_per_sec"]
        share = {"default": [], "default, bound": [], "allreduce:auto": []}
        got = {k: [] for k in configs}
        for _ in range(args.rounds):
            one.append(dv.rate(dv.dtrain(*common)))
            for k, f in configs.items():
                got[k].append(f())
        base, ceil = max(one), max(got["ceiling"])
        print(f"{w} workers (1 worker: {base:.0f} samples/s, best of {len(one)} so far):")
        for k, v in got.items():
            print(f"  {k:16s} {max(v):9.0f}  {max(v) / base:6.2f}x one worker  {max(v) / ceil:5.0%} of the ceiling"
                  f"  (median {statistics.median(v) / statistics.median(got['ceiling']):5.0%}; rounds: "
                  f"{' '.join('%.0f' % x for x in v)})"
                  + (f"  exchange {statistics.median(share[k]):4.0%} of the epoch" if k in share else ""))
        row = {"bench": "scaling_cores", "cpu": dv.cpu_name(), "model": args.model, "workers": w,
               "one": round(base), **{k.replace(", ", "_").replace(" ", "_"): round(max(v)) for k, v in got.items()},
               "default_of_ceiling": round(max(got["default"]) / ceil, 3),
               "bound_of_ceiling": round(max(got["default, bound"]) / ceil, 3),
               "allreduce_of_ceiling": round(max(got["allreduce:auto"]) / ceil, 3),
               "default_exchange_share": round(statistics.median(share["default"]), 3),
               "allreduce_exchange_share": round(statistics.median(share["allreduce:auto"]), 3)}
        if "pytorch ddp" in got:
            row["default_over_ddp"] = round(max(got["default"]) / max(got["pytorch ddp"]), 3)
        rows.append(row)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
