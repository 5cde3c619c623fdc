//! retrieve: the top-k pool of every variant for every question (`retrievals`), by BM25, exact
//! dense search over the `embeddings`, or their reciprocal rank fusion. Dense and hybrid variants
//! are reported as not run when there are no embeddings; nothing is faked.

use crate::artifact::outcomes::NotRun;
use crate::artifact::readers::{
    questions_by_scope, Bm25Batch, Bm25Scope, Bm25Scopes, IndexKind, Parts, ScopeSearcher, Vectors,
};
use crate::artifact::schema::{
    to_batch, ChunkRow, EmbeddingRow, FileRetrievalRow, QuestionRow, RetrievalRow, Row, Scope,
    Table,
};
use crate::artifact::StageId;
use crate::config::{FileRanking, Plan, Retriever, Variant};
use crate::error::Result;
use crate::retrieval::{
    best_chunk_files, dense_search, file_prior, fuse_hybrid, rrf, FUSION_DEPTH,
};
use crate::stages::{scope_keys, Ctx, Stage};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

pub struct Retrieve;

/// Why a variant cannot run under this plan, if it cannot.
pub fn not_run_reason(plan: &Plan, v: &Variant, have_dense: bool) -> Option<NotRun> {
    if (v.retrieval.retriever != Retriever::Bm25 || v.packing.unit_dense > 0.0) && !have_dense {
        return Some(if plan.embed.is_none() {
            NotRun::NoEmbedSection
        } else {
            NotRun::NoEmbeddings
        });
    }
    None
}

/// One pool: (chunk id, score, bm25 rank, dense rank), best first.
type Pool = Vec<(String, f64, Option<u32>, Option<u32>)>;

/// A variant's pool for one question and its file ranking (file key, score; best first).
type Finished = (Pool, Vec<(String, f64)>);

/// Depth of the lists a file-ranking variant draws on: its files' best chunks, and the chunks its
/// file prior re-ranks into the pool.
pub const PRIOR_DEPTH: usize = 1000;

/// How many files a variant's file ranking keeps per question.
pub const FILE_DEPTH: usize = 100;

/// Everything the questions of one scope (a repository, or `*`) are answered from.
struct ScopeSearch<'a> {
    bm25: Option<&'a Bm25Scope>,
    /// The whole-file index of the scope (ids are file keys), for file-ranking variants.
    files: Option<&'a Bm25Scope>,
    vectors: Option<&'a Vectors>,
    queries: &'a HashMap<String, Vec<f32>>,
    analyzer: &'a crate::text::analyze::Analyzer,
    params: crate::retrieval::bm25::Params,
    top_k: usize,
    rrf_k: f64,
}

/// A worker's BM25 searchers over the scope's chunk and file indexes: length norms and
/// accumulators built once.
type Lexical<'a> = (Option<ScopeSearcher<'a>>, Option<ScopeSearcher<'a>>);

/// The lists one variant's pool is made from, before its files are known: (chunk id, score,
/// bm25 rank, dense rank), best first, as deep as the variant needs.
struct Drawn {
    pool: Pool,
    whole: Vec<(String, f64)>,
}

impl<'a> ScopeSearch<'a> {
    fn lexical(&self, q: &QuestionRow, k: usize, lex: &mut Lexical<'a>) -> Vec<(String, f64)> {
        let Some(scope) = self.bm25 else {
            return Vec::new();
        };
        lex.0
            .get_or_insert_with(|| scope.searcher(self.params))
            .search(&self.analyzer.terms(&q.question), k)
            .into_iter()
            .map(|(d, s)| (scope.chunk_ids[d as usize].clone(), s))
            .collect()
    }

