# Developer recipes. `just` itself: `cargo install just`.
# The README's commands do not need just: they call the scripts directly.

# Run the quickstart study end to end (build, plan, launch, report).
quickstart *ARGS:
    ./examples/quickstart/run.sh {{ARGS}}

# Everything CI runs: fmt check, clippy -D warnings, all tests.
ci:
    ./scripts/test.sh

test:
    cargo test --all-targets

fmt:
    cargo fmt --all

# Benchmarks (not timed tests); figures go to docs/benchmarks.md.
bench:
    ./benches/dispatch.sh
    ./benches/ssh_dispatch.sh
    ./benches/busy_share.sh
    cargo bench --bench slurm_calls
    cargo bench --bench slurm_busy
    ./benches/plan_scale.sh
    ./benches/fs_inodes.py
    ./benches/search_regret.sh
    ./benches/verdict_integrity.sh --quick

# The launch driver over a simulated fleet under virtual time (FAKE hosts,
# an in-memory ledger that counts requests): busy share, makespan against its
# bound, ledger requests and launcher CPU per attempt. HOSTS, SLOTS, CLASSES,
# CHURN, SEED, STARTUP, MAX_REPEATS and RACES as benches/fleet_sim.rs reads
# them.
fleet-sim:
    cargo bench --bench fleet_sim

# The verdict-integrity benchmark in full (510 studies: about 1 hour with --jobs 4,
# whose timings are the FAKE program's own, so parallel launches change no figure); ARGS as
# benches/verdict_integrity.sh takes them (--tunectl PATH, --out FILE, --jobs N).
bench-verdict-integrity *ARGS:
    ./benches/verdict_integrity.sh {{ARGS}}

# The differential test of command templates under every shell installed,
# CASES generated templates (not a timed test; see docs/fuzzing.md).
shell-differential CASES="20000":
    ./benches/shell_differential.sh {{CASES}}

# Fuzz every input parser for SECONDS per target (not a timed test);
# findings go to target/fuzz-findings/ (see docs/fuzzing.md).
fuzz TARGET="all" SECONDS="60":
    ./benches/fuzz.sh {{TARGET}} {{SECONDS}}
