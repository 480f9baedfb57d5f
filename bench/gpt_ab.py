#!/usr/bin/python3
"""Two builds of dtrain on gpt's training step, side by side: did a change
to the layers make the step faster?

Trains `gpt` (4 blocks, 4 heads, width 256, T 128, fp32, batch 32, AdamW)
with an OLD and a NEW dtrain binary on one thread (--threads 1, OpenBLAS
and OpenMP pinned to 1), interleaved run after run, and prints per binary
the median of the rounds of two figures and NEW/OLD:

  tokens/s   the epoch line's (wall clock of the training steps, the first
             step included, the evaluation not): what bench/gpt_vs_pytorch.py
             reports, and what a loaded host moves most;
  CPU s/step the process's CPU time (getrusage of the child) of a run of
             1 + STEPS steps less that of a 1-step run, over STEPS: start-up,
             the first step's page faults and the evaluation cancel, and
             time spent waiting for the core (other processes) is not
             counted, so this is the figure to trust on a shared host.

The text is the first 64,000 bytes of the fortunes file `cookie` (57,600
for training, enough for 14 steps of 32 windows; a short held-out part,
so that the evaluation pass is short).

usage: bench/gpt_ab.py OLD_DTRAIN NEW_DTRAIN [--rounds 5] [--steps 6]
       (e.g. a copy of the old build: cp build/dtrain /tmp/dtrain-old)"""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile

ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
T, BATCH = 128, 32


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(binary, steps, text, d):
    """(tokens/s of the epoch line, CPU seconds of the whole process)."""
    metrics = os.path.join(d, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    c0 = child_cpu()
    out = subprocess.run([binary, "train", "--model", "gpt", "--data", "text:" + text, "--seq-len",
                          str(T), "--batch", str(BATCH), "--threads", "1", "--optimizer", "adamw",
                          "--lr", "1e-3", "--max-steps", str(steps), "--seed", "1", "--quiet",
                          "--metrics", metrics], env=ENV, capture_output=True, text=True)
    cpu = child_cpu() - c0
    if out.returncode:
        sys.exit(f"{binary} failed: {out.stderr.strip()}")
    for line in open(metrics):
        rec = json.loads(line)
        if rec.get("event") == "epoch":
            return rec["tokens_per_sec"], cpu
    sys.exit(f"{binary}: no epoch line in its metrics")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old"), ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    if not 1 <= args.steps <= 13:
        sys.exit("--steps: the text holds 14 steps of 32 windows: use 1 to 13")
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "text.txt")
        open(text, "wb").write(open("/usr/share/games/fortunes/cookie", "rb").read()[:64000])
        tok = {"old": [], "new": []}
        cps = {"old": [], "new": []}
        for r in range(args.rounds):
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                binary = getattr(args, name)
                _, cpu1 = run(binary, 1, text, d)
                t, cpun = run(binary, 1 + args.steps, text, d)
                tok[name].append(t)
                cps[name].append((cpun - cpu1) / args.steps)
            print(f"round {r + 1}: tokens/s old {tok['old'][-1]:.0f} new {tok['new'][-1]:.0f}; "
                  f"CPU s/step old {cps['old'][-1]:.3f} new {cps['new'][-1]:.3f}; "
                  f"load {open('/proc/loadavg').read().split()[0]}", flush=True)
        mt = {k: statistics.median(v) for k, v in tok.items()}
        mc = {k: statistics.median(v) for k, v in cps.items()}
        print(f"gpt 1 thread, median of {args.rounds}: tokens/s old {mt['old']:.0f} new {mt['new']:.0f} "
              f"(new/old {mt['new'] / mt['old']:.3f}); CPU s/step old {mc['old']:.3f} new "
              f"{mc['new']:.3f} (old/new {mc['old'] / mc['new']:.3f}: the step's speed-up)")


if __name__ == "__main__":
    sys.exit(main())
