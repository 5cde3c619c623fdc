//! pack: fills each variant's token budget from its retrieved pool with the variant's packer and
//! writes `packs` (one row per packed chunk or unit, in reading order). A compact variant with
//! `unit_dense` also scores units by their cosine to the question (the embed stage's vectors).

use crate::answer::{self, PackInputs};
use crate::artifact::readers::{
    chunks_by_id, pools, questions_by_scope, Bm25Scope, Bm25Scopes, Parts, Vectors,
};
use crate::artifact::schema::{
    ChunkRow, EmbeddingRow, PackRow, QuestionRow, RetrievalRow, Row, Scope,
};
use crate::artifact::StageId;
use crate::config::{Packer, Plan, Variant};
use crate::error::Result;
use crate::packing::intellirag::{self, rank::Corpus};
use crate::packing::{Candidate, CompactParams, Packed, UnitSim};
use crate::stages::{scope_keys, Ctx, Stage};
use crate::text::tokens::TokenCounter;
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};

pub struct Pack;

impl Stage for Pack {
    fn id(&self) -> StageId {
        StageId::Pack
    }
    fn inputs(&self) -> &'static [StageId] {
        &[
            StageId::Chunk,
            StageId::Questions,
            StageId::Embed,
            StageId::Index,
            StageId::Retrieve,
        ]
    }
    fn config(&self, plan: &Plan) -> Value {
        let vs: Vec<_> = plan.variants.iter().map(|v| v.key(&v.packing)).collect();
        json!({ "pack": plan.pack, "index": plan.index, "variants": vs })
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        plan.answers_questions()
    }
    fn version(&self) -> u32 {
        // 2: one partition per question scope, reused while its inputs are unchanged; 3: packs
        // carry their chunk's commit.
        3
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let store = ctx.store;
        let counter = TokenCounter::from_setting(&plan.pack.tokenizer, &plan.root)?;
        let by_scope = questions_by_scope(store)?;
        let retrieval_parts = Parts::of(store, RetrievalRow::TABLE)?;
        let chunk_parts = Parts::of(store, ChunkRow::TABLE)?;
        // The idf of a compacting variant's question comes from its scope's stored index, opened
        // in place per scope and dropped with it.
        let scopes = Bm25Scopes::new(store)?;
        let an = plan.index.analyzer();
        let compacting = plan
            .variants
            .iter()
            .any(|v| v.packing.packer == Packer::Compact);
        let whole_repo = plan
            .variants
            .iter()
            .any(|v| v.packing.packer.reads_repository());
        let params = plan.pack.compact_params();
        // Unit vectors and question vectors, for the variants that score units densely (their
        // pools exist only when the embed stage produced vectors: see retrieve's not-run rule).
        let dense_units = plan.unit_vectors();
        let (queries, unit_parts) = if dense_units {
            (
                Vectors::questions(store)?,
                Parts::of(store, EmbeddingRow::UNITS)?,
            )
        } else {
            (HashMap::new(), Parts::default())
        };
        let config = self.config(plan);
        // A variant packs from its chunker's chunks, with its chunker's index statistics.
        let chunkers = plan.chunker_names();
        let variant_ci: HashMap<&str, usize> = plan
            .variants
            .iter()
            .map(|v| (v.name.as_str(), plan.chunker_index(v)))
            .collect();
        let jobs = scope_keys(&by_scope, &(self.version(), &config), |scope| {
            let vectors: Vec<Option<&Vec<f32>>> = by_scope[scope]
                .iter()
                .filter(|_| dense_units)
                .map(|q| queries.get(&q.question_id))
                .collect();
            (
                retrieval_parts.own(scope.as_str()),
                chunk_parts.checksums_of(scope, &chunkers),
                scopes.checksums_of(scope, &chunkers),
                unit_parts.checksums_of(scope, &chunkers),
                vectors,
            )
        });
        let packing = Packing {
            plan,
            store,
            counter: &counter,
            retrieval_parts: &retrieval_parts,
            chunk_parts: &chunk_parts,
            scopes: &scopes,
            an: &an,
            compacting,
            whole_repo,
            params: &params,
            dense_units,
            queries: &queries,
            unit_parts: &unit_parts,
            chunkers: &chunkers,
            variant_ci: &variant_ci,
        };
        crate::stages::per_scope(ctx, jobs, |scope| packing.scope(scope, &by_scope[scope]))
    }
}

/// Per chunker, the pooled chunks by id and their units' vectors by unit id.
type PooledChunks = (
    Vec<HashMap<String, ChunkRow>>,
    Vec<HashMap<String, Vec<f32>>>,
);

