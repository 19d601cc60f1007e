#!/usr/bin/env python3
"""Optuna's side of benches/search_regret.sh, and the combined table.

    search_regret.py check RUST_JSON                 # this file's model == the Rust one
    search_regret.py optuna RUST_JSON OUT_JSON [--jobs N]
    search_regret.py table RUST_JSON OPTUNA_JSON

RUST_JSON is what `SEARCH_REGRET_JSON=... cargo bench --bench search_regret`
writes: the settings, the model's true values and a sample of measurements
(which `check` recomputes here and compares), the per-seed `hb1` budgets
(one Hyperband iteration of tunectl plus its finalist step, one worker) and
every tunectl run's picks.

`optuna` runs, for every variant and seed of RUST_JSON, Optuna's
TPESampler(seed=seed) with HyperbandPruner(min_resource, max_resource,
reduction_factor=eta) on the same synthetic model (the formulas below are
the Rust ones, term for term; docs/benchmarks.md has them), sequentially
(one worker), until its trial-seconds reach the largest budget
(`OPTUNA_UPTO` of grid's, default 1: all of grid's). Each trial
suggests the knobs as categorical parameters, then reports the model's
noisy measurement at every rung budget (`trial.report(value, step=b)`,
`trial.should_prune()`); a pruned trial pays the seconds of the budget it
reached. A crashing config costs the crash seconds and is told as FAIL
(what an objective that raises gets; TPESampler leaves FAIL trials out of
its model), or with `OPTUNA_CRASH=prune` as PRUNED (which it ranks last).
The picks at each budget are computed from the log of completions
afterwards (the trials completed within the budget; the one running at the
budget is cut, as if stopped there), two ways:

- `optuna`: the best COMPLETE trial (lowest measured value at max budget,
  Optuna's `best_trial`), with no re-measurement;
- `optuna+finalists`: tunectl's finalist step on the 3 best distinct
  configs of its complete trials, paid from the same budget: the race of
  the Rust side (`race` there and here; `check` compares the two on a
  sample of races and Student's t quantiles), or with
  `FINALIST_STEP=fixed` on the Rust side 5 repeats at max budget each,
  the lowest median.
"""

import json
import math
import os
import sys
import time
from multiprocessing import Pool
from statistics import NormalDist

M64 = (1 << 64) - 1


