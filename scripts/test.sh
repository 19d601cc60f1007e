#!/bin/sh
# Run everything CI runs: format check, clippy with warnings denied, and the
# whole test suite. Installs what the tests need on a fresh Debian machine
# (as root); for now the suite needs only the Rust toolchain.
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
echo "== cargo test" >&2
cargo test --locked --all-targets
