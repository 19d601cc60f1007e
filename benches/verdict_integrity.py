#!/usr/bin/env python3
"""Verdict-integrity benchmark: many small studies through the real
`tunectl launch` (local transport, one slot) on a FAKE trial program with a
known truth (benches/verdict_integrity/fake_bench.py), scored against that
truth. Run it through benches/verdict_integrity.sh; docs/benchmarks.md has
the model, the targets and results.

    verdict_integrity.py --tunectl PATH [--quick] [--jobs 2] [--out FIGURES.json]
                         [--noise 0.01,0.05,0.10] [--keep DIR] [--seed N]

Per noise level (per-sample lognormal sigma) it runs, each study in its own
temporary ledger and work directory:

- null studies: no knob matters (every working config has the baseline's
  true time); anything but the baseline shipping is a false win;
- win studies: one named config is truly 3 %, 5 % or 10 % faster;
- drift studies: null truth, or a true 10 % win, and the "host" runs
  20 % slower during a 3 s window of the study: in its sweep (every null
  truth, and half the wins), or from the start of its final round (the
  other half of the wins);

every study also holds three traps: a config that is 15 % faster but
crashes from its third sweep repeat on, one that is 15 % faster at n=2 and
out of memory at n=3, one that is 20 % faster with a different output.
Studies come in groups of repeats (same truth, a different noise seed),
which give the "identical winners" figure.
"""

import argparse
import concurrent.futures as cf
import glob
import json
import math
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "verdict_integrity", "fake_bench.py")

# The study every run shares (but for its name, truth file and ledger).
KNOBS = {
    "tile": [32, 64, 128],
    "stages": [1, 2],
    "layout": ["row", "col"],
}
DEFAULTS = {"tile": 64, "stages": 1, "layout": "row"}
CELLS = [2, 3]  # axis n; pow2 buckets: both in n ∈ [2, 4), one bucket
TRAPS = [
    # 15 % faster, but crashes from its third sweep repeat on
    {"knobs": {"tile": 32, "stages": 2, "layout": "col"}, "effect": "crash",
     "from_repeat": 2, "factor": 1.15},
    # out of memory at n=3; 15 % faster at n=2
    {"knobs": {"tile": 128, "stages": 2, "layout": "row"}, "cell": {"n": 3}, "effect": "oom"},
    {"knobs": {"tile": 128, "stages": 2, "layout": "row"}, "effect": "speed", "factor": 1.15},
    # 20 % faster, different output
    {"knobs": {"tile": 32, "stages": 1, "layout": "col"}, "effect": "wrong", "factor": 1.2},
]
TRAP_CONFIGS = [{"tile": 32, "stages": 2, "layout": "col"},
                {"tile": 128, "stages": 2, "layout": "row"},
                {"tile": 32, "stages": 1, "layout": "col"}]

MEASUREMENT = {
    "warmup": 0,            # the fake has nothing to warm up
    "repeats": 5,
    "anchor_every": 5,
    "cool_drift": 0.10,     # the defaults
    "cool_eps": 0.03,
    "cool_wait": "200ms",   # scaled to ~0.1 s trials (default 5s)
    "cool_max_wait": "8s",  # default 10m; back-off sum 0.2+0.4+0.8+1.6+3.2 = 6.2 s
    "cool_max_retry": 5,
    "confirm_repeats": 3,
}
SLOWDOWN_FACTOR = 1.2
SLOWDOWN_LEN_S = 3.0

NOISE = {"sigma": None, "trial_sigma_ratio": 0.5, "outlier_p": 0.01, "outlier_x": 1.3,
         "samples": 5, "sleep_s": 0.05, "base_ms": 10.0}

TARGETS = {
    "false_wins": "0 in 100 null studies at each noise level",
    "found_5": ">= 95% of true >=5% wins found at 5% noise",
    "all_verdict": ">= 95% of studies without injected drift all-VERDICT, no cell dropped",
    "drift_caught": ">= 95% of injected 20% slowdowns caught at 5% noise",
    "identical": "identical winners in >= 9 of 10 repeats where the best is >= 5% ahead",
    "cooling": "cooling <= 10% of trial-seconds when nothing drifts",
    "traps": "crash/OOM/output-changing configs never ship",
    "cost": "<= 1.2x the fixed design's runs in studies with no close decision",
}

# A drift study counts for the slowdown figure when at least this many of
# its trials started inside a window in the sweep: enough for a check (an
# anchor every `anchor_every` candidates) to fall in it. In the final round
# every baseline run is a check: one trial in the window is enough.
MIN_HOT_TRIALS = 6


def label(cfg):
    """The report's config label: the knobs that differ from the baseline,
    in knob order."""
    parts = ["%s=%s" % (k, cfg[k]) for k in KNOBS if cfg[k] != DEFAULTS[k]]
    return " ".join(parts) if parts else "baseline"