def mix(z):
    """SplitMix64's finalizer, as in search_regret.rs."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def unit(h):
    return ((h >> 11) + 0.5) / float(1 << 53)


class Model:
    def __init__(self, doc, variant):
        s = doc["settings"]
        self.knobs = [(k["name"], k["values"]) for k in doc["knobs"]]
        self.radices = [len(v) for _, v in self.knobs]
        self.size = math.prod(self.radices)
        self.max_budget = s["max_budget"]
        self.t0 = s["t0"]
        self.crash_seconds = s["crash_seconds"]
        self.noise = s["noise"]
        self.variant = variant
        self.f = []
        self.c = []
        for x in range(self.size):
            t, w, st, u, l = (float(p) for p in self.decode(x))
            crash = t + st >= 6.0 or (t == 0.0 and u == 2.0)
            layout = [0.04, 0.10, 0.0][int(l)]
            tiled = 1.0 if l == 2.0 else 0.0
            r = unit(mix(0xC0FFEE00 ^ x))
            a, b, cc, d = t - 2.6, w - 0.8 * t + 0.3, st - 2.3, u - 1.2
            ln_f = (math.log(0.05) + 0.08 * (a * a) + 0.08 * (b * b) + 0.06 * (cc * cc)
                    + 0.04 * (d * d) + layout - 0.04 * u * tiled + 0.06 * (r - 0.5))
            self.f.append(None if crash else math.exp(ln_f))
            self.c.append(1.0 if variant == "faithful" else 0.25 + 0.75 * st + 0.5 * u)
        self.v = [None if self.f[x] is None else self.f[x] * (1.0 + self.c[x] / self.max_budget)
                  for x in range(self.size)]
        self.optimum, self.argmin = min((v, x) for x, v in enumerate(self.v) if v is not None)

    def decode(self, x):
        d = [0] * len(self.radices)
        for k in range(len(self.radices) - 1, -1, -1):
            d[k] = x % self.radices[k]
            x //= self.radices[k]
        return d

    def encode(self, positions):
        x = 0
        for p, r in zip(positions, self.radices):
            x = x * r + p
        return x

    def seconds(self, x, b):
        f = self.f[x]
        return self.crash_seconds if f is None else self.t0 + (b + self.c[x]) * f

    def measure(self, seed, x, b, rep):
        f = self.f[x]
        if f is None:
            return None
        h = mix(seed)
        h = mix(h ^ x)
        h = mix(h ^ int(round(b)))
        h = mix(h ^ rep)
        u1, u2 = unit(h), unit(mix(h))
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        return f * (1.0 + self.c[x] / b) * math.exp(self.noise / math.sqrt(b) * z)

    def regret(self, x):
        v = self.v[x]
        return math.inf if v is None else (v - self.optimum) / self.optimum


def load(path):
    with open(path) as fh:
        return json.load(fh)


def check(doc):
    """Recompute the Rust model's values and sample measurements."""
    worst = 0.0
    for var in doc["variants"]:
        m = Model(doc, var["variant"])
        assert m.argmin == var["argmin"], (m.argmin, var["argmin"])
        pairs = [(m.optimum, var["optimum"]), (sum(m.seconds(x, m.max_budget) for x in range(m.size)),
                                               var["grid_seconds"])]
        pairs += [(a, b) for a, b in zip(m.v, var["values"]) if a is not None or b is not None]
        for seed, x, b, rep, want in var["check"]:
            got = m.measure(seed, x, b, rep)
            assert (got is None) == (want is None), (seed, x, b, rep)
            if got is not None:
                pairs.append((got, want))
        for df, want in var["t_check"]:
            pairs.append((t_quantile(df, 0.5 + doc["settings"]["confidence"] / 2.0), want))
        for seed, xs, pick, seconds, runs in var["race_check"]:
            got = race(m, doc["settings"], seed, [(x, 0.0) for x in xs], math.inf)
            assert (got[0], got[2]) == (pick, runs), (seed, xs, got, pick, runs)
            pairs.append((got[1], seconds))
        for got, want in pairs:
            assert got is not None and want is not None
            worst = max(worst, abs(got - want) / abs(want))
    assert worst < 1e-9, f"the Python model differs from the Rust one: {worst}"
    return worst


