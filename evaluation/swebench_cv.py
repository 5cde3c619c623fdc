"""Settings for SWE-bench-style localization chosen by leave-one-repository-out cross-validation.

    python evaluation/swebench_cv.py BIN [INSTANCES] [MIRRORS] [WORK]

Runs one pipeline per (chunk size, BM25 b, stemming) setting over the instances (default: the
SWE-bench Lite dev split in ../shared and the mirrors in ../.mirror), each with file-ranking and
file-prior variants, then for each metric (file MRR@10, file Acc@10, packed evidence recall at
2,000 and 8,000 tokens) chooses the setting on all repositories but one and scores it on the one
left out. Prints, per metric, the setting chosen on everything (in-sample), its in-sample mean,
the cross-validated mean, and the gap between them; a setting is reported only with both.
Needs pyarrow (the test venv has it).
"""

import glob
import itertools
import json
import pathlib
import subprocess
import sys

import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = sys.argv[1]
INSTANCES = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / "../shared/data/swe-bench-lite-dev/dev.jsonl").resolve()
MIRRORS = pathlib.Path(sys.argv[3] if len(sys.argv) > 3 else ROOT / "../.mirror").resolve()
WORK = pathlib.Path(sys.argv[4] if len(sys.argv) > 4 else ROOT / "target/swebench-cv").resolve()

CHUNK = [200, 500]
B = [0.4, 0.75]
STEM = [False, True]
WEIGHTS = [0.5, 1.0, 2.0]


def pipeline(name, chunk, b, stem):
    v = [
        f'[[variants]]\nname = "fused"\nretriever = "bm25"\npacker = "rank"\nbudget = 8000\nfiles = "fused"\n',
        f'[[variants]]\nname = "whole"\nretriever = "bm25"\npacker = "rank"\nbudget = 8000\nfiles = "whole"\n',
        f'[[variants]]\nname = "chunks"\nretriever = "bm25"\npacker = "rank"\nbudgets = [2000, 8000]\n',
    ]
    for w in WEIGHTS:
        v.append(
            f'[[variants]]\nname = "prior{w}"\nretriever = "bm25"\npacker = "rank"\nbudgets = [2000, 8000]\nfiles = "fused"\nfile_weight = {w}\n'
        )
    return (
        f'[pipeline]\nname = "{name}"\noutput_dir = "{WORK / name / "out"}"\n\n'
        f'[import]\nformat = "swebench"\nsource = "{INSTANCES}"\nrepos = "{MIRRORS}"\nsplit = "dev"\n\n'
        f'[scan]\ninclude = ["**/*.py"]\nmax_commits = 0\n\n[chunk]\nmax_tokens = {chunk}\n\n'
        f'[index]\nb = {b}\nstem = {"true" if stem else "false"}\n\n[retrieve]\ntop_k = 100\n\n'
        + "\n".join(v)
    )


def table(out, name):
    files = [
        f"{out}/{f['path']}"
        for m in glob.glob(f"{out}/*/manifest.json")
        for f in json.load(open(m))["files"]
        if f["table"] == name
    ]
    rows = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def main():
    if not INSTANCES.is_file() or not MIRRORS.is_dir():
        print(f"skipped: {INSTANCES} or {MIRRORS} is not here")
        return
    per = {}  # (setting, variant) -> {question: row}
    repo_of = {}
    for chunk, b, stem in itertools.product(CHUNK, B, STEM):
        name = f"c{chunk}-b{b}-s{int(stem)}"
        d = WORK / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "pipeline.toml").write_text(pipeline(name, chunk, b, stem))
        subprocess.run([BIN, "run", str(d / "pipeline.toml"), "--quiet"], capture_output=True)
        for r in table(d / "out", "evaluation"):
            per.setdefault((name, r["variant"]), {})[r["question_id"]] = r
            repo_of[r["question_id"]] = r["repo"].split("@")[0]
    repos = sorted(set(repo_of.values()))
    metrics = {
        "file MRR@10": ("mrr10", lambda v: v in ("fused", "whole") or v.startswith("prior") and v.endswith("@8000")),
        "file Acc@10": ("acc10", lambda v: v in ("fused", "whole") or v.startswith("prior") and v.endswith("@8000")),
        "packed recall @2000": ("packed_recall", lambda v: v.endswith("@2000")),
        "packed recall @8000": ("packed_recall", lambda v: v.endswith("@8000")),
    }

    def mean(rows, col, qs):
        xs = [rows[q][col] for q in qs if q in rows and rows[q][col] is not None]
        return sum(xs) / len(xs) if xs else 0.0

    for label, (col, ok) in metrics.items():
        cands = [k for k in per if ok(k[1])]
        allq = list(repo_of)
        best = max(cands, key=lambda k: mean(per[k], col, allq))
        in_sample = mean(per[best], col, allq)
        cv, n = 0.0, 0
        for held in repos:
            train = [q for q in allq if repo_of[q] != held]
            test = [q for q in allq if repo_of[q] == held]
            pick = max(cands, key=lambda k: mean(per[k], col, train))
            cv += mean(per[pick], col, test) * len(test)
            n += len(test)
        cv /= n
        base = ("c500-b0.75-s0", "chunks@8000" if "packed" not in label or "8000" in label else "chunks@2000")
        default = mean(per[base], col, allq) if base in per else float("nan")
        print(
            f"{label:22} chosen {best[0]}/{best[1]:12} in-sample {in_sample:.3f}  cross-validated {cv:.3f}  "
            f"gap {in_sample - cv:+.3f}  (defaults, best chunk: {default:.3f})"
        )


if __name__ == "__main__":
    main()