def all_configs():
    out = []
    for t in KNOBS["tile"]:
        for s in KNOBS["stages"]:
            for l in KNOBS["layout"]:
                out.append({"tile": t, "stages": s, "layout": l})
    return out


def plan(args):
    """The studies to run, per noise level: (kind, true effect, group, repeat)."""
    # kind: (groups, repeats per group, true effect of the named winner or 0)
    if args.quick:
        per = [("null", 1, 3, 0.0), ("win", 1, 3, 0.05), ("win", 1, 2, 0.10),
               ("drift", 1, 2, 0.0), ("drift", 1, 2, 0.10)]
    else:
        per = [("null", 10, 10, 0.0), ("win", 1, 10, 0.03), ("win", 2, 10, 0.05),
               ("win", 2, 10, 0.10), ("drift", 1, 10, 0.0), ("drift", 1, 10, 0.10)]
    # --groups K multiplies every kind's groups; --effects keeps the win
    # and drift studies of those true effects (the null truth's 0 always).
    effects = getattr(args, "effects", None)
    per = [(k, g * getattr(args, "groups", 1), r, e) for k, g, r, e in per
           if effects is None or e == 0.0 or any(abs(e - x) < 1e-9 for x in effects)]
    rng = random.Random(args.seed)
    candidates = [c for c in all_configs() if c != DEFAULTS and c not in TRAP_CONFIGS]
    studies = []
    for sigma in args.noise:
        for kind, groups, reps, effect in per:
            for g in range(groups):
                winner = rng.choice(candidates) if effect else None
                tag = kind if kind == "null" else "%s%d" % (kind, round(effect * 100))
                for r in range(reps):
                    studies.append({
                        "kind": kind,
                        "effect": effect,
                        "sigma": sigma,
                        "group": "%s-s%02d-g%02d" % (tag, round(sigma * 100), g),
                        "repeat": r,
                        "winner": winner,
                        "seed": rng.randrange(1 << 30),
                        # Where the slowdown falls: a null truth has no
                        # final round; half the wins slow down in theirs.
                        "phase": "final" if kind == "drift" and effect and r % 2 else "sweep",
                    })
    return studies


def study_yaml(name, py, truth_path):
    m = MEASUREMENT
    cmd = "%s -S %s %s" % (shlex.quote(py), shlex.quote(FAKE), shlex.quote(truth_path))
    return f"""# FAKE study written by benches/verdict_integrity.py
name: {name}
description: verdict-integrity benchmark, FAKE trial program (benches/verdict_integrity/fake_bench.py)
knobs:
  tile: {{kind: int, values: [32, 64, 128], default: 64}}
  stages: {{kind: int, values: [1, 2], default: 1}}
  layout: {{kind: categorical, values: [row, col], default: row}}
cells:
  n: [{", ".join(str(c) for c in CELLS)}]
trial:
  command: {json.dumps(cmd)}
  timeout: 30s
objective: {{metric: time_ms, unit: ms, better: lower}}
measurement:
  warmup: {m["warmup"]}
  repeats: {m["repeats"]}
  anchor_every: {m["anchor_every"]}
  cool_drift: {m["cool_drift"]}
  cool_eps: {m["cool_eps"]}
  cool_wait: {m["cool_wait"]}
  cool_max_wait: {m["cool_max_wait"]}
  cool_max_retry: {m["cool_max_retry"]}
  confirm_repeats: {m["confirm_repeats"]}
"""


def parse_ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


DRIFT_RE = re.compile(r"host (\S+) drifted ([\d.]+)% at cell (.+?) \(3 anchors against the reference")
SLOWER_RE = re.compile(r"host (\S+) was slower before: 3 anchors at cell (.+?) are ([\d.]+)% better")
COOLED_RE = re.compile(r"host (\S+) cooled down:")
DROP_RE = re.compile(r"host (\S+) drops cell (.+?): ")