    /// The whole-file BM25 ranking of the scope's files for `q` (file keys).
    fn whole_files(&self, q: &QuestionRow, lex: &mut Lexical<'a>) -> Vec<(String, f64)> {
        let Some(scope) = self.files else {
            return Vec::new();
        };
        lex.1
            .get_or_insert_with(|| scope.searcher(self.params))
            .search(&self.analyzer.terms(&q.question), FILE_DEPTH)
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

    /// The lists of variant `v` for question `q`: its pool (deeper for a file-ranking variant)
    /// and, for one, the whole-file ranking.
    fn draw(&self, v: &Variant, q: &QuestionRow, lex: &mut Lexical<'a>) -> Drawn {
        let k = if v.retrieval.files == FileRanking::Chunks {
            self.top_k
        } else {
            PRIOR_DEPTH.max(self.top_k)
        };
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
        let pool = match v.retrieval.retriever {
            Retriever::Bm25 => ranked(self.lexical(q, k, lex), true),
            Retriever::Dense => ranked(self.dense(q, k), false),
            Retriever::Hybrid => {
                let depth = FUSION_DEPTH.max(k);
                let a = self.lexical(q, depth, lex);
                let b = self.dense(q, depth);
                fuse_hybrid(
                    [v.retrieval.weight_bm25, v.retrieval.weight_dense],
                    v.retrieval.fusion,
                    a,
                    b,
                    self.rrf_k,
                )
                .into_iter()
                .take(k)
                .map(|f| (f.doc, f.score, f.ranks[0], f.ranks[1]))
                .collect()
            }
        };
        let whole = if v.retrieval.files == FileRanking::Chunks {
            Vec::new()
        } else {
            self.whole_files(q, lex)
        };
        Drawn { pool, whole }
    }

    /// Finishes a variant's lists into its pool (top k) and its file ranking, with each drawn
    /// chunk's file key from `file_of`.
    fn finish(&self, v: &Variant, drawn: Drawn, file_of: &HashMap<String, String>) -> Finished {
        let Drawn { mut pool, whole } = drawn;
        if v.retrieval.files == FileRanking::Chunks {
            pool.truncate(self.top_k);
            return (pool, Vec::new());
        }
        let key = |c: &str| file_of.get(c).map(|s| s.as_str()).unwrap_or("");
        let files: Vec<(String, f64)> = match v.retrieval.files {
            FileRanking::Chunks | FileRanking::Whole => whole,
            FileRanking::Fused => {
                let best = best_chunk_files(pool.iter().map(|(c, s, _, _)| (key(c), *s)));
                let lists = [
                    whole.into_iter().map(|(f, _)| f).collect(),
                    best.into_iter().map(|(f, _)| f).collect(),
                ];
                rrf(&lists, &[1.0, 1.0], self.rrf_k)
                    .into_iter()
                    .take(FILE_DEPTH)
                    .map(|f| (f.doc, f.score))
                    .collect()
            }
        };
        if v.retrieval.file_weight > 0.0 {
            let ranks: HashMap<String, (Option<u32>, Option<u32>)> = pool
                .iter()
                .map(|(c, _, b, d)| (c.clone(), (*b, *d)))
                .collect();
            let scored: Vec<(String, f64, String)> = pool
                .into_iter()
                .map(|(c, s, _, _)| {
                    let f = key(&c).to_string();
                    (c, s, f)
                })
                .collect();
            pool = file_prior(scored, &files, v.retrieval.file_weight)
                .into_iter()
                .take(self.top_k)
                .map(|(c, s)| {
                    let (b, d) = ranks[&c];
                    (c, s, b, d)
                })
                .collect();
        } else {
            pool.truncate(self.top_k);
        }
        (pool, files)
    }
}

/// The (repository, path) of every chunk in the partitions of a batch of scopes (revisions of one
/// repository), read once for the batch, for the file rankings of the variants that rank files.
type Located = HashMap<String, (String, String)>;

/// The columns that locate a chunk.
#[derive(serde::Deserialize)]
struct ChunkFile {
    chunk_id: String,
    repo: String,
    path: String,
}

/// [`Located`] of a batch of `scopes` under every chunker in `chunkers`, when the batch has
/// several scopes to share it; a scope alone reads only the chunks it drew (see
/// [`drawn_files`]), so the scope over every repository never holds every chunk's location.
fn located(
    store: &crate::artifact::Store,
    chunk_parts: &Parts,
    chunkers: &[Option<&str>],
    scopes: &[Scope],
) -> Result<Option<Located>> {
    if scopes.len() < 2 {
        return Ok(None);
    }
    let mut out = HashMap::new();
    for part in chunk_parts.of_batch(scopes, chunkers) {
        let rows: Vec<ChunkFile> = store.read_rows_of(part, Some(&["chunk_id", "repo", "path"]))?;
        out.extend(rows.into_iter().map(|r| (r.chunk_id, (r.repo, r.path))));
    }
    Ok(Some(out))
}

/// The chunk vectors `scope` searches (a chunker's scope reads that chunker's): a revision of a
/// repository read at several searches its own chunks' vectors, in its index's order.
fn vectors_of(
    store: &crate::artifact::Store,
    parts: &Parts,
    scope: &Scope,
    bm25: Option<&Bm25Scope>,
) -> Result<Vectors> {
    let all = Vectors::of(store, &parts.of_scope(scope))?;
    Ok(match bm25.and_then(|b| b.subset.as_ref().map(|s| (b, s))) {
        Some((b, sub)) => all.select(
            sub.members()
                .iter()
                .filter_map(|&d| b.chunk_ids.get(d as usize))
                .map(|s| s.as_str()),
        ),
        None => all,
    })
}

impl Stage for Retrieve {
    fn id(&self) -> StageId {
        StageId::Retrieve
    }
    fn inputs(&self) -> &'static [StageId] {
        &[
            StageId::Chunk,
            StageId::Questions,
            StageId::Index,
            StageId::Embed,
        ]
    }
    fn config(&self, plan: &Plan) -> Value {
        let vs: Vec<_> = plan.variants.iter().map(|v| v.key(&v.retrieval)).collect();
        json!({ "retrieve": plan.retrieve, "index": plan.index, "variants": vs })
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        plan.answers_questions()
    }
    fn version(&self) -> u32 {
        // 2: one partition per question scope, reused while its inputs are unchanged; 3:
        // `file_retrievals` beside `retrievals`, each scope's partition of both.
        3
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let store = ctx.store;
        let by_scope = questions_by_scope(store)?;
        let scopes = Bm25Scopes::new(store)?;
        let have_dense = Vectors::available(store)?;
        let an = plan.index.analyzer();
        let (groups, not_run) = groups_of(plan, have_dense);
        let needs_dense = groups.iter().any(|g| g[0].retrieval.dense());
        let ranks_files = groups.iter().any(|g| g[0].retrieval.ranks_files());
        let (queries, vector_parts) = if needs_dense {
            (
                Vectors::questions(store)?,
                Parts::of(store, EmbeddingRow::CHUNKS)?,
            )
        } else {
            (HashMap::new(), Parts::default())
        };
        let file_scopes = Bm25Scopes::of_kind(store, IndexKind::Files)?;
        let chunk_parts = Parts::of(store, ChunkRow::TABLE)?;
        // A scope's partition is reused while its questions, its index, its vectors and the
        // configuration are unchanged.
        let config = self.config(plan);
        // Every chunker's index and vectors (`scope`, `scope~name`); a group uses its variants'.
        let chunkers = plan.chunker_names();
        let chunker_of_group: Vec<usize> =
            groups.iter().map(|g| plan.chunker_index(g[0])).collect();
        let jobs = scope_keys(&by_scope, &(self.version(), &config, &not_run), |scope| {
            let vectors: Vec<Option<&Vec<f32>>> = by_scope[scope]
                .iter()
                .map(|q| queries.get(&q.question_id))
                .collect();
            (
                scopes.checksums_of(scope, &chunkers),
                vector_parts.checksums_of(scope, &chunkers),
                vectors,
                file_scopes.checksums(scope),
                chunk_parts.checksums_of(scope, &chunkers),
            )
        });
        let params = plan.index.params();
        // `file_retrievals` only when a variant ranks files.
        let tables: &[Table] = if ranks_files {
            &[RetrievalRow::TABLE, FileRetrievalRow::TABLE]
        } else {
            &[RetrievalRow::TABLE]
        };
        // One scope at a time per worker: its index is opened in place and its vectors read, its
        // questions answered, its rows written, and all of it dropped.
        // A batch of scopes opens each index it searches once: its revisions share it.
        let prepare = |batch: &[Scope]| -> Result<Prepared> {
            let bm25 = scopes.open_batch_of(batch, &chunkers, true)?;
            if !ranks_files {
                return Ok((None, bm25, None));
            }
            let files = file_scopes.open_batch(batch, true)?;
            let located = located(store, &chunk_parts, &chunkers, batch)?;
            Ok((located, bm25, Some(files)))
        };
        crate::stages::per_scope_tables(
            ctx,
            tables,
            jobs,
            &by_scope,
            prepare,
            |(located, bm25, files), scope| {
                let questions = &by_scope[scope];
                let files = files.as_ref().and_then(|f| f.scope(scope));
                let bm25s = bm25.scopes_of(scope, &chunkers);
                let mut opened = Vec::new();
                for (c, bm25) in chunkers.iter().zip(bm25s) {
                    let vectors = if needs_dense {
                        let cs = scope.with_chunker(*c);
                        Some(vectors_of(store, &vector_parts, &cs, bm25.as_ref())?)
                    } else {
                        None
                    };
                    opened.push((bm25, vectors));
                }
                let searches: Vec<ScopeSearch> = opened
                    .iter()
                    .map(|(bm25, vectors)| ScopeSearch {
                        bm25: bm25.as_ref(),
                        files: files.as_ref(),
                        vectors: vectors.as_ref(),
                        queries: &queries,
                        analyzer: &an,
                        params,
                        top_k: plan.retrieve.top_k,
                        rrf_k: plan.retrieve.rrf_k,
                    })
                    .collect();
                let drawn: Vec<Vec<Drawn>> = questions
                    .par_iter()
                    .map_init(
                        || -> Vec<Lexical> { searches.iter().map(|_| (None, None)).collect() },
                        |lex, q| {
                            groups
                                .iter()
                                .zip(&chunker_of_group)
                                .map(|(vs, &ci)| searches[ci].draw(vs[0], q, &mut lex[ci]))
                                .collect()
                        },
                    )
                    .collect();
                let file_of = if ranks_files {
                    let parts = chunk_parts.of_scopes(scope, &chunkers);
                    drawn_files(store, &parts, located.as_ref(), scope, &drawn)?
                } else {
                    HashMap::new()
                };
                let finished: Vec<Vec<Finished>> = drawn
                    .into_par_iter()
                    .map(|d| {
                        groups
                            .iter()
                            .zip(&chunker_of_group)
                            .zip(d)
                            .map(|((vs, &ci), d)| searches[ci].finish(vs[0], d, &file_of))
                            .collect()
                    })
                    .collect();
                let (rows, file_rows) = retrieval_rows(scope, &groups, questions, &finished);
                let mut batches = vec![to_batch(&rows)?];
                if ranks_files {
                    batches.push(to_batch(&file_rows)?);
                }
                Ok(batches)
            },
        )?;
        ctx.stat(crate::artifact::readers::NOT_RUN, json!(not_run));
        ctx.stat("scopes", by_scope.len());
        Ok(())
    }
}

