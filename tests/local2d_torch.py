#!/usr/bin/python3
"""usage: local2d_torch.py DTRAIN TMPDIR -- dtrain's local2d layer against an
independent implementation in PyTorch (torch.nn.functional.unfold and an
einsum: the standard construction of a locally connected layer, which
PyTorch has no module for). Exit 0 when they agree, 1 when they do not, 77
when torch is not installed (the caller skips).

dtrain trains a model of two local2d layers (stride 2 and padding 1, then
padding 1) and a dense layer for one step of SGD (learning rate 1, no
momentum) on a batch that is the whole training set, from its initial
weights (a run with learning rate 0 writes them). The step's loss is the
loss of the initial weights, and (initial - stepped) / lr is the gradient
of the batch's mean loss. PyTorch computes both from the initial weights
read from dtrain's checkpoint (docs/MODEL_FORMAT.md: local2d weight
[out_h, out_w, filters, k·k·in_c] with (ky, kx, c) order, bias [out_h,
out_w, filters]; activations NHWC)."""
import gzip, json, os, struct, subprocess, sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)

dtrain, tmp = sys.argv[1], sys.argv[2]
N = 64
MODEL = """input shape=1x28x28
local2d filters=3 kernel=3 stride=2 pad=1
relu
local2d filters=4 kernel=3 pad=1
tanh
flatten
dense units=10
"""
LAYERS = [(0, 3, 2, 1), (2, 3, 1, 1)]  # (index, kernel, stride, pad) of the local2d lines


def small_data(d):
    os.makedirs(d, exist_ok=True)
    src = "/usr/share/datasets/fashion-mnist"
    for split, n in (("train", N), ("t10k", 16)):
        for kind, hdr, per in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
            b = gzip.open(f"{src}/{split}-{kind}-ubyte.gz").read()
            head = bytearray(b[:hdr]); head[4:8] = n.to_bytes(4, "big")
            open(os.path.join(d, f"{split}-{kind}-ubyte"), "wb").write(bytes(head) + b[hdr:hdr + n * per])


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]],
                             dtype="<f4").reshape(v["shape"]).astype(np.float64)
            for k, v in header.items() if not k.startswith("optimizer.")}


def train(lr, out):
    for f in (out, out + ".jsonl"):
        if os.path.exists(f): os.remove(f)
    subprocess.run([dtrain, "train", "--model", f"{tmp}/l2d.model", "--data", f"{tmp}/data", "--batch", str(N),
                    "--epochs", "1", "--max-steps", "1", "--lr", str(lr), "--momentum", "0", "--seed", "5",
                    "--quiet", "--checkpoint", out, "--metrics", out + ".jsonl"], check=True, capture_output=True,
                   env=dict(os.environ, DTRAIN_GEMM="openblas"))
    return [json.loads(l) for l in open(out + ".jsonl") if '"epoch"' in l][0]["train_loss"]


def local2d(x, w, b, k, s, p):
    """x NHWC; w [OH, OW, F, k*k*C] in (ky, kx, c) order; returns NHWC."""
    n, h, wd, c = x.shape
    oh, ow, f = w.shape[0], w.shape[1], w.shape[2]
    cols = F.unfold(x.permute(0, 3, 1, 2), k, padding=p, stride=s)            # [N, C*k*k, L], (c, ky, kx)
    wt = w.reshape(oh * ow, f, k, k, c).permute(0, 1, 4, 2, 3).reshape(oh * ow, f, c * k * k)
    y = torch.einsum("ncl,lfc->nlf", cols, wt) + b.reshape(oh * ow, f)
    return y.reshape(n, oh, ow, f)


def images_labels(d):
    raw = open(f"{d}/train-images-idx3-ubyte", "rb").read()[16:]
    x = np.frombuffer(raw, dtype=np.uint8).reshape(N, 28, 28, 1).astype(np.float32)
    x = x * np.float32(1 / 0.3530 / 255) + np.float32(-0.2860 / 0.3530)  # dtrain's normalisation
    y = np.frombuffer(open(f"{d}/train-labels-idx1-ubyte", "rb").read()[8:], dtype=np.uint8)
    return torch.tensor(x, dtype=torch.float64), torch.tensor(y.astype(np.int64))


small_data(f"{tmp}/data")
open(f"{tmp}/l2d.model", "w").write(MODEL)
lr = 1.0
loss0 = train(0, f"{tmp}/w0.st")
train(lr, f"{tmp}/w1.st")
w0, w1 = load(f"{tmp}/w0.st"), load(f"{tmp}/w1.st")
p = {k: torch.tensor(v, requires_grad=True) for k, v in w0.items()}
x, y = images_labels(f"{tmp}/data")
h = x
for (i, k, s, pad), act in zip(LAYERS, (torch.relu, torch.tanh)):
    h = act(local2d(h, p[f"layers.{i}.weight"], p[f"layers.{i}.bias"], k, s, pad))
logits = h.reshape(N, -1) @ p["layers.5.weight"].T + p["layers.5.bias"]
loss = F.cross_entropy(logits, y)
loss.backward()
ok = abs(loss.item() - loss0) <= 1e-5 * max(1, abs(loss0))
print(f"loss: dtrain {loss0:.6f}, torch {loss.item():.6f}")
for k in sorted(w0):
    g_dtrain = (w0[k] - w1[k]) / lr
    g_torch = p[k].grad.numpy()
    scale = np.abs(g_torch).max()
    err = np.abs(g_dtrain - g_torch).max() / max(scale, 1e-12)
    print(f"{k:18s} shape {list(w0[k].shape)}: max |grad| {scale:.3g}, max |dtrain - torch| / max {err:.2g}")
    ok &= err <= 1e-3 and scale > 0
sys.exit(0 if ok else 1)