def run_study(st, args, root):
    name = "vi-%s-r%02d" % (st["group"], st["repeat"])
    d = os.path.join(root, name)
    os.makedirs(d)
    truth_path = os.path.join(d, "truth.json")
    rules = []
    if st["winner"]:
        rules.append({"knobs": st["winner"], "effect": "speed", "factor": 1.0 + st["effect"]})
    rules += TRAPS
    slowdown = None
    if st["kind"] == "drift":
        slowdown = {"start_s": st["window_start"], "end_s": st["window_start"] + SLOWDOWN_LEN_S,
                    "factor": SLOWDOWN_FACTOR}
        if st["phase"] == "final":
            slowdown["from_role"] = "confirm"
    truth = {
        "seed": st["seed"], "base_ms": NOISE["base_ms"], "cell_axis": "n",
        "sigma": st["sigma"], "trial_sigma": st["sigma"] * NOISE["trial_sigma_ratio"],
        "outlier_p": NOISE["outlier_p"], "outlier_x": NOISE["outlier_x"],
        "samples": NOISE["samples"], "sleep_s": NOISE["sleep_s"],
        "state_dir": os.path.join(d, "state"), "slowdown": slowdown, "rules": rules,
    }
    with open(truth_path, "w") as f:
        json.dump(truth, f, indent=1)
    study = os.path.join(d, "study.yaml")
    with open(study, "w") as f:
        f.write(study_yaml(name, args.python, truth_path))
    ledger = os.path.join(d, "ledger")
    cmd = [args.tunectl, "launch", study, "--ledger", ledger,
           "--workdir", os.path.join(d, "work"), "--progress", "plain"]
    lines = []
    t_start = time.time()
    with open(os.path.join(d, "launch.out"), "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            lines.append((time.time(), line.rstrip("\n")))
        rc = p.wait()
    t_end = time.time()
    with open(os.path.join(d, "launch.err"), "w") as f:
        for t, line in lines:
            f.write("%.3f %s\n" % (t - t_start, line))
    res = {k: st[k] for k in ("kind", "effect", "sigma", "group", "repeat", "seed", "phase")}
    res.update(name=name, launch_rc=rc, wall_s=t_end - t_start,
               winner_truth=label(st["winner"]) if st["winner"] else "baseline")
    if slowdown:
        # On the study's clock (zero: its first trial); a window that
        # follows the final round starts with the round's first trial (no
        # round: the slowdown never came).
        shift = 0.0
        if slowdown.get("from_role"):
            try:
                with open(os.path.join(d, "state", "t0")) as f0, \
                        open(os.path.join(d, "state", "t_" + slowdown["from_role"])) as f1:
                    shift = float(f1.read()) - float(f0.read())
            except (OSError, ValueError):
                shift = None
        res["window"] = (None if shift is None else
                         [shift + slowdown["start_s"], shift + slowdown["end_s"]])
    rep = subprocess.run([args.tunectl, "report", study, "--ledger", ledger, "--format", "json"],
                         capture_output=True, text=True)
    if rc != 0 or rep.returncode != 0:
        res["error"] = (rep.stderr or "")[-2000:] + "\n".join(l for _, l in lines[-20:])
        return res
    report = json.loads(rep.stdout)
    buckets = [b for c in report["classes"] for b in c["buckets"]]
    res["buckets"] = [{"label": b["label"], "ships": b["config"] if isinstance(b["config"], str)
                       else config_label(b), "level": b["level"],
                       "level_reason": b.get("level_reason"), "decision": b["decision"]}
                      for b in buckets]
    res["level"] = report.get("level")

    # The ledger: attempts by role, voided, drops.
    sdir = os.path.join(ledger, name)
    attempts = []
    sweep = []
    for path in glob.glob(os.path.join(sdir, "trials", "*", "*.json")):
        with open(path) as f:
            a = json.load(f)
        void = os.path.exists(path[:-5] + ".void")
        attempts.append({
            "role": a.get("role", "sweep"), "status": a.get("status"),
            "start": parse_ts(a["started_at"]) if a.get("started_at") else None,
            "dur": float(a.get("duration_s") or 0.0),
            "void": void,
        })
        if a.get("role", "sweep") == "sweep" and not void and a.get("status") in ("ok", "failed"):
            sweep.append({"label": a.get("config_label"), "baseline": a.get("is_baseline"),
                          "cell": a.get("cell_label"), "repeat": a.get("repeat", 0),
                          "status": a.get("status"), "digest": a.get("digest"),
                          "samples": (a.get("metrics") or {}).get("time_ms") or []})
    res["peers"] = peers(sweep)
    drops = glob.glob(os.path.join(sdir, "drops", "**", "*.json"), recursive=True)
    t0 = None
    try:
        with open(os.path.join(d, "state", "t0")) as f:
            t0 = float(f.read())
    except (OSError, ValueError):
        pass

    # Cool-downs from the stamped stderr: "drifted ... cooling down" to
    # "cooled down" / "drops cell" (one slot: one at a time).
    cooldowns, alarms, open_at = [], [], None
    for t, line in lines:
        m = DRIFT_RE.search(line)
        if m:
            alarms.append({"t": t, "kind": "drifted", "pct": float(m.group(2)),
                           "cell": m.group(3)})
            open_at = t
            continue
        m = SLOWER_RE.search(line)
        if m:
            alarms.append({"t": t, "kind": "slower_before", "pct": float(m.group(3)),
                           "cell": m.group(2)})
            continue
        if (COOLED_RE.search(line) or DROP_RE.search(line)) and open_at is not None:
            cooldowns.append((open_at, t))
            open_at = None
    if open_at is not None:
        cooldowns.append((open_at, t_end))

    def in_cooldown(a):
        return a["start"] is not None and any(s <= a["start"] <= e for s, e in cooldowns)

    cool_wall = sum(e - s for s, e in cooldowns)
    cool_anchor = sum(a["dur"] for a in attempts if a["role"] == "anchor" and in_cooldown(a))
    trial_s = sum(a["dur"] for a in attempts)
    total = trial_s + max(0.0, cool_wall - cool_anchor)
    voided_s = sum(a["dur"] for a in attempts if a["void"])
    routine_anchor_s = sum(a["dur"] for a in attempts
                           if a["role"] == "anchor" and not in_cooldown(a))
    res.update(
        attempts=len(attempts),
        by_role={r: sum(1 for a in attempts if a["role"] == r)
                 for r in ("sweep", "anchor", "confirm")},
        voided=sum(1 for a in attempts if a["void"]),
        drops=len(drops),
        trial_s=trial_s, cooldown_wall_s=cool_wall, voided_s=voided_s,
        cooling_share=(cool_wall + voided_s) / total if total else 0.0,
        anchor_share=routine_anchor_s / total if total else 0.0,
        alarms=[dict(a, t=a["t"] - t0 if t0 else None) for a in alarms],
        # Trials that started inside the slowdown window, by role.
        hot_trials={r: sum(1 for a in attempts
                           if a["role"] == r and a["start"] is not None and t0
                           and res.get("window")
                           and res["window"][0] <= a["start"] - t0 < res["window"][1])
                    for r in ("sweep", "anchor", "confirm")} if slowdown else None,
        t0_offset=(t0 - t_start) if t0 else None,
        duration_s=(t_end - t0) if t0 else None,
    )
    if not args.keep:
        shutil.rmtree(d, ignore_errors=True)
    return res


# ------------------------------------------------ peers on the same runs

def peers(sweep):
    """What two other deciders would ship from the same study's sweep
    runs, limited to the first `repeats` runs of each config and cell (the
    fixed design, no racing): `spread_rule`, tunectl's rule before the
    interval (a win must beat max(min_improvement, the combined relative
    spread of single samples), host by host, no harm beyond the spread;
    its confirmation round is left out, which can only remove wins), and
    `best_mean`, the config with the best mean time over its runs when it
    is any faster than the baseline's (what a tuner that picks the best
    observed value ships). Both respect the gate. Lower is better."""
    reps = MEASUREMENT["repeats"]
    by = {}
    for a in sweep:
        if a["repeat"] < reps:
            by.setdefault((a["cell"], a["label"], a["baseline"]), []).append(a)
    cells = sorted({c for c, _, _ in by})
    base = {c: v for (c, _, b), v in by.items() if b}
    labels = sorted({l for (_, l, b) in by if not b})
    out = {"spread_rule": "baseline", "best_mean": "baseline",
           "runs": sum(len(v) for v in by.values())}
    if not cells or any(c not in base for c in cells):
        return out

    def ok(v):
        return [a for a in v if a["status"] == "ok" and a["samples"]]

    def gate(c, l):
        v = by.get((c, l, False))
        if not v or any(a["status"] != "ok" for a in v):
            return False
        ref = sorted(ok(base[c]), key=lambda a: a["repeat"])
        return bool(ref) and all(a["digest"] == ref[0]["digest"] for a in v)

    def rel_mad(xs):
        m = statistics.median(xs)
        return 1.4826 * statistics.median([abs(x - m) for x in xs]) / m if m else 0.0

    spread_best, mean_best = None, None
    for l in labels:
        if not all(gate(c, l) for c in cells):
            continue
        sp, spreads, means = [], [], []
        for c in cells:
            b = [x for a in ok(base[c]) for x in a["samples"]]
            x = [x for a in ok(by[(c, l, False)]) for x in a["samples"]]
            if len(b) < 3 or len(x) < 3:
                break
            sp.append(statistics.median(b) / statistics.median(x))
            spreads.append(rel_mad(b) + rel_mad(x))
            means.append(statistics.mean(b) / statistics.mean(x))
        else:
            geo = math.exp(sum(math.log(v) for v in sp) / len(sp))
            thr = max(0.02, sum(spreads) / len(spreads))
            harm = any(v < 1 - s for v, s in zip(sp, spreads))
            if geo - 1 > thr and not harm and (spread_best is None or geo > spread_best[0]):
                spread_best = (geo, l)
            gm = math.exp(sum(math.log(v) for v in means) / len(means))
            if gm > 1 and (mean_best is None or gm > mean_best[0]):
                mean_best = (gm, l)
    if spread_best:
        out["spread_rule"] = spread_best[1]
    if mean_best:
        out["best_mean"] = mean_best[1]
    return out


def fixed_runs(r):
    """Runs the fixed design (before the interval rule: no racing, a final
    round of `confirm_repeats` a side at every cell) spends on this study's
    truth: its sweep (the first `repeats` runs of each config and cell, as
    `peers` counted), anchors at the rate this study took them, and its
    final round when its rule (`spread_rule`) had a winner to confirm."""
    sweep = r["by_role"].get("sweep", 0)
    anchors = r["by_role"].get("anchor", 0) * r["peers"]["runs"] / sweep if sweep else 0
    final = (2 * MEASUREMENT["confirm_repeats"] * len(CELLS)
             if r["peers"]["spread_rule"] != "baseline" else 0)
    return r["peers"]["runs"] + anchors + final


def close_decision(effect, sigma):
    """Whether a study of this truth holds a decision the fixed design
    cannot settle: a true speedup (the named winner's, or the others' 0)
    within the half-width of the fixed design's 95 % interval of the
    bucket's speedup (5 runs a side at each of 2 cells) of the minimum
    improvement (2 %). One run's value is the median of 5 samples (standard
    error 1.2533·σ/√5) with a per-process offset of σ/2."""
    run_sd = sigma * math.sqrt(NOISE["trial_sigma_ratio"] ** 2
                               + 1.2533 ** 2 / NOISE["samples"])
    reps = MEASUREMENT["repeats"]
    # Per cell: a difference of two means of `reps` runs; the bucket: the
    # mean of the cells' log speedups.
    cell_var = 2 * run_sd ** 2 / reps
    half = 2.12 * math.sqrt(cell_var / len(CELLS))  # t at about 16 d.f.
    return any(abs(e - 0.02) <= half for e in {0.0, effect})


def config_label(bucket):
    """`config` may be an object of knobs (the JSON report) or a label."""
    cfg = bucket.get("config")
    if isinstance(cfg, dict):
        full = dict(DEFAULTS)
        full.update(cfg.get("knobs", cfg))
        return label(full)
    return str(cfg)


# ---------------------------------------------------------------- scoring

def trap_labels():
    return {label(c) for c in TRAP_CONFIGS}


def score(results, args):
    traps = trap_labels()
    figs = {}
    for sigma in args.noise:
        rs = [r for r in results if r["sigma"] == sigma]
        ok = [r for r in rs if "error" not in r]
        f = {"studies": len(rs), "errors": len(rs) - len(ok)}

        def ships(r):
            return [b["ships"] for b in r["buckets"]]

        nulls = [r for r in ok if r["kind"] == "null"]
        f["null_studies"] = len(nulls)
        f["false_wins"] = sum(1 for r in nulls if any(s != "baseline" for s in ships(r)))
        for e in (0.03, 0.05, 0.10):
            ws = [r for r in ok if r["kind"] == "win" and abs(r["effect"] - e) < 1e-9]
            if ws:
                f["win%d_studies" % round(e * 100)] = len(ws)
                f["win%d_found" % round(e * 100)] = sum(
                    1 for r in ws if all(s == r["winner_truth"] for s in ships(r)))
                f["win%d_wrong" % round(e * 100)] = sum(
                    1 for r in ws if any(s not in ("baseline", r["winner_truth"]) for s in ships(r)))
        nodrift = [r for r in ok if r["kind"] != "drift"]
        f["nodrift_studies"] = len(nodrift)
        f["all_verdict"] = sum(1 for r in nodrift
                               if all(b["level"] == "verdict" for b in r["buckets"])
                               and r["drops"] == 0)
        f["with_drops"] = sum(1 for r in nodrift if r["drops"] > 0)
        f["any_draft"] = sum(1 for r in nodrift
                             if any(b["level"] != "verdict" for b in r["buckets"]))
        f["false_alarm_studies"] = sum(1 for r in nodrift if r["alarms"])
        f["false_alarms"] = sum(len(r["alarms"]) for r in nodrift)
        cs = [r["cooling_share"] for r in nodrift]
        f["cooling_share_mean"] = statistics.mean(cs) if cs else None
        f["cooling_share_median"] = statistics.median(cs) if cs else None
        f["cooling_share_max"] = max(cs) if cs else None
        an = [r["anchor_share"] for r in nodrift]
        f["anchor_share_mean"] = statistics.mean(an) if an else None
        dr_all = [r for r in ok if r["kind"] == "drift"]
        # Only a slowdown that reached the study can be caught: a study that
        # ended before its window, or had no final round for it, is counted
        # apart.
        dr = [r for r in dr_all if r.get("window")
              and sum((r.get("hot_trials") or {}).values())
              >= (1 if r.get("phase") == "final" else MIN_HOT_TRIALS)]
        untouched = [r for r in dr_all if r not in dr]
        f["drift_untouched"] = len(untouched)
        f["drift_untouched_right"] = sum(
            1 for r in untouched if all(s == r["winner_truth"] for s in ships(r)))
        slack = 8.0 + 2.0  # cool_max_wait + 2 s
        for tag, sel in (("", dr), ("_null", [r for r in dr if not r["effect"]]),
                         ("_win10", [r for r in dr if r["effect"]
                                     and r.get("phase", "sweep") == "sweep"]),
                         ("_final", [r for r in dr if r.get("phase") == "final"])):
            n = {"studies": 0, "seen": 0, "caught": 0, "right_answer": 0, "all_verdict": 0}
            for r in sel:
                a, b = r["window"]
                seen = any(x["t"] is not None and a <= x["t"] <= b + slack for x in r["alarms"])
                right = all(s == r["winner_truth"] for s in ships(r))
                n["studies"] += 1
                n["seen"] += seen
                n["right_answer"] += right
                n["caught"] += seen and right
                n["all_verdict"] += (all(b_["level"] == "verdict" for b_ in r["buckets"])
                                     and r["drops"] == 0)
            for k, v in n.items():
                f["drift%s_%s" % (tag, k)] = v
        # The same runs judged by the rule before the interval and by the
        # best observed mean (see `peers`), and the runs each spends.
        for peer in ("spread_rule", "best_mean"):
            pk = [r for r in ok if "peers" in r]
            f[peer + "_false_wins"] = sum(1 for r in pk if r["kind"] == "null"
                                          and r["peers"][peer] != "baseline")
            f[peer + "_wrong"] = sum(1 for r in pk if r["kind"] == "win"
                                     and r["peers"][peer] not in ("baseline", r["winner_truth"]))
            for e in (0.03, 0.05, 0.10):
                ws = [r for r in pk if r["kind"] == "win" and abs(r["effect"] - e) < 1e-9]
                if ws:
                    f["%s_win%d_found" % (peer, round(e * 100))] = sum(
                        1 for r in ws if r["peers"][peer] == r["winner_truth"])
        runs = [r["by_role"] for r in ok]
        f["runs_mean"] = statistics.mean([sum(b.values()) for b in runs]) if runs else None
        f["fixed_runs_mean"] = (statistics.mean([fixed_runs(r) for r in ok if "peers" in r])
                                if ok else None)
        # The cost target: studies without injected drift whose decisions
        # are not close (see `close_decision`).
        calm = [r for r in ok if r["kind"] != "drift" and "peers" in r
                and not close_decision(r["effect"], sigma)]
        f["calm_studies"] = len(calm)
        f["calm_runs_ratio"] = (sum(sum(r["by_role"].values()) for r in calm)
                                / sum(fixed_runs(r) for r in calm)) if calm else None
        f["trap_ships"] = sum(1 for r in ok for s in ships(r) if s in traps)
        f["trap_studies"] = len(ok)
        # identical winners per group of repeats
        groups = {}
        for r in ok:
            groups.setdefault(r["group"], []).append(tuple(ships(r)))
        ident = []
        kind_of = {r["group"]: (r["kind"], r["effect"]) for r in ok}
        for g, w in sorted(groups.items()):
            top = max(w.count(x) for x in set(w))
            kind, effect = kind_of[g]
            # The target's groups: the best config truly >= 5 % ahead of
            # the next, the study undisturbed.
            ident.append({"group": g, "repeats": len(w), "same": top,
                          "target": kind == "win" and effect >= 0.05 - 1e-9})
        f["identical"] = ident
        f["wall_s_median"] = statistics.median([r["wall_s"] for r in rs]) if rs else None
        figs["%g" % sigma] = f
    return figs


def pct(a, b):
    return "%d/%d (%.0f%%)" % (a, b, 100.0 * a / b) if b else "n/a"


def verdict(ok):
    return "met" if ok else "NOT met"


def table(figs, args):
    rows = []
    for key, f in figs.items():
        s = "σ=%s%%" % round(float(key) * 100)
        rows.append((s, "false wins in null studies", "%d of %d" % (f["false_wins"], f["null_studies"]),
                     TARGETS["false_wins"], verdict(f["false_wins"] == 0)))
        for e in (3, 5, 10):
            if "win%d_studies" % e in f:
                n, k = f["win%d_studies" % e], f["win%d_found" % e]
                tgt = TARGETS["found_5"] if e >= 5 else "(no target)"
                v = verdict(k >= 0.95 * n) if (e >= 5 and key == "0.05") else ""
                rows.append((s, "true +%d%% win found (wrong winner: %d)" % (e, f["win%d_wrong" % e]),
                             pct(k, n), tgt, v))
        rows.append((s, "all-VERDICT, no cell dropped (no drift)",
                     pct(f["all_verdict"], f["nodrift_studies"]), TARGETS["all_verdict"],
                     verdict(f["all_verdict"] >= 0.95 * f["nodrift_studies"])))
        rows.append((s, "  with a DRAFT bucket / with a dropped cell",
                     "%d / %d" % (f["any_draft"], f["with_drops"]), "", ""))
        rows.append((s, "  false drift alarms (studies with any / alarms)",
                     "%d / %d" % (f["false_alarm_studies"], f["false_alarms"]), "", ""))
        rows.append((s, "20% slowdown caught (reported, right answer)",
                     pct(f["drift_caught"], f["drift_studies"]), TARGETS["drift_caught"],
                     verdict(f["drift_caught"] >= 0.95 * f["drift_studies"])
                     if key == "0.05" and f["drift_studies"] else ""))
        for tag, what in (("_null", "null truth, in the sweep"),
                          ("_win10", "true +10% win, in the sweep"),
                          ("_final", "true +10% win, in the final round")):
            if f["drift%s_studies" % tag]:
                rows.append((s, "  %s: caught / reported in window / right / all-VERDICT" % what,
                             "%d / %d / %d / %d of %d" % (
                                 f["drift%s_caught" % tag], f["drift%s_seen" % tag],
                                 f["drift%s_right_answer" % tag], f["drift%s_all_verdict" % tag],
                                 f["drift%s_studies" % tag]), "", ""))
        if f.get("drift_untouched"):
            rows.append((s, "  slowdown reached too few trials (not counted): right answer", "%d of %d" % (f["drift_untouched_right"],
                                                          f["drift_untouched"]), "", ""))
        targeted = [g for g in f["identical"] if g.get("target", True)]
        others = [g for g in f["identical"] if not g.get("target", True)]
        good = [g for g in targeted if g["same"] >= 0.9 * g["repeats"]]
        low = min(targeted, key=lambda g: g["same"] / g["repeats"], default=None)
        rows.append((s, "identical winners (>= 90%), groups with a >= 5% win",
                     "%d of %d (lowest %d/%d)" % (len(good), len(targeted), low["same"],
                                                  low["repeats"]) if low else "n/a",
                     TARGETS["identical"], verdict(len(good) == len(targeted)) if targeted else ""))
        if others:
            ok_o = [g for g in others if g["same"] >= 0.9 * g["repeats"]]
            low_o = min(others, key=lambda g: g["same"] / g["repeats"])
            rows.append((s, "  other groups (null, +3%, drift): identical in >= 90%",
                         "%d of %d (lowest %d/%d)" % (len(ok_o), len(others), low_o["same"],
                                                      low_o["repeats"]), "", ""))
        rows.append((s, "cooling share of trial-seconds (no drift; mean/max)",
                     "%.1f%% / %.1f%%" % (100 * f["cooling_share_mean"], 100 * f["cooling_share_max"])
                     if f["cooling_share_mean"] is not None else "n/a",
                     TARGETS["cooling"], verdict((f["cooling_share_mean"] or 0) <= 0.10)))
        rows.append((s, "  routine anchors' share of trial-seconds (mean)",
                     "%.1f%%" % (100 * f["anchor_share_mean"]) if f["anchor_share_mean"] is not None
                     else "n/a", "", ""))
        for peer, what in (("spread_rule", "rule before (spread, same sweep runs)"),
                           ("best_mean", "best observed mean (same sweep runs)")):
            if peer + "_false_wins" not in f:
                continue
            found = ", ".join("+%d%%: %d" % (e, f["%s_win%d_found" % (peer, e)])
                              for e in (3, 5, 10) if "%s_win%d_found" % (peer, e) in f)
            rows.append((s, "  %s: false wins / wrong / found" % what,
                         "%d / %d / %s" % (f[peer + "_false_wins"], f[peer + "_wrong"], found),
                         "", ""))
        if f.get("runs_mean") is not None:
            rows.append((s, "  runs per study (mean): tunectl / fixed design",
                         "%.0f / %.0f" % (f["runs_mean"], f["fixed_runs_mean"] or 0), "", ""))
        if f.get("calm_runs_ratio") is not None:
            rows.append((s, "cost with no close decision: runs / fixed design's (%d studies)"
                         % f["calm_studies"], "%.2fx" % f["calm_runs_ratio"], TARGETS["cost"],
                         verdict(f["calm_runs_ratio"] <= 1.2)))
        rows.append((s, "trap configs shipped", "%d in %d studies" % (f["trap_ships"], f["trap_studies"]),
                     TARGETS["traps"], verdict(f["trap_ships"] == 0)))
        if f["errors"]:
            rows.append((s, "studies that failed to run", str(f["errors"]), "", ""))
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    hdr = ("noise", "figure", "value", "target", "")
    out = ["  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)).rstrip()]
    for r in rows:
        out.append("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tunectl")
    ap.add_argument("--rescore", metavar="FIGURES.json",
                    help="score the studies of an earlier --out file again (no launches)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None, help="JSON file of the figures and every study")
    ap.add_argument("--noise", default="0.01,0.05,0.10")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", default=None, help="keep every study's directory under DIR")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--kinds", default="null,win,drift",
                    help="which kinds of study to run (drift alone: the window in the sweep "
                         "starts at 4.2 s, 35%% of 12 s)")
    ap.add_argument("--effects", default=None,
                    help="only the win and drift studies of these true effects, e.g. 0.03 "
                         "(comma-separated; the seeds then differ from a full run's)")
    ap.add_argument("--groups", type=int, default=1,
                    help="K times as many groups of repeats of every kind (e.g. 4: 40 studies "
                         "at +3%% per noise level)")
    args = ap.parse_args()
    args.noise = [float(x) for x in args.noise.split(",")]
    if args.effects is not None:
        args.effects = [float(x) for x in args.effects.split(",")]
    if args.rescore:
        with open(args.rescore) as f:
            old = json.load(f)
        results = old["studies"]
        args.noise = sorted({r["sigma"] for r in results})
        args.quick = old.get("mode") == "quick"
        print("verdict-integrity benchmark: %s, %d studies, scored again from %s"
              % (old.get("mode"), len(results), args.rescore))
        print(table(score(results, args), args))
        return
    if not args.tunectl:
        ap.error("--tunectl is required (unless --rescore)")
    if args.jobs > 2:
        print("warning: --jobs %d: more than 2 parallel launches on a shared machine" % args.jobs,
              file=sys.stderr)

    root = args.keep or tempfile.mkdtemp(prefix="tunectl-verdict-integrity.")
    os.makedirs(root, exist_ok=True)
    kinds = set(args.kinds.split(","))
    studies = [s for s in plan(args) if s["kind"] in kinds]
    first = [s for s in studies if s["kind"] != "drift"]
    drift = [s for s in studies if s["kind"] == "drift"]
    results = []
    lock = threading.Lock()
    t_begin = time.time()

    def go(batch):
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {ex.submit(run_study, s, args, root): s for s in batch}
            for fut in cf.as_completed(futs):
                r = fut.result()
                with lock:
                    results.append(r)
                    n = len(results)
                bk = ",".join("%s[%s]" % (b["ships"], b["level"]) for b in r.get("buckets", []))
                print("  [%d/%d] %s %.1fs ships %s; anchors %d, voided %d, drops %d, alarms %d%s"
                      % (n, len(studies), r["name"], r["wall_s"], bk or "?",
                         r.get("by_role", {}).get("anchor", 0), r.get("voided", 0),
                         r.get("drops", 0), len(r.get("alarms", [])),
                         "; ERROR" if "error" in r else ""), file=sys.stderr, flush=True)
                if "error" in r:
                    print(r["error"], file=sys.stderr)

    print("verdict_integrity: %d studies (%d with an injected slowdown), %d at a time, in %s"
          % (len(studies), len(drift), args.jobs, root), file=sys.stderr)
    go(first)
    # Place each noise level's slowdown window in the sweep from its null
    # studies' durations (first trial to the launch's end): starting at 35 %
    # of the shortest (so that every study is still in its sweep then),
    # lasting SLOWDOWN_LEN_S. A final-round window starts 0.2 s after the
    # round's first trial.
    for sigma in args.noise:
        ds = [r["duration_s"] for r in results
              if r["sigma"] == sigma and r.get("duration_s") and r["kind"] == "null"]
        d = min(ds) if ds else 12.0
        for s in drift:
            if s["sigma"] == sigma:
                s["window_start"] = 0.2 if s["phase"] == "final" else round(0.35 * d, 2)
    go(drift)
    elapsed = time.time() - t_begin

    figs = score(results, args)
    print("verdict-integrity benchmark: %s, %d studies, %.0f s wall, %d at a time"
          % ("quick" if args.quick else "full", len(results), elapsed, args.jobs))
    print(table(figs, args))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"mode": "quick" if args.quick else "full", "elapsed_s": elapsed,
                       "measurement": MEASUREMENT, "noise": NOISE, "targets": TARGETS,
                       "figures": figs, "studies": sorted(results, key=lambda r: r["name"])},
                      f, indent=1)
        print("figures: %s" % args.out)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
