//! pack: fills each variant's token budget from its retrieved pool with the variant's packer and
//! writes `packs` (one row per packed chunk or unit, in reading order).

use crate::config::{Packer, Plan, Variant};
use crate::error::Result;
use crate::intellirag::{self, rank::Corpus};
use crate::packers::{pack_compact, pack_marginal, pack_rank, Candidate, CompactParams, Packed};
use crate::pipeline::{Ctx, Stage};
use crate::readers::{chunks_by_id, chunks_of_repo, pools, Bm25Scope, Bm25Scopes};
use crate::schema::{ChunkRow, PackRow, QuestionRow, RetrievalRow, Row};
use crate::text::tokens::TokenCounter;
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

pub struct Pack;

/// IntelliRAG's lean floor: units must score 20% of the best (`compactMinUnitShare`).
const LEAN_SHARE: f64 = 0.2;

impl Stage for Pack {
    fn name(&self) -> &'static str {
        "pack"
    }
    fn inputs(&self) -> &'static [&'static str] {
        &["chunk", "questions", "index", "retrieve"]
    }
    fn config(&self, plan: &Plan) -> Value {
        let vs: Vec<_> = plan
            .variants
            .iter()
            .map(|v| json!([v.name, v.packer, v.budget]))
            .collect();
        json!({ "pack": plan.pack, "index": plan.index, "variants": vs })
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        crate::stages::retrieve::Retrieve.enabled(plan)
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let counter = TokenCounter::from_setting(&plan.pack.tokenizer, &plan.root)?;
        let questions: Vec<QuestionRow> = ctx.store.read(QuestionRow::TABLE)?;
        let retrievals: Vec<RetrievalRow> = ctx.store.read(RetrievalRow::TABLE)?;
        let an = plan.index.analyzer();
        // Only the pooled chunks are read, one repository partition at a time.
        let wanted: HashSet<&str> = retrievals.iter().map(|r| r.chunk_id.as_str()).collect();
        let chunks = chunks_by_id(ctx.store, &wanted)?;

        let pools = pools(&retrievals);
        // The idf of a compacting variant's question comes from its scope's stored index, opened
        // in place; scopes are taken one per worker at a time and dropped when done.
        let scopes = Bm25Scopes::new(ctx.store)?;
        let compacting = plan.variants.iter().any(|v| v.packer == Packer::Compact);
        let whole_repo = plan.variants.iter().any(|v| v.packer.reads_repository());
        // Token cost of each pooled chunk under the budget's counter, computed once.
        let cost: HashMap<&str, u32> = chunks
            .par_iter()
            .map(|(id, c)| (id.as_str(), counter.count(&c.text) as u32))
            .collect();
        let params = CompactParams {
            top_chunks: plan.pack.compact_top_chunks,
            neighbour_bonus: plan.pack.neighbour_bonus,
            heading_bonus: plan.pack.heading_bonus,
            lean: plan.pack.lean,
        };
        let mut jobs: Vec<(&Variant, &QuestionRow, &Vec<&RetrievalRow>)> = Vec::new();
        for v in &plan.variants {
            for q in &questions {
                if let Some(pool) = pools.get(&(v.name.as_str(), q.question_id.as_str())) {
                    jobs.push((v, q, pool));
                }
            }
        }
        let mut by_scope: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, (_, q, _)) in jobs.iter().enumerate() {
            by_scope.entry(q.repo.as_str()).or_default().push(i);
        }
        let bar = ctx.bar(jobs.len() as u64, "packs");
        let candidate = |c: &ChunkRow, score: f64| {
            let tokens = cost
                .get(c.chunk_id.as_str())
                .copied()
                .unwrap_or_else(|| counter.count(&c.text) as u32);
            Candidate::of(c, tokens, score)
        };
        let pack_one = |(v, q, pool): &(&Variant, &QuestionRow, &Vec<&RetrievalRow>),
                        scope: Option<&Bm25Scope>,
                        repo: Option<(&[Candidate], &Corpus)>|
         -> Vec<Packed> {
            let cands: Vec<Candidate> = pool
                .iter()
                .filter_map(|r| Some(candidate(chunks.get(r.chunk_id.as_str())?, r.score)))
                .collect();
            let count = |t: &str| counter.count(t);
            let out = match v.packer {
                Packer::Rank => pack_rank(&cands, v.budget),
                Packer::MarginalGain => pack_marginal(&cands, v.budget, &an),
                Packer::Compact => {
                    let idf = |t: &str| scope.map_or(1.0, |s| s.index.idf(t));
                    pack_compact(&cands, v.budget, &q.question, &an, &idf, &count, &params)
                }
                Packer::IntelliragBm25 | Packer::Intellirag | Packer::IntelliragLean => {
                    // The question's repository is the corpus; a `*` question's pool is.
                    let own;
                    let (docs, corpus) = match repo {
                        Some(r) => r,
                        None => {
                            own = intellirag::corpus_of(&cands);
                            (cands.as_slice(), &own)
                        }
                    };
                    match v.packer {
                        Packer::IntelliragBm25 => {
                            intellirag::pack_baseline(docs, corpus, &q.question, v.budget)
                        }
                        lean => {
                            let share = if lean == Packer::IntelliragLean {
                                LEAN_SHARE
                            } else {
                                0.0
                            };
                            intellirag::pack_compaction(
                                docs,
                                corpus,
                                &q.question,
                                v.budget,
                                share,
                                &count,
                            )
                        }
                    }
                }
            };
            bar.inc(1);
            out
        };
        let packed: Vec<Vec<Packed>> =
            crate::pipeline::per_group(&by_scope, jobs.len(), |repo, idxs| {
                let scope = if compacting {
                    scopes.open(repo, false)?
                } else {
                    None
                };
                let rows = if whole_repo && repo != "*" {
                    chunks_of_repo(ctx.store, repo)?
                } else {
                    Vec::new()
                };
                let docs: Vec<Candidate> = rows.iter().map(|c| candidate(c, 0.0)).collect();
                let corpus = (!docs.is_empty()).then(|| intellirag::corpus_of(&docs));
                let whole = corpus.as_ref().map(|c| (docs.as_slice(), c));
                Ok(idxs
                    .par_iter()
                    .map(|&i| (i, pack_one(&jobs[i], scope.as_ref(), whole)))
                    .collect())
            })?;
        bar.finish_and_clear();
        let mut rows = Vec::new();
        for ((v, q, _), pieces) in jobs.iter().zip(packed) {
            for (order, p) in pieces.into_iter().enumerate() {
                rows.push(PackRow {
                    variant: v.name.clone(),
                    question_id: q.question_id.clone(),
                    order: order as u32,
                    chunk_id: p.chunk_id,
                    repo: p.repo,
                    path: p.path,
                    start_line: p.start_line,
                    end_line: p.end_line,
                    tokens: p.tokens,
                    unit: p.unit.to_string(),
                    text: p.text,
                });
            }
        }
        ctx.writer
            .write(PackRow::TABLE, PackRow::TABLE, "", &rows)?;
        Ok(())
    }
}
