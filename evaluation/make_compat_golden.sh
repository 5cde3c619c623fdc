#!/usr/bin/env bash
# Makes tests/data/compat/bundled-bm25.golden: runs tests/data/compat/bundled-bm25.toml with the
# given ri-batch binary (the golden file was made with the binary of commit 6984809, before the
# index was stored as memory-mapped CSR) and records, per query of queries.tsv, the SHA-256 of its
# CSV result, and the result itself (tests/data/compat/bundled-bm25/<name>.csv): tests/compat.rs
# compares a run's rows with those, and checks them against the hashes.
# Remade once since, for the oracle selector fix (a unit merely contained in a quote no longer
# counts): against the binary before that fix, every row of every table was identical except
# the bm25-compact-oracle variant's extracts, evaluation and summary rows (3 `irrelevant`
# selections became `full`).
# usage: evaluation/make_compat_golden.sh path/to/ri-batch
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(realpath "$1")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
datasets/build-repos.sh
sed -e "s|^root = .*|root = \"$PWD\"|" -e "s|^output_dir = .*|output_dir = \"$work/out\"|" \
  tests/data/compat/bundled-bm25.toml > "$work/p.toml"
# The old binary reads [[repos]] entries only: expand the glob for it the same way (sorted).
if ! "$bin" dataset check "$work/p.toml" >/dev/null 2>&1; then
  { sed '/^\[\[repos\]\]/,/^glob/d' "$work/p.toml"
    for d in datasets/repos/*; do printf '[[repos]]\nname = "%s"\ngit = "%s"\n' "$(basename "$d")" "$PWD/$d"; done
  } > "$work/p2.toml"
  mv "$work/p2.toml" "$work/p.toml"
fi
"$bin" run "$work/p.toml" --quiet >/dev/null
out=tests/data/compat/bundled-bm25.golden
: > "$out"
mkdir -p tests/data/compat/bundled-bm25
while IFS=$'\t' read -r name query; do
  csv="$("$bin" sql "$work/out" "$query" --format csv)"
  printf '%s\t%s\n' "$name" "$(printf '%s' "$csv" | sha256sum | cut -d' ' -f1)" >> "$out"
  printf '%s\n' "$csv" > "tests/data/compat/bundled-bm25/$name.csv"
done < tests/data/compat/queries.tsv
cat "$out"
