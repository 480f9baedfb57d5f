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
elif mode != "valid":
    die(f"unknown mode {mode}")
