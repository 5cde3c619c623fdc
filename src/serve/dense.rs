//! Dense and hybrid search at query time: the run's embedding model, loaded on the first such
//! query, embeds the question as the embed stage embeds questions; a scope's chunk vectors are
//! read once and kept. Scores and fusion are the retrieve stage's, so a query ranks as the same
//! question did in the batch run.

use super::cache_put;
use crate::artifact::readers::{Parts, Vectors};
use crate::artifact::schema::EmbeddingRow;
use crate::artifact::scope::Scope;
use crate::artifact::Store;
use crate::config::{Fusion, Plan, Retriever};
use crate::error::{Error, Result};
use crate::models::{Embedder, TextKind};
use crate::retrieval::dense_search;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Scopes whose vectors are kept at once (a repository's vectors are its chunks × dims floats).
const CACHED_VECTORS: usize = 256;

/// The model and the vectors of the scopes searched so far.
pub(super) struct Dense {
    model: Mutex<Option<Arc<Embedder>>>,
    vectors: Mutex<HashMap<String, Arc<Vectors>>>,
    /// The `embeddings` partitions, read from the manifest once.
    parts: Option<Parts>,
}

impl Dense {
    pub(super) fn new(store: &Store) -> Result<Dense> {
        let parts = if Vectors::available(store)? {
            Some(Parts::of(store, EmbeddingRow::CHUNKS)?)
        } else {
            None
        };
        Ok(Dense {
            model: Mutex::new(None),
            vectors: Mutex::new(HashMap::new()),
            parts,
        })
    }

    fn parts(&self, plan: &Plan) -> Result<&Parts> {
        self.parts.as_ref().ok_or_else(|| {
            Error::Invalid(format!(
                "this run has no chunk vectors: {} has no [embed] section, or its embed stage did not run",
                plan.config_path.display()
            ))
        })
    }

    /// The question's vector, from the run's model (loaded on first use).
    fn query(&self, plan: &Plan, question: &str) -> Result<Vec<f32>> {
        let model = {
            let mut slot = self.model.lock().expect("no poisoned lock");
            match &*slot {
                Some(m) => m.clone(),
                None => {
                    let m = Arc::new(plan.load_model()?);
                    *slot = Some(m.clone());
                    m
                }
            }
        };
        let batch = plan
            .embed
            .as_ref()
            .expect("a model implies [embed]")
            .config
            .batch_tokens;
        let mut v = model.embed(&[question.to_string()], TextKind::Query, batch, |_, _| {})?;
        Ok(v.pop().unwrap_or_default())
    }

    /// The chunk vectors of `scope` (a repository, or `*`: every repository's).
    fn vectors(&self, store: &Store, plan: &Plan, scope: &Scope) -> Result<Arc<Vectors>> {
        // Every revision of a repository searches its repository's vectors.
        let group = scope.group();
        if let Some(v) = self.vectors.lock().expect("no poisoned lock").get(group) {
            return Ok(v.clone());
        }
        let parts = self.parts(plan)?;
        let files = parts.of_scope(scope);
        if files.is_empty() {
            return Err(Error::Invalid(format!(
                "no chunk vectors for repository `{group}` in this run"
            )));
        }
        let v = Arc::new(Vectors::of(store, &files)?);
        cache_put(&self.vectors, group, v.clone(), CACHED_VECTORS);
        Ok(v)
    }

    /// The top `k` of `scope` by cosine: (row of the scope's vectors, chunk id, score). A
    /// repository's row `n` is row `n` of its `chunks` partition (the embed stage writes one
    /// vector per chunk, in order).
    pub(super) fn search(
        &self,
        store: &Store,
        plan: &Plan,
        scope: &Scope,
        question: &str,
        k: usize,
        allowed: Option<&[u32]>,
    ) -> Result<Vec<(u32, String, f64)>> {
        let v = self.vectors(store, plan, scope)?;
        let q = self.query(plan, question)?;
        if q.len() != v.dims {
            return Err(Error::Invalid(format!(
                "the model gives {} dimensions, the run's vectors have {}",
                q.len(),
                v.dims
            )));
        }
        Ok(dense_search(&q, &v.data, v.dims, allowed, k)
            .into_iter()
            .map(|(i, s)| (i, v.ids[i as usize].clone(), s))
            .collect())
    }
}

/// Fuses BM25 and dense hits as the plan's first hybrid variant does (its weights and fusion;
/// equal-weight RRF when it has none): best first, the top `k`.
pub(super) fn fuse(
    plan: &Plan,
    lexical: Vec<(u32, String, f64)>,
    dense: Vec<(u32, String, f64)>,
    k: usize,
) -> Vec<(u32, String, f64)> {
    let v = plan
        .variants
        .iter()
        .find(|v| v.retrieval.retriever == Retriever::Hybrid);
    let weights = v.map_or([1.0, 1.0], |v| {
        [v.retrieval.weight_bm25, v.retrieval.weight_dense]
    });
    let fusion = v.map_or(Fusion::Rrf, |v| v.retrieval.fusion);
    let mut rows: HashMap<String, u32> = HashMap::new();
    for (row, id, _) in lexical.iter().chain(&dense) {
        rows.entry(id.clone()).or_insert(*row);
    }
    let pairs = |l: Vec<(u32, String, f64)>| -> Vec<(String, f64)> {
        l.into_iter().map(|(_, id, s)| (id, s)).collect()
    };
    crate::retrieval::fuse_hybrid(
        weights,
        fusion,
        pairs(lexical),
        pairs(dense),
        plan.retrieve.rrf_k,
    )
    .into_iter()
    .take(k)
    .map(|f| (rows[&f.doc], f.doc, f.score))
    .collect()
}
