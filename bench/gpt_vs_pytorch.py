#!/usr/bin/python3
"""Training speed of gpt (4 blocks, 4 heads, width 256, T 128; fp32, or bf16 below) in
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

--precision bf16 (where the CPU has AVX512_BF16 or AMX): in the same
interleaved rounds dtrain `--precision bf16`, dtrain fp32, PyTorch fp32
and PyTorch under `torch.autocast("cpu", dtype=torch.bfloat16)`; prints
dtrain-bf16 / PyTorch-fp32, dtrain-bf16 / PyTorch-bf16 and dtrain's
bf16 / fp32. Before the rounds, one step of each bf16 side shows that its
products ran in bf16: dtrain's done line (`gemm`, its counts of products
made in bf16 and left to fp32), PyTorch's aten products by dtype (a
TorchDispatchMode), and the oneDNN matmul kernels each ran
(ONEDNN_VERBOSE); a side with a product left to fp32 stops the bench.
After the rounds each side's loss in fp32 and in bf16 (dtrain: held-out
loss after its steps; PyTorch: the last step's training loss).

usage: [DTRAIN=BINARY] bench/gpt_vs_pytorch.py [--steps 6] [--rounds 3] [--batch 32]
                                              [--precision fp32|bf16]
Run from the repository root after `make`."""
import argparse, collections, json, os, re, resource, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.environ.get("DTRAIN") or os.path.join(ROOT, "build", "dtrain")  # DTRAIN: a copy to time
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
    for e in (model.wte, model.wpe):  # GPT-2's 0.02, not N(0, 1): a first loss near ln 256, not ~170
        torch.nn.init.normal_(e.weight, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    n = (len(data) - 1) // T
    tokens, sec, cpu, thread_cpu = 0, 0.0, 0.0, 0.0
    counter = product_counter(torch) if args.count_products else None
    for step in range(args.steps + 1):
        idx = [(step * args.batch + i) % n for i in range(args.batch)]
        x = torch.tensor([list(data[i * T:i * T + T]) for i in idx])
        y = torch.tensor([list(data[i * T + 1:i * T + T + 1]) for i in idx])
        t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
        if counter:
            counter.__enter__()
        # autocast around the forward and loss only, as PyTorch's AMP recipe has it
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if counter:
            counter.__exit__(None, None, None)
        opt.step()
        if step > 0:  # the first step warms up
            sec += time.perf_counter() - t0
            cpu += time.process_time() - c0
            thread_cpu += time.thread_time() - h0
            tokens += args.batch * T
    # process CPU over the main thread's: 1.0 when nothing else computed
    rec = {"tokens_per_sec": tokens / sec if sec else 0, "cpu_per_thread_cpu": cpu / thread_cpu if sec else 1,
           "cpu_per_step": cpu / args.steps if args.steps else 0, "loss": loss.item()}
    if counter:
        rec["products"] = {f"{k[0]} {k[1]}": v for k, v in sorted(counter.counts.items())}
    print(json.dumps(rec))


def product_counter(torch):
    """A dispatch mode counting the aten products (mm, addmm, bmm, ...) by
    the dtype they ran in: what autocast left them, forward and backward."""
    from torch.utils._python_dispatch import TorchDispatchMode
    products = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "dot", "mv"}

    class Count(TorchDispatchMode):
        counts = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if name in products:
                dtypes = sorted({str(a.dtype).replace("torch.", "") for a in args
                                 if isinstance(a, torch.Tensor)})
                self.counts[(name, "+".join(dtypes))] += 1
            return func(*args, **(kwargs or {}))
    return Count()


def torch_env(threads):
    # torch.set_num_threads sets torch's own threads only: Debian's torch
    # multiplies through OpenBLAS (libblas.so.3), whose pthreads pool takes
    # every core unless told. Unpinned, "1 core" ran its GEMMs on 2 threads.
    return dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads))


def torch_cmd(args, threads, autocast=False, steps=None, batch=None):
    cmd = [sys.executable, __file__, "--torch-side", "--threads", str(threads), "--steps",
           str(args.steps if steps is None else steps), "--batch", str(batch or args.batch), "--text",
           args.text]
    return cmd + ["--autocast"] if autocast else cmd


