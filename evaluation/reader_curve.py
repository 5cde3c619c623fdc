"""The reader's refusal curve (issue 49): refusal probability vs `support`, dev and holdout apart.

    python evaluation/reader_curve.py BIN [PIPELINE] [--work DIR] [--max-answerable-refused 0.10]

Runs PIPELINE (default pipelines/reader.toml) once more with `refuse_at = 1` into DIR (its readings
come from the pipeline's reading cache, so nothing is read again when the pipeline has run), so
that every reading's own selection is rendered and classified; then, per split and per variant
with refusal probabilities:

- AUC of P(NONE) for telling unanswerable from answerable questions, beside the AUC of
  1 - support on the same packs (95% bootstrap intervals over questions);
- the threshold chosen on dev: the one refusing the most unanswerable questions while refusing at
  most --max-answerable-refused of the answerable ones (ties: the lower threshold); then, at that
  threshold on each split: unanswerable refused, answerable refused, and of the answered
  answerable questions those whose selection holds all their evidence (full) or some (partial),
  with 95% Wilson intervals;
- selection by rule (`selection`: the greedy list or the label likeliest to be named first, then
  by `select_mass` the next likeliest until the selection holds that much of the first-ID
  probability): for each rule and each mass of --masses, the
  pipeline is rerun from the same readings (nothing is read again), and at the chosen threshold
  each split's answered answerable questions holding all their evidence, beside how many labels
  and source lines were selected of how many packed (the other selectors' beside, for scale), and
  the smallest mass whose dev share reaches --want-full, if one does.
Needs pyarrow (the test venv has it).
"""

import argparse
import math
import pathlib
import random
import re
import subprocess
import sys

import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parent.parent


def wilson(k, n):
    if n == 0:
        return (float("nan"), float("nan"))
    z, p = 1.96, k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (c - h, c + h)


def auc(pos, neg):
    """P(a positive scores above a negative), ties counted half."""
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def auc_ci(pos, neg, rounds=2000, seed=7):
    rng = random.Random(seed)
    xs = []
    for _ in range(rounds):
        a = [rng.choice(pos) for _ in pos]
        b = [rng.choice(neg) for _ in neg]
        xs.append(auc(a, b))
    xs.sort()
    return xs[int(0.025 * rounds)], xs[int(0.975 * rounds) - 1]


def table(out, name):
    return pq.read_table(pathlib.Path(out) / name).to_pylist()  # a stage folder / table


def at(rows, t):
    """Counts at threshold t over rows (answerable, p, outcome)."""
    un = [r for r in rows if not r["answerable"]]
    an = [r for r in rows if r["answerable"]]
    un_ref = sum(r["p"] >= t for r in un)
    an_ref = sum(r["p"] >= t for r in an)
    answered = [r for r in an if r["p"] < t]
    full = sum(r["outcome"] == "full" for r in answered)
    some = sum(r["outcome"] in ("full", "partial") for r in answered)
    return dict(un=len(un), un_ref=un_ref, an=len(an), an_ref=an_ref, answered=len(answered), full=full, some=some)


