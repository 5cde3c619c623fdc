//! pack: fills each variant's token budget from its retrieved pool with the variant's packer and
//! writes `packs` (one row per packed chunk or unit, in reading order). A compact variant with
//! `unit_dense` also scores units by their cosine to the question (the embed stage's vectors).

use crate::answer::{self, PackInputs};
use crate::artifact::readers::{
    chunks_by_id, pools, questions_by_scope, Bm25Batch, Bm25Scope, Bm25Scopes, Parts, Vectors,
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
        let prepare = |scopes: &[Scope]| packing.batch(scopes);
        crate::stages::per_scope(ctx, jobs, &by_scope, prepare, |batch, scope| {
            packing.scope(batch, scope, &by_scope[scope])
        })
    }
}

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

/// What the scopes of one batch (revisions of one repository) share, read once for all of them:
/// each scope's retrievals, and per chunker the pooled chunks by id, their token costs, their
/// units' vectors by unit id, and (for the packers that rank the whole repository) the
/// repository's chunks.
struct Batch {
    retrievals: HashMap<Scope, Vec<RetrievalRow>>,
    chunks_by: Vec<HashMap<String, ChunkRow>>,
    cost_by: Vec<HashMap<String, u32>>,
    units_by: Vec<HashMap<String, Vec<f32>>>,
    repository_by: Vec<Vec<ChunkRow>>,
    /// The indexes of the batch's scopes, for the packers that need them.
    bm25: Option<Bm25Batch>,
}

impl Packing<'_> {
    /// The shared reads of a batch of `scopes`. Only the pooled chunks are read, each variant's
    /// from its chunker's partitions (a chunk of the same lines may be another row under another
    /// chunker), in one pass over those partitions for the whole batch.
    fn batch(&self, scopes: &[Scope]) -> Result<Batch> {
        let (store, variant_ci) = (self.store, self.variant_ci);
        let retrievals: HashMap<Scope, Vec<RetrievalRow>> =
            self.retrieval_parts.read_each(store, scopes)?;
        let (mut chunks_by, mut cost_by, mut units_by, mut repository_by) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (ci, c) in self.chunkers.iter().enumerate() {
            let wanted: HashSet<&str> = retrievals
                .values()
                .flatten()
                .filter(|r: &&RetrievalRow| variant_ci.get(r.variant.as_str()) == Some(&ci))
                .map(|r| r.chunk_id.as_str())
                .collect();
            let chunks = chunks_by_id(store, &self.chunk_parts.of_batch(scopes, &[*c]), &wanted)?;
            // Token cost of each pooled chunk under the budget's counter, computed once.
            let counter = self.counter;
            cost_by.push(
                chunks
                    .par_iter()
                    .map(|(id, c)| (id.clone(), counter.count(&c.text) as u32))
                    .collect(),
            );
            chunks_by.push(chunks);
            units_by.push(if self.dense_units {
                Vectors::units_of(store, &self.unit_parts.of_batch(scopes, &[*c]), &wanted)?
            } else {
                HashMap::new()
            });
            // A batch holds one group: its repository's chunks serve every revision.
            let first = scopes.first().map(|s| s.with_chunker(*c));
            repository_by.push(match first {
                Some(cs) if self.whole_repo && !cs.is_all() => {
                    self.chunk_parts.read(store, cs.group())?
                }
                _ => Vec::new(),
            });
        }
        let bm25 = if self.compacting || self.whole_repo {
            Some(self.scopes.open_batch_of(scopes, self.chunkers, false)?)
        } else {
            None
        };
        Ok(Batch {
            retrievals,
            chunks_by,
            cost_by,
            units_by,
            repository_by,
            bm25,
        })
    }

    /// Per chunker, for the packers that rank the question's whole repository (at its revision)
    /// themselves, that repository's chunks at the scope's revision; none otherwise.
    fn repository_rows<'b>(
        &self,
        batch: &'b Batch,
        bm25s: &[Option<Bm25Scope>],
    ) -> Vec<Vec<&'b ChunkRow>> {
        batch
            .repository_by
            .iter()
            .zip(bm25s)
            .map(
                |(all, bm25)| match bm25.as_ref().and_then(|b| b.subset.as_ref()) {
                    Some(sub) => sub
                        .members()
                        .iter()
                        .filter_map(|&d| all.get(d as usize))
                        .collect(),
                    None => all.iter().collect(),
                },
            )
            .collect()
    }

    /// The packs of one scope's questions, for every variant with a pool.
    fn scope(
        &self,
        batch: &Batch,
        scope: &Scope,
        questions: &[QuestionRow],
    ) -> Result<Vec<PackRow>> {
        let Packing {
            plan,
            counter,
            an,
            params,
            queries,
            chunkers,
            variant_ci,
            ..
        } = *self;
        let no_rows = Vec::new();
        let retrievals = batch.retrievals.get(scope).unwrap_or(&no_rows);
        let (chunks_by, units_by, cost_by) = (&batch.chunks_by, &batch.units_by, &batch.cost_by);
        let pools = pools(retrievals);
        let candidate = |ci: usize, c: &ChunkRow, score: f64| {
            let tokens = cost_by[ci]
                .get(c.chunk_id.as_str())
                .copied()
                .unwrap_or_else(|| counter.count(&c.text) as u32);
            Candidate::of(c, tokens, score)
        };
        // Per chunker: its index of the scope, and for the packers that rank the question's
        // whole repository (at its revision) themselves, that repository's chunks.
        let bm25s: Vec<Option<Bm25Scope>> = match &batch.bm25 {
            Some(b) => b.scopes_of(scope, chunkers),
            None => chunkers.iter().map(|_| None).collect(),
        };
        let rows_by = self.repository_rows(batch, &bm25s);
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
