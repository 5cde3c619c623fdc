"""The shipped README setting scored once on READMEs nobody tuned on (issue 27).

    python evaluation/readme_holdout.py BIN [PIPELINE] [--work DIR]

Runs PIPELINE (default pipelines/readme-holdout.toml: eight registry READMEs whose questions were
written after every shipped setting had been chosen) with BIN into DIR, then prints, per budget,
on the answerable questions:

- packed recall and tokens actually packed of the shipped `fused-compact-dense`, IntelliRAG's
  compaction (`ir-compact`) and ri-batch's plain compaction (`bm25-compact`);
- a 95% interval for the shipped recall by resampling whole repositories (the questions of one
  README are not independent), and the paired difference to IntelliRAG's compaction with its 95%
  bootstrap interval over questions and wins / losses;
- the shipped recall per repository;

and, at 900 tokens, the share of answerable and of unanswerable questions a support threshold
would refuse. Nothing is chosen here: this script only reads. Needs pyarrow (the test venv has it).
"""

import argparse
import pathlib
import random
import subprocess
import sys
from collections import defaultdict

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from readme_cv import interval, load, load_support, mean, refusal_rates  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGETS = [450, 700, 900, 1400, 2800]
SHIPPED, SEED, PLAIN = "fused-compact-dense", "ir-compact", "bm25-compact"
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


def at(variant, budget):
    """The variant's name at a budget (1,400 is the pipelines' plain `budget`)."""
    return variant if budget == 1400 else f"{variant}@{budget}"


def cluster_interval(by_repo, seed=11, n=2000):
    """95% interval of the mean over questions, resampling whole repositories."""
    rng = random.Random(seed)
    repos = list(by_repo)
    means = []
    for _ in range(n):
        pick = [by_repo[repos[rng.randrange(len(repos))]] for _ in repos]
        means.append(mean([x for xs in pick for x in xs]))
    means.sort()
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def report(rows, qs, support):
    answerable = sorted(q for q, (_, _, a) in qs.items() if a)
    repos = sorted({qs[q][0] for q in answerable})
    print(f"{len(answerable)} answerable and {len(qs) - len(answerable)} unanswerable questions, {len(repos)} repositories")
    print("budget | shipped (repository 95% CI), tokens | IntelliRAG compaction, tokens | plain compaction | shipped − IntelliRAG [95% CI] w/l")
    for b in BUDGETS:
        rec = lambda v, q: rows[(at(v, b), q)][2]
        tok = lambda v: max(rows[(at(v, b), q)][3] for q in answerable)
        ours = [rec(SHIPPED, q) for q in answerable]
        seed = [rec(SEED, q) for q in answerable]
        plain = [rec(PLAIN, q) for q in answerable]
        by_repo = defaultdict(list)
        for q, x in zip(answerable, ours):
            by_repo[qs[q][0]].append(x)
        lo, hi = cluster_interval(by_repo)
        d = [a - s for a, s in zip(ours, seed)]
        dlo, dhi = interval(d)
        wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
        print(
            f"{b} | {100 * mean(ours):.1f}% [{100 * lo:.1f}, {100 * hi:.1f}], ≤ {tok(SHIPPED)}"
            f" | {100 * mean(seed):.1f}%, ≤ {tok(SEED)} | {100 * mean(plain):.1f}%"
            f" | {100 * mean(d):+.1f} [{100 * dlo:+.1f}, {100 * dhi:+.1f}] {wins}/{losses}"
        )
    print("\nshipped recall per repository, " + " / ".join(str(b) for b in BUDGETS) + " tokens:")
    for r in repos:
        mine = [q for q in answerable if qs[q][0] == r]
        cells = " / ".join(f"{100 * mean([rows[(at(SHIPPED, b), q)][2] for q in mine]):.0f}" for b in BUDGETS)
        print(f"  {r} ({len(mine)}): {cells}")
    variant = at(SHIPPED, 900)
    questions = [q for q in qs if (variant, q) in support]
    print(f"\nrefused by a support threshold at 900 tokens (% answerable / % unanswerable):")
    print("  " + " | ".join(f"{t:g}: {100 * a:.0f} / {100 * u:.0f}" for t, (a, u) in ((t, refusal_rates(qs, support, variant, questions, t)) for t in THRESHOLDS)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin")
    ap.add_argument("pipeline", nargs="?", default=str(ROOT / "pipelines" / "readme-holdout.toml"))
    ap.add_argument("--work", default=str(ROOT / "outputs" / "readme-holdout-check"))
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    text = pathlib.Path(a.pipeline).read_text().replace('root = ".."', f'root = "{ROOT}"\noutput_dir = "{work / "out"}"')
    text = text.replace('model = "models/', f'model = "{ROOT}/models/')
    p = work / "pipeline.toml"
    p.write_text(text)
    subprocess.run([a.bin, "run", str(p), "--quiet"], check=True)
    rows, qs = load(work / "out")
    report(rows, qs, load_support(work / "out"))


if __name__ == "__main__":
    main()
