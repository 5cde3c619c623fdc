"""The whole-file baseline for SWE-bench-style localization: bm25s over every included file of an
instance's base commit (path + content as one document, an identifier-splitting tokenizer, the
issue text as the query), read straight from the git mirrors, each blob read once.

    python benches/swebench_bm25s.py INSTANCES.jsonl MIRRORS_DIR OUT.json [--include .py]

Writes per instance the ranked files (top 100) and prints file-level Acc@1/5/10, R@10, MRR@10 and
R@100 over the instances it could read: the peer that benches/swebench.sh sets beside ri-batch.
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import bm25s
import numpy as np

WORD = re.compile(r"[A-Za-z0-9]+")
CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def tokens(text):
    """Identifier-splitting tokenizer: words and identifiers, also cut at case changes and
    underscores, lowercased; the whole identifier is kept beside its parts."""
    out = []
    for w in WORD.findall(text):
        parts = CAMEL.findall(w)
        low = w.lower()
        out.append(low)
        if len(parts) > 1:
            out.extend(p.lower() for p in parts)
    return out


def mirror(root, repo):
    owner, name = repo.split("/")
    for base in (f"{owner}+{name}", f"{owner}__{name}", f"{owner}/{name}", name):
        for cand in (root / base, root / f"{base}.git"):
            for c in (cand, cand / "repo"):
                if (c / "HEAD").is_file() and (c / "objects").is_dir():
                    return c
                if (c / ".git").exists():
                    return c
    return None


def changed_files(patch):
    out = []
    for line in patch.splitlines():
        if line.startswith("--- "):
            p = line[4:].split("\t")[0].strip()
            if p != "/dev/null":
                p = p[2:] if p.startswith("a/") else p
                if p not in out:
                    out.append(p)
    return out


class Blobs:
    """`git cat-file --batch` over one mirror; blobs cached by id (each read once)."""

    def __init__(self, git_dir):
        self.proc = subprocess.Popen(
            ["git", "--git-dir", str(git_dir), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.cache = {}

    def get(self, oid):
        if oid in self.cache:
            return self.cache[oid]
        self.proc.stdin.write(oid.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) < 3 or header[1] == b"missing":
            self.cache[oid] = None
            return None
        size = int(header[2])
        data = self.proc.stdout.read(size)
        self.proc.stdout.read(1)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        self.cache[oid] = text
        return text


def listing(git_dir, commit, suffix):
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--full-tree", commit],
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8", "replace")
    files = []
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind == "blob" and path.endswith(suffix) and mode != "120000":
            files.append((path, oid))
    return files


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    suffix = ".py"
    if "--include" in sys.argv:
        suffix = sys.argv[sys.argv.index("--include") + 1]
        args.remove(suffix)
    src, root, out_path = Path(args[0]), Path(args[1]), Path(args[2])
    instances = [json.loads(l) for l in src.read_text().splitlines() if l.strip()]
    blobs = {}
    results = {}
    t0 = time.time()
    for inst in instances:
        git_dir = mirror(root, inst["repo"])
        if git_dir is None:
            continue
        b = blobs.setdefault(inst["repo"], Blobs(git_dir))
        try:
            files = listing(git_dir, inst["base_commit"], suffix)
        except subprocess.CalledProcessError:
            continue
        docs, paths = [], []
        for path, oid in files:
            text = b.get(oid)
            if text is None:
                continue
            paths.append(path)
            docs.append(tokens(path) + tokens(text))
        if not docs:
            continue
        retriever = bm25s.BM25()
        retriever.index(docs, show_progress=False)
        q = tokens(inst["problem_statement"])
        k = min(100, len(paths))
        ids, scores = retriever.retrieve([q], k=k, show_progress=False)
        ranked = [paths[i] for i in ids[0]]
        gold = [p for p in changed_files(inst["patch"]) if p in set(paths)]
        results[inst["instance_id"]] = {"ranked": ranked, "gold": gold}
    seconds = time.time() - t0
    out_path.write_text(json.dumps(results))
    rows = [r for r in results.values() if r["gold"]]

    def acc(r, k):
        return float(all(g in r["ranked"][:k] for g in r["gold"]))

    def recall(r, k):
        return sum(g in r["ranked"][:k] for g in r["gold"]) / len(r["gold"])

    def mrr(r, k):
        for i, p in enumerate(r["ranked"][:k]):
            if p in r["gold"]:
                return 1.0 / (i + 1)
        return 0.0

    n = len(rows)
    report = {
        "instances": n,
        "acc1": np.mean([acc(r, 1) for r in rows]),
        "acc5": np.mean([acc(r, 5) for r in rows]),
        "acc10": np.mean([acc(r, 10) for r in rows]),
        "recall10": np.mean([recall(r, 10) for r in rows]),
        "mrr10": np.mean([mrr(r, 10) for r in rows]),
        "recall100": np.mean([recall(r, 100) for r in rows]),
        "seconds": seconds,
    }
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in report.items()}))


if __name__ == "__main__":
    main()