def last_json(out):
    """The torch side's record: its last line that is JSON (oneDNN's verbose
    lines share its stdout)."""
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def run_torch(args, threads, autocast=False, full=False):
    out = subprocess.run(torch_cmd(args, threads, autocast), check=True, capture_output=True, text=True,
                         env=torch_env(threads)).stdout
    rec = last_json(out)
    if threads == 1 and rec["cpu_per_thread_cpu"] > 1.05:
        sys.exit(f"pytorch used more than one thread on 1 core (process CPU {rec['cpu_per_thread_cpu']:.2f}x "
                 "its main thread's)")
    return rec if full else (rec["tokens_per_sec"], rec["cpu_per_step"])


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def dtrain_cmd(args, threads, workers, metrics, steps=None, precision="fp32", batch=None):
    return [DTRAIN, "train", "--model", "gpt", "--data", "text:" + args.text, "--seq-len", str(T),
            "--batch", str((batch or args.batch) // workers), "--workers", str(workers), "--threads",
            str(threads), "--optimizer", "adamw", "--lr", "1e-3", "--max-steps",
            str(steps or args.steps + 1), "--quiet", "--metrics", metrics, "--precision", precision]


def run_dtrain(args, threads, workers, d, steps=None, precision="fp32", full=False):
    """(tokens/s of the epoch line, CPU seconds of the whole process); with
    full, also the epoch's held-out loss and the done line."""
    metrics = os.path.join(d, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    c0 = child_cpu()
    subprocess.run(dtrain_cmd(args, threads, workers, metrics, steps, precision), check=True,
                   stdout=subprocess.DEVNULL)
    cpu = child_cpu() - c0
    recs = [json.loads(line) for line in open(metrics)]
    epoch = [r for r in recs if r.get("event") == "epoch"][0]
    if full:
        return epoch["tokens_per_sec"], cpu, epoch["test_loss"], [r for r in recs if r.get("event") == "done"][0]
    return epoch["tokens_per_sec"], cpu


def cpu_name_and_bf16():
    info = open("/proc/cpuinfo").read()
    name = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    flags = set(re.search(r"^flags\s*:\s*(.*)$", info, re.M).group(1).split())
    return (name.group(1) if name else "unknown CPU"), sorted(flags & {"avx512_bf16", "amx_bf16"})


def onednn_matmuls(stderr):
    """oneDNN's verbose lines of executed matmuls: count by kernel and source type."""
    c = collections.Counter()
    for line in stderr.splitlines():
        f = line.split(",")
        if len(f) > 6 and f[0] in ("onednn_verbose", "dnnl_verbose") and f[1] == "exec" and f[3] == "matmul":
            src = re.search(r"src_(\w+?):", f[6])
            c[f"{f[4]} src {src.group(1) if src else '?'}"] += 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items())) or "none"


