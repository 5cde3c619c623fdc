#!/usr/bin/env bash
# Makes datasets/readme-questions.jsonl for pipelines/intellirag-readme.toml (IntelliRAG's setting:
# each repository's README is its corpus): the answerable questions of datasets/questions.jsonl
# whose every evidence quote is in the repository's README, and every unanswerable question,
# unchanged and in the same order (splits kept). Nothing is tuned on it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY' > datasets/readme-questions.jsonl
import json
for line in open("datasets/questions.jsonl"):
    q = json.loads(line)
    ev = q.get("evidence") or []
    if not q["answerable"] or (ev and all(e["path"].lower() == "readme.md" for e in ev)):
        print(line, end="")
PY
