#!/usr/bin/python3
"""dtrain plan --predict against measured step times (issue 33).

For each configuration, `dtrain plan --predict OPTIONS` and `dtrain train
OPTIONS --metrics ...` are run on the same command line; the measured step
is the epoch line's epoch_sec / step (one epoch of --max-steps steps, the
first step's start-up included, which the prediction of a steady step
leaves out). A run has --steps steps, or more where the first prediction's
step is short: enough for --min-sec seconds (a 2 ms step over 12 steps is
mostly the first step's start-up and the host's jitter). Each row is the
median of --repeats predictions and runs, alternated (the machine's load
drifts); the summary also gives the runs' own spread (a row's slowest run
less its fastest, over their median): how far measurement falls from
measurement, the floor under any prediction's error. The
yardstick is the measurement itself: each row prints the ratio
predicted / measured and the error |predicted - measured| / measured; the
summary gives the median and the 90th percentile of the errors, overall and
per family, with the issue's targets (median <= 10%, p90 <= 25%).

The configurations are the families `dtrain describe` covers (allreduce
ring, rhd, tree, shm; shared memory; PS sync and SSP; local SGD, D-PSGD,
EASGD; GPipe, 1F1B and interleaved, and without a flush PipeDream and
2BW (their steady step); tensor; dp x pp x tp; four codecs), each
on `local` under emulated 100 Mbit/s, 1 Gbit/s and 10 Gbit/s links, and
(--mpi) a few on `mpi` under mpirun; allreduce:hier and auto with two
emulated hosts, and auto on one. Not covered: asynchronous PS (its pool
of batches is an expectation).

DTRAIN (the environment) names the binary (default build/dtrain): a copy
keeps a rebuild from pulling it away mid-run. --baseline BINARY predicts
each row with that binary too, in the same repeats (one measurement for
both: a change to the model compared on the same runs, at the same load),
and prints its ratio and error beside the row's and both summaries.

usage: bench/plan_accuracy.py [--steps 12] [--min-sec 0.5] [--steady] [--nets 100Mbit,1Gbit,10Gbit]
                              [--only SUBSTRING] [--mpi] [--profile FILE]
                              [--json FILE] [--baseline BINARY]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.environ.get("DTRAIN", os.path.join(ROOT, "build", "dtrain"))
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--mca",
          "btl_vader_single_copy_mechanism", "none"]

FOUR = "dense units=256\nrelu\n" * 4 + "dense units=10\n"

# (family, name, options): workers included
CONFIGS = [
    ("allreduce", "ring-4", "--workers 4 --exchange allreduce:ring"),
    ("allreduce", "rhd-4", "--workers 4 --exchange allreduce:rhd"),
    ("allreduce", "tree-4", "--workers 4 --exchange allreduce:tree"),
    ("allreduce", "ring-2-lenet", "--workers 2 --exchange allreduce:ring --model lenet"),
    ("allreduce", "shm-2", "--workers 2 --exchange allreduce:shm"),
    ("shared", "shared-sync-2", "--workers 2 --exchange shared"),
    ("ps", "ps1-sync-2", "--workers 2 --exchange ps:1"),
    ("ps", "ps2-sync-2", "--workers 2 --exchange ps:2"),
    ("ps", "ps1-ssp2-2", "--workers 2 --exchange ps:1 --schedule ssp:2"),
    ("ps", "ps2-ssp2-2", "--workers 2 --exchange ps:2 --schedule ssp:2"),
    ("ps", "petuum-2", "--workers 2 --preset petuum"),
    ("decentral", "local-sgd-4", "--workers 4 --preset local-sgd"),
    ("decentral", "d-psgd-3", "--workers 3 --preset d-psgd"),
    ("decentral", "easgd-2", "--workers 2 --preset easgd"),
    ("pipeline", "gpipe-pp2-m4", "--workers 2 --pp 2 --micro-batches 4 --partition 0,1"),
    ("pipeline", "1f1b-pp2-m4", "--workers 2 --pp 2 --micro-batches 4 --partition 0,1 --pipe-schedule 1f1b"),
    ("pipeline", "interleaved-pp2-m4", "--workers 2 --pp 2 --micro-batches 4 --pipe-schedule interleaved:2 --partition macs --model FOUR"),
    ("pipeline", "pipedream-pp2", "--workers 2 --pp 2 --micro-batches 1 --partition 0,1 --pipe-schedule pipedream"),
    ("pipeline", "2bw-pp2-m4", "--workers 2 --pp 2 --micro-batches 4 --partition 0,1 --pipe-schedule 2bw"),
    ("tensor", "tp-2", "--workers 2 --tp 2"),
    ("hybrid", "dp2-pp2", "--workers 4 --pp 2 --micro-batches 2 --partition 0,1"),
    ("hybrid", "pp2-tp2", "--workers 4 --pp 2 --tp 2 --micro-batches 2 --partition macs --model FOUR"),
    ("hybrid", "dp2-tp2", "--workers 4 --tp 2 --exchange allreduce:ring"),
    ("codec", "fp16-2", "--workers 2 --exchange allreduce:ring --compress fp16"),
    ("codec", "int8-2", "--workers 2 --exchange allreduce:ring --compress int8"),
    ("codec", "topk-2", "--workers 2 --exchange allreduce:ring --compress topk:0.01"),
    ("codec", "powersgd-2", "--workers 2 --exchange allreduce:ring --compress powersgd:4"),
    # HOSTS: the link's --net gets hosts=2 (its bandwidth then between the hosts)
    ("allreduce", "hier-2x2", "--workers 4 --exchange allreduce:hier HOSTS"),
    ("allreduce", "auto-2x2", "--workers 4 --exchange allreduce:auto HOSTS"),
    ("allreduce", "auto-4", "--workers 4 --exchange allreduce:auto"),
]
MPI_CONFIGS = ["ring-4", "tree-4", "ps1-sync-2", "gpipe-pp2-m4", "d-psgd-3"]


def options(opts, four, steps, net):
    hosts = "HOSTS" in opts
    o = opts.replace("FOUR", four).replace("HOSTS", "").split()
    base = ["--data", "fashion-mnist", "--batch", "32", "--epochs", "1", "--max-steps", str(steps),
            "--seed", "1", "--quiet"]
    if "--model" not in o:
        base += ["--model", "mlp"]
    if net and net != "none":
        o += ["--net", ("hosts=2," if hosts else "") + f"bandwidth={net},latency=50us"]
    elif hosts and net != "":  # on local without a link: the hosts alone (mpi finds its own)
        o += ["--net", "hosts=2"]
    return base + o


def predict(o, profile, binary=None):
    cmd = [binary or DTRAIN, "plan", "--predict"] + o + (["--profile", profile, "--force"] if profile else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    return json.loads(p.stdout.splitlines()[-1]), None


def epoch_sec(o, d, mpi_ranks=0):
    """A run's one epoch: its seconds and steps (or None and why)."""
    m = os.path.join(d, "m.jsonl")
    if os.path.exists(m):
        os.remove(m)
    cmd = [DTRAIN, "train"] + o + ["--metrics", m]
    if mpi_ranks:
        cmd = MPIRUN + ["-np", str(mpi_ranks)] + cmd + ["--comm", "mpi"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
    ep = [json.loads(l) for l in open(m) if '"event":"epoch"' in l]
    return (ep[0]["epoch_sec"], ep[0]["step"]), None


def measure(o, d, mpi_ranks=0, steady=False):
    """The measured step: the epoch's seconds over its steps (the first
    step's start-up in it); steady: the second N steps of a 2N-step run
    (its epoch less an N-step run's, over N), the start-up left out, as the
    prediction is a steady step."""
    got, err = epoch_sec(o, d, mpi_ranks)
    if err or not steady:
        return (got[0] / got[1] if got else None), err
    i = o.index("--max-steps") + 1
    twice, err = epoch_sec(o[:i] + [str(2 * int(o[i]))] + o[i + 1:], d, mpi_ranks)
    if err:
        return None, err
    return (twice[0] - got[0]) / (twice[1] - got[1]), None


def steps_for(step_sec, least, min_sec):
    """Steps for a run of at least min_sec by the prediction (and at least
    `least`, at most an epoch's 1,875): a few-millisecond step measured over
    12 steps is mostly the first step's start-up and the host's jitter."""
    if step_sec <= 0:
        return least
    return max(least, min(1875, int(min_sec / step_sec + 0.999)))


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12, help="at least this many steps a run")
    ap.add_argument("--min-sec", type=float, default=0.5,
                    help="and enough steps for this many seconds by the prediction (0: --steps only)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nets", default="100Mbit,1Gbit,10Gbit")
    ap.add_argument("--only", default="", help="rows whose name holds one of these (comma-separated)")
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--profile")
    ap.add_argument("--json")
    ap.add_argument("--steady", action="store_true",
                    help="measure the steady step: a 2N-step run's epoch less an N-step run's, over N")
    ap.add_argument("--baseline", help="a second dtrain binary whose predictions are compared")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        four = os.path.join(d, "four.model")
        open(four, "w").write(FOUR)
        # shm sends nothing for an emulated link to delay (--net is refused with it): run bare
        runs = [(f, n, c, net, 0) for f, n, c in CONFIGS
                for net in (["none"] if "allreduce:shm" in c else a.nets.split(","))]
        if a.mpi:
            runs += [(f, n, c, "", -1) for f, n, c in CONFIGS if n in MPI_CONFIGS]
        print(f"{'family':10} {'config':20} {'link':8} {'predicted_s':>11} {'measured_s':>11} {'ratio':>6} {'error':>6}"
              + (f" {'baseline_s':>11} {'ratio':>6} {'error':>6}" if a.baseline else ""))
        print("load", open("/proc/loadavg").read().split()[0], flush=True)
        for fam, name, opts, net, mpi in runs:
            if a.only and not any(x in name for x in a.only.split(",")):
                continue
            o = options(opts, four, a.steps, net)
            first, err = predict(o + (["--comm", "mpi"] if mpi else []), a.profile)
            if first and a.min_sec > 0:  # short steps: enough of them to outlast the host's jitter
                o = options(opts, four, steps_for(first["step_sec"], a.steps, a.min_sec), net)
            preds, meass, bases = [], [], []
            for _ in range(a.repeats if first else 0):  # alternated: the machine's load drifts
                plan, err = predict(o + (["--comm", "mpi"] if mpi else []), a.profile)
                if plan is None:
                    break
                if a.baseline:
                    base, err = predict(o + (["--comm", "mpi"] if mpi else []), a.profile, a.baseline)
                    if base is None:
                        break
                    bases.append(base["step_sec"])
                meas, err = measure(o, d, plan["ranks"] if mpi else 0, a.steady)
                if meas is None:
                    break
                preds.append(plan["step_sec"])
                meass.append(meas)
            if err:
                print(f"{fam:10} {name:20} {net or 'mpi':8} skipped: {err}")
                continue
            p, meas = statistics.median(preds), statistics.median(meass)
            e = abs(p - meas) / meas
            rows.append({"family": fam, "config": name, "link": net or "mpi", "predicted": p,
                         "measured": meas, "error": e, "steps": int(o[o.index("--max-steps") + 1]),
                         "spread": (max(meass) - min(meass)) / meas})
            extra = ""
            if bases:
                b = statistics.median(bases)
                rows[-1].update(baseline=b, baseline_error=abs(b - meas) / meas)
                extra = f" {b:11.5f} {b / meas:6.2f} {rows[-1]['baseline_error']:6.1%}"
            print(f"{fam:10} {name:20} {net or 'mpi':8} {p:11.5f} {meas:11.5f} {p / meas:6.2f} {e:6.1%}" + extra,
                  flush=True)
    errs = [r["error"] for r in rows]
    print(f"\n{len(rows)} runs: median error {statistics.median(errs):.1%} (target <= 10%), "
          f"90th percentile {pct(errs, 0.9):.1%} (target <= 25%)")
    for fam in dict.fromkeys(r["family"] for r in rows):
        fe = [r["error"] for r in rows if r["family"] == fam]
        print(f"  {fam:10} {len(fe):3} runs: median {statistics.median(fe):.1%}, p90 {pct(fe, 0.9):.1%}")
    spreads = [r["spread"] for r in rows]
    if a.repeats > 1 and spreads:  # the yardstick of the errors: how far runs fall from each other
        print(f"the measurements' own spread (a row's slowest run less its fastest, over their median): "
              f"median {statistics.median(spreads):.1%}, 90th percentile {pct(spreads, 0.9):.1%}")
    be = [r["baseline_error"] for r in rows if "baseline_error" in r]
    if be:
        print(f"baseline ({a.baseline}): median error {statistics.median(be):.1%}, "
              f"90th percentile {pct(be, 0.9):.1%}")
    print("load", open("/proc/loadavg").read().split()[0])
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
