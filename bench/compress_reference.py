#!/usr/bin/python3
"""The accuracy that 1-bit SGD, top-k and DGC lose in dtrain, against what the
same codecs lose in an independent PyTorch implementation at the same
settings: is a loss dtrain's, or the method's at this length of training?

The PyTorch side simulates the workers in one process: each step, each of
the --workers workers takes its own batch of 64, computes its gradient,
encodes it through its own error-feedback memory, and the decoded messages
are averaged; the optimizer then steps on the average, as dtrain's
allreduce data parallelism does. The codecs follow the same papers and
references as src/compress/ (docs/COMPRESSION.md):

  onebit      1-bit SGD (Seide et al. 2014) laid out as CNTK's: a sign a value
              and, per column of each weight matrix, the mean of the values
              >= 0 and of those < 0; error feedback on the gradient.
  topk:R      Aji & Heafield 2017: the ceil(R n) largest magnitudes of each
              weight tensor, error feedback on the gradient; the optimizer's
              momentum applies to the averaged sparse gradient.
  dgc:R       Lin et al. 2018, as its reference (mit-han-lab): momentum
              correction (u = m u + g, v += u), top-k of v per tensor, u and
              v cleared where sent; the optimizer steps without momentum.

As in dtrain, vectors (biases) and tensors of at most 1024 values go dense
(DGC's and CNTK's rule), and the dense run is plain momentum SGD. lr 0.05,
momentum 0.9, cosine over the run, batch 64 a worker, 4 workers; mlp 5
epochs, lenet 3. Each run's loss is against the dense run of the same
implementation and seed; the two implementations differ in initialization
and data order, so their dense accuracies differ by a few tenths.

usage: bench/compress_reference.py [--models lenet,mlp] [--codecs onebit,topk:0.001,dgc:0.001]
                                   [--seeds 1,2,3] [--no-dtrain]
Run with Debian's /usr/bin/python3 (python3-torch).
"""
import argparse, math, os, sys, tempfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train import load, model  # noqa: E402  (the same models and data as the speed yardstick)
import compress  # noqa: E402  (dtrain's side: bench/compress.py's runner)

EPOCHS = {"mlp": 5, "lenet": 3}
SMALL = 1024  # src/compress/exchange.c: SMALL_TENSOR


def dense_tensor(p):
    return p.dim() < 2 or p.numel() <= SMALL


def onebit(v):
    """CNTK's 1-bit SGD on a weight tensor: the decoded message (v keeps the rest)."""
    m = v.view(v.shape[0], -1)  # rows: outputs; a column: one input's weights
    pos = m >= 0
    mean_pos = (m * pos).sum(0) / pos.sum(0).clamp(min=1)
    mean_neg = (m * ~pos).sum(0) / (~pos).sum(0).clamp(min=1)
    return torch.where(pos, mean_pos.expand_as(m), mean_neg.expand_as(m)).view_as(v)


def topk(v, ratio):
    flat = v.view(-1)
    k = max(1, math.ceil(ratio * flat.numel()))
    sel = flat.abs().topk(k).indices
    out = torch.zeros_like(flat)
    out[sel] = flat[sel]
    return out.view_as(v)