/// What every scope's packs are computed from.
struct Packing<'a> {
    plan: &'a Plan,
    store: &'a crate::artifact::Store,
    counter: &'a TokenCounter,
    retrieval_parts: &'a Parts,
    chunk_parts: &'a Parts,
    scopes: &'a Bm25Scopes<'a>,
    an: &'a crate::text::analyze::Analyzer,
    compacting: bool,
    whole_repo: bool,
    params: &'a CompactParams,
    dense_units: bool,
    queries: &'a HashMap<String, Vec<f32>>,
    unit_parts: &'a Parts,
    chunkers: &'a [Option<&'a str>],
    variant_ci: &'a HashMap<&'a str, usize>,
}

impl Packing<'_> {
    /// Per chunker, the pooled chunks of `retrievals` and (for dense unit scoring) their units'
    /// vectors. Only the pooled chunks are read, each variant's from its chunker's partitions (a
    /// chunk of the same lines may be another row under another chunker).
    fn pooled(&self, scope: &Scope, retrievals: &[RetrievalRow]) -> Result<PooledChunks> {
        let (store, variant_ci) = (self.store, self.variant_ci);
        let mut chunks_by: Vec<HashMap<String, ChunkRow>> = Vec::new();
        let mut units_by: Vec<HashMap<String, Vec<f32>>> = Vec::new();
        for (ci, c) in self.chunkers.iter().enumerate() {
            let cs = scope.with_chunker(*c);
            let wanted: HashSet<&str> = retrievals
                .iter()
                .filter(|r| variant_ci.get(r.variant.as_str()) == Some(&ci))
                .map(|r| r.chunk_id.as_str())
                .collect();
            chunks_by.push(chunks_by_id(
                store,
                &self.chunk_parts.of_scope(&cs),
                &wanted,
            )?);
            units_by.push(if self.dense_units {
                Vectors::units_of(store, &self.unit_parts.of_scope(&cs), &wanted)?
            } else {
                HashMap::new()
            });
        }
        Ok((chunks_by, units_by))
    }

    /// Per chunker, for the packers that rank the question's whole repository (at its revision)
    /// themselves, that repository's chunks; none otherwise.
    fn repository_rows(
        &self,
        scope: &Scope,
        bm25s: &[Option<Bm25Scope>],
    ) -> Result<Vec<Vec<ChunkRow>>> {
        let mut rows_by: Vec<Vec<ChunkRow>> = Vec::new();
        for (c, bm25) in self.chunkers.iter().zip(bm25s) {
            let cs = scope.with_chunker(*c);
            let rows: Vec<ChunkRow> = if self.whole_repo && !scope.is_all() {
                let all: Vec<ChunkRow> = self.chunk_parts.read(self.store, cs.group())?;
                match bm25.as_ref().and_then(|b| b.subset.as_ref()) {
                    Some(sub) => sub
                        .members()
                        .iter()
                        .filter_map(|&d| all.get(d as usize).cloned())
                        .collect(),
                    None => all,
                }
            } else {
                Vec::new()
            };
            rows_by.push(rows);
        }
        Ok(rows_by)
    }

    /// The packs of one scope's questions, for every variant with a pool.
    fn scope(&self, scope: &Scope, questions: &[QuestionRow]) -> Result<Vec<PackRow>> {
        let Packing {
            plan,
            store,
            counter,
            retrieval_parts,
            scopes,
            an,
            compacting,
            whole_repo,
            params,
            queries,
            chunkers,
            variant_ci,
            ..
        } = *self;
        let retrievals: Vec<RetrievalRow> = retrieval_parts.read(store, scope.as_str())?;
        let (chunks_by, units_by) = self.pooled(scope, &retrievals)?;
        let pools = pools(&retrievals);
        // Token cost of each pooled chunk under the budget's counter, computed once.
        let cost_by: Vec<HashMap<&str, u32>> = chunks_by
            .iter()
            .map(|chunks| {
                chunks
                    .par_iter()
                    .map(|(id, c)| (id.as_str(), counter.count(&c.text) as u32))
                    .collect()
            })
            .collect();
        let candidate = |ci: usize, c: &ChunkRow, score: f64| {
            let tokens = cost_by[ci]
                .get(c.chunk_id.as_str())
                .copied()
                .unwrap_or_else(|| counter.count(&c.text) as u32);
            Candidate::of(c, tokens, score)
        };
        // Per chunker: its index of the scope, and for the packers that rank the question's
        // whole repository (at its revision) themselves, that repository's chunks.
        let bm25s: Vec<Option<Bm25Scope>> = if compacting || whole_repo {
            scopes.open_each(scope, chunkers, false)?
        } else {
            chunkers.iter().map(|_| None).collect()
        };
        let rows_by = self.repository_rows(scope, &bm25s)?;
        let docs_by: Vec<Vec<Candidate>> = rows_by
            .iter()
            .enumerate()
            .map(|(ci, rows)| rows.iter().map(|c| candidate(ci, c, 0.0)).collect())
            .collect();
        let corpus_by: Vec<Option<Corpus>> = docs_by
            .iter()
            .map(|docs| (!docs.is_empty()).then(|| intellirag::corpus_of(docs)))
            .collect();
        let mut jobs: Vec<(&Variant, &QuestionRow, Vec<Candidate>)> = Vec::new();
        for v in &plan.variants {
            for q in questions {
                if let Some(pool) = pools.get(&(v.name.as_str(), q.question_id.as_str())) {
                    let ci = variant_ci[v.name.as_str()];
                    let cands = pool
                        .iter()
                        .filter_map(|r| {
                            let c = chunks_by[ci].get(r.chunk_id.as_str())?;
                            Some(candidate(ci, c, r.score))
                        })
                        .collect();
                    jobs.push((v, q, cands));
                }
            }
        }
        let packed: Vec<Vec<Packed>> = jobs
            .par_iter()
            .map(|(v, q, cands)| {
                let ci = variant_ci[v.name.as_str()];
                let whole = corpus_by[ci].as_ref().map(|c| (docs_by[ci].as_slice(), c));
                let dense = DenseUnits {
                    queries,
                    units: &units_by[ci],
                };
                pack_one(
                    v,
                    q,
                    cands,
                    bm25s[ci].as_ref(),
                    whole,
                    an,
                    counter,
                    &v.packing.compact_params(*params),
                    &dense,
                )
            })
            .collect();
        let commit_of = |ci: usize, id: &str| {
            chunks_by[ci]
                .get(id)
                .map(|c| c.commit.clone())
                .or_else(|| {
                    rows_by[ci]
                        .iter()
                        .find(|c| c.chunk_id == id)
                        .map(|c| c.commit.clone())
                })
                .unwrap_or_default()
        };
        let commit_of = |v: &Variant, id: &str| commit_of(variant_ci[v.name.as_str()], id);
        Ok(pack_rows(&jobs, packed, &commit_of))
    }
}

