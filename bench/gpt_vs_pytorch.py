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

fp32 only: each side's GFLOP/s against the machine's sgemm roof. FLOPs a
step, matrix products only (2·m·n·k each; bias, norm, GELU, softmax and
the optimizer not counted), batch B, N = B·T rows, width C, L blocks, H
heads of hs = C/H, vocabulary V (the head tied to the token table):
  dense    3 · 2N(12·L·C² + C·V)     QKV 3C², out proj C², MLP 4C² + 4C² a
                                     block, head C·V; the backward twice the
                                     forward (weight and input gradients of
                                     every product: gpt's first product, block
                                     0's QKV, passes its input gradient on to
                                     the embeddings, so none is skipped)
  attention  6 · 2·hs·A · B·H·L      S = QKᵀ and PV forward; dP = dY·Vᵀ,
                                     dQ = dS·K, dV = Pᵀ·dY, dK = dSᵀ·Q backward
where A is the area of the score matrix the products make: PyTorch makes
all of it, A = T²; dtrain (src/nn/attention.c) makes row block i of
ATT_BLOCK = 32 rows against key blocks 0..i, A = 32²·n(n+1)/2 with n = T/32
(10,240 of 16,384 at T 128, the diagonal blocks' masked upper halves
included, the blocks right of the diagonal not). gpt at B 32: dtrain
82,946,555,904 (20.25 M a token), PyTorch 85,362,475,008 (20.84 M).
Checked in the run: PyTorch's count is the sum over the aten mm, addmm and
bmm of one step (a TorchDispatchMode; it must equal the formula with
A = T²), dtrain's is bench/gpt_gemms.c's sum over the same products
attention.c, linear.c and lmhead.c make (it must equal A = 32²·10); the
two differ by exactly the blocks dtrain leaves out.

