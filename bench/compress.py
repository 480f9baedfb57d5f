#!/usr/bin/env python3
"""Gradient compression against the dense ring allreduce, measured in the
same run (src/compress/, --compress).

  accuracy: mlp (5 epochs) and lenet (3 epochs), 4 workers, batch 64 a
            worker, lr 0.05, momentum 0.9, cosine, seed 1 (--seeds: each, and
            the mean of the points lost): final test
            accuracy of each codec, the points it loses against the dense
            run, and the bytes the dense run sent over the bytes the codec
            sent (the transport's counts, the run's totals of rank 0);
            PowerSGD sends its first 100 steps dense, as its authors'
            reference implementation does by default; TernGrad clips at
            2.5 standard deviations, as its paper does (terngrad:2.5: a
            scaler a tensor, shared by the workers, as the paper;
            terngrad-chunked:2.5: a scale a 512 values, not shared); onebit+shared is
            1-bit SGD with --momentum-correction shared (1-bit Adam's
            compressed momentum step, the owner's error fed back);
            encode + decode seconds against the training seconds.
  speed:    mlp under an emulated 100 Mbit/s link (--net bandwidth=100Mbit),
            4 workers: wall seconds to 85% test accuracy (checked after each
            epoch) of the dense ring, dgc and powersgd, and the ratio.

usage: bench/compress.py [accuracy|speed|all] [--models mlp,lenet] [--codecs a,b] [--seeds 1,2,3]
"""
import argparse, json, os, subprocess, sys, tempfile, time

DTRAIN = os.environ.get("DTRAIN", "build/dtrain")
CODECS = ["none", "fp16", "int8", "qsgd:7", "terngrad:2.5", "terngrad-chunked:2.5", "onebit", "onebit+shared", "powersgd:2",
          "topk:0.001", "dgc:0.001"]
EPOCHS = {"mlp": 5, "lenet": 3}


def codec_args(codec):
    """The options of a codec label: "none", "CODEC", or "CODEC+MC" for
    --compress CODEC --momentum-correction MC (onebit+shared: 1-bit SGD with
    the momentum step compressed, as 1-bit Adam)."""
    if codec == "none":
        return []
    name, _, mc = codec.partition("+")
    return ["--compress", name] + (["--momentum-correction", mc] if mc else [])


def run(args, metrics):
    if os.path.exists(metrics):
        os.remove(metrics)
    t0 = time.time()
    p = subprocess.run([DTRAIN, "train", "--quiet", "--metrics", metrics] + args,
                       capture_output=True, text=True)
    wall = time.time() - t0
    lines = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    return p.returncode, p.stderr.strip(), lines, wall


def epochs(lines):
    return [l for l in lines if l.get("event") == "epoch"]


def accuracy(models, codecs, seeds, tmp):
    print("| model | seed | codec | test acc | vs dense (points) | dense bytes / bytes | encode+decode s | train s |")
    print("|---|---|---|---|---|---|---|---|")
    deltas = {}  # (model, codec) -> the points lost at each seed
    for model in models:
        for seed in seeds:
            base = ["--model", model, "--workers", "4", "--epochs", str(EPOCHS[model]), "--batch", "64",
                    "--lr", "0.05", "--momentum", "0.9", "--lr-schedule", "cosine", "--seed", str(seed),
                    "--exchange", "allreduce:ring"]
            dense_acc = dense_bytes = None
            for codec in codecs:
                extra = codec_args(codec)
                if codec.startswith("powersgd"):  # the authors' reference (epfml/powersgd):
                    extra += ["--compress-warmup-steps", "100"]  # start_compressing_after_num_steps
                rc, err, lines, _ = run(base + extra, os.path.join(tmp, "m.jsonl"))
                ep = epochs(lines)
                if rc != 0 or not ep:
                    print(f"| {model} | {seed} | {codec} | failed: {err[:120]} | | | | |")
                    continue
                acc = ep[-1]["test_acc"]
                sent = sum(e["bytes_sent"] for e in ep)
                coding = sum(e.get("encode_sec", 0) + e.get("decode_sec", 0) for e in ep)
                train = sum(e["epoch_sec"] for e in ep)
                if codec == "none":
                    dense_acc, dense_bytes = acc, sent
                delta = 100 * (acc - dense_acc) if dense_acc is not None else 0
                ratio = dense_bytes / sent if dense_bytes and sent else 0
                deltas.setdefault((model, codec), []).append(delta)
                print(f"| {model} | {seed} | {codec} | {100 * acc:.2f}% | {delta:+.2f} | {ratio:.1f}x | "
                      f"{coding:.2f} | {train:.1f} |", flush=True)
    if len(seeds) > 1:  # one seed's difference is within the seeds' spread: their mean
        print()
        print("| model | codec | vs dense, mean over the seeds (points) | each |")
        print("|---|---|---|---|")
        for (model, codec), d in deltas.items():
            if codec != "none":
                print(f"| {model} | {codec} | {sum(d) / len(d):+.2f} | {', '.join(f'{x:+.2f}' for x in d)} |")


def speed(tmp, target=0.85):
    print(f"| codec (mlp, 4 workers, 100 Mbit/s emulated) | s to {100 * target:.0f}% | epochs | "
          "final acc | speed-up vs dense |")
    print("|---|---|---|---|---|")
    base = ["--model", "mlp", "--workers", "4", "--epochs", "4", "--batch", "64", "--lr", "0.05",
            "--momentum", "0.9", "--seed", "1", "--exchange", "allreduce:ring",
            "--net", "bandwidth=100Mbit"]
    dense = None
    for codec in ["none", "dgc:0.001", "powersgd:2"]:
        extra = [] if codec == "none" else ["--compress", codec]
        rc, err, lines, _ = run(base + extra, os.path.join(tmp, "s.jsonl"))
        ep = epochs(lines)
        if rc != 0 or not ep:
            print(f"| {codec} | failed: {err[:120]} | | | |")
            continue
        t, reached = 0.0, None
        for i, e in enumerate(ep):
            t += e["epoch_sec"]
            if e["test_acc"] >= target:
                reached = (t, i + 1)
                break
        if reached is None:
            print(f"| {codec} | not reached | {len(ep)} | {100 * ep[-1]['test_acc']:.2f}% | |")
            continue
        if codec == "none":
            dense = reached[0]
        sp = f"{dense / reached[0]:.1f}x" if dense else ""
        print(f"| {codec} | {reached[0]:.1f} | {reached[1]} | {100 * ep[-1]['test_acc']:.2f}% | {sp} |",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="?", default="all", choices=["accuracy", "speed", "all"])
    ap.add_argument("--models", default="mlp,lenet")
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--seeds", default="1", help="accuracy: seeds, each against its own dense run")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.what in ("accuracy", "all"):
            accuracy(a.models.split(","), a.codecs.split(","), [int(x) for x in a.seeds.split(",")], tmp)
        if a.what in ("speed", "all"):
            speed(tmp)


if __name__ == "__main__":
    sys.exit(main())
