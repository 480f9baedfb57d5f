#!/usr/bin/python3
"""The PyTorch DDP side of bench/ddp_vs_pytorch.py: N processes (gloo,
loopback), one thread each, the same model, per-process batch, optimizer and
cosine schedule as dtrain, each process on its shard of every global batch.
Prints one JSON line: samples/s over all processes (training loop only),
per-epoch test accuracy and the wall time at which each epoch ended."""
import argparse, json, math, os, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train import load, model  # noqa: E402


def worker(rank, args, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    torch.manual_seed(args.seed)
    if args.synthetic:  # Fashion-MNIST's shapes and sizes, no file (a host without the data set)
        g0 = torch.Generator().manual_seed(args.seed)
        xtr, ytr = torch.randn(60000, 1, 28, 28, generator=g0), torch.randint(0, 10, (60000,), generator=g0)
        xte, yte = xtr[:10000], ytr[:10000]
    else:
        xtr, ytr = load("train")
        xte, yte = load("t10k")
    net = nn.parallel.DistributedDataParallel(model(args.model))
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    n, gb = xtr.shape[0], args.batch * args.procs
    spe = math.ceil(n / gb)
    total = spe * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    lossf = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(args.seed)
    t_start, train_sec, samples, epochs = time.perf_counter(), 0.0, 0, []
    for epoch in range(args.epochs):
        net.train()
        perm = torch.randperm(n, generator=g)  # same order on every rank
        dist.barrier()
        t0 = time.perf_counter()
        for k in range(spe):
            if args.max_steps and k >= args.max_steps:
                break
            idx = perm[k * gb:(k + 1) * gb][rank::args.procs]
            opt.zero_grad(set_to_none=True)
            lossf(net(xtr[idx]), ytr[idx]).backward()
            opt.step()
            sched.step()
            samples += len(idx) * args.procs
        train_sec += time.perf_counter() - t0
        acc = None
        if rank == 0 and not args.max_steps:
            net.eval()
            with torch.no_grad():
                pred = torch.cat([net(xte[i:i + 1000]).argmax(1) for i in range(0, len(xte), 1000)])
            acc = float((pred == yte).float().mean())
        epochs.append({"epoch": epoch + 1, "test_acc": acc, "wall_sec": time.perf_counter() - t_start})
        if args.max_steps:
            break
    if rank == 0:
        queue.put({"procs": args.procs, "model": args.model, "samples_per_sec": samples / train_sec,
                   "epochs": epochs})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=["mlp", "lenet"])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="per process")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--synthetic", action="store_true", help="random data of Fashion-MNIST's shape (speed only)")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.spawn(worker, args=(args, q), nprocs=args.procs, join=True)
    print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
