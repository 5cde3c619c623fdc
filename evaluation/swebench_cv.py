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
import os
import random
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
METHOD = ["lines"]
if os.environ.get("CV_GRID") == "chunkers":
    # Line against syntax chunks (issue 30): chunk size chosen within each method, BM25 as chosen.
    CHUNK, B, STEM, METHOD = [200, 500, 1000], [0.75], [True], ["lines", "syntax"]


def pipeline(name, chunk, b, stem, method="lines"):
    v = [
        f'[[variants]]\nname = "fused"\nretriever = "bm25"\npacker = "rank"\nbudget = 8000\nfiles = "fused"\n',
        f'[[variants]]\nname = "whole"\nretriever = "bm25"\npacker = "rank"\nbudget = 8000\nfiles = "whole"\n',
        f'[[variants]]\nname = "chunks"\nretriever = "bm25"\npacker = "rank"\nbudgets = [2000, 8000]\n',
        f'[[variants]]\nname = "compact"\nretriever = "bm25"\npacker = "compact"\nbudgets = [2000, 8000]\n',
    ]
    for w in WEIGHTS:
        v.append(
            f'[[variants]]\nname = "prior{w}"\nretriever = "bm25"\npacker = "rank"\nbudgets = [2000, 8000]\nfiles = "fused"\nfile_weight = {w}\n'
        )
    return (
        f'[pipeline]\nname = "{name}"\noutput_dir = "{WORK / name / "out"}"\n\n'
        f'[import]\nformat = "swebench"\nsource = "{INSTANCES}"\nrepos = "{MIRRORS}"\nsplit = "dev"\n\n'
        f'[scan]\ninclude = ["**/*.py"]\nmax_commits = 0\n\n[chunk]\nmax_tokens = {chunk}\nmethod = "{method}"\n\n'
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
    for method, chunk, b, stem in itertools.product(METHOD, CHUNK, B, STEM):
        name = f"c{chunk}-b{b}-s{int(stem)}" + ("" if method == "lines" else f"-{method}")
        d = WORK / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "pipeline.toml").write_text(pipeline(name, chunk, b, stem, method))
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
    if len(METHOD) > 1:
        paired(per, repo_of, repos, metrics)
        return

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


def paired(per, repo_of, repos, metrics):
    """Each method with its own settings chosen leave-one-repository-out; per metric, both
    cross-validated means and the paired difference (syntax - lines) with a 95% bootstrap
    interval over questions, and wins/losses."""
    allq = sorted(repo_of)

    def mean(rows, col, qs):
        xs = [rows[q][col] for q in qs if q in rows and rows[q][col] is not None]
        return sum(xs) / len(xs) if xs else 0.0

    for label, (col, ok) in metrics.items():
        scores = {}
        for method in METHOD:
            def mine(name):
                others = [m for m in METHOD if m != "lines"]
                if method == "lines":
                    return not any(name.endswith(f"-{m}") for m in others)
                return name.endswith(f"-{method}")
            cands = [k for k in per if ok(k[1]) and mine(k[0])]
            got = {}
            for held in repos:
                train = [q for q in allq if repo_of[q] != held]
                pick = max(cands, key=lambda k: mean(per[k], col, train))
                for q in allq:
                    if repo_of[q] == held and q in per[pick] and per[pick][q][col] is not None:
                        got[q] = per[pick][q][col]
            best = max(cands, key=lambda k: mean(per[k], col, allq))
            scores[method] = (got, best, mean(per[best], col, allq))
        a, b = scores["lines"][0], scores["syntax"][0]
        qs = [q for q in allq if q in a and q in b]
        d = [b[q] - a[q] for q in qs]
        rng = random.Random(7)
        boots = sorted(sum(rng.choice(d) for _ in d) / len(d) for _ in range(2000))
        lo, hi = boots[50], boots[1949]
        wins = sum(x > 1e-9 for x in d)
        losses = sum(x < -1e-9 for x in d)
        cv = {m: sum(s[0][q] for q in qs) / len(qs) for m, s in scores.items()}
        print(
            f"{label:22} lines CV {cv['lines']:.3f} (in-sample {scores['lines'][2]:.3f}, {scores['lines'][1][0]}/{scores['lines'][1][1]})  "
            f"syntax CV {cv['syntax']:.3f} (in-sample {scores['syntax'][2]:.3f}, {scores['syntax'][1][0]}/{scores['syntax'][1][1]})  "
            f"syntax - lines {sum(d) / len(d):+.3f} [{lo:+.3f}, {hi:+.3f}] wins/losses {wins}/{losses} of {len(d)}"
        )


if __name__ == "__main__":
    main()
