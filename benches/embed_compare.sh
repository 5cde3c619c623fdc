#!/usr/bin/env bash
# Runs the embedding benchmark, then sentence-transformers (installed from PyPI into a venv by this
# script; CPU, same texts, same model directory) and prints tokens/s of both and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${ST_VENV:-$target/st-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "sentence-transformers==6.2.0"
cargo bench --locked --bench embed -- --noplot
HF_HUB_OFFLINE=1 "$venv/bin/python" benches/embed_compare.py "$target/embed-bench" models/all-minilm-l6-v2
