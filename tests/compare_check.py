#!/usr/bin/env python3
"""Checks a dtrain compare report folder against itself, independently of
the C code that wrote it:
  - report.json's runs carry each run's metrics file, line for line;
  - each preset's figures are recomputed here from those metrics;
  - every number in the page's table equals report.json's, and its text
    shows that number;
  - each chart holds one series per preset (staleness: the presets that
    have it);
  - each verdict clause is regenerated here from the figures it cites;
  - each preset's predicted step stands beside its measured one (training
    time over the steps run), the error and the part named over 15% follow
    from those numbers, and the page shows the same words.
Prints PASS/FAIL lines (tests/lib.sh style) named after the folder's tag."""
import html.parser
import json
import math
import os
import sys

out, tag = sys.argv[1], sys.argv[2]
failures = []


def check(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + f"{tag}_{name}" + ("" if cond else f": {detail}"))
    if not cond:
        failures.append(name)


def close(a, b, rel=1e-6):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


rep = json.load(open(os.path.join(out, "report.json")))
target = rep["target_acc"]

# ---- the runs' metrics, as they are in their files -------------------------
same = True
for run in rep["runs"]:
    path = os.path.join(out, run["file"])
    lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    if lines != run["metrics"]:
        same = False
        print(f"  {run['file']}: report.json's metrics differ from the file")
check("metrics_equal_runs", same)


# ---- the figures, recomputed ------------------------------------------------
def figures(runs):
    ok = [r for r in runs if r["ok"]]
    f = {}
    def mean(vals):
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None
    def epochs(r):
        return [m for m in r["metrics"] if m["event"] == "epoch"]
    def done(r):
        return [m for m in r["metrics"] if m["event"] == "done"][0]
    def s(r, key):
        return sum(e[key] for e in epochs(r))
    f["final_acc"] = mean([done(r)["test_acc"] for r in ok])
    f["samples_per_sec"] = mean([done(r)["samples_per_sec"] for r in ok])
    f["bytes_sent"] = mean([done(r)["bytes_sent"] for r in ok])
    f["total_sec"] = mean([done(r)["total_sec"] for r in ok])
    f["bytes_per_step"] = mean([s(r, "bytes_sent_per_step") / len(epochs(r)) for r in ok])
    for key, field in (("train_sec", "epoch_sec"), ("compute_sec", "compute_sec"),
                       ("comm_sec", "comm_sec"), ("comm_exposed_sec", "comm_exposed_sec"),
                       ("eval_sec", "eval_sec")):
        f[key] = mean([s(r, field) for r in ok])
    comm = sum(s(r, "comm_sec") for r in ok)
    exposed = sum(s(r, "comm_exposed_sec") for r in ok)
    f["comm_hidden_frac"] = max(0.0, (comm - exposed) / comm) if ok and comm > 0 else None
    f["other_sec"] = max(0.0, f["train_sec"] - f["compute_sec"] - f["comm_exposed_sec"]) if ok else None
    times = []
    for r in ok:
        t = 0
        for e in epochs(r):
            t += e["epoch_sec"] + e["eval_sec"]
            if target is not None and e["test_acc"] >= target:
                times.append(t)
                break
    f["time_to_target"] = mean(times)
    f["reached"] = len(times)
    stale = []
    for r in ok:
        v = [e["staleness_mean"] for e in epochs(r) if "staleness_mean" in e]
        if v:
            stale.append(sum(v) / len(v))
    f["staleness_mean"] = mean(stale)
    waits = [sum(e["wait_sec"] for e in epochs(r) if "wait_sec" in e) for r in ok
             if any("wait_sec" in e for e in epochs(r))]
    f["wait_sec"] = mean(waits)
    bubbles = [sum(e["bubble_sec"] for e in epochs(r) if "bubble_sec" in e) for r in ok
               if any("bubble_sec" in e for e in epochs(r))]
    f["bubble_sec"] = mean(bubbles)
    f["ok"] = len(ok)
    f["runs"] = len(runs)
    return f


KEYS = ["final_acc", "samples_per_sec", "bytes_sent", "bytes_per_step", "total_sec", "train_sec",
        "compute_sec", "comm_sec", "comm_exposed_sec", "eval_sec", "other_sec",
        "comm_hidden_frac", "time_to_target", "staleness_mean", "wait_sec", "bubble_sec", "reached", "ok",
        "runs"]
