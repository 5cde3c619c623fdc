"""trec_eval's own measures (pytrec_eval) over a TREC run and qrels exported by ri-batch.

Usage: trec_eval.py RUN QRELS. Prints JSON: question id -> ndcg10, mrr10, recall10, recall100.
MRR@10 is trec_eval's recip_rank over each question's first 10 documents (recip_rank itself is
not cut); the others are trec_eval's ndcg_cut_10, recall_10 and recall_100.
"""

import json
import sys
from urllib.parse import unquote

import pytrec_eval


def read_run(path, depth=None):
    run = {}
    for line in open(path, encoding="utf-8"):
        qid, _, doc, rank, score, _tag = line.split()
        if depth is None or int(rank) <= depth:
            run.setdefault(unquote(qid), {})[unquote(doc)] = float(score)
    return run


def read_qrels(path):
    qrels = {}
    for line in open(path, encoding="utf-8"):
        qid, _, doc, grade = line.split()
        qrels.setdefault(unquote(qid), {})[unquote(doc)] = int(grade)
    return qrels


def main():
    run_path, qrels_path = sys.argv[1], sys.argv[2]
    qrels = read_qrels(qrels_path)
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10,100"}).evaluate(
        read_run(run_path)
    )
    top10 = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(
        read_run(run_path, 10)
    )
    out = {}
    for qid, m in full.items():
        out[qid] = {
            "ndcg10": m["ndcg_cut_10"],
            "mrr10": top10.get(qid, {}).get("recip_rank", 0.0),
            "recall10": m["recall_10"],
            "recall100": m["recall_100"],
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
