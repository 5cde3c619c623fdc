//! pack: fills each variant's token budget from its retrieved pool with the variant's packer and
//! writes `packs` (one row per packed chunk or unit, in reading order).

use crate::config::{Packer, Plan};
use crate::error::Result;
use crate::packers::{pack_compact, pack_marginal, pack_rank, Candidate, CompactParams, Packed};
use crate::pipeline::{Ctx, Stage};
use crate::schema::{ChunkRow, PackRow, QuestionRow, RetrievalRow};
use crate::stages::index;
use crate::text::tokens::TokenCounter;
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::HashMap;

pub struct Pack;

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
        let questions: Vec<QuestionRow> = ctx.store.read("questions")?;
        let chunks: Vec<ChunkRow> = ctx.store.read("chunks")?;
        let retrievals: Vec<RetrievalRow> = ctx.store.read("retrievals")?;
        let idfs = index::load_idf(ctx.store)?;
        let an = index::analyzer(&plan.index);
        let by_id: HashMap<&str, &ChunkRow> =
            chunks.iter().map(|c| (c.chunk_id.as_str(), c)).collect();
        let mut pools: HashMap<(&str, &str), Vec<&RetrievalRow>> = HashMap::new();
        for r in &retrievals {
            pools
                .entry((r.variant.as_str(), r.question_id.as_str()))
                .or_default()
                .push(r);
        }
        for p in pools.values_mut() {
            p.sort_by_key(|r| r.rank);
        }
        // Token cost of each pooled chunk under the budget's counter, computed once.
        let pooled: Vec<&str> = {
            let mut ids: Vec<&str> = retrievals.iter().map(|r| r.chunk_id.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        let cost: HashMap<&str, u32> = pooled
            .par_iter()
            .filter_map(|id| by_id.get(id).map(|c| (*id, counter.count(&c.text) as u32)))
            .collect();
        let params = CompactParams {
            top_chunks: plan.pack.compact_top_chunks,
            neighbour_bonus: plan.pack.neighbour_bonus,
            heading_bonus: plan.pack.heading_bonus,
            lean: plan.pack.lean,
        };
        let mut jobs: Vec<(&crate::config::Variant, &QuestionRow, &Vec<&RetrievalRow>)> =
            Vec::new();
        for v in &plan.variants {
            for q in &questions {
                if let Some(pool) = pools.get(&(v.name.as_str(), q.question_id.as_str())) {
                    jobs.push((v, q, pool));
                }
            }
        }
        let bar = ctx.bar(jobs.len() as u64, "packs");
        let packed: Vec<(String, String, Vec<Packed>)> = jobs
            .par_iter()
            .map(|(v, q, pool)| {
                let cands: Vec<Candidate> = pool
                    .iter()
                    .filter_map(|r| {
                        let c = by_id.get(r.chunk_id.as_str())?;
                        Some(Candidate {
                            chunk_id: c.chunk_id.clone(),
                            repo: c.repo.clone(),
                            path: c.path.clone(),
                            start_line: c.start_line,
                            end_line: c.end_line,
                            heading: c.heading.clone(),
                            kind: c.kind.clone(),
                            text: c.text.clone(),
                            tokens: cost[c.chunk_id.as_str()],
                            score: r.score,
                        })
                    })
                    .collect();
                let out = match v.packer {
                    Packer::Rank => pack_rank(&cands, v.budget),
                    Packer::MarginalGain => pack_marginal(&cands, v.budget, &an),
                    Packer::Compact => {
                        let scope = index::scope_of(&idfs, &q.repo);
                        let idf = |t: &str| scope.map_or(1.0, |s| s.idf(t));
                        pack_compact(
                            &cands,
                            v.budget,
                            &q.question,
                            &an,
                            &idf,
                            &|t| counter.count(t),
                            &params,
                        )
                    }
                };
                bar.inc(1);
                (v.name.clone(), q.question_id.clone(), out)
            })
            .collect();
        bar.finish_and_clear();
        let mut rows = Vec::new();
        for (variant, qid, pieces) in packed {
            for (order, p) in pieces.into_iter().enumerate() {
                rows.push(PackRow {
                    variant: variant.clone(),
                    question_id: qid.clone(),
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
        ctx.writer.write("packs", "packs", "", &rows)?;
        Ok(())
    }
}
