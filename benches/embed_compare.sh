#!/usr/bin/env bash
# CPU embeddings through `ri-batch run` against ONNX Runtime at its best (benches/embed_run.py says
# how each side is configured and timed), in alternating rounds: ri-batch f32 and int8 through the
# embed stage as users run it, then ONNX Runtime f32, f32 with the transformer optimizer's fusions,
# and int8 dynamic quantizations (per tensor, per channel, fused), each at its fastest batching.
# The peers are installed from PyPI into a venv (PEER_VENV chooses where), the model is the one
# `ri-batch model fetch all-minilm-l6-v2` gives. ROUNDS (default 3) sets the rounds.
# The library-level bench with sentence-transformers (`cargo bench --bench embed`) is separate:
# it times the model call alone, not the product.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${PEER_VENV:-$target/peer-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check \
  "torch==2.9.1" "transformers==4.57.3" "onnxruntime==1.32.0" "onnx==1.23.2" "onnxscript" "pyarrow"
cargo build --release --locked --bin ri-batch
[ -d models/all-minilm-l6-v2 ] || "$target/release/ri-batch" model fetch all-minilm-l6-v2
"$venv/bin/python" benches/embed_run.py "$target/release/ri-batch" models/all-minilm-l6-v2 \
  "$target/embed-run" "${ROUNDS:-3}"