bad = []
for p in rep["presets"]:
    f = figures([r for r in rep["runs"] if r["preset"] == p["name"]])
    for k in KEYS:
        # the C side sums in double and prints %.10g: equal to 1e-6 relative
        if not close(f[k], p[k], 1e-6 if k not in ("other_sec",) else 1e-4):
            bad.append(f"{p['name']}.{k}: report {p[k]}, metrics give {f[k]}")
check("figures_equal_metrics", not bad, "; ".join(bad[:5]))


# ---- the page -------------------------------------------------------------------
class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells = []          # (preset, key, value, text)
        self.charts = {}         # chart id -> [preset of each series]
        self.chart = None
        self.cell = None
        self.scripts = 0
        self.external = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        for k in ("src", "href"):
            if k in a:
                self.external.append(a[k])
        if tag == "svg" and "data-chart" in a:
            self.chart = a["data-chart"]
            self.charts[self.chart] = []
        if tag == "g" and a.get("class") == "series" and self.chart:
            self.charts[self.chart].append(a["data-preset"])
        if tag == "td" and "data-key" in a:
            self.cell = [a["data-preset"], a["data-key"], a.get("data-value"), ""]

    def handle_endtag(self, tag):
        if tag == "svg":
            self.chart = None
        if tag == "td" and self.cell:
            self.cells.append(tuple(self.cell))
            self.cell = None

    def handle_data(self, data):
        if self.cell:
            self.cell[3] += data


page = Page()
page.feed(open(os.path.join(out, "report.html"), encoding="utf-8").read())
check("html_self_contained", page.scripts == 0 and not page.external,
      f"{page.scripts} scripts, links {page.external[:3]}")

by_name = {p["name"]: p for p in rep["presets"]}


def shown(key, v, p):
    """The text the page shows for a number (the C side's formats)."""
    if key == "final_acc":
        return "n/a" if v is None else "%.2f%%" % (100 * v)
    if key == "samples_per_sec":
        return "n/a" if v is None else "%.0f" % v
    if key == "bytes_sent":
        return "n/a" if v is None else "%.2f" % (v / 1e6)
    if key == "bytes_per_step":
        return "n/a" if v is None else "%.0f" % v
    if key == "comm_hidden_frac":
        return "n/a" if v is None else "%.0f%%" % (100 * v)
    if key == "ok":
        return "%d/%d" % (p["ok"], p["runs"])
    if key == "time_to_target":
        if target is None:
            return "no target"
        if v is None:
            return "not reached"
        return "%.1f s%s" % (v, " (some runs)" if p["reached"] < p["ok"] else "")
    return None


def same_text(a, b):
    """Equal, or the same figure rounded either way at its last digit: the
    page rounds the full double, the check the %.10g that data-value has."""
    if a == b:
        return True
    import re
    na, nb = re.findall(r"[0-9.]+", a), re.findall(r"[0-9.]+", b)
    if len(na) != 1 or len(nb) != 1 or re.sub(r"[0-9.]+", "", a) != re.sub(r"[0-9.]+", "", b):
        return False
    digits = len(na[0].split(".")[1]) if "." in na[0] else 0
    return abs(float(na[0]) - float(nb[0])) <= 10 ** -digits * 1.0001


bad, seen = [], set()
for preset, key, value, text in page.cells:
    p = by_name.get(preset)
    if p is None:
        bad.append(f"unknown preset {preset}")
        continue
    seen.add((preset, key))
    if key == "verdict":
        want = "; ".join(c["text"] for c in p["verdict"])
        if text != want:
            bad.append(f"{preset} verdict: page '{text}', report.json '{want}'")
        continue
    v = None if value == "null" else float(value)
    if not close(v, p[key], 0):
        bad.append(f"{preset}.{key}: page {value}, report.json {p[key]}")
    if not same_text(text, shown(key, v, p)):
        bad.append(f"{preset}.{key}: shows '{text}', expected '{shown(key, v, p)}'")
want_cells = {(p["name"], k) for p in rep["presets"] for k in
              ("ok", "time_to_target", "final_acc", "samples_per_sec", "bytes_sent",
               "bytes_per_step", "comm_hidden_frac", "verdict")}
