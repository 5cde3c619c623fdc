//! retrieve: the top-k pool of every variant for every question (`retrievals`), by BM25, exact
//! dense search over the `embeddings`, or their reciprocal rank fusion. Dense and hybrid variants
//! are reported as not run when there are no embeddings; nothing is faked.

use crate::artifact::Store;
use crate::config::{Plan, Retriever, Variant};
use crate::error::Result;
use crate::pipeline::{Ctx, Stage};
use crate::retrieval::{dense_search, rrf};
use crate::schema::{ChunkRow, EmbeddingRow, QuestionRow, RetrievalRow};
use crate::stages::index::{self, ALL};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// Depth of each input list before fusion.
pub const FUSION_DEPTH: usize = 100;

pub struct Retrieve;

/// Chunk and question vectors for dense search.
pub struct Dense {
    pub dims: usize,
    pub chunk_ids: Vec<String>,
    pub vectors: Vec<f32>,
    pub rows_by_repo: HashMap<String, Vec<u32>>,
    pub queries: HashMap<String, Vec<f32>>,
}

impl Dense {
    /// Loads the embed stage's vectors, if that stage has run.
    pub fn load(store: &Store, chunks: &[ChunkRow]) -> Result<Option<Dense>> {
        if store.manifest("embed")?.is_none() || store.files_of("embeddings")?.is_empty() {
            return Ok(None);
        }
        let emb: Vec<EmbeddingRow> = store.read("embeddings")?;
        let q: Vec<EmbeddingRow> = store.read("question_embeddings")?;
        let repo_of: HashMap<&str, &str> = chunks
            .iter()
            .map(|c| (c.chunk_id.as_str(), c.repo.as_str()))
            .collect();
        let dims = emb.first().map_or(0, |e| e.vector.len());
        let mut d = Dense {
            dims,
            chunk_ids: Vec::with_capacity(emb.len()),
            vectors: Vec::with_capacity(emb.len() * dims),
            rows_by_repo: HashMap::new(),
            queries: q.into_iter().map(|e| (e.id, e.vector)).collect(),
        };
        for e in emb {
            let row = d.chunk_ids.len() as u32;
            if let Some(repo) = repo_of.get(e.id.as_str()) {
                d.rows_by_repo
                    .entry(repo.to_string())
                    .or_default()
                    .push(row);
            }
            d.vectors.extend_from_slice(&e.vector);
            d.chunk_ids.push(e.id);
        }
        Ok(Some(d))
    }

    fn search(&self, q: &QuestionRow, k: usize) -> Vec<(String, f64)> {
        let Some(v) = self.queries.get(&q.question_id) else {
            return Vec::new();
        };
        let allowed = if q.repo == ALL {
            None
        } else {
            Some(self.rows_by_repo.get(&q.repo).map_or(&[][..], |r| r))
        };
        dense_search(v, &self.vectors, self.dims, allowed, k)
            .into_iter()
            .map(|(i, s)| (self.chunk_ids[i as usize].clone(), s))
            .collect()
    }
}

/// The variants the retrieve stage could not run, with the reason (from its manifest).
pub fn not_run(store: &Store) -> Result<BTreeMap<String, String>> {
    Ok(store
        .manifest("retrieve")?
        .and_then(|m| m.stats.get("not_run").cloned())
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
}

/// Why a variant cannot run under this plan, if it cannot.
pub fn not_run_reason(plan: &Plan, v: &Variant, have_dense: bool) -> Option<String> {
    if v.retriever != Retriever::Bm25 && !have_dense {
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

/// Everything a query needs to be answered by any retriever.
struct Searcher<'a> {
    bm25: &'a HashMap<String, crate::bm25::Index>,
    analyzer: &'a crate::text::analyze::Analyzer,
    params: crate::bm25::Params,
    dense: Option<&'a Dense>,
    top_k: usize,
    rrf_k: f64,
}

/// BM25 searchers of one worker thread, by scope: length norms and the score accumulator are
/// built once per scope, not once per query.
type Lexical<'a> = HashMap<String, crate::bm25::Searcher<'a>>;

impl<'a> Searcher<'a> {
    fn lexical(&self, q: &QuestionRow, k: usize, lex: &mut Lexical<'a>) -> Vec<(String, f64)> {
        let Some(ix) = index::scope_of(self.bm25, &q.repo) else {
            return Vec::new();
        };
        lex.entry(q.repo.clone())
            .or_insert_with(|| crate::bm25::Searcher::new(ix, self.params))
            .search(&self.analyzer.terms(&q.question), k)
            .into_iter()
            .map(|(d, s)| (ix.docs[d as usize].clone(), s))
            .collect()
    }

    fn dense(&self, q: &QuestionRow, k: usize) -> Vec<(String, f64)> {
        self.dense.map(|d| d.search(q, k)).unwrap_or_default()
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
                let a: Vec<String> = self
                    .lexical(q, depth, lex)
                    .into_iter()
                    .map(|(c, _)| c)
                    .collect();
                let b: Vec<String> = self.dense(q, depth).into_iter().map(|(c, _)| c).collect();
                rrf(&[a, b], &[v.weight_bm25, v.weight_dense], self.rrf_k)
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
            .map(|v| json!([v.name, v.retriever, v.weight_bm25, v.weight_dense]))
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
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let questions: Vec<QuestionRow> = ctx.store.read("questions")?;
        let chunks: Vec<ChunkRow> = ctx.store.read("chunks")?;
        let bm25 = index::load(ctx.store)?;
        let dense = Dense::load(ctx.store, &chunks)?;
        drop(chunks);
        let an = index::analyzer(&plan.index);
        let searcher = Searcher {
            bm25: &bm25,
            analyzer: &an,
            params: crate::bm25::Params {
                k1: plan.index.k1,
                b: plan.index.b,
            },
            dense: dense.as_ref(),
            top_k: plan.retrieve.top_k,
            rrf_k: plan.retrieve.rrf_k,
        };
        let mut not_run = BTreeMap::new();
        // Variants that retrieve the same way share one computation.
        let mut groups: BTreeMap<String, Vec<&Variant>> = BTreeMap::new();
        for v in &plan.variants {
            if let Some(why) = not_run_reason(plan, v, dense.is_some()) {
                not_run.insert(v.name.clone(), why);
                continue;
            }
            let key = format!("{:?}/{}/{}", v.retriever, v.weight_bm25, v.weight_dense);
            groups.entry(key).or_default().push(v);
        }
        let bar = ctx.bar((groups.len() * questions.len()) as u64, "queries");
        let mut rows = Vec::new();
        for vs in groups.values() {
            let pools: Vec<Pool> = questions
                .par_iter()
                .map_init(Lexical::new, |lex, q| {
                    let p = searcher.pool(vs[0], q, lex);
                    bar.inc(1);
                    p
                })
                .collect();
            for v in vs {
                for (q, pool) in questions.iter().zip(&pools) {
                    for (rank, (chunk_id, score, br, dr)) in pool.iter().enumerate() {
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
        bar.finish_and_clear();
        ctx.stat("not_run", json!(not_run));
        ctx.writer.write("retrievals", "retrievals", "", &rows)?;
        Ok(())
    }
}