/// What a batch of scopes shares: the chunks' locations (when files are ranked), the chunk
/// indexes and the file index.
type Prepared = (Option<Located>, Bm25Batch, Option<Bm25Batch>);

/// The variants that can run, grouped by how they retrieve (variants that retrieve the same way
/// share one computation), and those that cannot, with the reason.
fn groups_of(plan: &Plan, have_dense: bool) -> (Vec<Vec<&Variant>>, BTreeMap<String, NotRun>) {
    let mut not_run = BTreeMap::new();
    // Variants that retrieve the same way (equal specs) share one computation, in the order
    // their first variant comes.
    let mut groups: Vec<Vec<&Variant>> = Vec::new();
    for v in &plan.variants {
        if let Some(why) = not_run_reason(plan, v, have_dense) {
            not_run.insert(v.name.clone(), why);
            continue;
        }
        match groups.iter_mut().find(|g| g[0].retrieval == v.retrieval) {
            Some(g) => g.push(v),
            None => groups.push(vec![v]),
        }
    }
    (groups, not_run)
}

/// The rows of each group's variants for each question: the pool in rank order, and the file
/// ranking of the variants that rank files.
fn retrieval_rows(
    scope: &Scope,
    groups: &[Vec<&Variant>],
    questions: &[QuestionRow],
    finished: &[Vec<Finished>],
) -> (Vec<RetrievalRow>, Vec<FileRetrievalRow>) {
    let (mut rows, mut file_rows) = (Vec::new(), Vec::new());
    for (gi, vs) in groups.iter().enumerate() {
        for v in vs {
            for (q, qp) in questions.iter().zip(finished) {
                let (pool, files) = &qp[gi];
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
                for (rank, (f, score)) in files.iter().enumerate() {
                    let (repo, path) = split_file_key(scope, f);
                    file_rows.push(FileRetrievalRow {
                        variant: v.name.clone(),
                        question_id: q.question_id.clone(),
                        rank: rank as u32 + 1,
                        repo,
                        path,
                        score: *score,
                    });
                }
            }
        }
    }
    (rows, file_rows)
}