if seen != want_cells:
    bad.append(f"cells missing: {sorted(want_cells - seen)[:4]}")
check("html_numbers_equal_json", not bad, "; ".join(bad[:5]))

names = [p["name"] for p in rep["presets"]]
stale = [p["name"] for p in rep["presets"] if p["staleness_mean"] is not None]
bad = []
for chart in ("acc_time", "acc_samples", "loss_step", "samples_per_sec", "time_split", "bytes_per_step"):
    if page.charts.get(chart) != names:
        bad.append(f"{chart}: {page.charts.get(chart)}")
if stale and page.charts.get("staleness") != stale:
    bad.append(f"staleness: {page.charts.get('staleness')} (expected {stale})")
if not stale and "staleness" in page.charts:
    bad.append("a staleness chart without staleness")
check("charts_one_series_per_preset", not bad, "; ".join(bad))

# ---- the verdicts, regenerated from the figures -----------------------------------
ok = [p for p in rep["presets"] if p["ok"]]


def extreme(key, sign):
    best = None
    for p in ok:
        if p[key] is None:
            continue
        if best is None or sign * p[key] < sign * best[key]:
            best = p
    return best


def clauses(p):
    c = []
    if not p["ok"]:
        return [("failed", None, "failed: " + (p["error"] or "no run ended"))]
    if target is not None:
        pct = "%.4g" % (100 * target)
        first = extreme("time_to_target", 1)
        if p["time_to_target"] is None:
            c.append(("not_reached", p["final_acc"], "did not reach %s%% (final %.2f%%)" % (pct, 100 * p["final_acc"])))
        elif first is p:
            c.append(("first", p["time_to_target"], "reached %s%% first, at %.1f s" % (pct, p["time_to_target"])))
        else:
            c.append(("reached", p["time_to_target"], "reached %s%% at %.1f s, %.1f\u00d7 the fastest (%s)"
                      % (pct, p["time_to_target"], p["time_to_target"] / first["time_to_target"], first["name"])))
    else:
        best = extreme("final_acc", -1)
        if best is p:
            c.append(("best_final", p["final_acc"], "best final accuracy, %.2f%%" % (100 * p["final_acc"])))
        else:
            c.append(("final", p["final_acc"], "final accuracy %.2f%%, %.2f points below %s"
                      % (100 * p["final_acc"], 100 * (best["final_acc"] - p["final_acc"]), best["name"])))
    if p["comm_sec"] > 0 and p["train_sec"] > 0:
        waits = p["wait_sec"] is not None
        wait = p["wait_sec"] / p["train_sec"] if waits else 0
        bubble = p["bubble_sec"] / p["train_sec"] if p["bubble_sec"] is not None else 0
        exposed = p["comm_exposed_sec"] / p["train_sec"] - wait - bubble
        if p["comm_hidden_frac"] is not None and p["comm_hidden_frac"] >= 0.5:
            c.append(("hidden", p["comm_hidden_frac"], "communication %.0f%% hidden" % (100 * p["comm_hidden_frac"])))
        if wait >= 0.1:
            c.append(("waiting", wait, "waited for slower ranks %.0f%% of training time" % (100 * wait)))
        if bubble >= 0.1:
            c.append(("bubble", bubble, "pipeline bubble %.0f%% of training time" % (100 * bubble)))
        if exposed >= 0.2:
            c.append(("exposed", exposed, "exposed communication%s %.0f%% of training time"
                      % ("" if waits else " and waiting", 100 * exposed)))
    most = extreme("bytes_per_step", -1)
    if most and most["bytes_per_step"] > 0:
        if p["bytes_per_step"] == 0:
            c.append(("no_bytes", 0, "no bytes on the wire"))
        elif most["bytes_per_step"] / p["bytes_per_step"] >= 1.5:
            r = most["bytes_per_step"] / p["bytes_per_step"]
            c.append(("bytes", r, "%.1f\u00d7 fewer bytes per step than %s" % (r, most["name"])))
    if extreme("samples_per_sec", -1) is p and len(rep["presets"]) > 1:
        c.append(("throughput", p["samples_per_sec"], "highest throughput, %.0f samples/s" % p["samples_per_sec"]))
    if p["staleness_mean"] is not None:
        c.append(("staleness", p["staleness_mean"], "mean staleness %.2f" % p["staleness_mean"]))
    return c[:6]


