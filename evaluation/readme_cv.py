"""Compaction settings chosen by leave-one-repository-out cross-validation (issue 27).

    python evaluation/readme_cv.py BIN [PIPELINE ...] [--work DIR] [--json OUT] [--pair A B ...]

For each pipeline (default: pipelines/intellirag-readme.toml, intellirag.toml and readme-wide.toml) runs
one grid pipeline: the pipeline's own sections, IntelliRAG's packers, and ri-batch's compact
packer at every setting of the grid below (pool from BM25, rank fusion or score fusion, chunks compacted,
lean floor, dense unit weight, rank prior, novelty discount, continuation bonus), each at every budget. Then, per budget, on the dev split's
answerable questions:

- in-sample: the ri-batch setting with the best mean packed recall over all dev repositories;
- cross-validated: for each repository, the setting best on the *other* repositories, scored on
  that one; the mean over all dev questions, and its gap to the in-sample figure;
- the holdout: the setting chosen on all of dev, scored once on the holdout split;
- IntelliRAG's compaction at the same budget beside each, with the paired difference (95%
  bootstrap interval over questions) and wins / losses.

Ties go to the setting that uses fewer tokens. Tokens are those actually packed (a packer may
stop short of its budget). Needs pyarrow (the test venv has it).
"""

import argparse
import itertools
import json
import pathlib
import random
import re
import subprocess
import sys
from collections import defaultdict

import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGETS = [450, 700, 900, 1400]
# The grid: the pool's retriever, how many top chunks are cut into units, the lean floor (0 fills
# the budget; > 0 drops units scoring 0 or under that share of the best, so packs may stop short)
# and the weight of the question-unit cosine.
# The pool: BM25; reciprocal rank fusion of BM25 and dense at equal weights; or normalised score
# fusion with a small dense share (BM25's order barely moves, and chunks that share no term with
# the question can still enter the pool when BM25 runs short of them).
FUSED_DENSE = [0.1, 0.3]
RETRIEVERS = {"bm25": 'retriever = "bm25"', "hybrid": 'retriever = "hybrid"'} | {
    f"fused{w:g}": f'retriever = "hybrid"\nfusion = "score"\nweights = {{ bm25 = 1.0, dense = {w:g} }}'
    for w in FUSED_DENSE
}
TOP = [10, 20, 30]
LEAN = [0.0, 0.05, 0.2]
DENSE = [0.0, 0.5]
# The weight of the chunk's rank prior (IntelliRAG's is 0.2).
PRIOR = [0.0, 0.2]
# The novelty discount (`coverage`): 0 scores every unit on its own.
COVERAGE = [0.0, 0.5]
# The continuation bonus (`follow`) between a lead-in and the unit it introduces: 0 leaves both as they scored.
FOLLOW = [0.0, 0.3, 0.6]
GRID = list(itertools.product(RETRIEVERS, TOP, LEAN, DENSE, PRIOR, COVERAGE, FOLLOW))


def setting_name(ret, top, lean, dense, prior, coverage, follow):
    name = f"c-{ret}-t{top}-l{lean:g}-d{dense:g}-p{prior:g}"
    return name + (f"-c{coverage:g}" if coverage else "") + (f"-f{follow:g}" if follow else "")


