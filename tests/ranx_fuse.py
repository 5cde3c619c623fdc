"""ranx's reciprocal rank fusion of two TREC run files exported by ri-batch.

Usage: ranx_fuse.py RUN_A RUN_B K. Prints JSON: question id -> document -> fused score, from
ranx.fuse(method="rrf", params={"k": K}) over the two runs as they are.
"""

import json
import sys
from urllib.parse import unquote

from ranx import Run, fuse


def read(path, name):
    runs = {}
    for line in open(path, encoding="utf-8"):
        qid, _, doc, _rank, score, _tag = line.split()
        runs.setdefault(unquote(qid), {})[unquote(doc)] = float(score)
    return Run(runs, name=name)


def main():
    a, b, k = read(sys.argv[1], "a"), read(sys.argv[2], "b"), float(sys.argv[3])
    fused = fuse(runs=[a, b], method="rrf", params={"k": k})
    json.dump({q: dict(docs) for q, docs in fused.to_dict().items()}, sys.stdout)


if __name__ == "__main__":
    main()
