#!/usr/bin/env bash
# Late-stage cost against the number of scopes (not a timed test). The same 300 questions
# (benches/scopes_workload.py: 3 repositories of 1,500 real Rust files each, 100 one-file commits
# each) are answered
#   many: each at its own base commit (300 revisions: SWE-bench's shape, one scope a question);
#   head: all at their repository's last commit (3 scopes: the floor for these questions);
# through `ri-batch run` with pipelines/swebench-dev.toml's variants over `**/*.rs`. Both are run
# cold once, then retrieve, pack, extract and evaluate are redone (--force) ROUNDS times (default
# 3), alternating; then an unchanged rerun of each. With BASE_BIN (another build of ri-batch) the
# many-revision directory is also run cold into a directory of its own and redone by that binary
# in the same rounds, as a baseline. Prints each stage's seconds per round, and the bytes the cold
# runs wrote.
#
#   benches/scopes.sh            (WORK, default $CARGO_TARGET_DIR/scopes-bench; BIN, the build to
#                                 measure, default this checkout's release build)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
target="${CARGO_TARGET_DIR:-$root/target}"
bin="${BIN:-$target/release/ri-batch}"
[ -x "$bin" ] || cargo build --release --locked --quiet
work="${WORK:-$target/scopes-bench}"
rounds="${ROUNDS:-3}"
[ -f "$work/instances.jsonl" ] || python3 benches/scopes_workload.py "$work"
pipeline() { # name instances
  sed -e "s|^root = \"..\"|root = \"$work\"\noutput_dir = \"out-$1\"|" \
    -e "s|^source = .*|source = \"$2\"|" -e 's|^repos = .*|repos = "mirrors"|' \
    -e 's|\*\*/\*\.py|**/*.rs|' -e "s|^name = \"swebench-dev\"|name = \"scopes-$1\"|" \
    pipelines/swebench-dev.toml >"$work/$1.toml"
}
pipeline many instances.jsonl
pipeline head instances-head.jsonl
late() { # label binary pipeline [flags]: one line of stage seconds
  local label=$1 b=$2 p=$3
  shift 3
  local start end
  start=$(date +%s.%N)
  "$b" run "$p" "$@" 2>"$work/last.err" >/dev/null
  end=$(date +%s.%N)
  printf '%-14s wall %6.2f s ' "$label" "$(echo "$end - $start" | bc)"
  grep -oE '^ *(scan|chunk|index|retrieve|pack|extract|evaluate) +ran in [0-9.]+s' "$work/last.err" \
    | awk '{printf "%s %s  ", $1, $4}' || true
  echo
}
sizes() { # label directory: bytes each early stage wrote, and in all
  printf '%-14s bytes ' "$1"
  for s in scan chunk index; do printf '%s %s  ' "$s" "$(du -sb "$2/$s" | cut -f1)"; done
  echo "total $(du -sb "$2" | cut -f1)"
}
for n in many head; do
  rm -rf "$work/out-$n"
  late "$n cold" "$bin" "$work/$n.toml"
  sizes "$n" "$work/out-$n"
done
if [ -n "${BASE_BIN:-}" ]; then
  rm -rf "$work/out-base"
  sed -e 's|^output_dir = "out-many"|output_dir = "out-base"|' "$work/many.toml" >"$work/base.toml"
  late "many base cold" "$BASE_BIN" "$work/base.toml"
  sizes "many base" "$work/out-base"
fi
stages=retrieve,pack,extract,evaluate
for r in $(seq "$rounds"); do
  late "many" "$bin" "$work/many.toml" --stages $stages --force
  late "head" "$bin" "$work/head.toml" --stages $stages --force
  if [ -n "${BASE_BIN:-}" ]; then
    late "many base" "$BASE_BIN" "$work/base.toml" --stages $stages --force
  fi
done
late "many rerun" "$bin" "$work/many.toml"
late "head rerun" "$bin" "$work/head.toml"