def grid_pipeline(base: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    """The base pipeline up to its variants, with the grid's variants instead."""
    text = base.read_text()
    head = text.split("[[variants]]", 1)[0]
    name = re.search(r'^name = "([^"]+)"', head, re.M).group(1)
    head = re.sub(r'^root = "[^"]*"', f'root = "{ROOT}"', head, count=1, flags=re.M)
    head = head.replace("[pipeline]\n", f'[pipeline]\noutput_dir = "{work / name}"\n', 1)
    budgets = ", ".join(map(str, BUDGETS))
    out = [head.rstrip() + "\n"]
    out.append('\n[[variants]]\nname = "ir-bm25"\nretriever = "bm25"\npacker = "intellirag-bm25"\nbudget = 1400\n')
    for v, packer in [("ir-compact", "intellirag"), ("ir-lean", "intellirag-lean")]:
        out.append(f'\n[[variants]]\nname = "{v}"\nretriever = "bm25"\npacker = "{packer}"\nbudgets = [{budgets}]\n')
    for ret, top, lean, dense, prior, cov, follow in GRID:
        v = f'\n[[variants]]\nname = "{setting_name(ret, top, lean, dense, prior, cov, follow)}"\n{RETRIEVERS[ret]}\npacker = "compact"\n'
        v += f"compact_top_chunks = {top}\nlean = {lean}\nrank_prior = {prior}\ncoverage = {cov}\nfollow = {follow}\n"
        if dense:
            v += f"unit_dense = {dense}\n"
        out.append(v + f"budgets = [{budgets}]\n")
    path = work / f"{name}.grid.toml"
    path.write_text("".join(out))
    return path


def load(out_dir: pathlib.Path):
    """The evaluation table, read once: (variant, question_id) -> (repo, split, recall, tokens) for
    answerable questions, and question_id -> (repo, split, answerable) for every question."""
    rows, qs = {}, {}
    for r in pq.read_table(out_dir / "evaluate" / "evaluation").to_pylist():
        qs[r["question_id"]] = (r["repo"], r["split"], r["answerable"])
        if r["answerable"] and r["packed_recall"] is not None:
            rows[(r["variant"], r["question_id"])] = (r["repo"], r["split"], r["packed_recall"], r["tokens_used"])
    return rows, qs


def load_support(out_dir: pathlib.Path):
    """(variant, question_id) -> the pack's support."""
    t = pq.read_table(out_dir / "extract" / "extracts", columns=["variant", "question_id", "support"])
    return {(r["variant"], r["question_id"]): r["support"] for r in t.to_pylist()}


def split_questions(qs, support, variant, split):
    """The questions of one split that the variant packed (and so has a support for)."""
    return [q for q in qs if qs[q][1] == split and (variant, q) in support]


def refusal_rates(qs, support, variant, questions, t):
    ans = [q for q in questions if qs[q][2]]
    una = [q for q in questions if not qs[q][2]]
    refused = lambda q: support[(variant, q)] < t
    return mean([refused(q) for q in ans]), mean([refused(q) for q in una])


def refusal_cv(qs, support, variant, max_false_refusals=0.10):
    """A refusal threshold on support chosen per fold: the one refusing the most unanswerable
    training questions with at most `max_false_refusals` of the answerable ones refused."""
    dev, hold = split_questions(qs, support, variant, "dev"), split_questions(qs, support, variant, "holdout")

    def choose(train):
        cands = sorted({support[(variant, q)] for q in train} | {0.0})
        best = (0.0, 0.0)
        for t in cands + [c + 1e-9 for c in cands]:
            fr, tr = refusal_rates(qs, support, variant, train, t)
            if fr <= max_false_refusals and (tr, -t) > (best[1], -best[0]):
                best = (t, tr)
        return best[0]

    repos = sorted({qs[q][0] for q in dev})
    refused = {}
    for r in repos:
        t = choose([q for q in dev if qs[q][0] != r])
        for q in dev:
            if qs[q][0] == r:
                refused[q] = support[(variant, q)] < t
    ans = [q for q in dev if qs[q][2]]
    una = [q for q in dev if not qs[q][2]]
    t_all = choose(dev)
    fr_in, tr_in = refusal_rates(qs, support, variant, dev, t_all)
    fr_ho, tr_ho = refusal_rates(qs, support, variant, hold, t_all)
    return {
        "variant": variant,
        "threshold": t_all,
        "in_sample": (fr_in, tr_in),
        "cv": (mean([refused[q] for q in ans]), mean([refused[q] for q in una])),
        "holdout": (fr_ho, tr_ho),
        "n": (len(ans), len(una), sum(qs[q][2] for q in hold), sum(not qs[q][2] for q in hold)),
    }


def refusal_curve(qs, support, variant, thresholds=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)):
    """Per split, the share of answerable and of unanswerable questions refused at each support
    threshold: the trade-off a threshold buys on this corpus."""
    return {
        split: [(t, *refusal_rates(qs, support, variant, split_questions(qs, support, variant, split), t)) for t in thresholds]
        for split in ("dev", "holdout")
    }


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def interval(diffs, seed=7, n=2000):
    rng = random.Random(seed)
    k = len(diffs)
    means = sorted(mean([diffs[rng.randrange(k)] for _ in range(k)]) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def analyse(rows, info, budget):
    settings = [setting_name(*s) for s in GRID]
    qs = sorted({q for (_, q) in rows})
    dev = [q for q in qs if info[q][1] == "dev"]
    hold = [q for q in qs if info[q][1] == "holdout"]
    repos = sorted({info[q][0] for q in dev})

    def rec(v, q):
        return rows[(f"{v}@{budget}", q)][2]

    def tok(v, q):
        return rows[(f"{v}@{budget}", q)][3]

    def best(questions):
        return max(settings, key=lambda s: (mean([rec(s, q) for q in questions]), -mean([tok(s, q) for q in questions]), s))

    chosen_all = best(dev)
    cv = {}
    picks = {}
    for r in repos:
        train = [q for q in dev if info[q][0] != r]
        s = best(train)
        picks[r] = s
        for q in dev:
            if info[q][0] == r:
                cv[q] = (rec(s, q), tok(s, q))
    ir = "ir-compact"
    d_cv = [cv[q][0] - rec(ir, q) for q in dev]
    d_ho = [rec(chosen_all, q) - rec(ir, q) for q in hold]
    return {
        "budget": budget,
        "n_dev": len(dev),
        "n_holdout": len(hold),
        "chosen": chosen_all,
        "in_sample": mean([rec(chosen_all, q) for q in dev]),
        "in_sample_tokens": mean([tok(chosen_all, q) for q in dev]),
        "cv": mean([cv[q][0] for q in dev]),
        "cv_tokens": mean([cv[q][1] for q in dev]),
        "cv_picks": picks,
        "ir_dev": mean([rec(ir, q) for q in dev]),
        "ir_dev_tokens": mean([tok(ir, q) for q in dev]),
        "cv_minus_ir": mean(d_cv),
        "cv_minus_ir_ci": interval(d_cv),
        "cv_wins_losses": (sum(d > 0 for d in d_cv), sum(d < 0 for d in d_cv)),
        "holdout": mean([rec(chosen_all, q) for q in hold]),
        "holdout_tokens": mean([tok(chosen_all, q) for q in hold]),
        "ir_holdout": mean([rec(ir, q) for q in hold]),
        "ir_holdout_tokens": mean([tok(ir, q) for q in hold]),
        "holdout_minus_ir_ci": interval(d_ho) if hold else None,
        "holdout_wins_losses": (sum(d > 0 for d in d_ho), sum(d < 0 for d in d_ho)),
    }


def joint(all_rows, all_qs):
    """One setting for every pipeline and budget, chosen leave-one-repository-out over all of
    them (the shipped pipelines' variant): per pipeline and budget, its cross-validated and
    holdout recall and tokens."""
    settings = [setting_name(*s) for s in GRID]
    items = []  # (pipeline, budget, question, repo, split)
    for name, rows in all_rows.items():
        qs = sorted({q for (_, q) in rows})
        info = all_qs[name]
        for b in BUDGETS:
            items += [(name, b, q, info[q][0], info[q][1]) for q in qs]

    def rec(s, it):
        return all_rows[it[0]][(f"{s}@{it[1]}", it[2])][2]

    def tok(s, it):
        return all_rows[it[0]][(f"{s}@{it[1]}", it[2])][3]

    def best(train):
        return max(settings, key=lambda s: (mean([rec(s, i) for i in train]), -mean([tok(s, i) for i in train]), s))

    dev = [i for i in items if i[4] == "dev"]
    repos = sorted({i[3] for i in dev})
    cv = {}
    picks = set()
    for r in repos:
        s = best([i for i in dev if i[3] != r])
        picks.add(s)
        for i in dev:
            if i[3] == r:
                cv[i] = (rec(s, i), tok(s, i))
    chosen = best(dev)
    out = {"chosen": chosen, "fold_picks": sorted(picks), "cells": []}
    for name in all_rows:
        for b in BUDGETS:
            d = [i for i in dev if i[0] == name and i[1] == b]
            h = [i for i in items if i[0] == name and i[1] == b and i[4] == "holdout"]
            out["cells"].append({
                "pipeline": name, "budget": b,
                "in_sample": mean([rec(chosen, i) for i in d]),
                "cv": mean([cv[i][0] for i in d]), "cv_tokens": mean([cv[i][1] for i in d]),
                "holdout": mean([rec(chosen, i) for i in h]), "holdout_tokens": mean([tok(chosen, i) for i in h]),
                "ir_dev": mean([rec("ir-compact", i) for i in d]), "ir_holdout": mean([rec("ir-compact", i) for i in h]),
            })
    return out


def paired(all_rows, a, b):
    """Setting `a` against `b`, question by question over every pipeline and budget: per split,
    the questions `a` packs more of and those it packs less of."""
    out = {"dev": [0, 0], "holdout": [0, 0]}
    for rows in all_rows.values():
        for (v, q), (_, split, rec_a, _) in rows.items():
            if not v.startswith(f"{a}@"):
                continue
            rec_b = rows[(b + v[len(a):], q)][2]
            out[split][0] += rec_a > rec_b
            out[split][1] += rec_a < rec_b
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("pipelines", nargs="*")
    ap.add_argument("--work", default=str(ROOT / "target/readme-cv"))
    ap.add_argument("--json")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="also print setting A against setting B, wins / losses per split (repeatable)")
    a = ap.parse_args()
    work = pathlib.Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    bases = a.pipelines or [ROOT / f"pipelines/{p}.toml" for p in ("intellirag-readme", "intellirag", "readme-wide")]
    report = {}
    all_rows, all_qs = {}, {}
    for base in map(pathlib.Path, bases):
        grid = grid_pipeline(base.resolve(), work)
        subprocess.run([a.bin, "run", str(grid), "--quiet"], check=True, stdout=subprocess.DEVNULL)
        out = work / re.search(r'^name = "([^"]+)"', grid.read_text(), re.M).group(1)
        rows, qs = load(out)
        all_rows[base.name], all_qs[base.name] = rows, qs
        results = [analyse(rows, qs, b) for b in BUDGETS]
        report[base.name] = results
        print(f"\n## {base.name}: dev answerable {results[0]['n_dev']}, holdout {results[0]['n_holdout']}")
        print("| budget | in-sample (setting) | CV (gap) | IntelliRAG dev | CV − IntelliRAG [95% CI] w/l | holdout | IntelliRAG holdout | w/l |")
        print("|---|---|---|---|---|---|---|---|")
        for r in results:
            lo, hi = r["cv_minus_ir_ci"]
            print(
                f"| {r['budget']} | {100*r['in_sample']:.1f}% @{r['in_sample_tokens']:.0f} ({r['chosen']}) "
                f"| {100*r['cv']:.1f}% @{r['cv_tokens']:.0f} ({100*(r['in_sample']-r['cv']):+.1f}) "
                f"| {100*r['ir_dev']:.1f}% @{r['ir_dev_tokens']:.0f} "
                f"| {100*r['cv_minus_ir']:+.1f} [{100*lo:+.1f}, {100*hi:+.1f}] {r['cv_wins_losses'][0]}/{r['cv_wins_losses'][1]} "
                f"| {100*r['holdout']:.1f}% @{r['holdout_tokens']:.0f} | {100*r['ir_holdout']:.1f}% @{r['ir_holdout_tokens']:.0f} "
                f"| {r['holdout_wins_losses'][0]}/{r['holdout_wins_losses'][1]} |"
            )
        for r in results:
            picks = sorted(set(r["cv_picks"].values()))
            print(f"- @{r['budget']}: settings chosen across folds: {', '.join(picks)}")
        support = load_support(out)
        print("\n| refusal on support (≤ 10% answerable refused on the folds' training repos) | threshold | answerable refused (in-sample / CV / holdout) | unanswerable refused (in-sample / CV / holdout) |")
        print("|---|---|---|---|")
        refusals = []
        for v in ["ir-compact@900", f"{results[2]['chosen']}@900"]:
            f = refusal_cv(qs, support, v)
            refusals.append(f)
            print(
                f"| {v} | {f['threshold']:.3f} | {100*f['in_sample'][0]:.0f}% / {100*f['cv'][0]:.0f}% / {100*f['holdout'][0]:.0f}% "
                f"| {100*f['in_sample'][1]:.0f}% / {100*f['cv'][1]:.0f}% / {100*f['holdout'][1]:.0f}% |"
            )
        report[base.name + ":refusals"] = refusals
        v = f"{results[2]['chosen']}@900"
        curve = refusal_curve(qs, support, v)
        report[base.name + ":refusal_curve"] = curve
        print(f"\n| support threshold ({v}) | " + " | ".join(f"{t:g}" for t, _, _ in curve["dev"]) + " |")
        print("|---|" + "---|" * len(curve["dev"]))
        for split in ("dev", "holdout"):
            print(f"| {split}: answerable / unanswerable refused | " + " | ".join(f"{100*a:.0f} / {100*u:.0f}" for _, a, u in curve[split]) + " |")
    if len(all_rows) > 1:
        j = joint(all_rows, all_qs)
        report["joint"] = j
        print(f"\n## One setting for every pipeline and budget: {j['chosen']} (folds chose {', '.join(j['fold_picks'])})")
        print("| pipeline | budget | in-sample | CV @tokens | holdout @tokens | IntelliRAG dev / holdout |")
        print("|---|---|---|---|---|---|")
        for c in j["cells"]:
            print(
                f"| {c['pipeline']} | {c['budget']} | {100*c['in_sample']:.1f}% | {100*c['cv']:.1f}% @{c['cv_tokens']:.0f} "
                f"| {100*c['holdout']:.1f}% @{c['holdout_tokens']:.0f} | {100*c['ir_dev']:.1f}% / {100*c['ir_holdout']:.1f}% |"
            )
    for x, y in a.pair:
        w = paired(all_rows, x, y)
        report[f"pair:{x}:{y}"] = w
        print(f"\n{x} against {y}, questions won / lost over every pipeline and budget: "
              f"dev {w['dev'][0]} / {w['dev'][1]}, holdout {w['holdout'][0]} / {w['holdout'][1]}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
