#!/usr/bin/python3
"""Megatron's tensor parallelism on a wide GPT against one worker.

A GPT of width W (default 1024: heads of 64, an MLP of 4W; 2 blocks of
12 W^2 parameters, 25.5 M for W 1024, plus the tables) over T
positions of the fortunes text, batch B, AdamW: tokens/s of one worker on
one core (the yardstick), one worker with 2 BLAS threads (both cores in
one process), and tp 2 (attention split by heads and the MLP by columns
then rows, one core a rank: four allreduces of B x T x W floats a block a
step, two each way). Rows are interleaved round after round (the machine
drifts and is shared): the best round and the median, and the ratio of tp
2 to the yardstick.

usage: bench/gpt_tp.py [--width 1024] [--blocks 2] [--seq 64] [--batch 4]
[--steps 6] [--rounds 3]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
TEXT = "/usr/share/games/fortunes/cookie"
TEXT_BYTES = 24000  # the first bytes of it: the held-out tenth evaluated each run stays short


def model_text(width, blocks, seq):
    heads = max(1, width // 64)
    lines = [f"embedding vocab=256 units={width} name=tok", f"posembed positions={seq} name=x0"]
    for b in range(blocks):
        lines += ["layernorm", f"attention heads={heads}", f"add with=x{b} name=a{b}", "layernorm",
                  f"linear units={4 * width}", "gelu", f"linear units={width}", f"add with=a{b} name=x{b + 1}"]
    lines += ["layernorm", "lmhead vocab=256 tie=tok"]
    return "\n".join(lines) + "\n"


def run(model, text, a, opts):
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        out = subprocess.run([DTRAIN, "train", "--quiet", "--model", model, "--data", "text:" + text,
                              "--seq-len", str(a.seq), "--batch", str(a.batch), "--epochs", "1",
                              "--max-steps", str(a.steps), "--seed", "1", "--optimizer", "adamw",
                              "--lr", "1e-3", "--metrics", m, *opts],
                             env=ENV, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"dtrain {' '.join(opts)} failed: {out.stderr.strip()}")
        ep = [e for e in map(json.loads, open(m)) if e["event"] == "epoch"][-1]
        return ep["tokens_per_sec"], ep["bytes_sent_per_step"], ep["compute_sec"] / ep["step"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rows = [("1 worker, 1 thread", ["--workers", "1", "--threads", "1"]),
            ("1 worker, 2 BLAS threads", ["--workers", "1", "--threads", "2"]),
            ("tp 2 (1 thread a rank)", ["--workers", "2", "--tp", "2", "--threads", "1"])]
    tps = {n: [] for n, _ in rows}
    comp = {n: [] for n, _ in rows}
    sent = {}
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "wide.model")
        open(model, "w").write(model_text(a.width, a.blocks, a.seq))
        text = os.path.join(d, "text.txt")
        with open(TEXT, "rb") as f:
            open(text, "wb").write(f.read(TEXT_BYTES))
        for r in range(a.rounds):
            for name, opts in (rows if r % 2 == 0 else rows[::-1]):
                t, b, c = run(model, text, a, opts)
                tps[name].append(t)
                comp[name].append(c)
                sent[name] = b
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    one, one_med = max(tps[rows[0][0]]), statistics.median(tps[rows[0][0]])
    print(f"gpt width {a.width}, {a.blocks} blocks, heads of 64, T {a.seq}, batch {a.batch}, "
          f"{a.steps} steps, {a.rounds} rounds (load avg {load} at the end)")
    print(f"{'':28s} {'tokens/s best':>14s} {'median':>8s} {'x yardstick':>12s} {'bytes/step':>11s} "
          f"{'compute s/step (best)':>22s}")
    for name, _ in rows:
        best, med = max(tps[name]), statistics.median(tps[name])
        print(f"{name:28s} {best:14.0f} {med:8.0f} {best / one:6.2f} ({med / one_med:4.2f}) "
              f"{sent[name]:11.0f} {min(comp[name]):22.3f}")
    print(f"ratio tp 2 / one worker on one core: {max(tps[rows[2][0]]) / one:.2f} "
          f"(medians {statistics.median(tps[rows[2][0]]) / one_med:.2f})")


if __name__ == "__main__":
    main()