The roof, each round beside the trainers: the best GFLOP/s of a 1024² and
a 2048² sgemm through oneDNN (dtrain's fp32 library) and OpenBLAS
(PyTorch's), on 1 thread and on 2 (bench/gpt_gemms.c; the roof is the
better library's). Printed: each side's GFLOP/s (its own FLOPs a step ·
steps / seconds) and its fraction of the roof; what 1.5× PyTorch's
tokens/s would need of dtrain (dtrain's FLOPs a token · 1.5 · PyTorch's
tokens/s) against the roof; on 1 core, dtrain's step with its products
only (bench/gpt_gemms.c replays them, nothing else) against its whole
step -- the share outside the GEMMs, and the tokens/s dtrain would reach
were every other pass free -- and the epoch line's split by layer kind.
On 1 core the same again by CPU seconds (the roof's and the replay's by
the process's CPU clock, each side's step as above), which a shared
host's waits for the core leave out: under load the clock's roof falls
with the trainers' in some rounds and not in others.

usage: [DTRAIN=BINARY] bench/gpt_vs_pytorch.py [--steps 6] [--rounds 3] [--batch 32]
                                              [--precision fp32|bf16]
Run from the repository root after `make` (it builds build/bench/gpt_gemms too)."""
import argparse, collections, json, os, re, resource, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.environ.get("DTRAIN") or os.path.join(ROOT, "build", "dtrain")  # DTRAIN: a copy to time
T = 128
GEMMS = os.path.join(ROOT, "build", "bench", "gpt_gemms")
ATT_BLOCK = 32  # src/nn/attention.c


def gpt_flops(batch, causal_blocks, L=4, H=4, C=256, V=256):
    """Matrix-product FLOPs of one training step of gpt (the docstring's
    formula): causal_blocks, dtrain's score area; else PyTorch's T²."""
    n = T // ATT_BLOCK
    area = ATT_BLOCK * ATT_BLOCK * n * (n + 1) // 2 if causal_blocks else T * T
    dense = 3 * 2 * batch * T * (12 * L * C * C + C * V)
    return dense + 6 * 2 * (C // H) * area * batch * H * L


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
        rec["flops"], rec["uncounted_products"] = counter.flops, counter.uncounted
    print(json.dumps(rec))


def product_counter(torch):
    """A dispatch mode counting the aten products (mm, addmm, bmm, ...) by
    the dtype they ran in: what autocast left them, forward and backward."""
    from torch.utils._python_dispatch import TorchDispatchMode
    products = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "dot", "mv"}

    def flops(name, args):  # 2·m·n·k from the operands' shapes; None: a product not counted here
        a, b = {"mm": args[:2], "bmm": args[:2], "addmm": args[1:3]}.get(name, (None, None))
        if a is None:
            return None
        return 2 * a.shape[0] * a.shape[1] * b.shape[-1] * (a.shape[2] if name == "bmm" else 1)

    class Count(TorchDispatchMode):
        counts = collections.Counter()
        flops, uncounted = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if name in products:
                dtypes = sorted({str(a.dtype).replace("torch.", "") for a in args
                                 if isinstance(a, torch.Tensor)})
                self.counts[(name, "+".join(dtypes))] += 1
                f = flops(name, args)
                Count.flops += f or 0
                Count.uncounted += f is None
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
        return (epoch["tokens_per_sec"], cpu, epoch["test_loss"], [r for r in recs if r.get("event") == "done"][0],
                epoch)
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
        print(f"CPU: {cpu_name_and_bf16()[0]}, {os.cpu_count()} cores; load average at the start "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)
        flops = check_flops(args)
        rows = []
        for cores in (1, 2):
            ratios, ds, ps, cpu_ratios, dc, pc = [], [], [], [], [], []
            roof = collections.defaultdict(list)
            for _ in range(args.rounds):
                p, p_cpu = run_torch(args, cores)
                settings = [(1, 1)] if cores == 1 else [(2, 1), (1, 2)]
                runs = [run_dtrain(args, t, w, d, full=True) for t, w in settings]
                dt = max(r[0] for r in runs)
                ds.append(dt), ps.append(p), ratios.append(dt / p)
                if cores == 1:  # CPU per step: less a 1-step run (start-up, evaluation) over the steps
                    d_cpu = (runs[0][1] - run_dtrain(args, 1, 1, d, steps=1)[1]) / args.steps
                    dc.append(d_cpu), pc.append(p_cpu), cpu_ratios.append(p_cpu / d_cpu)
                roof_round(args, cores, dt, p, (runs[0][4], d_cpu, p_cpu) if cores == 1 else None, flops, roof)
            print_roof(cores, flops, roof)
            rows.append((cores, statistics.median(ds), statistics.median(ps), statistics.median(ratios)))
            print(f"gpt fp32 {cores} core{'s' if cores > 1 else ''}: dtrain {rows[-1][1]:.0f} tokens/s, "
                  f"pytorch {rows[-1][2]:.0f} tokens/s, ratio {rows[-1][3]:.2f} "
                  f"(median of {args.rounds}; ratios {', '.join(f'{r:.2f}' for r in ratios)})", flush=True)
            if cores == 1:
                print(f"gpt fp32 1 core, CPU s/step: dtrain {statistics.median(dc):.3f}, pytorch "
                      f"{statistics.median(pc):.3f}, ratio pytorch/dtrain {statistics.median(cpu_ratios):.2f} "
                      f"(median of {args.rounds}; ratios {', '.join(f'{r:.2f}' for r in cpu_ratios)})",
                      flush=True)
        print(f"load average at the end {' '.join(open('/proc/loadavg').read().split()[:3])}")


def gemms(lib, threads, batch, steps):
    """bench/gpt_gemms.c's record: the library's sgemm roof, and with steps
    > 0 gpt's products of a step alone (their FLOPs, seconds a step)."""
    if not os.path.exists(GEMMS):
        sys.exit(f"{GEMMS} is missing: run `make`")
    out = subprocess.run([GEMMS, lib, str(threads), str(batch), str(steps)], check=True, capture_output=True,
                         text=True, env=torch_env(threads)).stdout
    return json.loads(out)


def check_flops(args):
    """FLOPs a step of each side: the formula (the docstring's), checked
    against PyTorch's aten products of one step and against the products
    bench/gpt_gemms.c replays from dtrain's layers. Stops where they differ."""
    want = {"dtrain": gpt_flops(args.batch, True), "pytorch": gpt_flops(args.batch, False)}
    t = subprocess.run(torch_cmd(args, 1, steps=0) + ["--count-products"], env=torch_env(1),
                       capture_output=True, text=True, check=True)
    rec = last_json(t.stdout)
    dtrain = gemms("onednn", 1, args.batch, 1)["flops_per_step"]
    masked = want["pytorch"] - want["dtrain"]
    print(f"gpt batch {args.batch}, matrix-product FLOPs a step (forward + backward): formula dtrain "
          f"{want['dtrain']:,} (causal blocks of {ATT_BLOCK}), pytorch {want['pytorch']:,} (all T x T); "
          f"counted: dtrain's products (bench/gpt_gemms.c) {dtrain:,.0f}, pytorch's aten products of a step "
          f"{rec['flops']:,} ({', '.join(f'{k} x{v}' for k, v in rec['products'].items())}); difference "
          f"{masked:,} = the score blocks right of the diagonal dtrain leaves out "
          f"({masked / want['pytorch']:.1%} of pytorch's)", flush=True)
    if rec["uncounted_products"] or rec["flops"] != want["pytorch"] or dtrain != want["dtrain"]:
        sys.exit("a counted FLOP total differs from the formula (above): the GFLOP/s would be wrong")
    return want


def roof_round(args, cores, d_tps, p_tps, one_core, flops, roof):
    """One round's roof (both libraries, beside the trainers) and GFLOP/s;
    on 1 core (one_core: dtrain's epoch record, each side's CPU s a step)
    the same by CPU seconds, dtrain's step with its products only and the
    epoch's split by layer kind."""
    per_tok = {k: v / (args.batch * T) for k, v in flops.items()}
    one = gemms("onednn", cores, args.batch, 3 if cores == 1 else 0)
    ob = gemms("openblas", cores, args.batch, 0)
    r = {"onednn": max(one["roof_1024_gflops"], one["roof_2048_gflops"]),
         "openblas": max(ob["roof_1024_gflops"], ob["roof_2048_gflops"])}
    best = max(r.values())
    d_gf, p_gf = per_tok["dtrain"] * d_tps / 1e9, per_tok["pytorch"] * p_tps / 1e9
    need = 1.5 * p_tps * per_tok["dtrain"] / 1e9
    for k, v in (("roof", best), ("roof onednn", r["onednn"]), ("roof openblas", r["openblas"]),
                 ("dtrain gf", d_gf), ("pytorch gf", p_gf), ("dtrain/roof", d_gf / best),
                 ("pytorch/roof", p_gf / best), ("need", need), ("need/roof", need / best)):
        roof[k].append(v)
    if one_core is None:
        return
    epoch, d_cpu, p_cpu = one_core
    c_roof = max(one["roof_cpu_gflops"], ob["roof_cpu_gflops"])
    for k, v in (("cpu roof", c_roof), ("cpu dtrain/roof", flops["dtrain"] / d_cpu / 1e9 / c_roof),
                 ("cpu pytorch/roof", flops["pytorch"] / p_cpu / 1e9 / c_roof),
                 ("cpu need/roof", 1.5 * flops["dtrain"] / p_cpu / 1e9 / c_roof),
                 ("cpu gemm share", one["gemm_cpu_sec_median"] / d_cpu),
                 ("cpu gemm-only ratio", p_cpu / one["gemm_cpu_sec_median"]),
                 ("cpu gemm/roof", one["flops_per_step"] / one["gemm_cpu_sec_median"] / 1e9 / c_roof),
                 ("cpu att/roof", one["attention_flops_per_step"] / one["attention_cpu_sec_median"] / 1e9 / c_roof),
                 ("cpu dense/roof", (one["flops_per_step"] - one["attention_flops_per_step"])
                  / (one["gemm_cpu_sec_median"] - one["attention_cpu_sec_median"]) / 1e9 / c_roof)):
        roof[k].append(v)
    step = args.batch * T / d_tps  # dtrain's measured seconds a step
    g = one["gemm_sec_median"]
    roof["gemm step"].append(g), roof["step"].append(step)
    roof["gemm share"].append(g / step), roof["gemm-only ratio"].append(args.batch * T / g / p_tps)
    a = one["attention_sec_median"]  # the heads' causal products, the rest dense
    roof["gemm gf"].append(one["flops_per_step"] / g / 1e9)
    roof["att gf"].append(one["attention_flops_per_step"] / a / 1e9)
    roof["dense gf"].append((one["flops_per_step"] - one["attention_flops_per_step"]) / (g - a) / 1e9)
    roof["att share"].append(a / g)
    lay = epoch["layers"]
    total = sum(v["compute_sec"] for v in lay.values())
    gemm_kinds = ("attention", "linear", "lmhead")
    roof["layers outside"].append(sum(v["compute_sec"] for k, v in lay.items() if k not in gemm_kinds) / total)
    roof["layers"].append({k: v["compute_sec"] / total for k, v in lay.items()})


def print_roof(cores, flops, roof):
    label = f"{cores} core{'s' if cores > 1 else ''}"
    m = {k: med(v) for k, v in roof.items() if k != "layers"}
    print(f"gpt fp32 {label}: sgemm roof {m['roof']:.1f} GFLOP/s (best of 1024^2 and 2048^2 on {cores} "
          f"thread{'s' if cores > 1 else ''}: oneDNN {m['roof onednn']:.1f}, OpenBLAS {m['roof openblas']:.1f}; "
          f"rounds {spread0(roof['roof'])}); dtrain {m['dtrain gf']:.1f} GFLOP/s = {m['dtrain/roof']:.0%} of "
          f"the roof (rounds {spread(roof['dtrain/roof'])}), pytorch {m['pytorch gf']:.1f} GFLOP/s = "
          f"{m['pytorch/roof']:.0%} (rounds {spread(roof['pytorch/roof'])})", flush=True)
    print(f"gpt fp32 {label}: 1.5x PyTorch would need {m['need']:.1f} GFLOP/s = {m['need/roof']:.0%} of the "
          f"sgemm roof (rounds {spread(roof['need/roof'])})", flush=True)
    if "step" not in m:
        return
    print(f"gpt fp32 1 core: dtrain's step {m['step']:.3f} s, its products alone (bench/gpt_gemms.c, oneDNN) "
          f"{m['gemm step']:.3f} s = {m['gemm share']:.0%} of it (rounds {spread(roof['gemm share'])}); "
          f"outside the GEMMs {1 - m['gemm share']:.0%}; with every other pass free dtrain would make "
          f"{m['gemm-only ratio']:.2f}x pytorch's tokens/s (rounds {spread(roof['gemm-only ratio'])})", flush=True)
    print(f"gpt fp32 1 core: dtrain's products alone {m['gemm gf']:.1f} GFLOP/s = {m['gemm gf'] / m['roof']:.0%} "
          f"of the roof: the dense ones (QKV, projections, MLP, head) {m['dense gf']:.1f}, the heads' causal "
          f"blocks {m['att gf']:.1f} ({m['att share']:.0%} of the products' time)", flush=True)
    print(f"gpt fp32 1 core, by CPU seconds (what waits for the core leave out): sgemm roof {m['cpu roof']:.1f} "
          f"GFLOP/s (rounds {spread0(roof['cpu roof'])}); dtrain {m['cpu dtrain/roof']:.0%} of it (rounds "
          f"{spread(roof['cpu dtrain/roof'])}), its products alone {m['cpu gemm/roof']:.0%} (rounds "
          f"{spread(roof['cpu gemm/roof'])}: the dense ones {m['cpu dense/roof']:.0%}, the heads' causal blocks "
          f"{m['cpu att/roof']:.0%}), pytorch {m['cpu pytorch/roof']:.0%} (rounds "
          f"{spread(roof['cpu pytorch/roof'])}); 1.5x PyTorch would need {m['cpu need/roof']:.0%} of the roof "
          f"(rounds {spread(roof['cpu need/roof'])}); dtrain's products alone {m['cpu gemm share']:.0%} of its "
          f"step (rounds {spread(roof['cpu gemm share'])}), with every other pass free {m['cpu gemm-only ratio']:.2f}x "
          f"pytorch (rounds {spread(roof['cpu gemm-only ratio'])})", flush=True)
    kinds = sorted(roof["layers"][0], key=lambda k: -roof["layers"][0][k])
    print(f"gpt fp32 1 core: dtrain's epoch line by layer kind (share of its layers' time, median): "
          + ", ".join(f"{k} {med([x[k] for x in roof['layers']]):.1%}" for k in kinds)
          + f"; outside attention, linear and lmhead (layer norm, GELU, add, embeddings) "
          f"{m['layers outside']:.1%}", flush=True)


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
