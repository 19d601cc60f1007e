"""A study's results in pandas and DuckDB, from tunectl's Parquet export.

    tunectl export study.yaml --format parquet -o attempts.parquet
    tunectl export study.yaml --format parquet --samples -o samples.parquet
    python examples/notebook/analyze.py attempts.parquet samples.parquet --plot configs.png

The `# %%` markers make each part a cell in Jupyter (with jupytext), VS Code
or Spyder. The columns are in docs/ledger.md ("The study as data").

What it does, none of it tunectl's own analysis (`tunectl report` is that):
1. pandas: per host class and cell, the objective's median per config over
   the samples of the trials that count, with n and the interquartile range,
   and its ratio to the baseline's median with a bootstrap 95% interval;
2. DuckDB: SQL over the attempts, what failed and why, per knob value;
3. matplotlib: the samples of the baseline and the best configs per cell,
   one panel per host class and cell, saved as a PNG.
"""

# %%
import argparse
import json

import duckdb
import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("attempts", help="tunectl export --format parquet")
parser.add_argument("samples", help="tunectl export --format parquet --samples")
parser.add_argument("--plot", default="configs.png", help="PNG to draw")
parser.add_argument("--top", type=int, default=4, help="configs per panel besides the baseline")
args = parser.parse_args()

# The file says what its rows are and what the objective is.
meta = json.loads(pq.read_metadata(args.samples).metadata[b"tunectl.data"])
objective = meta["objective"]
higher = objective["better"] == "higher"
print(f"study {meta['study']} (spec {meta['spec_hash'][:12]}), objective "
      f"{objective['name']} in {objective['unit']}, {objective['better']} is better")

# %% pandas: medians with n, spread and an interval of the ratio
samples = pd.read_parquet(args.samples)
# The sweep's samples of the objective, from the attempt that counts for
# each trial (a relaunch's duplicate or a lost attempt does not), of
# configs that passed the gate (not judged rejected).
sweep = samples[
    samples["objective"]
    & samples["counts"]
    & (samples["role"] == "sweep")
    & (samples["status"] == "ok")
    & (samples["judged"] != "rejected")
]

rng = np.random.default_rng(0)


def ratio_interval(config, baseline, draws=2000):
    """Bootstrap 95% interval of median(config) / median(baseline)."""
    c = rng.choice(config, size=(draws, len(config)))
    b = rng.choice(baseline, size=(draws, len(baseline)))
    r = np.median(c, axis=1) / np.median(b, axis=1)
    return np.percentile(r, [2.5, 97.5])


panels = []
for (cls, label, cell), g in sweep.groupby(["host_class", "host_class_label", "cell"]):
    stats = g.groupby("config")["value"].agg(
        n="count",
        median="median",
        q1=lambda v: v.quantile(0.25),
        q3=lambda v: v.quantile(0.75),
    )
    base_label = g.loc[g["is_baseline"], "config"]
    if base_label.empty:
        print(f"{label} ({cls}) · {cell}: no baseline samples")
        continue
    base = base_label.iloc[0]
    base_values = g.loc[g["config"] == base, "value"].to_numpy()
    stats["ratio"] = stats["median"] / stats.loc[base, "median"]
    ordered = stats.sort_values("median", ascending=not higher)
    best = ordered.index[0]
    name = "baseline" if base == "baseline" else f"baseline ({base})"
    print(f"\n{label} ({cls}) · {cell}: {name} median "
          f"{stats.loc[base, 'median']:.4g} {objective['unit']} "
          f"(n={stats.loc[base, 'n']}, IQR {stats.loc[base, 'q1']:.4g}-{stats.loc[base, 'q3']:.4g})")
    for config, row in ordered.head(args.top).iterrows():
        values = g.loc[g["config"] == config, "value"].to_numpy()
        lo, hi = ratio_interval(values, base_values)
        print(f"  {config}: median {row['median']:.4g} (n={int(row['n'])}, IQR "
              f"{row['q1']:.4g}-{row['q3']:.4g}), {row['ratio']:.3f}x the baseline "
              f"[{lo:.3f}, {hi:.3f}] bootstrap 95%")
    print(f"  fastest by median: {best}")
    panels.append((f"{label} · {cell}", g, [base] + [c for c in ordered.index[: args.top] if c != base]))

# %% DuckDB: SQL over the attempts, failures per knob value
con = duckdb.connect()
con.execute(f"CREATE VIEW attempts AS SELECT * FROM read_parquet('{args.attempts}')")
knobs = [r[0] for r in con.execute(
    "SELECT column_name FROM (DESCRIBE attempts) WHERE column_name LIKE 'knob.%' ORDER BY 1"
).fetchall()]
print("\nattempts that count, by status:")
for status, n in con.execute(
    "SELECT status, count(*) FROM attempts WHERE counts GROUP BY 1 ORDER BY 1"
).fetchall():
    print(f"  {status}: {n}")
print("rejected configs per knob value, by reason:")
for knob in knobs:
    rows = con.execute(f"""
        SELECT value, string_agg(rejection || ' ' || configs, ', ' ORDER BY rejection)
        FROM (SELECT "{knob}"::VARCHAR AS value, rejection, count(DISTINCT config) AS configs
              FROM attempts WHERE counts AND judged = 'rejected' GROUP BY ALL)
        GROUP BY value ORDER BY value
    """).fetchall()
    for value, reasons in rows:
        print(f"  {knob}={value}: {reasons}")

# %% matplotlib: the samples of the baseline and the best configs per cell
fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.2 + 0.5 * (args.top + 1) * len(panels)),
                         squeeze=False)
for ax, (title, g, configs) in zip(axes[:, 0], panels):
    data = [g.loc[g["config"] == c, "value"].to_numpy() for c in configs]
    ax.boxplot(data, orientation="horizontal", tick_labels=configs)
    for i, values in enumerate(data, start=1):
        ax.plot(values, np.full(len(values), i), "o", alpha=0.4, markersize=3)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(f"{objective['name']} ({objective['unit']}), {objective['better']} is better")
fig.tight_layout()
fig.savefig(args.plot, dpi=100)
print(f"\nwrote {args.plot}")