def train(name, codec, seed, workers=4, batch=64, lr0=0.05, m=0.9, data=None):
    torch.manual_seed(seed)
    (xtr, ytr), (xte, yte) = data
    net = model(name)
    params = list(net.parameters())
    kind, _, r = codec.partition(":")
    ratio = float(r) if r else 0.0
    steps_per_epoch = xtr.shape[0] // (workers * batch)
    total = steps_per_epoch * EPOCHS[name]
    zeros = lambda: [torch.zeros_like(p) for p in params]  # noqa: E731
    momentum = zeros()                                   # the optimizer's
    residual = [zeros() for _ in range(workers)]         # error feedback (DGC: v)
    velocity = [zeros() for _ in range(workers)]         # DGC's u
    lossf, step = nn.CrossEntropyLoss(), 0
    for _ in range(EPOCHS[name]):
        perm = torch.randperm(xtr.shape[0])
        for k in range(steps_per_epoch):
            lr = lr0 * 0.5 * (1 + math.cos(math.pi * step / total))
            avg = zeros()
            for w in range(workers):
                idx = perm[(k * workers + w) * batch:(k * workers + w + 1) * batch]
                net.zero_grad()
                lossf(net(xtr[idx]), ytr[idx]).backward()
                for i, p in enumerate(params):
                    g = p.grad.detach()
                    if kind == "dgc":  # every tensor carries its momentum in u
                        u = velocity[w][i].mul_(m).add_(g)
                        if dense_tensor(p):
                            avg[i] += u
                            continue
                        v = residual[w][i].add_(u)
                        sent = topk(v, ratio)
                        u.masked_fill_(sent != 0, 0)  # momentum factor masking
                    elif kind == "none" or dense_tensor(p):
                        avg[i] += g
                        continue
                    else:
                        v = residual[w][i].add_(g)
                        sent = onebit(v) if kind == "onebit" else topk(v, ratio)
                    v.sub_(sent)
                    avg[i] += sent
            with torch.no_grad():
                for i, p in enumerate(params):
                    g = avg[i] / workers
                    if kind != "dgc":
                        g = momentum[i].mul_(m).add_(g)
                    p.add_(g, alpha=-lr)
            step += 1
    with torch.no_grad():
        return (net(xte).argmax(1) == yte).float().mean().item()


def dtrain_acc(name, codec, seed, tmp):
    extra = [] if codec == "none" else ["--compress", codec]
    args = ["--model", name, "--workers", "4", "--epochs", str(EPOCHS[name]), "--batch", "64",
            "--lr", "0.05", "--momentum", "0.9", "--lr-schedule", "cosine", "--seed", str(seed),
            "--exchange", "allreduce:ring"] + extra
    rc, err, lines, _ = compress.run(args, os.path.join(tmp, "m.jsonl"))
    ep = compress.epochs(lines)
    if rc != 0 or not ep:
        sys.exit(f"dtrain {' '.join(args)} failed: {err}")
    return ep[-1]["test_acc"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="lenet,mlp")
    ap.add_argument("--codecs", default="onebit,topk:0.001,dgc:0.001")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-dtrain", action="store_true", help="the PyTorch side only")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    data = (load("train"), load("t10k"))
    codecs, seeds = a.codecs.split(","), [int(s) for s in a.seeds.split(",")]
    print("| model | seed | codec | dtrain acc | dtrain vs its dense | PyTorch acc | PyTorch vs its dense |")
    print("|---|---|---|---|---|---|---|")
    lost = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            for seed in seeds:
                base = {}
                for codec in ["none"] + codecs:
                    ref = train(name, codec, seed, data=data)
                    ours = None if a.no_dtrain else dtrain_acc(name, codec, seed, tmp)
                    if codec == "none":
                        base = {"ref": ref, "ours": ours}
                    d_ref = 100 * (ref - base["ref"])
                    d_ours = None if ours is None else 100 * (ours - base["ours"])
                    lost.setdefault((name, codec), []).append((d_ours, d_ref))
                    fo = "" if ours is None else f"{100 * ours:.2f}%"
                    fd = "" if d_ours is None else f"{d_ours:+.2f}"
                    print(f"| {name} | {seed} | {codec} | {fo} | {fd} | {100 * ref:.2f}% | {d_ref:+.2f} |",
                          flush=True)
    print()
    print("| model | codec | dtrain vs dense, mean (points) | PyTorch vs dense, mean (points) |")
    print("|---|---|---|---|")
    for (name, codec), d in lost.items():
        if codec == "none":
            continue
        ours = [x for x, _ in d if x is not None]
        fo = f"{sum(ours) / len(ours):+.2f}" if ours else ""
        print(f"| {name} | {codec} | {fo} | {sum(r for _, r in d) / len(d):+.2f} |")


if __name__ == "__main__":
    main()