/// The file key of every chunk a file-ranking variant drew: from its batch's `located`, or read
/// from the scope's chunk partitions `parts` (those chunks only) without one.
fn drawn_files(
    store: &crate::artifact::Store,
    parts: &[&crate::artifact::FileEntry],
    located: Option<&Located>,
    scope: &Scope,
    drawn: &[Vec<Drawn>],
) -> Result<HashMap<String, String>> {
    let ids: HashSet<&str> = drawn
        .iter()
        .flat_map(|d| d.iter().flat_map(|d| d.pool.iter().map(|p| p.0.as_str())))
        .collect();
    if let Some(located) = located {
        return Ok(ids
            .into_iter()
            .filter_map(|id| {
                let (repo, path) = located.get(id)?;
                Some((id.to_string(), file_key(scope, repo, path)))
            })
            .collect());
    }
    let rows: Vec<ChunkFile> =
        store.read_where(parts, &["chunk_id", "repo", "path"], "chunk_id", |id| {
            ids.contains(id)
        })?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let key = file_key(scope, &r.repo, &r.path);
            (r.chunk_id, key)
        })
        .collect())
}

/// A file's key in a scope's rankings: its path, or `repo/path` in the scope over all.
fn file_key(scope: &Scope, repo: &str, path: &str) -> String {
    if scope.is_all() {
        format!("{repo}/{path}")
    } else {
        path.to_string()
    }
}

