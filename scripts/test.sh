#!/bin/sh
# Run everything CI runs: format check, clippy with warnings denied, and the
# whole test suite. Installs what the tests need on a fresh Debian machine
# (as root): besides the Rust toolchain, an S3-compatible server (moto, from
# PyPI, in .cache/moto-venv) that the ledger tests use; it runs on loopback
# while the tests run and is stopped on exit (scripts/moto.sh); and the
# OpenSSH server and client (apt), with which the ssh tests start their own
# sshd hosts on loopback addresses (scripts/sshd.sh); and Slurm and MUNGE
# (apt; munged is started), with which the Slurm tests start their own
# single-machine clusters (scripts/slurm.sh); and onnxruntime, onnx and
# numpy (PyPI, in .cache/onnxruntime-venv) for the onnxruntime example's
# end-to-end test; and pandas, pyarrow, DuckDB and matplotlib (PyPI, in
# .cache/notebook-venv) for the notebook example's test; and headless
# Chromium (apt) that opens the HTML reports (scripts/chromium.sh).
set -eu
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts/test.sh: cargo is required (https://rustup.rs)" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --locked --all-targets -- -D warnings

. ./scripts/moto.sh
if [ -n "${TUNECTL_TEST_S3_ENDPOINT:-}" ]; then
    echo "== S3 test server: using TUNECTL_TEST_S3_ENDPOINT=$TUNECTL_TEST_S3_ENDPOINT" >&2
else
    echo "== S3 test server (moto)" >&2
    moto_install
    trap moto_stop EXIT
    trap 'moto_stop; exit 130' INT
    trap 'moto_stop; exit 143' TERM
    moto_start
fi

# The ssh transport tests start their own sshd hosts on loopback
# (tests/it/support/sshd.rs): only the OpenSSH server and client are needed.
. ./scripts/sshd.sh
echo "== OpenSSH (sshd for the ssh transport tests)" >&2
sshd_install

# The Slurm transport tests start their own slurmctld and slurmd per cluster
# (tests/it/support/slurm.rs): Slurm, MUNGE and a running munged are needed.
. ./scripts/slurm.sh
echo "== Slurm and MUNGE (for the Slurm transport tests)" >&2
slurm_install

# The onnxruntime example's test (tests/it/examples.rs) tunes a real runtime:
# install its pinned wheels from PyPI once (some 20 s on a fast link; a no-op
# when .cache/onnxruntime-venv already imports them).
echo "== onnxruntime, onnx and numpy (for the onnxruntime example)" >&2
./examples/onnxruntime/setup.sh >/dev/null

# The notebook example's test (tests/it/export_data.rs) reads a Parquet
# export in pandas and DuckDB: pinned wheels from PyPI, installed once.
echo "== pandas, pyarrow, DuckDB and matplotlib (for the notebook example)" >&2
./examples/notebook/setup.sh >/dev/null

# The HTML report's test opens the pages it renders in headless Chromium
# (tests/it/html_report.rs).
. ./scripts/chromium.sh
echo "== Chromium (headless, for the HTML report test)" >&2
chromium_install

# The test build links several large binaries (the unit tests, the one
# integration test binary of tests/it/, the benches, the example): say how
# much room there is, so that a linker killed by a full disk is told apart
# from a failing test.
echo "== free disk space where target/ is built" >&2
df -h . >&2 || true

echo "== cargo test" >&2
cargo test --locked --all-targets
