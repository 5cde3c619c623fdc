#!/usr/bin/env bash
# Runs the embedding benchmark with its peers in alternating rounds: ri-batch f32 and int8, then
# sentence-transformers, ONNX Runtime f32 and ONNX Runtime int8 (the same model exported once with
# torch.onnx and dynamically quantized), same texts, same model directory, same thread count. The
# peers are installed from PyPI into a venv by this script (ST_VENV chooses where). Prints tokens/s
# of each, their ratios per round and each peer's vector agreement with ri-batch's f32 vectors.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${ST_VENV:-$target/st-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check \
  "sentence-transformers==6.2.0" "onnxruntime==1.32.0" "onnx==1.23.2" "onnxscript"
RI_EMBED_PEERS="$venv/bin/python" cargo bench --locked --bench embed -- --noplot
"$venv/bin/python" benches/embed_compare.py "$target/embed-bench"