/// The (repository, path) of a file key of `scope` (see [`file_key`]).
fn split_file_key(scope: &Scope, key: &str) -> (String, String) {
    if scope.is_all() {
        let (r, p) = key.split_once('/').unwrap_or(("", key));
        (r.to_string(), p.to_string())
    } else {
        (scope.group().to_string(), key.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::COSINE_VERSION;

    /// Retrieve's key for each variant of a plan with one BM25 and one hybrid variant.
    fn keys() -> Vec<Value> {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("d")).unwrap();
        let toml = "[pipeline]\nname = \"t\"\n[[repos]]\nname = \"d\"\ndir = \"d\"\n\
            [[variants]]\nname = \"lexical\"\nretriever = \"bm25\"\npacker = \"rank\"\n\
            [[variants]]\nname = \"fused\"\nretriever = \"hybrid\"\nfusion = \"score\"\npacker = \"rank\"\n";
        let plan = Plan::parse(&t.path().join("p.toml"), toml).unwrap();
        Retrieve.config(&plan)["variants"]
            .as_array()
            .unwrap()
            .clone()
    }

    #[test]
    fn only_dense_scores_key_on_the_cosine_version() {
        let keys = keys();
        let cosine = json!({ "cosine": COSINE_VERSION });
        // A BM25 variant's key is as it was before dense scores had a version: its cached
        // retrievals stay valid when the cosine's arithmetic changes.
        assert_eq!(keys[0], json!(["lexical", "bm25", 1.0, 1.0, "rrf"]));
        assert_eq!(keys[1].as_array().unwrap().last(), Some(&cosine));
    }
}
