#!/usr/bin/env bash
# Sweeps [extract] lexical_threshold on the DEV split only (the holdout split is never queried)
# and prints, per threshold, the outcome counts of the lexical selector over the three BM25
# packers at 1,400 tokens, and the balanced accuracy used to choose it:
#   ((full / answerable) + (correct_refusal / unanswerable)) / 2.
# Restores the pipeline file afterwards. Needs a finished run of pipelines/multi-repo.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
p=pipelines/multi-repo.toml
cp "$p" "$p.bak"
trap 'mv "$p.bak" "$p"' EXIT
ri() { cargo run --release --locked --quiet -- "$@"; }
for t in 0.1 0.2 0.3 0.4 0.5 0.6 0.7; do
  sed -i "s/^lexical_threshold = .*/lexical_threshold = $t/" "$p"
  ri run "$p" --quiet --stages extract,evaluate >/dev/null
  ri sql outputs/multi-repo "SELECT $t AS threshold,
      sum(CASE WHEN e.outcome = 'full' THEN 1 ELSE 0 END) AS full,
      sum(CASE WHEN e.outcome = 'partial' THEN 1 ELSE 0 END) AS partial,
      sum(CASE WHEN e.outcome = 'irrelevant' THEN 1 ELSE 0 END) AS irrelevant,
      sum(CASE WHEN e.outcome = 'false_refusal' THEN 1 ELSE 0 END) AS false_refusal,
      sum(CASE WHEN e.outcome = 'correct_refusal' THEN 1 ELSE 0 END) AS correct_refusal,
      sum(CASE WHEN e.outcome = 'false_selection' THEN 1 ELSE 0 END) AS false_selection,
      round((sum(CASE WHEN e.outcome = 'full' THEN 1.0 ELSE 0 END) / sum(CASE WHEN q.answerable THEN 1 ELSE 0 END)
           + sum(CASE WHEN e.outcome = 'correct_refusal' THEN 1.0 ELSE 0 END) / sum(CASE WHEN q.answerable THEN 0 ELSE 1 END)) / 2, 3) AS balanced_accuracy
    FROM extracts e JOIN questions q ON q.question_id = e.question_id
    WHERE q.split = 'dev' AND e.variant IN ('bm25-rank', 'bm25-compact', 'bm25-marginal')" --format csv | tail -n +2
done
