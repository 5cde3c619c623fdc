#!/usr/bin/env bash
# Runs the BM25 benchmark, then bm25s (installed from PyPI into a venv by this script) on the same
# tokenized corpus and queries; prints the share of identical top-10 lists and throughput ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${BM25S_VENV:-$target/bm25s-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "bm25s==0.3.16" "numpy==2.4.6" "scipy==1.17.1"
cargo bench --locked --bench bm25 -- --noplot
"$venv/bin/python" benches/bm25s_compare.py "$target/bm25-bench"
