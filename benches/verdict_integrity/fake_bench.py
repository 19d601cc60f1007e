#!/usr/bin/env python3
"""FAKE benchmark program for benches/verdict_integrity.sh: no GPU, no real
work. It follows docs/trial-contract.md and reports made-up timings drawn
from a known truth, so that what tunectl decides can be scored.

    python3 -S fake_bench.py TRUTH_JSON

TRUTH_JSON (written by benches/verdict_integrity.py, one per study):

    {
      "seed": 123,                      # separates repeats of one study
      "base_ms": 10.0,                  # the baseline's true time at cell n=1
      "cell_axis": "n",                 # true time scales with this axis
      "sigma": 0.05,                    # per-sample lognormal noise
      "trial_sigma": 0.025,             # per-process (per-attempt) lognormal offset
      "outlier_p": 0.01, "outlier_x": 1.3,  # rare slow samples
      "samples": 5,                     # samples per trial
      "sleep_s": 0.05,                  # real time per trial (scaled by the true time)
      "state_dir": "/tmp/.../state",    # shared per study: the clock's zero
      "slowdown": {"start_s": 4.0, "end_s": 7.0, "factor": 1.2,
                   "from_role": "confirm"} or null,   # from_role optional
      "rules": [                        # first match wins; unmatched: factor 1.0
        {"knobs": {"tile": 128, "layout": "col"}, "effect": "speed", "factor": 1.05},
        {"knobs": {...}, "effect": "crash", "from_repeat": 2, "factor": 1.15},
        {"knobs": {...}, "cell": {"n": 3}, "effect": "oom"},
        {"knobs": {...}, "effect": "wrong", "factor": 1.2}
      ]
    }

Effects: `speed` (the config is `factor` times faster than the baseline:
its true time is base / factor), `crash` (exit 3 from sweep repeat
`from_repeat` on, and in any other role; faster by `factor` until then),
`oom` (print `CUDA out of memory` and exit 1), `wrong` (faster by `factor`,
but a different output digest). A rule with `cell` applies at that cell
only.

The objective is `time_ms` (lower is better). Each sample is
true_time × slowdown × exp(trial_sigma·z₀) × exp(sigma·zᵢ) × (outlier_x with
probability outlier_p), z standard normal, z₀ once per process. The
slowdown applies while (now − the study's first trial start) is within
[start_s, end_s): the "host" runs `factor` times slower then. With
`from_role`, the window's clock starts instead at the first trial of that
role (`confirm`: the final round), kept in `state_dir/t_<role>`. The random
stream is seeded from the study seed, the trial key and the attempt id:
every attempt draws afresh (attempt ids are unique), repeats of one study
differ by their seed.
"""

import json
import math
import os
import random
import sys
import time


def clock_zero(state_dir, now, name="t0"):
    """The study's first trial start (epoch seconds), set by whichever trial
    comes first (create-once via a hard link, so racing slots agree); with
    another `name`, the first start of whatever that clock follows."""
    path = os.path.join(state_dir, name)
    try:
        with open(path) as f:
            return float(f.read())
    except (FileNotFoundError, ValueError):
        pass
    os.makedirs(state_dir, exist_ok=True)
    tmp = "%s.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(repr(now))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    with open(path) as f:
        return float(f.read())


def matches(want, have):
    return all(have.get(k) == v for k, v in want.items())


def main():
    start = time.time()
    with open(sys.argv[1]) as f:
        truth = json.load(f)
    env = os.environ
    knobs = json.loads(env["TUNECTL_KNOBS"])
    cell = json.loads(env.get("TUNECTL_CELL", "{}"))
    role = env.get("TUNECTL_ROLE", "sweep")
    repeat = int(env.get("TUNECTL_REPEAT", "0"))
    warmup = env.get("TUNECTL_PHASE") == "warmup"
    rng = random.Random("%s:%s:%s:%s" % (truth["seed"], env.get("TUNECTL_TRIAL_ID", ""),
                                         env.get("TUNECTL_ATTEMPT_ID", ""), warmup))

    effect, factor, digest = "speed", 1.0, "ok"
    for rule in truth.get("rules", []):
        if matches(rule.get("knobs", {}), knobs) and matches(rule.get("cell", {}), cell):
            effect = rule["effect"]
            factor = float(rule.get("factor", 1.0))
            if effect == "crash" and role == "sweep" and repeat < rule.get("from_repeat", 0):
                effect = "speed"
            break
    if effect == "oom":
        time.sleep(truth["sleep_s"] / 4)
        sys.stderr.write("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB "
                         "(FAKE: fake_bench.py, verdict_integrity benchmark)\n")
        sys.exit(1)
    if effect == "crash":
        time.sleep(truth["sleep_s"] / 4)
        sys.stderr.write("fake_bench: illegal memory access (FAKE crash)\n")
        sys.exit(3)
    if effect == "wrong":
        digest = "wrong-output"

    slow = 1.0
    s = truth.get("slowdown")
    if s:
        zero = clock_zero(truth["state_dir"], start)
        after = s.get("from_role")
        if after:
            path = os.path.join(truth["state_dir"], "t_" + after)
            if role == after or os.path.exists(path):
                zero = clock_zero(truth["state_dir"], start, "t_" + after)
            else:
                zero = None
        since = None if zero is None else start - zero
        if since is not None and s["start_s"] <= since < s["end_s"]:
            slow = float(s["factor"])
    elif truth.get("state_dir"):
        clock_zero(truth["state_dir"], start)

    scale = float(cell.get(truth.get("cell_axis", ""), 1))
    true_ms = truth["base_ms"] * scale / factor * slow
    offset = math.exp(truth["trial_sigma"] * rng.gauss(0.0, 1.0))
    samples = []
    for _ in range(truth["samples"]):
        x = true_ms * offset * math.exp(truth["sigma"] * rng.gauss(0.0, 1.0))
        if rng.random() < truth["outlier_p"]:
            x *= truth["outlier_x"]
        samples.append(round(x, 6))

    # Real time passes too, in proportion to the true time (and the slowdown).
    time.sleep(max(0.0, truth["sleep_s"] * true_ms / (truth["base_ms"] * scale)
                   - (time.time() - start)))
    if warmup:
        return
    with open(env["TUNECTL_RESULT"], "w") as f:
        json.dump({"metrics": {"time_ms": samples}, "digest": digest}, f)


if __name__ == "__main__":
    main()
