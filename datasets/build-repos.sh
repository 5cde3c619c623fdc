#!/usr/bin/env bash
# Turns the package archives in datasets/sources/ into git repositories at pinned commits:
#   - sources.tsv        -> datasets/repos/<name>: the bundled ten (code, docs and questions.jsonl)
#   - readme-sources.tsv -> datasets/readme-repos/<name>: seven more READMEs for the README
#     questions (readme-wide-questions.jsonl), kept apart so the bundled set stays the ten
#   - readme-holdout-sources.tsv -> datasets/readme-repos/<name>: eight READMEs held out whole for
#     readme-holdout-questions.jsonl (pipelines/readme-holdout.toml), never tuned on
# Every archive's sha256 is checked against its table, and so is the resulting commit id (author,
# committer and date are fixed, so the id is reproducible).
# Usage: datasets/build-repos.sh [--print-commits]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=ri-batch GIT_AUTHOR_EMAIL=datasets@ri-batch.invalid GIT_AUTHOR_DATE=2026-01-01T00:00:00Z
export GIT_COMMITTER_NAME=ri-batch GIT_COMMITTER_EMAIL=datasets@ri-batch.invalid GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
print=${1:-}
status=0
build_set() {
  local table="$1" out="$2"
  mkdir -p "$out"
  while IFS=$'\t' read -r name registry version archive sha256 license license_files commit; do
    [ "$name" = name ] && continue
    src="$here/sources/$archive"
    got=$(sha256sum "$src" | cut -d' ' -f1)
    if [ "$got" != "$sha256" ]; then
      echo "datasets/sources/$archive: sha256 $got does not match $(basename "$table") ($sha256)" >&2
      status=1; continue
    fi
    dir="$out/$name"
    if [ -d "$dir/.git" ] && [ "$commit" != "-" ] && [ "$(git -C "$dir" rev-parse -q --verify HEAD 2>/dev/null)" = "$commit" ]; then
      continue
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    tar -xzf "$src" -C "$dir" --strip-components=1 --no-same-owner
    IFS=, read -ra lic <<<"$license_files"
    for l in "${lic[@]}"; do
      [ -f "$dir/$l" ] || { echo "$name: licence file $l missing from $archive" >&2; status=1; }
    done
    git -C "$dir" init -q -b main
    git -C "$dir" -c core.autocrlf=false add -A -f
    git -C "$dir" -c commit.gpgsign=false commit -q -m "$name $version from $registry ($license), archive sha256 $sha256"
    head=$(git -C "$dir" rev-parse HEAD)
    if [ "$print" = --print-commits ]; then
      printf '%s\t%s\n' "$name" "$head"
    elif [ "$commit" != "-" ] && [ "$head" != "$commit" ]; then
      echo "$name: built commit $head, but $(basename "$table") pins $commit" >&2
      status=1
    fi
  done <"$table"
}
build_set "$here/sources.tsv" "$here/repos"
build_set "$here/readme-sources.tsv" "$here/readme-repos"
build_set "$here/readme-holdout-sources.tsv" "$here/readme-repos"
exit $status
