"""How well refusal features separate answerable from unanswerable questions, per split: the AUC
(the chance that an answerable question scores above an unanswerable one; 0.5 is chance) of
  - support: the stored `extracts.support` (idf from the question's scope);
  - cosine: the best cosine between the question and its packed chunks (needs an [embed] run);
  - background: support with every term weighted by its idf over all repositories' chunks of
    BACKGROUND_RUN, a crude re-implementation of the analyser (lower-case words, camelCase split,
    plural s dropped), to test whether scope-independent weights carry across corpora.
The README's Refusals section quotes this script's output. Needs pyarrow and numpy (the test venv).

    python evaluation/refusal_features.py RUN BACKGROUND_RUN VARIANT...
e.g. python evaluation/refusal_features.py outputs/multi-repo outputs/multi-repo bm25-compact
"""
import collections
import math
import os
import re
import sys

import numpy as np
import pyarrow.dataset as ds

STOP = set("a an and are as at be but by can do does for from how i if in is it its me my of on or "
           "so that the this to what when where which who why will with you your there any way "
           "into than then them they should would could get".split())


def rows(run, table):
    return ds.dataset(os.path.join(run, table), format="parquet").to_table().to_pylist()


def terms(text):
    out = set()
    for w in re.findall(r"[A-Za-z0-9]+", text):
        for p in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+", w) or [w]:
            p = p.lower()
            if len(p) > 3 and p.endswith("s") and not p.endswith("ss"):
                p = p[:-1]
            out.add(p)
    return out


def auc(pos, neg):
    if not pos or not neg:
        return float("nan")
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    run, background, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
    df, n_bg = collections.Counter(), 0
    for c in rows(background, "chunk/chunks"):
        df.update(terms(c["text"]))
        n_bg += 1
    questions = {r["question_id"]: r for r in rows(run, "questions/questions")}
    packed_chunks, packed_terms = collections.defaultdict(set), collections.defaultdict(set)
    for r in rows(run, "pack/packs"):
        packed_chunks[(r["variant"], r["question_id"])].add(r["chunk_id"])
        packed_terms[(r["variant"], r["question_id"])] |= terms(r["text"])
    has_vectors = os.path.isdir(os.path.join(run, "embed", "embeddings"))
    if has_vectors:
        vec = {r["id"]: np.array(r["vector"], dtype=np.float32)
               for r in rows(run, "embed/embeddings")}
        qvec = {r["id"]: np.array(r["vector"], dtype=np.float32)
                for r in rows(run, "embed/question_embeddings")}
    support = {(r["variant"], r["question_id"]): r["support"] for r in rows(run, "extract/extracts")}
    print("| variant | split | answerable | unanswerable | support | cosine | background |")
    print("|---|---|---|---|---|---|---|")
    for v in variants:
        got = collections.defaultdict(lambda: collections.defaultdict(list))
        for qid, q in questions.items():
            if (v, qid) not in support or q["repo"] == "*":
                continue
            qt = [t for t in terms(q["question"]) if t not in STOP]
            w = {t: math.log(1 + (n_bg - df[t] + 0.5) / (df[t] + 0.5)) for t in qt}
            total = sum(w.values())
            bg = sum(w[t] for t in qt if t in packed_terms[(v, qid)]) / total if total else 0.0
            cos = 0.0
            if has_vectors and qid in qvec:
                cs = [float(vec[c] @ qvec[qid]) for c in packed_chunks[(v, qid)] if c in vec]
                cos = max(cs) if cs else 0.0
            side = "a" if q["answerable"] else "u"
            for name, x in (("support", support[(v, qid)]), ("cosine", cos), ("background", bg)):
                got[(q["split"], name)][side].append(x)
        for split in ("dev", "holdout"):
            a = got[(split, "support")]["a"]
            u = got[(split, "support")]["u"]
            cells = [f"{auc(got[(split, n)]['a'], got[(split, n)]['u']):.3f}"
                     for n in ("support", "cosine", "background")]
            if not has_vectors:
                cells[1] = "-"
            print(f"| {v} | {split} | {len(a)} | {len(u)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
