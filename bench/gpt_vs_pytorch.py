#!/usr/bin/python3
"""Training speed of gpt (4 blocks, 4 heads, width 256, T 128; fp32) in
tokens/s: dtrain against PyTorch 1.13 on the same model (the module of
bench/gpt_vs_pytorch_grads.py, float32 here), batch, AdamW and text,
measured in the same run, on 1 core and on 2 (PyTorch: torch threads,
its OpenBLAS pool pinned to as many, refused on 1 core if a second
thread computed;
dtrain: its best of 2 BLAS threads and 2 data-parallel workers with half
the batch each). Prints each side's tokens/s and the ratio dtrain/PyTorch
(the yardstick), the median of --rounds rounds; on 1 core also each
side's CPU seconds a step (PyTorch: its process's over the timed steps;
dtrain: its process's less that of a 1-step run, over the steps), whose
ratio a shared host's waits for the core leave out.

usage: bench/gpt_vs_pytorch.py [--steps 6] [--rounds 3] [--batch 32]
Run from the repository root after `make`."""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
T = 128


def torch_side(args):
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from gpt_vs_pytorch_grads import GPT
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    data = open(args.text, "rb").read()
    model = GPT(256, T, 256, 4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    n = (len(data) - 1) // T
    tokens, sec, cpu, thread_cpu = 0, 0.0, 0.0, 0.0
    for step in range(args.steps + 1):
        idx = [(step * args.batch + i) % n for i in range(args.batch)]
        x = torch.tensor([list(data[i * T:i * T + T]) for i in idx])
        y = torch.tensor([list(data[i * T + 1:i * T + T + 1]) for i in idx])
        t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step > 0:  # the first step warms up
            sec += time.perf_counter() - t0
            cpu += time.process_time() - c0
            thread_cpu += time.thread_time() - h0
            tokens += args.batch * T
    # process CPU over the main thread's: 1.0 when nothing else computed
    print(json.dumps({"tokens_per_sec": tokens / sec, "cpu_per_thread_cpu": cpu / thread_cpu,
                      "cpu_per_step": cpu / args.steps}))


def run_torch(args, threads):
    # torch.set_num_threads sets torch's own threads only: Debian's torch
    # multiplies through OpenBLAS (libblas.so.3), whose pthreads pool takes
    # every core unless told. Unpinned, "1 core" ran its GEMMs on 2 threads.
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--torch-side", "--threads", str(threads),
                          "--steps", str(args.steps), "--batch", str(args.batch), "--text",
                          args.text], check=True, capture_output=True, text=True, env=env).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    if threads == 1 and rec["cpu_per_thread_cpu"] > 1.05:
        sys.exit(f"pytorch used more than one thread on 1 core (process CPU {rec['cpu_per_thread_cpu']:.2f}x "
                 "its main thread's)")
    return rec["tokens_per_sec"], rec["cpu_per_step"]


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_dtrain(args, threads, workers, d, steps=None):
    """(tokens/s of the epoch line, CPU seconds of the whole process)."""
    metrics = os.path.join(d, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    c0 = child_cpu()
    subprocess.run([DTRAIN, "train", "--model", "gpt", "--data", "text:" + args.text, "--seq-len",
                    str(T), "--batch", str(args.batch // workers), "--workers", str(workers),
                    "--threads", str(threads), "--optimizer", "adamw", "--lr", "1e-3",
                    "--max-steps", str(steps or args.steps + 1), "--quiet", "--metrics", metrics],
                   check=True, stdout=subprocess.DEVNULL)
    cpu = child_cpu() - c0
    for line in open(metrics):
        rec = json.loads(line)
        if rec.get("event") == "epoch":
            return rec["tokens_per_sec"], cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--text", default="")
    ap.add_argument("--torch-side", action="store_true")
    args = ap.parse_args()
    if args.torch_side:
        return torch_side(args)
    with tempfile.TemporaryDirectory() as d:
        args.text = os.path.join(d, "text.txt")
        # enough windows for the timed steps; little held out, so the epoch's evaluation is short
        open(args.text, "wb").write(open("/usr/share/games/fortunes/cookie", "rb").read()[:200000])
        rows = []
        for cores in (1, 2):
            ratios, ds, ps, cpu_ratios, dc, pc = [], [], [], [], [], []
            for _ in range(args.rounds):
                p, p_cpu = run_torch(args, cores)
                settings = [(1, 1)] if cores == 1 else [(2, 1), (1, 2)]
                runs = [run_dtrain(args, t, w, d) for t, w in settings]
                dt = max(r[0] for r in runs)
                ds.append(dt), ps.append(p), ratios.append(dt / p)
                if cores == 1:  # CPU per step: less a 1-step run (start-up, evaluation) over the steps
                    d_cpu = (runs[0][1] - run_dtrain(args, 1, 1, d, steps=1)[1]) / args.steps
                    dc.append(d_cpu), pc.append(p_cpu), cpu_ratios.append(p_cpu / d_cpu)
            rows.append((cores, statistics.median(ds), statistics.median(ps), statistics.median(ratios)))
            print(f"gpt fp32 {cores} core{'s' if cores > 1 else ''}: dtrain {rows[-1][1]:.0f} tokens/s, "
                  f"pytorch {rows[-1][2]:.0f} tokens/s, ratio {rows[-1][3]:.2f} "
                  f"(median of {args.rounds}; ratios {', '.join(f'{r:.2f}' for r in ratios)})", flush=True)
            if cores == 1:
                print(f"gpt fp32 1 core, CPU s/step: dtrain {statistics.median(dc):.3f}, pytorch "
                      f"{statistics.median(pc):.3f}, ratio pytorch/dtrain {statistics.median(cpu_ratios):.2f} "
                      f"(median of {args.rounds}; ratios {', '.join(f'{r:.2f}' for r in cpu_ratios)})",
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
