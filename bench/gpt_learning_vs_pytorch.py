#!/usr/bin/python3
"""Does dtrain's gpt learn as PyTorch 1.13 does? The same model (the
module of bench/gpt_vs_pytorch_grads.py, fp32), the SAME initial weights,
the SAME batches in the same order and the same AdamW (lr 1e-3, betas
0.9/0.999, eps 1e-8, weight decay 0.01 on matrices and tables, none on
norms and biases: dtrain's rule) train --steps steps on the fortunes
corpus; both report the held-out validation loss in nats per token (the
mean over every validation window, as dtrain's evaluation). Passes when
they are within --tol (0.02) nats.

How each thing is made the same, with nothing added to dtrain:
- weights: `dtrain train --lr 0 --max-steps 1 --checkpoint init.st` with
  the run's seed writes its initial weights (AdamW at lr 0 moves nothing);
  they are loaded into the PyTorch model by docs/MODEL_FORMAT.md's mapping;
- batches: dtrain's order is a pure function of (seed, epoch)
  (src/data/shuffle.c: xoshiro256** seeded through splitmix64, Fisher-Yates
  with Lemire's bound); it is recomputed here, so step k takes windows
  order[k·B .. k·B+B) of the training split, as one dtrain worker does;
- the check that they are the same: the first step's loss (the weights
  run's training loss, batch 0 at the initial weights) must agree to 1e-5
  relative; the batch order past it is the same permutation of epoch 0 (at
  30 steps the mean training losses agreed to 6 digits). The mean training
  loss over the steps is printed with its relative difference, not judged:
  two fp32 trajectories part by rounding (1.7e-4 at 60 steps, 1.7e-3 at
  300; PyTorch against itself from weights perturbed by 1e-7: 1.5e-2).

The corpus: the plain files of /usr/share/games/fortunes (no .dat, no
links) concatenated in name order, written to one file both read.

usage: bench/gpt_learning_vs_pytorch.py [--steps 300] [--batch 32] [--tol 0.02] [--perturb X]
The issue's scale is --steps 300 (PyTorch 1.13 reached 2.71 nats there).
Run from the repository root after `make`; DTRAIN=path picks another binary."""
import argparse, json, os, subprocess, sys, tempfile, time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from gpt_vs_pytorch_grads import GPT, mapping, read_safetensors  # noqa: E402

