#!/usr/bin/env python3
"""Checks a dtrain --trace file: trace_check.py FILE MODE [ARG]
  MODE valid      loads as JSON; every slice has rank (pid), start and duration;
                  every asynchronous slice opens and closes on one rank
  MODE overlap    valid, and some communication slice of a step overlaps a
                  compute slice of that rank (overlap on)
  MODE no-overlap valid, and no communication slice overlaps a compute slice
  MODE order      valid, and each rank's compute slices and steps are in order
                  (merged mpi traces keep each rank's order)
  MODE steps A:B  valid, and the step slices are exactly global steps A..B-1
  MODE tracks T,T,...  valid, and every rank that trains has slices on each track
  MODE counters   valid, and each rank's "bytes in flight" counter rises above 0
                  and ends at 0
  MODE pipeline P M  valid, a pipeline of P stages, one replica (rank s = stage s),
                  M micro-batches: in every traced step each stage sends and
                  receives M activations and M gradients (the first stage no
                  activation in, the last none out), each send's bytes the
                  matching receive's on the neighbour; some stage idles on
                  the "bubble" track
  MODE tp-sums    valid, every rank has "tensor-parallel sum" slices, and in
                  each step the same number and bytes as every other rank
Exit 0 when the check holds, 1 (with the reason on stdout) when not."""
import json
import sys

path, mode = sys.argv[1], sys.argv[2]


def die(msg):
    print(msg)
    sys.exit(1)


ev = json.load(open(path))["traceEvents"]
slices, opened, asyncs, counters = [], {}, [], []
for e in ev:
    ph = e["ph"]
    if ph == "M":
        continue
    if ph == "X":
        for k in ("pid", "ts", "dur"):
            if not isinstance(e.get(k), (int, float)):
                die(f"slice without {k}: {e}")
        if e["args"]["rank"] != e["pid"] or e["dur"] < 0:
            die(f"bad slice: {e}")
        slices.append(e)
    elif ph == "b":
        opened[(e["pid"], e["id"])] = e
    elif ph == "e":
        b = opened.pop((e["pid"], e["id"]), None)
        if b is None or e["ts"] < b["ts"]:
            die(f"an async end without its begin: {e}")
        asyncs.append(dict(b, dur=e["ts"] - b["ts"]))
    elif ph == "C":
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("ts"), (int, float)) \
                or e["args"]["bytes"] < 0:
            die(f"bad counter: {e}")
        counters.append(e)
    else:
        die(f"unexpected phase {ph}")
if opened:
    die(f"{len(opened)} async slices never closed")
if not slices:
    die("no slices")


def overlaps(a, b):
    return a["ts"] < b["ts"] + b["dur"] and b["ts"] < a["ts"] + a["dur"]


comm = [a for a in asyncs if a["cat"] == "communication"]
compute = [s for s in slices if s["cat"] == "compute"]
if mode in ("overlap", "no-overlap"):
    hits = 0
    for c in comm:
        if any(s["pid"] == c["pid"] and overlaps(s, c) for s in compute):
            hits += 1
    pass
    if not comm:
        die("no communication slices")
    if mode == "overlap" and hits == 0:
        die("no communication slice overlaps compute")
    if mode == "no-overlap" and hits:
        die("communication overlaps compute with overlap off")
elif mode == "order":
    for pid in sorted({s["pid"] for s in slices}):
        comp = [s for s in compute if s["pid"] == pid]
        if any(b["ts"] < a["ts"] + a["dur"] - 1e-3 for a, b in zip(comp, comp[1:])):
            die(f"rank {pid}: compute slices out of order")
        steps = [s["args"]["step"] for s in slices if s["pid"] == pid and s["cat"] == "steps"]
        if steps != sorted(steps) or len(set(steps)) != len(steps):
            die(f"rank {pid}: steps out of order: {steps[:10]}")
    ranks = sorted({s["pid"] for s in slices})

elif mode == "steps":
    a, b = map(int, sys.argv[3].split(":"))
    got = sorted({s["args"]["step"] for s in slices if s["cat"] == "steps"})
    if got != list(range(a, b)):
        die(f"steps traced {got}, expected {a}..{b - 1}")
elif mode == "tracks":
    want = sys.argv[3].split(",")
    cats = {}
    for s in slices + asyncs:
        cats.setdefault(s["pid"], set()).add(s["cat"])
    for pid, have in cats.items():
        if "steps" in have and not set(want) <= have:
            die(f"rank {pid} lacks tracks {sorted(set(want) - have)}")

elif mode == "counters":
    ranks = sorted({c["pid"] for c in counters})
    if not ranks:
        die("no bytes-in-flight counter")
    for pid in ranks:
        v = [c["args"]["bytes"] for c in counters if c["pid"] == pid]
        if max(v) <= 0 or v[-1] != 0:
            die(f"rank {pid}: bytes in flight {v[:6]} ... {v[-3:]}")
elif mode == "pipeline":
    P, M = int(sys.argv[3]), int(sys.argv[4])
    steps = sorted({s["args"]["step"] for s in slices if s["cat"] == "steps"})
    if not steps:
        die("no steps")

    def sizes(rank, name, step):
        return [a["args"]["bytes"] for a in asyncs
                if a["pid"] == rank and a["name"] == name and a["args"]["step"] == step]
    for k in steps:
        for s in range(P):
            for name, there in (("send activation", s < P - 1), ("recv activation", s > 0),
                                ("send gradient", s > 0), ("recv gradient", s < P - 1)):
                got = sizes(s, name, k)
                if len(got) != (M if there else 0):
                    die(f"step {k}, stage {s}: {len(got)} '{name}', expected {M if there else 0}")
            if s < P - 1 and sorted(sizes(s, "send activation", k)) != sorted(sizes(s + 1, "recv activation", k)):
                die(f"step {k}: stage {s}'s activations sent differ from stage {s + 1}'s received")
            if s > 0 and sorted(sizes(s, "send gradient", k)) != sorted(sizes(s - 1, "recv gradient", k)):
                die(f"step {k}: stage {s}'s gradients sent differ from stage {s - 1}'s received")
    if not any(s["cat"] == "bubble" and s["name"] == "bubble" for s in slices):
        die("no bubble slice")
elif mode == "tp-sums":
    sums = [a for a in asyncs if a["name"] == "tensor-parallel sum"]
    ranks = sorted({s["pid"] for s in slices if s["cat"] == "steps"})
    seen = {}
    for r in ranks:
        seen[r] = sorted((a["args"]["step"], a["args"]["bytes"]) for a in sums if a["pid"] == r)
        if not seen[r] or min(b for _, b in seen[r]) <= 0:
            die(f"rank {r}: no tensor-parallel sum with bytes")
    if len({tuple(v) for v in seen.values()}) != 1:
        die("the ranks' tensor-parallel sums differ")
elif mode != "valid":
    die(f"unknown mode {mode}")
