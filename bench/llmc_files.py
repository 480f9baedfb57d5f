#!/usr/bin/python3
"""Writes the input files of karpathy/llm.c's train_gpt2.c for dtrain's
`gpt` (bench/gpt_vs_llmc.sh runs both): a model checkpoint in llm.c's
format and its train/val token files from a text read as bytes.

Checkpoint (llm.c's gpt2_build_from_checkpoint): 256 int32 of header —
magic 20240326, version 3, maxT, V, L, NH, C, padded V — then the float32
tensors in its order: wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b
[L, C], qkvw [L, 3C, C], qkvb [L, 3C], attprojw [L, C, C], attprojb [L, C],
ln2w, ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C], fcprojw [L, C, 4C],
fcprojb [L, C], lnfw, lnfb [C]. Weights as GPT-2 initialises them
(N(0, 0.02), biases 0, norms 1), the values dtrain's own init draws from;
speed does not depend on which values they are.
Tokens (llm.c's dataloader): 256 int32 of header — magic 20240520,
version 1, token count — then uint16 tokens; here the bytes of the text
(vocabulary 256, as dtrain's), the last 10% in the val file.

usage: bench/llmc_files.py --text FILE --out DIR [--layers 4 --heads 4 --width 256 --max-t 128]"""
import argparse, os, struct

import numpy as np


def header(*ints):
    h = np.zeros(256, dtype=np.int32)
    h[:len(ints)] = ints
    return h.tobytes()


def write_checkpoint(path, L, NH, C, maxT, V=256):
    Vp = V  # 256 is already a multiple of 128: llm.c pads the vocabulary to one
    rng = np.random.default_rng(1)
    normal = lambda *shape: (0.02 * rng.standard_normal(shape)).astype(np.float32)
    zeros = lambda *shape: np.zeros(shape, np.float32)
    ones = lambda *shape: np.ones(shape, np.float32)
    tensors = [normal(Vp, C), normal(maxT, C), ones(L, C), zeros(L, C), normal(L, 3 * C, C),
               zeros(L, 3 * C), normal(L, C, C), zeros(L, C), ones(L, C), zeros(L, C),
               normal(L, 4 * C, C), zeros(L, 4 * C), normal(L, C, 4 * C), zeros(L, C),
               ones(C), zeros(C)]
    with open(path, "wb") as f:
        f.write(header(20240326, 3, maxT, V, L, NH, C, Vp))
        for t in tensors:
            f.write(t.tobytes())
    return sum(t.size for t in tensors)


def write_tokens(path, data):
    with open(path, "wb") as f:
        f.write(header(20240520, 1, len(data)))
        f.write(np.frombuffer(data, dtype=np.uint8).astype(np.uint16).tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--max-t", type=int, default=128)
    a = ap.parse_args()
    data = open(a.text, "rb").read()
    cut = len(data) - len(data) // 10
    n = write_checkpoint(os.path.join(a.out, "gpt_llmc.bin"), a.layers, a.heads, a.width, a.max_t)
    write_tokens(os.path.join(a.out, "train.bin"), data[:cut])
    write_tokens(os.path.join(a.out, "val.bin"), data[cut:])
    print(f"llm.c checkpoint: {n} parameters; tokens: {cut} train, {len(data) - cut} val")


if __name__ == "__main__":
    main()
