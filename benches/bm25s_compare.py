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
corpus_ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in corpus]
tokenized = bm25s.tokenization.Tokenized(ids=corpus_ids, vocab=vocab)


def build():
    r = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    r.index(tokenized, show_progress=False)
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
for _ in range(5):
    t = time.perf_counter()
    res = []
    for q in q_tokens:
        if not q:
            res.append(([], []))
            continue
        docs, scores = retriever.retrieve([q], k=10, show_progress=False, n_threads=1)
        res.append((docs[0].tolist(), scores[0].tolist()))
    runs.append(time.perf_counter() - t)
    top = res
query_s = statistics.median(runs)

same = 0
same_set = 0
for (docs, scores), mine in zip(top, ours["top10"]):
    docs = [d for d, s in zip(docs, scores) if s > 0]
    same += docs == mine
    same_set += set(docs) == set(mine)
n = len(queries)
print(f"corpus {len(corpus)} chunks, {ours['tokens']} tokens; {n} queries ({ours['query_set']})")
print(f"identical top-10 lists: {same}/{n} = {same / n:.1%} (same sets: {same_set / n:.1%})")
print(f"index build: ri-batch {ours['build_seconds']:.3f}s, bm25s {build_s:.3f}s -> ratio {build_s / ours['build_seconds']:.2f}x")
print(f"queries: ri-batch {n / ours['query_seconds']:.0f} q/s, bm25s {n / query_s:.0f} q/s -> ratio {query_s / ours['query_seconds']:.2f}x")