def betai(a, b, x):
    """The regularised incomplete beta function I_x(a, b) (continued
    fraction, modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - betai(b, a, 1.0 - x)
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(a * math.log(x) + b * math.log1p(-x) + lbeta) / a
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = tiny if abs(d) < tiny else d
        d = 1.0 / d
        c = 1.0 + num / c
        c = tiny if abs(c) < tiny else c
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0)


def t_quantile(df, p):
    """Student's t quantile p (> 0.5) with df degrees of freedom, by
    bisection on its CDF; the normal one for an infinite or huge df."""
    if not math.isfinite(df) or df > 1e6:
        return NormalDist().inv_cdf(p)
    df = max(df, 1.0)
    cdf = lambda t: 1.0 - 0.5 * betai(df / 2.0, 0.5, df / (df + t * t))
    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def welch(ref, cand, confidence):
    """The interval of mean(cand) - mean(ref) (Student's t, Welch-
    Satterthwaite), as src/stats/speedup.rs forms it for one host; None
    with fewer than two values on a side."""
    if len(ref) < 2 or len(cand) < 2:
        return None
    def var(v):
        mu = sum(v) / len(v)
        return sum((x - mu) ** 2 for x in v) / (len(v) - 1)
    parts = [(var(cand) / len(cand), len(cand) - 1), (var(ref) / len(ref), len(ref) - 1)]
    total = sum(v for v, _ in parts)
    den = sum(v * v / df for v, df in parts if v > 0)
    df = math.inf if total <= 0 or den <= 0 else total * total / den
    log = sum(cand) / len(cand) - sum(ref) / len(ref)
    h = t_quantile(df, 0.5 + confidence / 2.0) * math.sqrt(max(total, 0.0))
    return log - h, log + h


def finalist_run(m, seed, x, r, frep):
    return m.measure(seed, x, m.max_budget, frep + r)


def reserved_seconds(m, s, finalists):
    runs = s["first_runs"] if s["finalist_step"] == "race" else s["repeats"]
    return sum(runs * m.seconds(x, m.max_budget) for x, _ in finalists)


def race(m, s, seed, finalists, allowance):
    """The finalist race of benches/search_regret.rs (`race`): (pick,
    seconds, runs)."""
    first, cap, frep = s["first_runs"], s["race_cap"], s["finalist_rep"]
    tau = math.log1p(s["race_min_improvement"])
    xs = [x for x, _ in finalists]
    values = [[] for _ in xs]
    seconds = 0.0

    def grow(i, to):
        paid = 0.0
        while len(values[i]) < to:
            values[i].append(-math.log(finalist_run(m, seed, xs[i], len(values[i]), frep)))
            paid += m.seconds(xs[i], m.max_budget)
        return paid

    for i in range(len(xs)):
        seconds += grow(i, first)
    while True:
        means = [sum(v) / len(v) for v in values]
        leader = max(range(len(xs)), key=lambda i: (means[i], -xs[i]))
        raced, contested = [], False
        for i in range(len(xs)):
            if i == leader:
                continue
            iv = welch(values[leader], values[i], s["confidence"])
            settled = iv is not None and (iv[1] < 0 or (iv[0] > -tau and iv[1] < tau))
            if not settled:
                contested = True
                if len(values[i]) < cap:
                    raced.append(i)
        if contested and len(values[leader]) < cap:
            raced.append(leader)
        runs = sum(len(v) for v in values)
        if not raced:
            return xs[leader], seconds, runs
        least = min(len(values[i]) for i in raced)
        to = min(least + max(first, -(-least // 2)), cap)
        cost = sum((to - len(values[i])) * m.seconds(xs[i], m.max_budget) for i in raced)
        if seconds + cost > allowance:
            return xs[leader], seconds, runs
        for i in raced:
            seconds += grow(i, to)


def finalist_step(m, s, seed, finalists, allowance):
    """(pick, seconds, runs) of the finalist step the Rust run used."""
    if s["finalist_step"] == "race":
        return race(m, s, seed, finalists, allowance)
    best = None
    for x, _ in finalists:
        ms = sorted(finalist_run(m, seed, x, r, s["finalist_rep"]) for r in range(s["repeats"]))
        key = (ms[len(ms) // 2], x)
        if best is None or key < best:
            best = key
    seconds = sum(s["repeats"] * m.seconds(x, m.max_budget) for x, _ in finalists)
    return best[1], seconds, s["repeats"] * len(finalists)


def optuna_run(args):
    path, variant, seed, budgets, crash = args
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    doc = load(path)
    s = doc["settings"]
    m = Model(doc, variant)
    var = next(v for v in doc["variants"] if v["variant"] == variant)
    rungs = var["rung_budgets"]
    k = s["finalists"]
    study = optuna.create_study(
        study_name=f"search-regret-{variant}-{seed}",
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.HyperbandPruner(
            min_resource=int(s["min_budget"]), max_resource=int(s["max_budget"]),
            reduction_factor=s["eta"]),
    )
    dists = {name: CategoricalDistribution(values) for name, values in m.knobs}
    index = [{v: i for i, v in enumerate(values)} for _, values in m.knobs]
    cap = max(budgets.values())
    consumed = 0.0
    reps = {}
    complete = {}  # config -> best measured value at max budget (for the finalists)
    best = None  # (value, trial number, config): Optuna's best_trial
    best_evaluated = math.inf
    events = []  # (consumed, best_trial config, top-k finalists, best_evaluated, trials)
    trials = pruned = failed = 0
    t_start = time.perf_counter()
    while consumed < cap:
        trial = study.ask(dists)
        x = m.encode([index[i][trial.params[name]] for i, (name, _) in enumerate(m.knobs)])
        trials += 1
        if m.f[x] is None:
            study.tell(trial, state=TrialState.FAIL if crash == "fail" else TrialState.PRUNED)
            failed += 1
            consumed += m.crash_seconds
        else:
            for b in rungs:
                key = (x, int(round(b)))
                v = m.measure(seed, x, b, reps.get(key, 0))
                reps[key] = reps.get(key, 0) + 1
                trial.report(v, step=int(round(b)))
                if b == m.max_budget:
                    study.tell(trial, v)
                    if best is None or (v, trial.number) < best[:2]:
                        best = (v, trial.number, x)
                    complete[x] = min(v, complete.get(x, math.inf))
                    best_evaluated = min(best_evaluated, m.regret(x))
                    break
                if trial.should_prune():
                    study.tell(trial, state=TrialState.PRUNED)
                    pruned += 1
                    break
            consumed += m.seconds(x, b)
        top = sorted((v, c) for c, v in complete.items())[:k]
        events.append((consumed, None if best is None else best[2], [(c, v) for v, c in top],
                       best_evaluated, trials))
    wall = time.perf_counter() - t_start

    points = {}
    for label, budget in budgets.items():
        lim = budget * (1 + 1e-12)
        # As in the Rust side: stop at the first completion past the
        # budget (with the finalist step, for `fin`), pick from the one
        # before.
        plain = fin = None
        for e in events:
            if e[0] > lim:
                break
            if e[1] is not None:
                plain = e
        for e in events:
            if e[0] + reserved_seconds(m, s, e[2]) > lim:
                break
            if e[2]:
                fin = e
        picked = None if fin is None else finalist_step(m, s, seed, fin[2], lim - fin[0])
        points[label] = {
            "optuna": None if plain is None else {
                "spent": plain[0], "trials": plain[4], "regret": m.regret(plain[1]),
                "incumbent": m.regret(plain[1]), "best_evaluated": plain[3], "finalist_runs": 0},
            "optuna+finalists": None if fin is None else {
                "spent": fin[0] + picked[1], "trials": fin[4],
                "regret": m.regret(picked[0]), "finalist_runs": picked[2],
                "incumbent": m.regret(fin[2][0][0]), "best_evaluated": fin[3]},
        }
    return {"variant": variant, "seed": seed, "trials": trials, "pruned": pruned, "failed": failed,
            "consumed": consumed, "wall_s": wall, "points": points}


def optuna_main(rust_path, out_path, jobs, crash, upto):
    import optuna

    doc = load(rust_path)
    worst = check(doc)
    print(f"search_regret.py: model agrees with the Rust one (largest relative difference {worst:.1e})",
          file=sys.stderr)
    tasks = []
    for var in doc["variants"]:
        fractions = {label: f * var["grid_seconds"] for label, f in doc["settings"]["fractions"]
                     if f <= upto + 1e-9}
        for run in var["runs"]:
            budgets = dict(fractions, hb1=run["hb1"])
            tasks.append((rust_path, var["variant"], run["seed"], budgets, crash))
    t0 = time.perf_counter()
    with Pool(jobs) as pool:
        runs = []
        for r in pool.imap_unordered(optuna_run, tasks):
            runs.append(r)
            print(f"  optuna {r['variant']} seed {r['seed']}: {r['trials']} trials ({r['pruned']} pruned, "
                  f"{r['failed']} failed), {r['wall_s']:.1f} s", file=sys.stderr)
    runs.sort(key=lambda r: (r["variant"], r["seed"]))
    with open(out_path, "w") as fh:
        json.dump({"optuna": optuna.__version__, "python": sys.version.split()[0], "jobs": jobs, "crash": crash,
                   "wall_s": time.perf_counter() - t0, "runs": runs}, fh)


def stats(points, n, hit):
    picked = [p for p in points if p is not None]
    regrets = sorted(p["regret"] for p in picked)
    if not regrets:
        return None
    mid = len(regrets) // 2
    med = regrets[mid] if len(regrets) % 2 else (regrets[mid - 1] + regrets[mid]) / 2
    return {
        "spent": sum(p["spent"] for p in picked) / len(picked),
        "mean": sum(regrets) / len(regrets),
        "median": med,
        "hit": sum(p["regret"] <= hit for p in picked) / n,
        "incumbent": sum(p["incumbent"] <= hit for p in picked) / n,
        "evaluated": sum(p["best_evaluated"] <= hit for p in picked) / n,
        "missing": n - len(picked),
        "trials": sorted(p["trials"] for p in picked)[mid],
        "finalist_runs": sorted(p.get("finalist_runs") or 0 for p in picked)[mid],
    }


def table_main(rust_path, optuna_path):
    doc = load(rust_path)
    opt = load(optuna_path) if optuna_path else {"runs": []}
    s = doc["settings"]
    hit = s["hit"]
    verdicts = []
    for var in doc["variants"]:
        name = var["variant"]
        runs = var["runs"]
        n = len(runs)
        grid = var["grid_seconds"]
        # rows[(label, strategy, workers)] = [point per seed]
        rows = {}
        for run in runs:
            for p in run["points"]:
                pt = None if p["regret"] is None else p
                rows.setdefault((p["budget"], p["strategy"], p["workers"]), []).append(pt)
        for r in opt["runs"]:
            if r["variant"] != name:
                continue
            for label, by in r["points"].items():
                for strategy, pt in by.items():
                    rows.setdefault((label, strategy, 1), []).append(pt)
        hb1 = sum(r["hb1"] for r in runs) / n / grid
        order = {label: f for label, f in s["fractions"]}
        order["hb1"] = hb1
        labels = sorted({k[0] for k in rows}, key=lambda l: order[l])
        strategies = ["grid", "random", "hyperband", "hyperband (1 iteration)", "hyperband+continuation",
                      "hyperband+continuation+prune", "hyperband+tpe", "hyperband+tpe+continuation",
                      "hyperband+tpe+continuation+prune", "tpe", "tpe+prune", "optuna", "optuna+finalists"]
        print(f"\n### {name}: {var['configs_within_hit']} of {len(var['values'])} configs within "
              f"{hit:.0%} of the optimum, {var['crashing_configs']} crash; grid {grid:,.0f} "
              f"trial-seconds; hb1 = {hb1:.3f} of grid (mean)\n")
        print("| budget | strategy | workers | trial-seconds / grid | trials (median) | finalist runs (median) "
              f"| regret mean | regret median | within {hit:.0%} | incumbent within {hit:.0%} "
              f"| evaluated one within {hit:.0%} |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        summary = {}
        for label in labels:
            keys = sorted((k for k in rows if k[0] == label),
                          key=lambda k: (strategies.index(k[1]), k[2]))
            for k in keys:
                st = stats(rows[k], len(rows[k]), hit)
                summary[k] = st
                if st is None:
                    print(f"| {label} | {k[1]} | {k[2]} | | | | no pick | | | | |")
                    continue
                note = f" ({st['missing']} seeds without a pick)" if st["missing"] else ""
                print(f"| {label} | {k[1]} | {k[2]} | {st['spent'] / grid:.3f} | {st['trials']} | {st['finalist_runs']} "
                      f"| {100 * st['mean']:.2f} %{note} "
                      f"| {100 * st['median']:.2f} % | {100 * st['hit']:.0f} % | {100 * st['incumbent']:.0f} % "
                      f"| {100 * st['evaluated']:.0f} % |")
        # Verdicts, per strategy and worker count, against Optuna's one worker.
        workers = sorted({k[2] for k in rows if k[1] not in ("grid", "random", "optuna", "optuna+finalists")})
        for strat, nw in ((s_, w_) for s_ in ("hyperband", "hyperband+continuation",
                                               "hyperband+continuation+prune", "hyperband+tpe",
                                               "hyperband+tpe+continuation",
                                               "hyperband+tpe+continuation+prune", "tpe", "tpe+prune")
                          for w_ in workers):
            ok = [l for l in labels if order[l] <= 1 / 3 + 1e-9
                  and summary.get((l, strat, nw)) and summary[(l, strat, nw)]["hit"] >= 0.9]
            first = min(ok, key=lambda l: order[l]) if ok else None
            verdicts.append(f"{name}: {strat} ({nw} workers) within {hit:.0%} in >= 90 % of seeds "
                            + (f"from budget {first} ({summary[(first, strat, nw)]['spent'] / grid:.3f} of grid): met"
                               if first else "at no budget <= 1/3 of grid: NOT met"))
            t19 = summary.get(("1/9", strat, nw))
            if t19 is not None:
                verdicts.append(f"{name}: {strat} ({nw} workers) at 1/9 within {hit:.0%} in "
                                f"{round(t19['hit'] * n)} of {n} seeds: "
                                + ("met" if t19["hit"] >= 0.95 - 1e-9 else "NOT met") + " (target >= 95 %)")
            for label in labels:
                o = summary.get((label, "optuna", 1))
                t = summary.get((label, strat, nw))
                if o is None or t is None:
                    continue
                tr = {r["seed"]: p for r in runs for p in r["points"]
                      if p["strategy"] == strat and p["workers"] == nw and p["budget"] == label}
                orr = {r["seed"]: r["points"][label]["optuna"] for r in opt["runs"] if r["variant"] == name}
                w = l = e = 0
                for seed, p in tr.items():
                    a = math.inf if p["regret"] is None else p["regret"]
                    q = orr.get(seed)
                    b = math.inf if q is None else q["regret"]
                    if a < b - 1e-12:
                        w += 1
                    elif b < a - 1e-12:
                        l += 1
                    else:
                        e += 1
                verdicts.append(
                    f"{name}: at {label}, {strat} ({nw}w) mean regret {100 * t['mean']:.2f} % vs optuna "
                    f"{100 * o['mean']:.2f} % (median {100 * t['median']:.2f} % vs {100 * o['median']:.2f} %; "
                    f"within {hit:.0%} {100 * t['hit']:.0f} % vs {100 * o['hit']:.0f} %); per seed "
                    f"better/equal/worse {w}/{e}/{l}: "
                    + ("no worse" if t["mean"] <= o["mean"] + 1e-12 else "WORSE"))
    print("\nTargets:")
    for v in verdicts:
        print(f"- {v}")
    if opt["runs"]:
        trials = [r["trials"] for r in opt["runs"]]
        failed = [r["failed"] for r in opt["runs"]]
        print(f"\nOptuna {opt['optuna']} (Python {opt['python']}), crashes told as {dict(fail='FAIL', prune='PRUNED')[opt['crash']]}: "
              f"{min(trials)}-{max(trials)} trials per run ({min(failed)}-{max(failed)} of them crashes) "
              f"to its last budget, {sum(r['wall_s'] for r in opt['runs']):.0f} s of CPU in its runs "
              f"({opt['wall_s']:.0f} s wall with {opt['jobs']} processes)")


def main(argv):
    if len(argv) >= 2 and argv[0] == "check":
        print(f"model agrees (largest relative difference {check(load(argv[1])):.1e})")
    elif len(argv) >= 3 and argv[0] == "optuna":
        jobs = os.cpu_count() or 1
        if "--jobs" in argv:
            jobs = int(argv[argv.index("--jobs") + 1])
        crash = os.environ.get("OPTUNA_CRASH", "fail")
        if crash not in ("fail", "prune"):
            sys.exit("OPTUNA_CRASH: fail or prune")
        upto = float(os.environ.get("OPTUNA_UPTO", "1"))
        optuna_main(argv[1], argv[2], jobs, crash, upto)
    elif len(argv) >= 2 and argv[0] == "table":
        table_main(argv[1], argv[2] if len(argv) > 2 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