def pct(k, n):
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {100 * k / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]" if n else "0/0"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("pipeline", nargs="?", default=str(ROOT / "pipelines/reader.toml"))
    ap.add_argument("--work", default=str(ROOT / "outputs/reader-curve"))
    ap.add_argument("--max-answerable-refused", type=float, default=0.10)
    ap.add_argument("--masses", default="0,0.5,0.7,0.8,0.9,0.95,0.99")
    ap.add_argument("--want-full", type=float, default=0.90)
    ap.add_argument("--refuse-at", type=float, help="a threshold chosen elsewhere (else chosen on dev)")
    a = ap.parse_args()
    src = pathlib.Path(a.pipeline).resolve()
    text = src.read_text()
    text = re.sub(r"(?m)^refuse_at = .*$", "refuse_at = 1.0", text)
    text = re.sub(r'(?m)^root = "(.*)"$', lambda m: f'root = "{(src.parent / m.group(1)).resolve()}"\noutput_dir = "{a.work}"', text)
    # The same reading cache as the pipeline's own runs.
    if "cache_dir" not in text.split("[extract.reader]")[1].split("[")[0]:
        cache = (src.parent / re.search(r'(?m)^root = "(.*)"$', src.read_text()).group(1)).resolve() / "outputs/.reader-cache"
        text = text.replace("[extract.reader]\n", f'[extract.reader]\ncache_dir = "{cache}"\n')
    text = re.sub(r"(?m)^(select_mass|selection) = .*\n", "", text)
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    p = work.parent / (work.name + ".toml")

    def run(how, mass):
        rule = f'selection = "{how}"\nselect_mass = {mass}\n'
        p.write_text(text.replace("[extract.reader]\n", f"[extract.reader]\n{rule}"))
        subprocess.run([a.bin, "run", "--quiet", str(p)], check=True, stdout=subprocess.DEVNULL)
        return table(work, "extract/extracts")

    masses = [float(m) for m in a.masses.split(",")]
    rules = [(how, m) for how in ("greedy", "likeliest") for m in masses]
    by_mass = {r: run(*r) for r in rules}

    questions = {q["question_id"]: q for q in table(work, "questions/questions")}
    rows = by_mass[rules[0]]
    variants = sorted({r["variant"] for r in rows if r["refusal_prob"] is not None})
    support = {}
    for r in rows:
        support.setdefault(r["question_id"], {})[r["variant"]] = r["support"]
    for v in variants:
        by_split = {}
        for r in rows:
            if r["variant"] != v:
                continue
            q = questions[r["question_id"]]
            p = 1.0 if r["refusal_prob"] is None else r["refusal_prob"]
            by_split.setdefault(q["split"], []).append(
                dict(answerable=q["answerable"], p=p, s=r["support"], outcome=r["outcome"]))
        print(f"## {v}")
        for split in ("dev", "holdout"):
            rs = by_split.get(split, [])
            pos = [r["p"] for r in rs if not r["answerable"]]
            neg = [r["p"] for r in rs if r["answerable"]]
            spos = [1 - r["s"] for r in rs if not r["answerable"]]
            sneg = [1 - r["s"] for r in rs if r["answerable"]]
            lo, hi = auc_ci(pos, neg)
            slo, shi = auc_ci(spos, sneg)
            print(f"{split}: {len(neg)} answerable, {len(pos)} unanswerable; AUC of P(NONE) {auc(pos, neg):.3f} "
                  f"[{lo:.3f}, {hi:.3f}]; of 1 - support {auc(spos, sneg):.3f} [{slo:.3f}, {shi:.3f}]")
        dev = by_split.get("dev", [])
        grid = [round(0.01 * i, 2) for i in range(1, 100)]
        ok = [t for t in grid if at(dev, t)["an_ref"] <= a.max_answerable_refused * at(dev, t)["an"]]
        best = max(ok, key=lambda t: (at(dev, t)["un_ref"], -t)) if ok else 0.5
        if a.refuse_at is not None:
            best = a.refuse_at
            print(f"threshold chosen elsewhere: refuse at P(NONE) >= {best}")
        else:
            print(f"threshold chosen on dev (answerable refused <= {a.max_answerable_refused:.0%}): refuse at P(NONE) >= {best}")
        for t, label in ((0.5, "greedy (0.5)"), (best, f"chosen ({best})")):
            for split in ("dev", "holdout"):
                c = at(by_split.get(split, []), t)
                print(f"  {label:>14} {split:>7}: unanswerable refused {pct(c['un_ref'], c['un'])}; answerable refused "
                      f"{pct(c['an_ref'], c['an'])}; answered holding all evidence {pct(c['full'], c['answered'])}, "
                      f"some {pct(c['some'], c['answered'])}")
        print("curve on dev (threshold: unanswerable refused / answerable refused):")
        print("  " + "; ".join(f"{t}: {at(dev, t)['un_ref']}/{at(dev, t)['an_ref']}" for t in (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)))
        selection_by_mass(v, by_mass, questions, best, a.want_full)


def held(answered):
    """Of answered answerable extract rows: how many hold all their evidence, and the labels and
    rendered source lines selected per row."""
    n = max(len(answered), 1)
    full = sum(r["outcome"] == "full" for r in answered)
    labels = sum(len(r["accepted_ids"]) for r in answered) / n
    lines = sum(sum(1 for ln in r["rendered"].splitlines() if ln) for r in answered) / n
    return full, labels, lines


def selection_by_mass(v, by_mass, questions, t, want):
    """Per mass and split, at refusal threshold t: answered answerable questions holding all their
    evidence, and the labels and rendered source lines selected per answered question against the
    labels packed."""
    print(f"selection by mass at P(NONE) < {t} (answered answerable: all evidence held; labels selected / packed; "
          f"source lines rendered):")
    share = {}
    for m, rows in by_mass.items():
        for split in ("dev", "holdout"):
            answered = [r for r in rows if r["variant"] == v and questions[r["question_id"]]["answerable"]
                        and questions[r["question_id"]]["split"] == split and r["refusal_prob"] is not None
                        and r["refusal_prob"] < t]
            n = len(answered)
            full, labels, lines = held(answered)
            share[(m, split)] = full / n if n else 0.0
            packed = sum(len(r["id_probs"] or []) for r in answered) / max(n, 1)
            if n:
                print(f"  {m[0]:>9} mass {m[1]:<5} {split:>7}: {pct(full, n)}; labels {labels:.2f} / {packed:.2f}; "
                      f"lines {lines:.1f}")
    for how in ("greedy", "likeliest"):
        ms = sorted(m for (h, m) in by_mass if h == how)
        ok = [m for m in ms if share[((how, m), "dev")] >= want]
        if ok:
            print(f"{how}: smallest mass reaching {want:.0%} on dev: {ok[0]}; "
                  f"holdout {100 * share[((how, ok[0]), 'holdout')]:.1f}%")
        else:
            print(f"{how}: no mass reaches {want:.0%} on dev")
    # The other selectors on the same packs, for scale: their answered answerable questions.
    rows = next(iter(by_mass.values()))
    for other in sorted({r["variant"] for r in rows if r["refusal_prob"] is None}):
        for split in ("dev", "holdout"):
            answered = [r for r in rows if r["variant"] == other and questions[r["question_id"]]["split"] == split
                        and questions[r["question_id"]]["answerable"] and r["outcome"] != "false_refusal"]
            if answered:
                full, labels, lines = held(answered)
                print(f"  {other} {split:>7}: {pct(full, len(answered))}; labels {labels:.2f}; lines {lines:.1f}")

if __name__ == "__main__":
    sys.exit(main())
