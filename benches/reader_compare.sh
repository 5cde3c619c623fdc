#!/usr/bin/env bash
# The reader against llama.cpp, alternating rounds, through the product's own path: each round
# runs `ri-batch run` on benches/reader.toml with a fresh reading cache (so every prompt is read;
# the stages before extract are reused), then llama.cpp (llama-cpp-python, n_threads = cores, as
# its docs recommend) on the very prompts that round's readings cached, with the same first-token
# refusal probability and a short greedy reply. Prints prompt tokens/s and s/question of both,
# their ratio per round, and how far the two refusal probabilities lie apart.
#   READER_MODEL   fetched name (default qwen2.5-coder-1.5b-instruct; fetched if missing)
#   ROUNDS         alternating rounds (default 3)
#   PEER_REPACK    0: llama.cpp without its weight repacking (its default is on; it crashed on a
#                  CPU with AMX)
#   PEER_VENV      where llama-cpp-python lives (default $target/llama-peer; built from its source
#                  package, about 20 minutes on 2 cores the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
model="${READER_MODEL:-qwen2.5-coder-1.5b-instruct}"
rounds="${ROUNDS:-3}"
venv="${PEER_VENV:-$target/llama-peer}"
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check cmake ninja scikit-build-core numpy
  CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
    --no-binary llama-cpp-python llama-cpp-python==0.3.36
fi
cargo build --release --locked --quiet
bin="$target/release/ri-batch"
"$bin" model fetch "$model" >/dev/null
work="$target/reader-bench"
rm -rf "$work" && mkdir -p "$work"
grep -E '"repo": "(ms|humantime)"' datasets/questions.jsonl >"$work/questions.jsonl"
pipeline() { # $1: the round's reading cache
  sed -e "s|^root = .*|root = \"$PWD\"\noutput_dir = \"$work/out\"|" \
    -e "s|^questions = .*|questions = \"$work/questions.jsonl\"|" \
    -e "s|^model = \"qwen.*|model = \"$model\"|" \
    -e "s|^cache_dir = .*|cache_dir = \"$1\"|" benches/reader.toml >"$work/pipeline.toml"
}
# The stages before extract, once (not timed).
pipeline "$work/warm"
"$bin" run --quiet --stages scan,chunk,questions,index,retrieve,pack "$work/pipeline.toml" >/dev/null
for r in $(seq 1 "$rounds"); do
  pipeline "$work/cache-$r"
  s=$(date +%s.%N)
  "$bin" run --quiet "$work/pipeline.toml" >/dev/null
  e=$(date +%s.%N)
  echo "{\"round\": $r, \"seconds\": $(echo "$e - $s" | bc)}" >"$work/ours-$r.json"
  "$venv/bin/python" benches/reader_peer.py "models/$model/model.gguf" "$work/cache-$r" "$(nproc)" \
    >"$work/peer-$r.json"
done
"$venv/bin/python" benches/reader_peer.py --report "$work" "$rounds"
