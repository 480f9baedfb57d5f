#!/usr/bin/python3
"""The PyTorch side of bench/train_vs_pytorch.sh: trains the same model with
the same batch, optimizer and schedule on the same IDX files, and prints one
JSON line with samples/s (training loop only) and, with --epochs, accuracy.

Run with Debian's /usr/bin/python3 (python3-torch 1.13)."""
import argparse, gzip, json, math, os, sys, time

import numpy as np
import torch
import torch.nn as nn

DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def load(split):
    def read(name, offset):
        with gzip.open(os.path.join(DIR, name), "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)
    x = read(f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    y = read(f"{split}-labels-idx1-ubyte.gz", 8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(),
                         nn.Linear(500, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=["mlp", "lenet"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="time only this many steps")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: torch.autocast on the CPU (bf16 products, fp32 weights and loss)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    net = model(args.model)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    n = xtr.shape[0]
    steps_per_epoch = math.ceil(n / args.batch)
    total = steps_per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    lossf = nn.CrossEntropyLoss()
    step, timed_samples, timed_sec, warmup = 0, 0, 0.0, 20
    for epoch in range(args.epochs):
        net.train()
        perm = torch.randperm(n)
        t0, s0 = None, 0
        for k in range(steps_per_epoch):
            if args.max_steps and step >= args.max_steps:
                break
            if k == warmup:
                t0, s0 = time.perf_counter(), k * args.batch
            idx = perm[k * args.batch:(k + 1) * args.batch]
            xb, yb = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = net(xb)
            loss = lossf(logits.float(), yb)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
        if t0 is not None:
            timed_sec += time.perf_counter() - t0
            timed_samples += min(n, k * args.batch) - s0 if args.max_steps else n - s0
        if args.max_steps and step >= args.max_steps:
            break
    out = {"model": args.model, "threads": args.threads, "precision": args.precision,
           "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", ""),
           "samples_per_sec": timed_samples / timed_sec if timed_sec else 0}
    if not args.max_steps:
        net.eval()
        with torch.no_grad():
            pred = torch.cat([net(xte[i:i + 1000]).argmax(1) for i in range(0, len(xte), 1000)])
        out["test_acc"] = float((pred == yte).float().mean())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
