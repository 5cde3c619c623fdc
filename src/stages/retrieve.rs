//! retrieve: the top-k pool of every variant for every question (`retrievals`), by BM25, exact
//! dense search over the `embeddings`, or their reciprocal rank fusion. Dense and hybrid variants
//! are reported as not run when there are no embeddings; nothing is faked.

use crate::bm25::stored::Stored;
use crate::config::{Fusion, Plan, Retriever, Variant};
use crate::error::Result;
use crate::pipeline::{scope_keys, Ctx, Stage};
use crate::readers::{questions_by_scope, Bm25Scope, Bm25Scopes, Parts, Vectors};
use crate::retrieval::{dense_search, rrf, score_fusion};
use crate::schema::{EmbeddingRow, QuestionRow, RetrievalRow, Row};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// Depth of each input list before fusion.
pub const FUSION_DEPTH: usize = 100;

/// A hybrid variant's fusion of a lexical list `a` and a dense list `b` (chunk id, score; best
/// first) with its `weights` (bm25, dense): weighted reciprocal rank fusion or normalised score
/// fusion. The retrieve stage and `serve` both rank with it.
pub fn fuse(
    weights: [f64; 2],
    fusion: Fusion,
    a: Vec<(String, f64)>,
    b: Vec<(String, f64)>,
    rrf_k: f64,
) -> Vec<crate::retrieval::Fused<String>> {
    match fusion {
        Fusion::Rrf => {
            let ids = |l: Vec<(String, f64)>| l.into_iter().map(|(c, _)| c).collect();
            rrf(&[ids(a), ids(b)], &weights, rrf_k)
        }
        Fusion::Score => score_fusion(&[a, b], &weights),
    }
}

pub struct Retrieve;

/// Why a variant cannot run under this plan, if it cannot.
pub fn not_run_reason(plan: &Plan, v: &Variant, have_dense: bool) -> Option<String> {
    if (v.retriever != Retriever::Bm25 || v.unit_dense > 0.0) && !have_dense {
        return Some(if plan.embed.is_none() {
            "not run: no embeddings (the pipeline has no [embed] section)".into()
        } else {
            "not run: the embed stage has not produced embeddings".into()
        });
    }
    None
}

/// One pool: (chunk id, score, bm25 rank, dense rank), best first.
type Pool = Vec<(String, f64, Option<u32>, Option<u32>)>;

/// Everything the questions of one scope (a repository, or `*`) are answered from.
struct ScopeSearch<'a> {
    bm25: Option<&'a Bm25Scope>,
    vectors: Option<&'a Vectors>,
    queries: &'a HashMap<String, Vec<f32>>,
    analyzer: &'a crate::text::analyze::Analyzer,
    params: crate::bm25::Params,
    top_k: usize,
    rrf_k: f64,
}

/// A worker's BM25 searcher over the scope: length norms and accumulator built once.
type Lexical<'a> = Option<crate::bm25::Searcher<'a, Stored>>;

impl<'a> ScopeSearch<'a> {
    fn lexical(&self, q: &QuestionRow, k: usize, lex: &mut Lexical<'a>) -> Vec<(String, f64)> {
        let Some(scope) = self.bm25 else {
            return Vec::new();
        };
        lex.get_or_insert_with(|| crate::bm25::Searcher::new(&scope.index, self.params))
            .search(&self.analyzer.terms(&q.question), k)
            .into_iter()
            .map(|(d, s)| (scope.chunk_ids[d as usize].clone(), s))
            .collect()
    }

    fn dense(&self, q: &QuestionRow, k: usize) -> Vec<(String, f64)> {
        let (Some(v), Some(query)) = (self.vectors, self.queries.get(&q.question_id)) else {
            return Vec::new();
        };
        dense_search(query, &v.data, v.dims, None, k)
            .into_iter()
            .map(|(i, s)| (v.ids[i as usize].clone(), s))
            .collect()
    }

    /// The pool of variant `v` for question `q`.
    fn pool(&self, v: &Variant, q: &QuestionRow, lex: &mut Lexical<'a>) -> Pool {
        let ranked = |hits: Vec<(String, f64)>, lexical: bool| -> Pool {
            hits.into_iter()
                .enumerate()
                .map(|(i, (c, s))| {
                    let r = Some(i as u32 + 1);
                    if lexical {
                        (c, s, r, None)
                    } else {
                        (c, s, None, r)
                    }
                })
                .collect()
        };
        match v.retriever {
            Retriever::Bm25 => ranked(self.lexical(q, self.top_k, lex), true),
            Retriever::Dense => ranked(self.dense(q, self.top_k), false),
            Retriever::Hybrid => {
                let depth = FUSION_DEPTH.max(self.top_k);
                let a = self.lexical(q, depth, lex);
                let b = self.dense(q, depth);
                fuse([v.weight_bm25, v.weight_dense], v.fusion, a, b, self.rrf_k)
                    .into_iter()
                    .take(self.top_k)
                    .map(|f| (f.doc, f.score, f.ranks[0], f.ranks[1]))
                    .collect()
            }
        }
    }
}