/// The pack rows of each job's packed pieces, in reading order.
fn pack_rows(
    jobs: &[(&Variant, &QuestionRow, Vec<Candidate>)],
    packed: Vec<Vec<Packed>>,
    commit_of: &dyn Fn(&Variant, &str) -> String,
) -> Vec<PackRow> {
    let mut out = Vec::new();
    for ((v, q, _), pieces) in jobs.iter().zip(packed) {
        for (order, p) in pieces.into_iter().enumerate() {
            out.push(PackRow {
                commit: commit_of(v, &p.chunk_id),
                variant: v.name.clone(),
                question_id: q.question_id.clone(),
                order: order as u32,
                chunk_id: p.chunk_id,
                repo: p.repo,
                path: p.path,
                start_line: p.start_line,
                end_line: p.end_line,
                tokens: p.tokens,
                unit: p.unit,
                text: p.text,
            });
        }
    }
    out
}

/// The vectors a scope's dense unit scoring reads: every question's, and the units' of its pooled
/// chunks.
struct DenseUnits<'a> {
    queries: &'a HashMap<String, Vec<f32>>,
    units: &'a HashMap<String, Vec<f32>>,
}

impl DenseUnits<'_> {
    /// Cosine between the question's vector `q` and unit `pos` of `c`; 0 where either is missing.
    fn cosine(&self, q: Option<&Vec<f32>>, c: &Candidate, pos: usize) -> f64 {
        match (q, self.units.get(&EmbeddingRow::unit_id(&c.chunk_id, pos))) {
            (Some(a), Some(b)) => crate::retrieval::cosine(a, b),
            _ => 0.0,
        }
    }
}

/// Packs one question's pool with its variant's packer. `repo` is the question's whole repository
/// (its chunks and their IntelliRAG corpus) for the packers that rank it themselves.
#[allow(clippy::too_many_arguments)]
fn pack_one(
    v: &Variant,
    q: &QuestionRow,
    cands: &[Candidate],
    scope: Option<&Bm25Scope>,
    repo: Option<(&[Candidate], &Corpus)>,
    an: &crate::text::analyze::Analyzer,
    counter: &TokenCounter,
    params: &CompactParams,
    dense: &DenseUnits,
) -> Vec<Packed> {
    let count = |t: &str| counter.count(t);
    let idf = |t: &str| scope.map_or(1.0, |s| s.idf(t));
    let query = dense.queries.get(&q.question_id);
    let sim = |c: &Candidate, pos: usize| dense.cosine(query, c, pos);
    let sim: UnitSim = &sim;
    let inputs = PackInputs {
        question: &q.question,
        analyzer: an,
        idf: &idf,
        count: &count,
        params,
        dense: (v.packing.unit_dense > 0.0).then_some((v.packing.unit_dense, sim)),
        repo,
    };
    answer::pack(v.packing.packer, v.packing.budget.get(), cands, &inputs)
}
