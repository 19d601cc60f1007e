#!/usr/bin/env python3
"""Helper of benches/ledger_scale.sh: writes a 100,000-attempt ledger in
tunectl's local layout, and loads / reads the same trials with Optuna.

    ledger_scale.py sweep   LEDGER STUDY_ID [--seed N]
    ledger_scale.py confirm LEDGER STUDY_ID REPORT_JSON --total N [--seed N]
    ledger_scale.py optuna-load LEDGER STUDY_ID STORAGE
    ledger_scale.py optuna-read STORAGE STUDY_ID trials|get_trials|dataframe
    ledger_scale.py parquet-read pandas|duckdb FILE

`sweep` expects LEDGER/STUDY_ID to hold what one real `tunectl launch` of
the study wrote (study.json, hosts/, and the failed first baselines of a
launch with `budget: {max_trials: 1}` whose command does not exist). It
takes the frozen spec, host class and fingerprint from there, checks its own
trial keys, labels, rendered commands and JSON formatting against the real
attempt records (byte for byte), removes them, and writes every sweep trial
of the study (1 baseline + every candidate of the grid, per cell, `repeats`
each, a config that failed not repeated in that cell) plus the baseline
anchors a launch takes (one after every `anchor_every` successful candidate
trials of a cell). Records are written exactly as serde_json's
`to_vec_pretty` writes an `AttemptRecord` (field order, 2-space indent,
sorted maps), one object per attempt, with create-only semantics, each
after its entry in the study's arrival log (one log stream per command,
ended like a launch ends it).

`confirm` reads `tunectl report --format json` of that ledger and writes the
confirmation round of every bucket with a winner (baseline and winner,
`confirm_repeats` rounds per cell), then `lost` attempts (a launch
interrupted, each trial re-run afterwards: the lost attempt sorts first) on
random trials until the ledger holds exactly `--total` attempt objects.

The trial program is never run: metrics come from a made-up performance
model of a blocked reduction kernel with 1.5 % noise per sample; failures
are deterministic (i32 accumulators overflow at seq=4096, unroll 8 does not
compile with block 64, large blocks run out of memory at batch 16) plus rare
random timeouts and segfaults; f32 accumulators change the output (the gate
rejects them).

`optuna-load` reads every attempt object of the ledger and adds the same
trials to an Optuna study (`optuna.trial.create_trial` + `study.add_trials`):
knobs as params (CategoricalDistribution of the knob's values), the
objective's sample as the value of COMPLETE trials (failed and lost attempts
are FAIL), cell, repeat, role, host, status, failure class, attempt id,
time_ms samples and duration as user attrs. STORAGE is `sqlite:///PATH` or
`journal:PATH` (JournalStorage with a JournalFileBackend). Prints JSON with
the time of add_trials alone.

`optuna-read` opens the study in a fresh process (`optuna.load_study`) and
times `study.trials` (deep copies), `study.get_trials(deepcopy=False)` or
`study.trials_dataframe()`; prints JSON (`import_s`, `load_study_s`,
`op_s`, `n`).
"""
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from datetime import datetime, timedelta, timezone

# --------------------------------------------------------------------------
# tunectl's formats


def canonical(v) -> str:
    """src/canon.rs: keys sorted at every level, no whitespace."""
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v[k])
                              for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def trial_key(study, config, cell, repeat, host_class, role="sweep", host=None, tag=None):
    """src/trial.rs TrialIdentity::key."""
    doc = {"study": study, "config": config, "cell": cell, "fidelity": None,
           "repeat": repeat, "host_class": host_class}
    if role == "anchor":
        doc.update(role="anchor", host=host, tag=tag)
    elif role == "confirm":
        doc["role"] = "confirm"
    return sha256_hex(canonical(doc))


def pretty(record) -> bytes:
    """serde_json::to_vec_pretty of an AttemptRecord built in field order."""
    return json.dumps(record, indent=2, ensure_ascii=False).encode()