def borderline(p):
    """The kinds of verdict whose figure lies within report.json's printing
    precision (%.10g) of its threshold: the report decided on the unrounded
    value, so a clause there may be present or not (gosgd's hidden share
    printed as 0.5 when it was 0.49999...)."""
    def near(x, t):
        return x is not None and abs(x - t) <= 1e-8 * max(1.0, abs(t))
    kinds = set()
    if not p["ok"]:
        return kinds
    if near(p["comm_hidden_frac"], 0.5):
        kinds.add("hidden")
    if p["comm_sec"] and p["train_sec"]:
        wait = p["wait_sec"] / p["train_sec"] if p["wait_sec"] is not None else 0
        bubble = p["bubble_sec"] / p["train_sec"] if p["bubble_sec"] is not None else 0
        if near(wait, 0.1):
            kinds.add("waiting")
        if near(bubble, 0.1):
            kinds.add("bubble")
        if near(p["comm_exposed_sec"] / p["train_sec"] - wait - bubble, 0.2):
            kinds.add("exposed")
    most = extreme("bytes_per_step", -1)
    if most and p["bytes_per_step"] and near(most["bytes_per_step"] / p["bytes_per_step"], 1.5):
        kinds.add("bytes")
    return kinds


bad = []
for p in rep["presets"]:
    skip = borderline(p)
    want = [c for c in clauses(p) if c[0] not in skip]
    got = [(v["kind"], v["value"], v["text"]) for v in p["verdict"] if v["kind"] not in skip]
    if [(k, t) for k, _, t in want] != [(k, t) for k, _, t in got] or \
            not all(close(a, b, 1e-6) for (_, a, _), (_, b, _) in zip(want, got)):
        bad.append(f"{p['name']}: report {got}, figures give {want}")
check("verdicts_match_figures", not bad, "; ".join(bad[:3]))

# ---- the performance model beside the measurement ------------------------------
bad = []
page_text = open(os.path.join(out, "report.html")).read()
for p in rep["presets"]:
    pr = p.get("prediction")
    if pr is None:
        bad.append(f"{p['name']}: no prediction")
        continue
    shown_text = pr["text"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    if shown_text not in page_text:  # as sb_html escapes
        bad.append(f"{p['name']}: the page does not show '{pr['text']}'")
    if not pr["predicted"]:
        if p["ok"] and not pr["text"].startswith("not predicted: "):
            bad.append(f"{p['name']}: measured, not predicted, and no reason: {pr['text']}")
        continue
    runs = [r for r in rep["runs"] if r["preset"] == p["name"] and r["ok"]]
    steps = sum([m for m in r["metrics"] if m["event"] == "epoch"][-1]["step"] for r in runs) / len(runs)
    meas = p["train_sec"] / steps
    err = (pr["step_sec"] - meas) / meas
    if not close(pr["measured_step_sec"], meas, 1e-6) or not close(pr["error"], err, 1e-6):
        bad.append(f"{p['name']}: measured {pr['measured_step_sec']} error {pr['error']}, metrics give {meas} {err}")
    if not close(pr["measured_compute_sec"], p["compute_sec"] / steps, 1e-6):
        bad.append(f"{p['name']}: measured compute {pr['measured_compute_sec']}")
    if not pr["step_sec"] > 0 or not 0 <= pr["compute_sec"] <= pr["step_sec"] * (1 + 1e-9):
        bad.append(f"{p['name']}: predicted step {pr['step_sec']}, compute {pr['compute_sec']}")
    over = abs(err) > 0.15
    if over != (pr["off"] is not None) or (over and pr["off"] not in ("compute", "communication", "bubble", "waiting")):
        bad.append(f"{p['name']}: error {err:.3f}, part named {pr['off']}")
    if over:
        dc = pr["compute_sec"] - pr["measured_compute_sec"]
        dr = (pr["step_sec"] - pr["compute_sec"]) - (meas - pr["measured_compute_sec"])
        if (pr["off"] == "compute") != (abs(dc) >= abs(dr)) or f"most off on {pr['off']}" not in pr["text"]:
            bad.append(f"{p['name']}: off on {pr['off']}, compute differs by {dc}, the rest by {dr}")
check("predicted_beside_measured", not bad, "; ".join(bad[:3]))
sys.exit(1 if failures else 0)
