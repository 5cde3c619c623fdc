"""bm25s on the corpus and queries the ri-batch BM25 benchmark wrote (already tokenized by
ri-batch's analyser, query terms de-duplicated), Lucene variant, k1 1.2, b 0.75, one thread.
Compares top-10 lists and times index build and retrieval (medians of 5)."""
import json
import statistics
import sys
import time

import bm25s
import numpy as np

d = sys.argv[1]
corpus = [json.loads(l) for l in open(f"{d}/corpus.jsonl")]
queries = json.load(open(f"{d}/queries.json"))
ours = json.load(open(f"{d}/ri_batch.json"))

vocab = {}


def build():
    # From the same token strings ri-batch starts from: map them to ids, then index.
    vocab.clear()
    corpus_ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in corpus]
    r = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    r.index(bm25s.tokenization.Tokenized(ids=corpus_ids, vocab=vocab), show_progress=False)
    return r


builds = []
for _ in range(5):
    t = time.perf_counter()
    retriever = build()
    builds.append(time.perf_counter() - t)
build_s = statistics.median(builds)

# Queries as token lists in the corpus vocabulary (unknown terms dropped: they score nothing).
q_tokens = [[t for t in q if t in vocab] for q in queries]
runs, top = [], None
# One call for all queries (bm25s's fast path), sequential (n_threads=0), like ri-batch's timing.
nonempty = [i for i, q in enumerate(q_tokens) if q]
for _ in range(5):
    t = time.perf_counter()
    docs, scores = retriever.retrieve([q_tokens[i] for i in nonempty], k=10, show_progress=False, n_threads=0)
    runs.append(time.perf_counter() - t)
res = [([], [])] * len(q_tokens)
for j, i in enumerate(nonempty):
    res[i] = (docs[j].tolist(), scores[j].tolist())
top = res
query_s = statistics.median(runs)

same = 0
same_set = 0
same_scores = 0
for (docs, scores), mine, mine_scores in zip(top, ours["top10"], ours["top10_scores"]):
    kept = [(d, s) for d, s in zip(docs, scores) if s > 0]
    docs = [d for d, _ in kept]
    same += docs == mine
    same_set += set(docs) == set(mine)
    # Same score at every rank: any difference is only the order among tied documents.
    same_scores += len(kept) == len(mine_scores) and all(
        abs(s - m) <= 1e-4 * max(1.0, abs(m)) for (_, s), m in zip(kept, mine_scores)
    )
n = len(queries)
print(f"corpus {len(corpus)} chunks, {ours['tokens']} tokens; {n} queries ({ours['query_set']})")
print(f"identical top-10 lists: {same}/{n} = {same / n:.1%} (same sets: {same_set / n:.1%}; "
      f"same score at every rank, i.e. differing only among tied documents: {same_scores / n:.1%})")
print(f"index build: ri-batch {ours['build_seconds']:.3f}s, bm25s {build_s:.3f}s -> ratio {build_s / ours['build_seconds']:.2f}x")
print(f"queries: ri-batch {n / ours['query_seconds']:.0f} q/s, bm25s {n / query_s:.0f} q/s -> ratio {query_s / ours['query_seconds']:.2f}x")