impl Stage for Retrieve {
    fn name(&self) -> &'static str {
        "retrieve"
    }
    fn inputs(&self) -> &'static [&'static str] {
        &["chunk", "questions", "index", "embed"]
    }
    fn config(&self, plan: &Plan) -> Value {
        let vs: Vec<_> = plan
            .variants
            .iter()
            .map(|v| json!([v.name, v.retriever, v.weight_bm25, v.weight_dense, v.fusion]))
            .collect();
        json!({ "retrieve": plan.retrieve, "index": plan.index, "variants": vs })
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        if plan.variants.is_empty() {
            return Err("the pipeline defines no [[variants]]".into());
        }
        if plan.questions.is_none() {
            return Err("the pipeline names no question file".into());
        }
        Ok(())
    }
    fn version(&self) -> u32 {
        // 2: one partition per question scope, reused while its inputs are unchanged.
        2
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let store = ctx.store;
        let by_scope = questions_by_scope(store)?;
        let scopes = Bm25Scopes::new(store)?;
        let have_dense = Vectors::available(store)?;
        let an = plan.index.analyzer();
        let mut not_run = BTreeMap::new();
        // Variants that retrieve the same way share one computation.
        let mut groups: BTreeMap<String, Vec<&Variant>> = BTreeMap::new();
        for v in &plan.variants {
            if let Some(why) = not_run_reason(plan, v, have_dense) {
                not_run.insert(v.name.clone(), why);
                continue;
            }
            let key = format!(
                "{:?}/{}/{}/{:?}",
                v.retriever, v.weight_bm25, v.weight_dense, v.fusion
            );
            groups.entry(key).or_default().push(v);
        }
        let groups: Vec<Vec<&Variant>> = groups.into_values().collect();
        let needs_dense = groups.iter().any(|g| g[0].retriever != Retriever::Bm25);
        let (queries, vector_parts) = if needs_dense {
            (
                Vectors::questions(store)?,
                Parts::of(store, EmbeddingRow::CHUNKS)?,
            )
        } else {
            (HashMap::new(), Parts::default())
        };
        // A scope's partition is reused while its questions, its index, its vectors and the
        // configuration are unchanged.
        let config = self.config(plan);
        let jobs = scope_keys(&by_scope, &(self.version(), &config, &not_run), |scope| {
            let vectors: Vec<Option<&Vec<f32>>> = by_scope[scope]
                .iter()
                .map(|q| queries.get(&q.question_id))
                .collect();
            (
                scopes.checksums(scope),
                vector_parts.checksums(scope),
                vectors,
            )
        });
        let params = plan.index.params();
        // One scope at a time per worker: its index is opened in place and its vectors read, its
        // questions answered, its rows written, and all of it dropped.
        crate::pipeline::per_scope(ctx, RetrievalRow::TABLE, jobs, |scope| {
            let questions = &by_scope[scope];
            let bm25 = scopes.open(scope, true)?;
            let vectors = if needs_dense {
                Some(Vectors::of(store, &vector_parts.of_scope(scope))?)
            } else {
                None
            };
            let s = ScopeSearch {
                bm25: bm25.as_ref(),
                vectors: vectors.as_ref(),
                queries: &queries,
                analyzer: &an,
                params,
                top_k: plan.retrieve.top_k,
                rrf_k: plan.retrieve.rrf_k,
            };
            let pools: Vec<Vec<Pool>> = questions
                .par_iter()
                .map_init(
                    || None,
                    |lex, q| groups.iter().map(|vs| s.pool(vs[0], q, lex)).collect(),
                )
                .collect();
            let mut rows = Vec::new();
            for (gi, vs) in groups.iter().enumerate() {
                for v in vs {
                    for (q, qp) in questions.iter().zip(&pools) {
                        for (rank, (chunk_id, score, br, dr)) in qp[gi].iter().enumerate() {
                            rows.push(RetrievalRow {
                                variant: v.name.clone(),
                                question_id: q.question_id.clone(),
                                rank: rank as u32 + 1,
                                chunk_id: chunk_id.clone(),
                                score: *score,
                                bm25_rank: *br,
                                dense_rank: *dr,
                            });
                        }
                    }
                }
            }
            Ok(rows)
        })?;
        ctx.stat("not_run", json!(not_run));
        ctx.stat("scopes", by_scope.len());
        Ok(())
    }
}
