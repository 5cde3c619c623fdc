#!/usr/bin/env bash
# SWE-bench-style localization, side by side in one run (not a timed test):
#   1. ri-batch on the instances with revisions shared (one repository per mirror, each base
#      commit a revision: every blob read once);
#   2. ri-batch with each instance its own repository read whole (what a block per revision did);
#   3. the whole-file bm25s script (benches/swebench_bm25s.py) on the same instances and mirrors.
# Prints wall time, peak RSS and output bytes of 1 and 2 with their ratios, and file-level
# Acc@1/5/10, R@10, MRR@10 and R@100 of every ranking.
#
#   benches/swebench.sh [INSTANCES] [MIRRORS]
# Defaults: ../shared/data/swe-bench-lite-dev/dev.jsonl and ../.mirror; skipped when absent.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
instances="${1:-$root/../shared/data/swe-bench-lite-dev/dev.jsonl}"
mirrors="${2:-$root/../.mirror}"
if [ ! -f "$instances" ] || [ ! -d "$mirrors" ]; then
  echo "benches/swebench.sh: skipped: $instances or $mirrors is not here" >&2
  exit 0
fi
instances="$(cd "$(dirname "$instances")" && pwd)/$(basename "$instances")"
mirrors="$(cd "$mirrors" && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
bin="$target/release/ri-batch"
[ -x "$bin" ] || cargo build --release --locked --quiet
venv="${BM25S_VENV:-$target/bm25s-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "bm25s==0.3.16" "numpy==2.4.6" "scipy==1.17.1"
work="${SWEBENCH_WORK:-$target/swebench-bench}"
rm -rf "$work"
mkdir -p "$work/shared" "$work/whole"
"$bin" dataset import swebench "$instances" --repos "$mirrors" --out "$work/import" --split dev 2>"$work/rejected.txt"
variants='
[scan]
include = ["**/*.py"]
max_commits = 0

[retrieve]
top_k = 100

[index]
all_repos = false
stem = true

[[variants]]
name = "bm25-rank"
retriever = "bm25"
packer = "rank"
budgets = [2000, 8000]

[[variants]]
name = "bm25-compact"
retriever = "bm25"
packer = "compact"
budgets = [2000, 8000]

[[variants]]
name = "bm25-marginal"
retriever = "bm25"
packer = "marginal-gain"
budgets = [2000, 8000]

[[variants]]
name = "files-whole"
retriever = "bm25"
packer = "rank"
budget = 8000
files = "whole"

[[variants]]
name = "localize"
retriever = "bm25"
packer = "rank"
budgets = [2000, 8000]
files = "fused"
file_weight = 2.0
'
{
  echo "repos = \"$work/import/repos.tsv\""
  printf '[pipeline]\nname = "shared"\noutput_dir = "%s"\nquestions = "%s"\n' "$work/shared/out" "$work/import/questions.jsonl"
  echo "$variants"
} >"$work/shared/pipeline.toml"
# The same instances, each its own repository at its base commit, read whole.
python3 - "$work" <<'EOF'
import json, sys, pathlib
work = pathlib.Path(sys.argv[1])
git = dict(l.split("\t") for l in (work / "import/repos.tsv").read_text().splitlines()[1:])
qs = [json.loads(l) for l in (work / "import/questions.jsonl").read_text().splitlines()]
lines, out = ["name\tgit\trev"], []
for i, q in enumerate(qs):
    name = f"{q['repo']}_{i}"
    lines.append(f"{name}\t{git[q['repo']]}\t{q['rev']}")
    q = dict(q, repo=name)
    del q["rev"]
    out.append(json.dumps(q))
(work / "whole/repos.tsv").write_text("\n".join(lines) + "\n")
(work / "whole/questions.jsonl").write_text("\n".join(out) + "\n")
EOF
{
  echo "repos = \"$work/whole/repos.tsv\""
  printf '[pipeline]\nname = "whole"\noutput_dir = "%s"\nquestions = "%s"\n' "$work/whole/out" "$work/whole/questions.jsonl"
  echo "$variants"
} >"$work/whole/pipeline.toml"
measure() { # name: runs the pipeline under /usr/bin/time, records wall and peak RSS
  /usr/bin/time -f "%e %M" -o "$work/$1/time" "$bin" run "$work/$1/pipeline.toml" --quiet >/dev/null 2>"$work/$1/stderr" || true
}
measure shared
measure whole
"$venv/bin/python" benches/swebench_bm25s.py "$instances" "$mirrors" "$work/bm25s.json" >"$work/bm25s.txt"
python3 - "$work" "$bin" <<'EOF'
import json, subprocess, sys, pathlib
work, bin = pathlib.Path(sys.argv[1]), sys.argv[2]
def du(p):
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
rows = {}
for mode in ("shared", "whole"):
    wall, rss = (work / mode / "time").read_text().split()
    rows[mode] = (float(wall), int(rss) / 1024, du(work / mode / "out"))
    print(f"{mode:>7}: wall {float(wall):7.1f} s  peak RSS {int(rss)/1024:6.0f} MB  outputs {du(work / mode / 'out')/1e6:8.1f} MB")
s, w = rows["shared"], rows["whole"]
print(f"  whole / shared: wall {w[0]/s[0]:.1f}x  outputs {w[2]/s[2]:.1f}x")
q = ("SELECT variant, questions, round(acc1, 4) AS acc1, round(acc5, 4) AS acc5, round(acc10, 4) AS acc10, "
     "round(recall10, 4) AS r10, round(mrr10, 4) AS mrr10, round(recall100, 4) AS r100, "
     "round(packed_recall, 4) AS packed, round(mean_tokens) AS tokens FROM summary WHERE split = 'dev' ORDER BY variant")
for mode in ("shared", "whole"):
    print(f"\nri-batch ({mode}):")
    print(subprocess.run([bin, "sql", str(work / mode / "out"), q], capture_output=True, text=True).stdout)
print("bm25s whole files:", (work / "bm25s.txt").read_text().strip())
EOF
