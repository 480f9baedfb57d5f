#!/usr/bin/python3
"""usage: ckpt_diff.py A B TOL -- exit 0 when the largest |a - b| over the
model tensors (not the optimizer state, --balance's speed estimates or the compressor's state) of
two safetensors checkpoints is at most TOL. Reads the format by hand: only NumPy is needed."""
import json, struct, sys

import numpy as np


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]], dtype="<f4")
            for k, v in header.items()}


def model(tensors):
    return {k: v for k, v in tensors.items() if not k.startswith(("optimizer.", "balance.", "compress."))}


a, b, tol = model(load(sys.argv[1])), model(load(sys.argv[2])), float(sys.argv[3])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
d = max(float(np.abs(a[k] - b[k]).max()) for k in a)
print(f"max abs difference {d:.3g} (tolerance {tol:g})")
sys.exit(0 if d <= tol else 1)