def value_text(v) -> str:
    """How a knob value turns into text (Display of spec::Value)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        raise ValueError("float knobs are not used by this benchmark")
    return str(v)


def render(template: str, config: dict, cell: dict) -> str:
    """Only `{{ name }}` holes (all this study's command uses): each becomes
    the expansion of the variable that carries its value (`"${TUNECTL_KNOB_X}"`,
    `"${TUNECTL_CELL_X}"`, `"${TUNECTL_STUDY_DIR}"`), never the value's text
    (docs/security.md), so the command is the same for every config."""
    out, rest = [], template
    while "{{" in rest:
        head, rest = rest.split("{{", 1)
        name, rest = rest.split("}}", 1)
        name = name.strip()
        if name == "study_dir":
            var = "TUNECTL_STUDY_DIR"
        elif name in config:
            var = "TUNECTL_KNOB_" + name.upper()
        elif name in cell:
            var = "TUNECTL_CELL_" + name.upper()
        else:
            raise ValueError(f"unknown hole {name}")
        out.append(head)
        out.append('"${' + var + '}"')
    out.append(rest)
    return "".join(out)


def rfc3339(t: datetime, nanos: int) -> str:
    # chrono's to_rfc3339 (AutoSi: 9 digits when the nanoseconds need them)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}+00:00"


def attempt_id(t: datetime, rng: random.Random) -> str:
    return t.strftime("%Y%m%dT%H%M%S.%fZ") + f"-{rng.getrandbits(64):016x}"


# --------------------------------------------------------------------------
# The study


class Space:
    def __init__(self, spec):
        self.spec = spec
        self.knobs = spec["knobs"]
        self.radices = [len(k["values"]) for k in self.knobs]
        self.size = math.prod(self.radices)
        defaults = [k["values"].index(k["default"]) for k in self.knobs]
        self.baseline = self.encode(defaults)
        self.axes = spec.get("cells", [])
        self.cells = [{}]
        for axis in self.axes:
            self.cells = [dict(c, **{axis["name"]: v}) for c in self.cells for v in axis["values"]]
        exprs = [c["expr"] for c in spec.get("constraints", [])]
        if exprs != ["not (accum == 'i32' and threads >= 16)"]:
            sys.exit(f"unexpected constraints {exprs}: update keep() in {__file__}")

    def encode(self, digits):
        idx = 0
        for d, r in zip(digits, self.radices):
            idx = idx * r + d
        return idx

    def decode(self, idx):
        digits = [0] * len(self.radices)
        for i in range(len(self.radices) - 1, -1, -1):
            digits[i] = idx % self.radices[i]
            idx //= self.radices[i]
        return digits

    def config(self, idx):
        return {k["name"]: k["values"][d] for k, d in zip(self.knobs, self.decode(idx))}

    def label(self, idx):
        if idx == self.baseline:
            return "baseline"
        base = self.decode(self.baseline)
        return " ".join(f"{k['name']}={value_text(k['values'][d])}"
                        for k, d, b in zip(self.knobs, self.decode(idx), base) if d != b)

    def index_of(self, config):
        return self.encode([k["values"].index(config[k["name"]]) for k in self.knobs])

    @staticmethod
    def keep(c):
        return not (c["accum"] == "i32" and c["threads"] >= 16)

    def candidates(self):
        return [i for i in range(self.size) if i != self.baseline and self.keep(self.config(i))]

    def cell_label(self, cell):
        if not self.axes:
            return "(single cell)"
        return " ".join(f"{a['name']}={value_text(cell[a['name']])}" for a in self.axes)


def sorted_map(d):
    return {k: d[k] for k in sorted(d)}


class Writer:
    """Builds AttemptRecords in AttemptRecord's field order and writes them
    to LEDGER/STUDY/trials/KEY/ATTEMPT.json, create-only, each after its
    arrival-log entry LEDGER/STUDY/log/STREAM/N-KEY-ATTEMPT.json, as a
    launch does (src/ledger/log.rs): one stream per Writer, ended by
    close()."""

    def __init__(self, ledger, study_record, host, rng):
        self.root = os.path.join(ledger, study_record["study_id"], "trials")
        self.log = os.path.join(ledger, study_record["study_id"], "log",
                                datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
                                + f"-{rng.getrandbits(64):016x}")
        self.entries = 0
        self.study = study_record
        self.space = Space(study_record["spec"])
        self.host = host
        self.rng = rng
        self.study_dir = None
        self.count = 0
        self.by_status = {}

    def record(self, *, key, aid, cfg_idx, cell_idx, repeat, role, slot, start, dur,
               run_s, warmups, status, failure, exit_, metrics, digest, outputs,
               stdout, stderr):
        space = self.space
        config = space.config(cfg_idx)
        cell = space.cells[cell_idx]
        fin = start + timedelta(seconds=dur)
        return {
            "schema": 1,
            "tunectl_version": self.study["tunectl_version"],
            "study_id": self.study["study_id"],
            "spec_hash": self.study["spec_hash"],
            "trial_key": key,
            "attempt_id": aid,
            "config": sorted_map(config),
            "config_label": space.label(cfg_idx),
            "config_index": cfg_idx,
            "is_baseline": cfg_idx == space.baseline,
            "cell": sorted_map(cell),
            "cell_label": space.cell_label(cell),
            "cell_index": cell_idx,
            "repeat": repeat,
            "role": role,
            "fidelity": None,
            "host": self.host["host"],
            "host_class": self.host["host_class"],
            "fingerprint": self.host["fingerprint_hash"],
            "slot": slot,
            "started_at": rfc3339(start, start.microsecond * 1000 + self.rng.randrange(1, 1000)),
            "finished_at": rfc3339(fin, fin.microsecond * 1000 + self.rng.randrange(1, 1000)),
            "duration_s": dur,
            "run_s": run_s,
            "warmup_runs": warmups,
            "status": status,
            "failure": failure,
            "exit": exit_,
            "metrics": sorted_map(metrics),
            "digest": digest,
            "outputs": sorted_map(outputs),
            "command": render(self.study["spec"]["trial"]["command"], config, cell),
            "stdout_tail": stdout,
            "stderr_tail": stderr,
        }

    def entry(self, rest, body):
        os.makedirs(self.log, exist_ok=True)
        self.entries += 1
        with open(os.path.join(self.log, f"{self.entries:012d}-{rest}"), "xb") as f:
            f.write(body)

    def close(self):
        if self.entries:
            self.entry("end", b'{"schema":1}')

    def write(self, rec):
        name = rec["attempt_id"] + ".json"
        obj = f"{self.study['study_id']}/trials/{rec['trial_key']}/{name}"
        self.entry(f"{rec['trial_key']}-{name}",
                   json.dumps({"schema": 1, "object": obj}, separators=(",", ":")).encode())
        d = os.path.join(self.root, rec["trial_key"])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "xb") as f:
            f.write(pretty(rec))
        self.count += 1
        k = rec["status"] if rec["role"] == "sweep" else rec["role"]
        self.by_status[k] = self.by_status.get(k, 0) + 1


# --------------------------------------------------------------------------
# The made-up kernel


def throughput(c, cell):
    """Melem/s of a config at a cell, before noise."""
    t = c["threads"]
    speed = min(t, 12) ** 0.85 * (1.0 if t <= 12 else 1.0 - 0.015 * math.log2(t / 12 + 1))
    opt = 9.0 if cell["seq"] >= 4096 else 7.5          # log2 of the best block
    speed *= math.exp(-((math.log2(c["block"]) - opt) ** 2) / 10.0)
    speed *= {1: 1.0, 2: 1.07, 4: 1.11, 8: 1.09}[c["unroll"]]
    speed *= {"f64": 1.0, "i64": 1.04, "f32": 1.3, "i32": 1.35}[c["accum"]]
    speed *= (1.035 if cell["seq"] >= 4096 else 0.985) if c["prefetch"] else 1.0
    sched = {"static": 1.0, "dynamic": 0.97, "guided": 0.99}[c["schedule"]]
    if cell["batch"] == 1 and c["schedule"] == "dynamic" and t >= 8:
        sched = 1.02
    return 420.0 * speed * sched * cell["batch"] ** 0.35


def deterministic_failure(c, cell):
    """(class, exit, detail, stderr, in warm-up) of a config that always fails."""
    if c["accum"] == "i32" and cell["seq"] >= 4096 and cell["batch"] >= 4:
        msg = ("accumulator overflow: i32 cannot hold the partial sum "
               f"(batch={cell['batch']}, seq={cell['seq']}); use --accum i64 or f64")
        stderr = (f"\nthread 'main' panicked at src/reduce.rs:212:17:\n{msg}\n"
                  "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n")
        return ("crash", {"code": 101, "signal": None}, f"exit code 101: {msg}", stderr)
    if c["unroll"] == 8 and c["block"] == 64:
        line = "kernel-bench: error: cannot unroll 8 ways a block of 64 elements (needs block >= 128)"
        return ("compile_failure", {"code": 1, "signal": None}, f"exit code 1: {line}",
                f"compiling reduce kernel (block=64, unroll=8)\n{line}\n")
    if c["block"] >= 4096 and cell["batch"] >= 16 and cell["seq"] >= 4096 and c["unroll"] >= 4:
        line = f"memory allocation of {c['block'] * cell['batch'] * cell['seq'] * 64} bytes failed"
        return ("oom", {"code": None, "signal": 6}, f"killed by SIGABRT: {line}", line + "\n")
    return None


def random_failure(rng):
    x = rng.random()
    if x < 0.002:
        return ("timeout", {"code": None, "signal": 9},
                "no exit within the 60.0s timeout; process group killed", "")
    if x < 0.003:
        line = "Segmentation fault (core dumped)"
        return ("crash", {"code": None, "signal": 11}, f"killed by SIGSEGV: {line}", line + "\n")
    return None


# --------------------------------------------------------------------------


def load_probe(ledger, study_id):
    base = os.path.join(ledger, study_id)
    with open(os.path.join(base, "study.json")) as f:
        study = json.load(f)
    hosts = []
    for root, _, files in os.walk(os.path.join(base, "hosts")):
        for name in files:
            with open(os.path.join(root, name)) as f:
                hosts.append(json.load(f))
    if len(hosts) != 1:
        sys.exit(f"expected one host record under {base}/hosts, found {len(hosts)}")
    return base, study, hosts[0]


def check_against_real(writer, base):
    """Compare what we would write with the attempts tunectl itself wrote."""
    real = []
    for root, _, files in os.walk(os.path.join(base, "trials")):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                real.append(f.read())
    if not real:
        sys.exit(f"no attempt under {base}/trials to check the generator against")
    space = writer.space
    for raw in real:
        r = json.loads(raw)
        # byte-for-byte formatting of a record as serde writes it
        if pretty(r) != raw:
            sys.exit(f"formatting differs from serde_json's for {r['attempt_id']}")
        cell_idx = r["cell_index"]
        cfg = r["config_index"]
        assert r["is_baseline"] and cfg == space.baseline, r["config_label"]
        key = trial_key(writer.study["study_id"], space.config(cfg), space.cells[cell_idx],
                        r["repeat"], writer.host["host_class"])
        mine = writer.record(
            key=key, aid=r["attempt_id"], cfg_idx=cfg, cell_idx=cell_idx, repeat=r["repeat"],
            role=r["role"], slot=r["slot"], start=datetime.now(timezone.utc), dur=r["duration_s"],
            run_s=r["run_s"], warmups=r["warmup_runs"], status=r["status"], failure=r["failure"],
            exit_=r["exit"], metrics=r["metrics"], digest=r["digest"], outputs=r["outputs"],
            stdout=r["stdout_tail"], stderr=r["stderr_tail"])
        for field in mine:
            if field in ("started_at", "finished_at"):
                continue
            if mine[field] != r[field]:
                sys.exit(f"generated {field} differs from tunectl's: {mine[field]!r} != {r[field]!r}")
        if list(mine) != [k for k in r if k != "stderr_head"]:
            sys.exit(f"field order differs: {list(mine)} != {list(r)}")
    return len(real)


def sweep(ledger, study_id, seed):
    rng = random.Random(seed)
    base, study, host = load_probe(ledger, study_id)
    w = Writer(ledger, study, host, rng)
    # study_dir: from the real records' rendered command
    real_cmd = None
    for root, _, files in os.walk(os.path.join(base, "trials")):
        for name in files:
            with open(os.path.join(root, name)) as f:
                real_cmd = json.load(f)["command"]
            break
        if real_cmd:
            break
    if not real_cmd:
        sys.exit(f"no attempt under {base}/trials")
    w.study_dir = real_cmd.split("/bin/kernel-bench ", 1)[0]
    checked = check_against_real(w, base)
    shutil.rmtree(os.path.join(base, "trials"))
    shutil.rmtree(os.path.join(base, "log"), ignore_errors=True)
    shutil.rmtree(os.path.join(base, "verdicts"), ignore_errors=True)
    shutil.rmtree(os.path.join(base, "index"), ignore_errors=True)

    spec = study["spec"]
    space = w.space
    meas = spec["measurement"]
    repeats, anchor_every, warmup = meas["repeats"], meas["anchor_every"], meas["warmup"]
    slots = 4
    cands = space.candidates()
    order = [space.baseline] + cands
    t = datetime.fromisoformat(study["created_at"][:26]).replace(tzinfo=timezone.utc)
    t += timedelta(seconds=2)
    clock = [t] * slots  # per slot
    nslot = [0]

    def take_slot(dur):
        s = min(range(slots), key=lambda i: clock[i])
        start = clock[s]
        clock[s] = start + timedelta(seconds=dur + rng.uniform(0.0003, 0.0015))
        return s, start

    def ok_attempt(cfg_idx, cell_idx, repeat, role, key, warm, tag_time=None):
        c = space.config(cfg_idx)
        cell = space.cells[cell_idx]
        tp = throughput(c, cell) * (1 + rng.gauss(0, 0.015))
        n_elem = cell["batch"] * cell["seq"] * 2048
        ms = [round(n_elem / (tp * (1 + rng.gauss(0, 0.01))) / 1e3, 4) for _ in range(3)]
        run = round(sum(ms) / 1e3 + rng.uniform(0.35, 0.6), 9)
        dur = round(run * (1 + warm) + rng.uniform(0.002, 0.01), 9)
        s, start = take_slot(dur)
        out = f"{cell['batch']}x{cell['seq']}" if c["accum"] != "f32" else f"f32-{cfg_idx}-{cell_idx}"
        out_sha = sha256_hex(f"checksum {out}\n")
        tpr = round(tp, 3)
        stdout = (f"kernel-bench: threads={c['threads']} block={c['block']} unroll={c['unroll']} "
                  f"accum={c['accum']} prefetch={value_text(c['prefetch'])} schedule={c['schedule']} "
                  f"batch={cell['batch']} seq={cell['seq']} passes=3 time_ms={ms} "
                  f"throughput={tpr} Melem/s\n")
        return w.record(
            key=key, aid=attempt_id(start, rng), cfg_idx=cfg_idx, cell_idx=cell_idx, repeat=repeat,
            role=role, slot=s, start=start, dur=dur, run_s=run, warmups=warm, status="ok",
            failure=None, exit_={"code": 0, "signal": None},
            metrics={"throughput": [tpr], "time_ms": ms},
            digest=sha256_hex(f"output out.txt {out_sha}\n"), outputs={"out.txt": out_sha},
            stdout=stdout, stderr="")

    def failed_attempt(cfg_idx, cell_idx, repeat, key, warm, fail):
        cls, exit_, detail, stderr = fail
        in_warmup = warm > 0 and cls in ("crash", "compile_failure", "oom")
        if cls == "timeout":
            run, dur = None, 60.0 + rng.uniform(0.05, 0.2)
        else:
            run = None if in_warmup else round(rng.uniform(0.05, 0.4), 9)
            dur = round(rng.uniform(0.05, 0.4) + (0 if in_warmup else 0.5 * warm), 9)
        if cls == "timeout" and warm:
            dur += 0.6
        s, start = take_slot(dur)
        if in_warmup:
            detail = f"{detail} (in warm-up run 1)"
        return w.record(
            key=key, aid=attempt_id(start, rng), cfg_idx=cfg_idx, cell_idx=cell_idx, repeat=repeat,
            role="sweep", slot=s, start=start, dur=round(dur, 9), run_s=run,
            warmups=0 if in_warmup else warm, status="failed",
            failure={"class": cls, "detail": detail, "phase": "warmup" if in_warmup else "measure"},
            exit_=exit_, metrics={}, digest=None, outputs={}, stdout="", stderr=stderr)

    sid, hc, hname = study["study_id"], host["host_class"], host["host"]
    for cell_idx, cell in enumerate(space.cells):
        failed = set()
        good = 0
        for repeat in range(repeats):
            for cfg_idx in order:
                if cfg_idx in failed:
                    continue
                key = trial_key(sid, space.config(cfg_idx), cell, repeat, hc)
                warm = warmup if repeat == 0 else 0
                fail = None
                if cfg_idx != space.baseline:
                    fail = deterministic_failure(space.config(cfg_idx), cell) if repeat == 0 else None
                    fail = fail or random_failure(rng)
                if fail:
                    failed.add(cfg_idx)
                    w.write(failed_attempt(cfg_idx, cell_idx, repeat, key, warm, fail))
                    continue
                w.write(ok_attempt(cfg_idx, cell_idx, repeat, "sweep", key, warm))
                if cfg_idx == space.baseline:
                    continue
                good += 1
                if anchor_every and good % anchor_every == 0:
                    tag = attempt_id(clock[0], rng)
                    akey = trial_key(sid, space.config(space.baseline), cell, 0, hc,
                                     role="anchor", host=hname, tag=tag)
                    w.write(ok_attempt(space.baseline, cell_idx, 0, "anchor", akey, 0))
    w.close()
    end = max(clock)
    json.dump({"checked_against_tunectl": checked, "written": w.count, "by_kind": w.by_status,
               "candidates_per_cell": len(cands), "cells": len(space.cells),
               "study_dir": w.study_dir, "end": end.isoformat(), "seed": seed},
              sys.stdout)
    print()


def all_attempts(base):
    root = os.path.join(base, "trials")
    for key in os.listdir(root):
        for name in os.listdir(os.path.join(root, key)):
            if name.endswith(".json"):
                with open(os.path.join(root, key, name), "rb") as f:
                    yield json.loads(f.read())


def confirm(ledger, study_id, report_path, total, seed):
    rng = random.Random(seed + 1)
    base, study, host = load_probe(ledger, study_id)
    w = Writer(ledger, study, host, rng)
    space = w.space
    with open(report_path) as f:
        report = json.load(f)
    attempts = list(all_attempts(base))
    w.study_dir = attempts[0]["command"].split("/bin/kernel-bench ", 1)[0]
    last = max(datetime.fromisoformat(a["finished_at"][:26]) for a in attempts).replace(
        tzinfo=timezone.utc)
    rounds = study["spec"]["measurement"]["confirm_repeats"]
    labels = {space.cell_label(c): i for i, c in enumerate(space.cells)}
    sid, hc = study["study_id"], host["host_class"]
    t = last + timedelta(seconds=1)
    winners = []
    for cls in report["classes"]:
        for bucket in cls["buckets"]:
            win = bucket.get("winner")
            if not win:
                continue
            cfg = space.index_of(win["config"])
            winners.append({"bucket": bucket["label"], "winner": win["label"]})
            cells = [c["cell_label"] for c in cls["cells"] if c["bucket"] == bucket["key"]]
            for r in range(rounds):
                for cell_label in cells:
                    ci = labels[cell_label]
                    for idx in (space.baseline, cfg):
                        key = trial_key(sid, space.config(idx), space.cells[ci], r, hc, role="confirm")
                        c = space.config(idx)
                        cell = space.cells[ci]
                        tp = round(throughput(c, cell) * (1 + rng.gauss(0, 0.015)), 3)
                        n_elem = cell["batch"] * cell["seq"] * 2048
                        ms = [round(n_elem / (tp * (1 + rng.gauss(0, 0.01))) / 1e3, 4)
                              for _ in range(3)]
                        run = round(sum(ms) / 1e3 + 0.4, 9)
                        out_sha = sha256_hex(f"checksum {cell['batch']}x{cell['seq']}\n")
                        w.write(w.record(
                            key=key, aid=attempt_id(t, rng), cfg_idx=idx, cell_idx=ci, repeat=r,
                            role="confirm", slot=0, start=t, dur=round(run + 0.004, 9), run_s=run,
                            warmups=0, status="ok", failure=None, exit_={"code": 0, "signal": None},
                            metrics={"throughput": [tp], "time_ms": ms},
                            digest=sha256_hex(f"output out.txt {out_sha}\n"),
                            outputs={"out.txt": out_sha},
                            stdout=f"kernel-bench: confirm round {r} throughput={tp} Melem/s\n",
                            stderr=""))
                        t += timedelta(seconds=run + 0.01)
    # Lost attempts: interrupted launches; the trial ran again later, so the
    # lost attempt's id sorts before the attempt that counts.
    have = len(attempts) + w.count
    missing = total - have
    if missing < 0:
        sys.exit(f"the ledger already holds {have} attempts, more than --total {total}")
    sweeps = [a for a in attempts if a["role"] == "sweep" and a["status"] == "ok"]
    for a in rng.sample(sweeps, missing):
        start = datetime.fromisoformat(a["started_at"][:26]).replace(tzinfo=timezone.utc)
        start -= timedelta(seconds=rng.uniform(600, 7200))
        dur = round(rng.uniform(0.1, 1.0), 9)
        rec = w.record(
            key=a["trial_key"], aid=attempt_id(start, rng), cfg_idx=a["config_index"],
            cell_idx=a["cell_index"], repeat=a["repeat"], role="sweep", slot=a["slot"],
            start=start, dur=dur, run_s=None, warmups=0, status="lost", failure=None,
            exit_={"code": None, "signal": 9}, metrics={}, digest=None, outputs={},
            stdout="", stderr="")
        w.write(rec)
    w.close()
    json.dump({"winners": winners, "confirm_written": w.by_status.get("confirm", 0),
               "lost_written": w.by_status.get("lost", 0), "total": have + missing}, sys.stdout)
    print()


# --------------------------------------------------------------------------
# Optuna


def open_storage(spec):
    import optuna
    if spec.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        return JournalStorage(JournalFileBackend(spec[len("journal:"):]))
    return spec


def optuna_load(ledger, study_id, storage):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage.startswith("sqlite:"):
        # Loading only: one fsync'd transaction per trial would take 25 ms
        # each on ext4. The readers open the file with SQLite's defaults.
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        @event.listens_for(Engine, "connect")
        def _fast_load(conn, _record):
            cur = conn.cursor()
            cur.execute("PRAGMA synchronous=OFF")
            cur.execute("PRAGMA journal_mode=MEMORY")
            cur.close()
    base, study, _ = load_probe(ledger, study_id)
    spec = study["spec"]
    objective = spec["objective"]["name"]
    dists = {k["name"]: optuna.distributions.CategoricalDistribution(k["values"])
             for k in spec["knobs"]}
    t0 = time.perf_counter()
    attempts = list(all_attempts(base))
    attempts.sort(key=lambda a: a["attempt_id"])
    t1 = time.perf_counter()
    trials = []
    for a in attempts:
        ok = a["status"] == "ok"
        trials.append(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL,
            value=a["metrics"][objective][0] if ok else None,
            params=dict(a["config"]),
            distributions=dists,
            user_attrs={
                "cell": a["cell"], "repeat": a["repeat"], "role": a["role"],
                "host": a["host"], "status": a["status"],
                "failure": a["failure"]["class"] if a["failure"] else None,
                "attempt_id": a["attempt_id"], "time_ms": a["metrics"].get("time_ms"),
                "duration_s": a["duration_s"],
            }))
    t2 = time.perf_counter()
    direction = "maximize" if spec["objective"]["better"] == "higher" else "minimize"
    s = optuna.create_study(study_name=study_id, storage=open_storage(storage),
                            direction=direction)
    t3 = time.perf_counter()
    s.add_trials(trials)
    t4 = time.perf_counter()
    json.dump({"n": len(trials), "read_ledger_s": t1 - t0, "create_trial_s": t2 - t1,
               "add_trials_s": t4 - t3}, sys.stdout)
    print()


def optuna_read(storage, study_name, op):
    t0 = time.perf_counter()
    import optuna
    t1 = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.load_study(study_name=study_name, storage=open_storage(storage))
    t2 = time.perf_counter()
    if op == "trials":
        n = len(s.trials)
    elif op == "get_trials":
        n = len(s.get_trials(deepcopy=False))
    else:
        n = len(s.trials_dataframe())
    t3 = time.perf_counter()
    json.dump({"n": n, "import_s": t1 - t0, "load_study_s": t2 - t1, "op_s": t3 - t2,
               "optuna": optuna.__version__}, sys.stdout)
    print()


def parquet_read(engine, path):
    """Read an export of `tunectl export --format parquet` as a user's
    notebook would: pandas' read_parquet of the whole file, or a DuckDB
    query over it (the objective's median per config and cell, on the
    samples file; count of rows by status on the attempts file)."""
    t0 = time.perf_counter()
    if engine == "pandas":
        import pandas as pd
        t1 = time.perf_counter()
        n = len(pd.read_parquet(path))
    else:
        import duckdb
        t1 = time.perf_counter()
        con = duckdb.connect()
        cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()]
        if "value" in cols:
            rows = con.execute(
                f"SELECT host_class, cell, config, median(value), count(*) FROM read_parquet('{path}') "
                "WHERE objective AND counts AND role = 'sweep' GROUP BY ALL").fetchall()
        else:
            rows = con.execute(
                f"SELECT status, count(*) FROM read_parquet('{path}') GROUP BY ALL").fetchall()
        n = con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()[0]
        assert rows
    t2 = time.perf_counter()
    json.dump({"n": n, "import_s": t1 - t0, "load_study_s": 0.0, "op_s": t2 - t1}, sys.stdout)
    print()


def main():
    a = sys.argv[1:]
    seed = 1
    if "--seed" in a:
        i = a.index("--seed")
        seed = int(a[i + 1])
        del a[i:i + 2]
    if a[:1] == ["sweep"] and len(a) == 3:
        sweep(a[1], a[2], seed)
    elif a[:1] == ["confirm"] and len(a) == 6 and a[4] == "--total":
        confirm(a[1], a[2], a[3], int(a[5]), seed)
    elif a[:1] == ["optuna-load"] and len(a) == 4:
        optuna_load(a[1], a[2], a[3])
    elif a[:1] == ["optuna-read"] and len(a) == 4 and a[3] in ("trials", "get_trials",
                                                               "dataframe"):
        optuna_read(a[1], a[2], a[3])
    elif a[:1] == ["parquet-read"] and len(a) == 3 and a[1] in ("pandas", "duckdb"):
        parquet_read(a[1], a[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