DTRAIN = os.environ.get("DTRAIN", os.path.join(ROOT, "build", "dtrain"))  # a copy outlives rebuilds
M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9e3779b97f4a7c15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return x, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Xoshiro:  # src/core/rng.c
    def __init__(self, seed):
        self.s, x = [], seed
        for _ in range(4):
            x, z = splitmix64(x)
            self.s.append(z)

    def next(self):
        s = self.s
        result, t = (rotl((s[1] * 5) & M64, 7) * 9) & M64, (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        return ((self.next() >> 32) * n) >> 32


def derive(seed, stream, index):
    _, a = splitmix64((seed ^ (stream * 0xd1342543de82ef95)) & M64)
    _, z = splitmix64((a ^ (index * 0x9e3779b97f4a7c15)) & M64)
    return z


def epoch_order(seed, epoch, n):  # src/data/shuffle.c: data_epoch_order
    order, r = list(range(n)), Xoshiro(derive(seed, 0x65706f6368, epoch))
    for i in range(n, 1, -1):
        j = r.below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def batches(seed, n, B, steps):
    """Window indices of each step, as one dtrain worker takes them."""
    out, epoch = [], 0
    while len(out) < steps:
        order = epoch_order(seed, epoch, n)
        out += [order[k:k + B] for k in range(0, n, B)][:steps - len(out)]
        epoch += 1
    return out


def corpus(path):
    d = "/usr/share/games/fortunes"
    names = sorted(f for f in os.listdir(d) if not f.endswith(".dat") and
                   not os.path.islink(os.path.join(d, f)) and os.path.isfile(os.path.join(d, f)))
    with open(path, "wb") as out:
        for f in names:
            out.write(open(os.path.join(d, f), "rb").read())
    return len(names)


def start_dtrain(text, args, d):
    """dtrain's run, started in the background: it trains while PyTorch does
    (one thread each), so the two share the machine's cores."""
    metrics = os.path.join(d, "m.jsonl")
    proc = subprocess.Popen([DTRAIN, "train", "--model", "gpt", "--data", "text:" + text,
                             "--seq-len", str(args.seq_len), "--batch", str(args.batch),
                             "--optimizer", "adamw", "--lr", "1e-3", "--seed", str(args.seed),
                             "--threads", str(args.threads), "--max-steps", str(args.steps),
                             "--quiet", "--metrics", metrics], stdout=subprocess.DEVNULL)
    return proc, metrics, time.perf_counter()


def finish_dtrain(run):
    proc, metrics, t0 = run
    if proc.wait() != 0:
        sys.exit(f"dtrain train failed (exit {proc.returncode})")
    sec = time.perf_counter() - t0
    rec = next(r for r in map(json.loads, open(metrics)) if r.get("event") == "epoch")
    return rec["train_loss"], rec["test_nats_per_token"], sec


def train_pytorch(weights, data, args):
    """The same gpt in PyTorch from dtrain's initial weights, on dtrain's
    batches: (mean training loss, validation loss, seconds, split sizes)."""
    T, B = args.seq_len, args.batch
    windows = (len(data) - 1) // T  # src/data/text.c: the last tenth of the windows held out
    held = windows // 10
    ntrain = windows - held
    x_all = torch.from_numpy(data[:windows * T].reshape(windows, T))
    y_all = torch.from_numpy(data[1:windows * T + 1].reshape(windows, T))

    L = sum(1 for k in weights if k.startswith("layers.") and k.endswith(".qkv.weight"))
    V, C = weights["layers.0.weight"].shape
    model, names = GPT(V, weights["layers.1.weight"].shape[0], C, 4, L), mapping(L)
    with torch.no_grad():
        for tname, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[names[tname]]))
        if args.perturb:
            torch.manual_seed(0)
            for p in model.parameters():
                p.mul_(1 + args.perturb * torch.randn_like(p))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": keep, "weight_decay": 0.0}], lr=1e-3)
    t0, losses = time.perf_counter(), []
    for idx in batches(args.seed, ntrain, B, args.steps):
        loss = F.cross_entropy(model(x_all[idx]).reshape(-1, V), y_all[idx].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    sec = time.perf_counter() - t0
    with torch.no_grad():
        vl = [F.cross_entropy(model(x_all[i:i + B]).reshape(-1, V), y_all[i:i + B].reshape(-1),
                              reduction="sum").item() for i in range(ntrain, windows, B)]
    return losses, sum(vl) / (held * T), sec, (ntrain, held)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tol", type=float, default=0.02)
    ap.add_argument("--perturb", type=float, default=0.0,
                    help="PyTorch's initial weights times 1 + X N(0,1): the yardstick of how far "
                         "rounding alone parts two runs (compare with a run without it)")
    args = ap.parse_args()
    T, B = args.seq_len, args.batch
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as d:
        text, init = os.path.join(d, "fortunes.txt"), os.path.join(d, "init.st")
        nfiles = corpus(text)
        subprocess.run([DTRAIN, "train", "--model", "gpt", "--data", "text:" + text, "--seq-len",
                        str(T), "--batch", str(B), "--optimizer", "adamw", "--lr", "0", "--seed",
                        str(args.seed), "--max-steps", "1", "--quiet", "--checkpoint", init,
                        "--metrics", init + ".jsonl"], check=True, stdout=subprocess.DEVNULL)
        weights, _ = read_safetensors(init)
        d_first = next(r for r in map(json.loads, open(init + ".jsonl"))
                       if r.get("event") == "epoch")["train_loss"]
        data = np.frombuffer(open(text, "rb").read(), dtype=np.uint8).astype(np.int64)
        run = start_dtrain(text, args, d)
        try:
            losses, p_val, p_sec, (ntrain, held) = train_pytorch(weights, data, args)
        except BaseException:
            run[0].kill()
            raise
        d_train, d_val, d_sec = finish_dtrain(run)

    print(f"gpt on fortunes ({nfiles} files, {len(data)} bytes; {ntrain} training windows, {held} "
          f"held out), batch {B}, T {T}, AdamW 1e-3, {args.steps} steps, seed {args.seed}, "
          f"{args.threads} thread(s)" + (f", PyTorch's weights perturbed by {args.perturb:g}"
                                         if args.perturb else ""))
    p_first, p_train = losses[0], sum(losses) / len(losses)
    drift = abs(d_train - p_train) / abs(p_train)
    print(f"  first step's loss (same weights, same batch): dtrain {d_first:.6f}  pytorch {p_first:.6f}")
    print(f"  mean training loss over the steps: dtrain {d_train:.6f}  pytorch {p_train:.6f}  "
          f"(relative difference {drift:.1e})")
    print(f"  validation loss (nats/token): dtrain {d_val:.5f}  pytorch {p_val:.5f}  "
          f"difference {d_val - p_val:+.5f} (bound {args.tol})")
    print(f"  wall time, side by side: dtrain {d_sec:.0f} s (with its evaluation), pytorch "
          f"{p_sec:.0f} s training")
    same_start = abs(d_first - p_first) <= 1e-5 * abs(p_first)
    if not same_start:
        print("  the first losses differ: not the same weights or first batch")
    ok = same_start and abs(d_val - p_val) <= args.tol
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