def show_bf16_products(args, d):
    """One step of each bf16 side (batch 4): what ran its products. Stops the
    bench where a product was left to fp32."""
    env = dict(torch_env(1), ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    metrics = os.path.join(d, "check.jsonl")
    r = subprocess.run(dtrain_cmd(args, 1, 1, metrics, steps=1, precision="bf16", batch=4), env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("dtrain --precision bf16 did not run: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    done = [json.loads(l) for l in open(metrics) if '"event":"done"' in l][0]
    print(f"dtrain --precision bf16, 1 step of batch 4 (and its evaluation): gemm \"{done['gemm']}\", "
          f"{done['bf16_products']} products in bf16, {done['fp32_products']} left to fp32; "
          f"oneDNN ran: {onednn_matmuls(r.stdout + r.stderr)}", flush=True)
    t = subprocess.run(torch_cmd(args, 1, autocast=True, steps=0, batch=4) + ["--count-products"], env=env,
                       capture_output=True, text=True, check=True)
    rec = last_json(t.stdout)
    print(f"pytorch autocast bf16, 1 step of batch 4: aten products {rec['products']}; "
          f"oneDNN ran: {onednn_matmuls(t.stdout + t.stderr)}", flush=True)
    fp32 = [k for k in rec["products"] if "bfloat16" not in k]
    if done["fp32_products"] or "bf16" not in done["gemm"] or "fell back" in done["gemm"] or fp32:
        sys.exit("a product under bf16 ran in fp32 (above): the bf16 figures would not be bf16's")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--text", default="")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--torch-side", action="store_true")
    ap.add_argument("--autocast", action="store_true")  # torch side: bf16 autocast
    ap.add_argument("--count-products", action="store_true")  # torch side: aten products by dtype
    args = ap.parse_args()
    if args.torch_side:
        return torch_side(args)
    if args.precision not in ("fp32", "bf16"):
        print(f"option --precision: '{args.precision}' is not a precision (fp32 or bf16)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        args.text = os.path.join(d, "text.txt")
        # enough windows for the timed steps; little held out, so the epoch's evaluation is short
        open(args.text, "wb").write(open("/usr/share/games/fortunes/cookie", "rb").read()[:200000])
        if args.precision == "bf16":
            return bench_bf16(args, d)
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


def med(xs):
    return statistics.median(xs)


def spread(xs):
    return ", ".join(f"{x:.2f}" for x in xs)


def spread0(xs):
    return " ".join(f"{x:.0f}" for x in xs)


def bench_bf16(args, d):
    """dtrain bf16 and fp32 against PyTorch fp32 and bf16 autocast, interleaved."""
    cpu, bf16 = cpu_name_and_bf16()
    print(f"CPU: {cpu}, {os.cpu_count()} cores, bf16 instructions: {', '.join(bf16) or 'none'}; "
          f"load average at the start {open('/proc/loadavg').read().split()[0]}", flush=True)
    if not bf16:
        sys.exit("this CPU has no bf16 instructions (avx512_bf16 or amx_bf16): nothing to measure")
    show_bf16_products(args, d)
    losses = {}
    for cores in (1, 2):
        rows = collections.defaultdict(list)
        for _ in range(args.rounds):
            pf = run_torch(args, cores, full=True)
            pb = run_torch(args, cores, autocast=True, full=True)
            settings = [(1, 1)] if cores == 1 else [(2, 1), (1, 2)]
            df = [run_dtrain(args, t, w, d, full=True) for t, w in settings]
            db = [run_dtrain(args, t, w, d, precision="bf16", full=True) for t, w in settings]
            fp32, b16 = max(r[0] for r in df), max(r[0] for r in db)
            for k, v in (("pf", pf["tokens_per_sec"]), ("pb", pb["tokens_per_sec"]), ("df", fp32),
                         ("db", b16), ("db/pf", b16 / pf["tokens_per_sec"]),
                         ("db/pb", b16 / pb["tokens_per_sec"]), ("db/df", b16 / fp32)):
                rows[k].append(v)
            if cores == 1:  # CPU a step: less a 1-step run (start-up, evaluation), over the steps
                db_cpu = (db[0][1] - run_dtrain(args, 1, 1, d, steps=1, precision="bf16")[1]) / args.steps
                rows["cpu pf/db"].append(pf["cpu_per_step"] / db_cpu)
                rows["cpu pb/db"].append(pb["cpu_per_step"] / db_cpu)
                rows["cpu db"].append(db_cpu), rows["cpu pf"].append(pf["cpu_per_step"])
                rows["cpu pb"].append(pb["cpu_per_step"])
                losses = {"dtrain": (df[0][2], db[0][2]), "pytorch": (pf["loss"], pb["loss"])}
        label = f"{cores} core{'s' if cores > 1 else ''}"
        print(f"gpt {label}: dtrain bf16 {med(rows['db']):.0f} tokens/s, dtrain fp32 {med(rows['df']):.0f}, "
              f"pytorch fp32 {med(rows['pf']):.0f}, pytorch bf16 autocast {med(rows['pb']):.0f} "
              f"(median of {args.rounds}; rounds: dtrain bf16 {spread0(rows['db'])}; pytorch fp32 "
              f"{spread0(rows['pf'])}; pytorch bf16 {spread0(rows['pb'])})", flush=True)
        for k, what in (("db/pf", "dtrain-bf16 / pytorch-fp32"), ("db/pb", "dtrain-bf16 / pytorch-bf16"),
                        ("db/df", "dtrain-bf16 / dtrain-fp32")):
            print(f"gpt {label}: ratio {what} {med(rows[k]):.2f} (ratios {spread(rows[k])})", flush=True)
        if cores == 1:
            print(f"gpt 1 core, CPU s/step: dtrain bf16 {med(rows['cpu db']):.3f}, pytorch fp32 "
                  f"{med(rows['cpu pf']):.3f}, pytorch bf16 {med(rows['cpu pb']):.3f}; ratio pytorch-fp32 / "
                  f"dtrain-bf16 {med(rows['cpu pf/db']):.2f} (ratios {spread(rows['cpu pf/db'])}), "
                  f"pytorch-bf16 / dtrain-bf16 {med(rows['cpu pb/db']):.2f} (ratios {spread(rows['cpu pb/db'])})",
                  flush=True)
    (df_loss, db_loss), (pf_loss, pb_loss) = losses["dtrain"], losses["pytorch"]
    print(f"loss after {args.steps + 1} steps: dtrain held-out fp32 {df_loss:.4f} bf16 {db_loss:.4f} "
          f"(difference {db_loss - df_loss:+.4f}); pytorch last step's training loss fp32 {pf_loss:.4f} "
          f"bf16 {pb_loss:.4f} (difference {pb_loss - pf_loss:+.4f})")
    print(f"load average at the end {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    sys.exit(main())
