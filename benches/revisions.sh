#!/usr/bin/env bash
# Cost against revision count on a real repository's history (not a timed test): N revisions of
# one repository (first-parent commits of its rev, evenly spaced over the last SPAN) read with
# their blobs shared, for each N in SHARED_NS, and read whole as one repository per revision for
# each N in WHOLE_NS. Per run: wall time, peak RSS, output bytes, distinct file versions kept (the
# blobs read: one revision's files plus every changed one).
#
#   benches/revisions.sh [GIT_DIR] [REV]
# Default: the sqlfluff mirror the workspace's fetch brings (../.mirror/sqlfluff+sqlfluff/repo)
# at HEAD; skipped when absent. SHARED_NS (default "1 10 30 100 150"), WHOLE_NS ("1 10 30 100"),
# SPAN (default 600 commits), INCLUDE (default "**/*.py").
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
repo="${1:-$root/../.mirror/sqlfluff+sqlfluff/repo}"
rev="${2:-HEAD}"
if [ ! -d "$repo" ]; then
  echo "benches/revisions.sh: skipped: no repository at $repo" >&2
  exit 0
fi
repo="$(cd "$repo" && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
bin="$target/release/ri-batch"
[ -x "$bin" ] || cargo build --release --locked --quiet
work="${REVISIONS_WORK:-$target/revisions-bench}"
rm -rf "$work"
mkdir -p "$work"
span="${SPAN:-600}"
include="${INCLUDE:-**/*.py}"
git --git-dir="$repo" rev-list --first-parent -n "$span" "$rev" >"$work/commits"
run() { # mode n: writes the pipeline and runs it under /usr/bin/time
  local mode=$1 n=$2 dir="$work/$1-$2"
  mkdir -p "$dir"
  python3 - "$work/commits" "$n" "$mode" "$repo" "$include" "$dir" <<'EOF'
import sys, pathlib
commits = pathlib.Path(sys.argv[1]).read_text().split()
n, mode, repo, include, d = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], pathlib.Path(sys.argv[6])
step = max(1, len(commits) // n)
picked = commits[::step][:n]
head = f'[pipeline]\nname = "{mode}"\noutput_dir = "{d}/out"\n\n'
scan = f'[scan]\ninclude = ["{include}"]\nmax_commits = 0\n\n[index]\nall_repos = false\n'
if mode == "shared":
    revs = ", ".join(f'"{c}"' for c in picked)
    body = f'[[repos]]\nname = "r"\ngit = "{repo}"\nrevs = [{revs}]\n\n'
else:
    body = "".join(f'[[repos]]\nname = "r{i}"\ngit = "{repo}"\nrev = "{c}"\n\n' for i, c in enumerate(picked))
(d / "pipeline.toml").write_text(head + body + scan)
EOF
  /usr/bin/time -f "%e %M" -o "$dir/time" "$bin" run "$dir/pipeline.toml" --quiet >/dev/null 2>"$dir/stderr"
  local files bytes
  files=$("$bin" sql "$dir/out" "SELECT count(*) || ' (' || round(sum(bytes) / 1e6, 1) || ' MB)' AS n FROM files" --format csv | sed -n 2p)
  bytes=$(du -sb "$dir/out" | cut -f1)
  read -r wall rss <"$dir/time"
  printf '%-7s N=%-4s wall %7.1f s  peak RSS %5d MB  outputs %8.1f MB  file versions %s\n' \
    "$mode" "$n" "$wall" "$((rss / 1024))" "$(echo "$bytes / 1000000" | bc -l)" "$files"
}
for n in ${SHARED_NS:-1 10 30 100 150}; do run shared "$n"; done
for n in ${WHOLE_NS:-1 10 30 100}; do run whole "$n"; done
