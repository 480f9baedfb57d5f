#!/usr/bin/python3
"""Priority scheduling on the parameter-server path (issue 22): synchronous
ps:K with --comm-order fifo, priority (ByteScheduler) and tictac (TicTac's
TAC), 4 workers, under an emulated link (--net, 1 Gbit/s by default), in
interleaved rounds so that the three orders see the same host load.
For each model: ms per step (the epoch's seconds over its steps; best and
median round) and the ratio to fifo of the same round (median over rounds).
The weights are fifo's bit for bit (tests/e2e_ps_priority.sh); only the
time moves.
needs: make (build/dtrain)
usage: bench/ps_priority.py [--rounds 5] [--models mlp,lenet] [--steps 40]
       [--servers 2] [--partition-kb 1024] [--credit-kb N] [--net latency=50us,bandwidth=1Gbit]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

DTRAIN = os.environ.get("DTRAIN", "build/dtrain")
ORDERS = ("fifo", "priority", "tictac")


def ms_per_step(model, order, args, tmp):
    metrics = os.path.join(tmp, f"{model}-{order}.jsonl")
    cmd = [DTRAIN, "train", "--model", model, "--workers", "4", "--exchange", f"ps:{args.servers}",
           "--epochs", "1", "--max-steps", str(args.steps), "--batch", "64", "--lr", "0.05",
           "--momentum", "0.9", "--seed", "1", "--net", args.net, "--quiet", "--metrics", metrics,
           "--comm-order", order]
    if order != "fifo":
        cmd += ["--partition-kb", str(args.partition_kb)]
        if args.credit_kb:
            cmd += ["--credit-kb", str(args.credit_kb)]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: failed: {r.stderr.strip()[-300:]}")
    epoch = [e for e in map(json.loads, open(metrics)) if e["event"] == "epoch"][0]
    return 1000 * epoch["epoch_sec"] / args.steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="mlp,lenet")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--partition-kb", type=int, default=1024)
    ap.add_argument("--credit-kb", type=int, default=0, help="0: dtrain's default")
    ap.add_argument("--net", default="latency=50us,bandwidth=1Gbit")
    args = ap.parse_args()
    print(f"# {DTRAIN} train --workers 4 --exchange ps:{args.servers} --max-steps {args.steps} "
          f"--batch 64 --net {args.net} --comm-order ORDER [--partition-kb {args.partition_kb}"
          f"{' --credit-kb %d' % args.credit_kb if args.credit_kb else ''}]")
    print(f"# load average before: {' '.join('%.2f' % x for x in os.getloadavg())} "
          f"({os.cpu_count()} cores); emulated network")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            got = {o: [] for o in ORDERS}
            for _ in range(args.rounds):
                for o in ORDERS:
                    got[o].append(ms_per_step(model, o, args, tmp))
            print(f"{model}: ms/step, {args.rounds} interleaved rounds")
            print(f"  {'order':10s} {'best':>8s} {'median':>8s} {'vs fifo':>8s}   rounds")
            for o in ORDERS:
                ratio = statistics.median(f / x for f, x in zip(got["fifo"], got[o]))
                print(f"  {o:10s} {min(got[o]):8.1f} {statistics.median(got[o]):8.1f} {ratio:7.2f}x"
                      f"   {' '.join('%.1f' % x for x in got[o])}")
                rows.append({"bench": "ps_priority", "model": model, "order": o,
                             "best_ms": round(min(got[o]), 2),
                             "median_ms": round(statistics.median(got[o]), 2),
                             "speedup_vs_fifo": round(ratio, 3)})
    print(f"# load average after: {' '.join('%.2f' % x for x in os.getloadavg())}")
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
