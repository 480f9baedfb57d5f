#!/usr/bin/python3
"""The PyTorch oracle for dtrain's GPT and LSTM (--model lstm: against
torch.nn.LSTM itself): the same weights, loaded from
dtrain's safetensors checkpoint into a PyTorch 1.13 model of the same shape
(written here from torch.nn, an implementation no one here wrote), give the
same loss and gradients on the same batch.

1. `dtrain train --model MODEL --data text:FILE --optimizer adamw
   --max-steps 2` writes a checkpoint (weights past their initial values);
2. build/bench/gpt_grads reads it and writes dtrain's loss and every
   parameter's gradient on windows 0..B-1 of the text's training split;
3. here the checkpoint's tensors go into the PyTorch model by the mapping
   below (docs/MODEL_FORMAT.md), the same windows are cut from the file in
   Python, and PyTorch's loss and gradients (float64, so that the reference
   is exact to far below fp32's rounding) are compared with dtrain's.

Passes when the loss and every tensor's gradient agree to REL (1e-5)
relative: |dtrain - torch|_max / |torch|_max per tensor.

usage: bench/gpt_vs_pytorch_grads.py [--model gpt|lstm] [--batch 4] [--seq-len 128]
Run from the repository root after `make`."""
import argparse, json, math, os, struct, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTRAIN = os.path.join(ROOT, "build", "dtrain")
GRADS = os.path.join(ROOT, "build", "bench", "gpt_grads")
REL = 1e-5


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", {})
    data = b[8 + n:]
    out = {}
    for name, t in head.items():
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(t["shape"]).copy()
    return out, meta


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        p = F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        return self.c_proj((p @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, P, C, H, L):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(P, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # the head tied to the token table


class LSTMLM(nn.Module):
    """The builtin lstm: embedding, torch.nn.LSTM itself (batch_first), head."""
    def __init__(self, V, C, H, L):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.lstm = nn.LSTM(C, H, num_layers=L, batch_first=True)
        self.head = nn.Linear(H, V, bias=False)

    def forward(self, idx):
        return self.head(self.lstm(self.wte(idx))[0])


def lstm_mapping(L):
    """PyTorch name -> dtrain name for the builtin lstm (line 0 embedding,
    1 lstm, 2 lmhead): torch.nn.LSTM's own tensor names under layers.1."""
    m = {"wte.weight": "layers.0.weight", "head.weight": "layers.2.weight"}
    for k in range(L):
        for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            m[f"lstm.{p}_l{k}"] = f"layers.1.{p}_l{k}"
    return m


def mapping(L):
    """PyTorch name -> dtrain name for the builtin gpt layout (one layer a
    model-file line: 0 embedding, 1 posembed, 8 lines a block, then the
    final layernorm and the tied lmhead)."""
    m = {"wte.weight": "layers.0.weight", "wpe.weight": "layers.1.weight",
         "ln_f.weight": f"layers.{2 + 8 * L}.weight", "ln_f.bias": f"layers.{2 + 8 * L}.bias"}
    for b in range(L):
        base = 2 + 8 * b
        for torch_name, (line, what) in {
                "ln_1": (0, ""), "c_attn": (1, "qkv."), "c_proj": (1, "proj."),
                "ln_2": (3, ""), "c_fc": (4, ""), "mlp_proj": (6, "")}.items():
            for p in ("weight", "bias"):
                m[f"h.{b}.{torch_name}.{p}"] = f"layers.{base + line}.{what}{p}"
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--text", default="/usr/share/games/fortunes/cookie")
    args = ap.parse_args()
    T, B = args.seq_len, args.batch
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "text.txt")
        open(text, "wb").write(open(args.text, "rb").read()[:40000])
        ckpt, grads = os.path.join(d, "ckpt.st"), os.path.join(d, "grads.st")
        subprocess.run([DTRAIN, "train", "--model", args.model, "--data", "text:" + text,
                        "--seq-len", str(T), "--batch", str(B), "--optimizer", "adamw",
                        "--lr", "1e-3", "--max-steps", "2", "--quiet", "--checkpoint", ckpt],
                       check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([GRADS, args.model, ckpt, text, str(T), str(B), grads], check=True,
                             capture_output=True, text=True).stdout
        weights, _ = read_safetensors(ckpt)
        dgrads, meta = read_safetensors(grads)
        data = open(text, "rb").read()
    V, C = weights["layers.0.weight"].shape
    torch.set_default_dtype(torch.float64)
    if "layers.1.weight_ih_l0" in weights:  # lstm
        L = sum(1 for k in weights if k.startswith("layers.1.weight_ih_l"))
        H = weights["layers.1.weight_hh_l0"].shape[1]
        model, names, what = LSTMLM(V, C, H, L), lstm_mapping(L), f"lstm ({L} layers of {H}"
    else:
        L = sum(1 for k in weights if k.startswith("layers.") and k.endswith(".qkv.weight"))
        P, H = weights["layers.1.weight"].shape[0], 4
        model, names, what = GPT(V, P, C, H, L), mapping(L), f"gpt ({L} blocks, {C} wide, {H} heads"
    with torch.no_grad():
        for tname, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[names[tname]].astype(np.float64)))
    x = torch.tensor([list(data[i * T:i * T + T]) for i in range(B)])
    y = torch.tensor([list(data[i * T + 1:i * T + T + 1]) for i in range(B)])
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    dl = float(meta["loss"])
    worst = abs(dl - loss.item()) / abs(loss.item())
    print(f"{what}, T {T}, batch {B}; dtrain: {out.strip()})")
    print(f"  loss: dtrain {dl:.9f}  pytorch {loss.item():.9f}  rel {worst:.2e}")
    ok = worst <= REL
    for tname, p in model.named_parameters():
        g = dgrads["grad." + names[tname]].astype(np.float64)
        ref = p.grad.numpy()
        rel = np.abs(g - ref).max() / max(np.abs(ref).max(), 1e-30)
        ok &= rel <= REL
        worst = max(worst, rel)
        if rel > REL:
            print(f"  {tname} ({names[tname]}): rel {rel:.2e}")
    print(f"  gradients of {len(names)} tensors: worst rel {worst:.2e} (bound {REL:g})")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
