//! A finished run as a query service, shared by `ri-batch ask` and `ri-batch serve`: BM25, dense
//! and hybrid search over a repository's stored index and vectors, commit-message search, and extractive answers (pack, select, hold the reply to the
//! contract, render the source lines) with a variant's settings.

mod dense;
pub mod http;

use crate::answer::selectors::{self, Evidence};
use crate::answer::{self, Ask, PackInputs, Piece};
use crate::artifact::outcomes::{Answer as Outcome, Reason};
use crate::artifact::readers::{Bm25Scope, Bm25Scopes};
use crate::artifact::schema::{ChunkRow, CommitRow, FileRow, Row};
use crate::artifact::scope::Scope;
use crate::artifact::{sha256_hex, Store};
use crate::config::{Plan, Retriever, Selector, Variant};
use crate::error::{Error, Result};
use crate::packing::Candidate;
use crate::repos::read_source;
use crate::text::analyze::Analyzer;
use crate::text::lines_of;
use crate::text::tokens::TokenCounter;
use serde::Serialize;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Repositories whose files or commits are kept in memory at once (a bound, not a need).
const CACHED_REPOS: usize = 64;
/// Opened BM25 scopes kept at once: a scope holds its documents' ids and lengths (its postings
/// stay in the mapped file), about 50 bytes per chunk, so a run's every scope usually fits.
const CACHED_SCOPES: usize = 4096;

/// Puts `value` in a bounded cache, emptying it first when full.
fn cache_put<T>(cache: &Mutex<HashMap<String, Arc<T>>>, key: &str, value: Arc<T>, bound: usize) {
    let mut cache = cache.lock().expect("no poisoned lock");
    if cache.len() >= bound {
        cache.clear();
    }
    cache.insert(key.to_string(), value);
}

/// One search hit.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub chunk_id: String,
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub score: f64,
    pub text: String,
}

/// One piece of an accepted answer: the source lines, verbatim, with their citation.
#[derive(Debug, Clone, Serialize)]
pub struct Cited {
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub lines: String,
}

/// An answer under the extractive contract.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub variant: String,
    pub outcome: Outcome,
    /// Why it was refused (`refused`, or the contract's reason), empty when answered.
    pub reason: String,
    /// The selector's raw reply.
    pub reply: String,
    /// The pack's support for the question (see [`selectors::support`]).
    pub support: f64,
    pub tokens: usize,
    pub evidence: Vec<Cited>,
    /// The evidence rendered as `path:start-end` followed by its lines.
    pub rendered: String,
}

/// One commit hit.
#[derive(Debug, Clone, Serialize)]
pub struct CommitHit {
    pub repo: String,
    pub commit: String,
    /// Commit time, seconds since the Unix epoch.
    pub time: i64,
    pub subject: String,
    pub score: f64,
}

/// A repository's commits and their BM25 index (subject and body, the run's analyzer), built
/// from its `commits` partition on first use: at most `[scan] max_commits` documents.
struct Commits {
    rows: Vec<CommitRow>,
    index: crate::retrieval::bm25::Index,
}

/// A repository's scanned files by (path, commit first scanned at), read when an answer renders
/// from them.
type Files = HashMap<(String, String), FileRow>;

/// A finished run, opened for queries.
pub struct Run {
    pub plan: Plan,
    store: Store,
    analyzer: Analyzer,
    counter: TokenCounter,
    scopes: Mutex<HashMap<String, Arc<Bm25Scope>>>,
    /// The `chunks` partitions, read from the manifests once.
    chunk_parts: crate::artifact::readers::Parts,
    files: Mutex<HashMap<String, Arc<Files>>>,
    commits: Mutex<HashMap<String, Arc<Commits>>>,
    /// The embedding model and vectors, for dense and hybrid search.
    dense: dense::Dense,
}

impl Run {
    /// Opens a run from its pipeline file, or from an output directory that a run wrote (its
    /// `run.json` names the pipeline, whose settings apply). An output directory answers only
    /// from itself: a copy of one, or one the pipeline no longer points at, reads its own
    /// tables, never those at the pipeline's `output_dir`.
    pub fn open(target: &Path) -> Result<Run> {
        let own_dir = target.is_dir().then(|| target.to_path_buf());
        let pipeline = if target.is_dir() {
            let record = target.join(crate::artifact::RUN_RECORD);
            let text = std::fs::read_to_string(&record).map_err(|e| Error::io(&record, e))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| Error::Invalid(format!("{}: {e}", record.display())))?;
            let p = v["pipeline"].as_str().ok_or_else(|| {
                Error::Invalid(format!("{}: no `pipeline` entry", record.display()))
            })?;
            PathBuf::from(p)
        } else {
            target.to_path_buf()
        };
        let mut plan = Plan::load(&pipeline)?;
        if let Some(dir) = own_dir {
            plan.output_dir = dir;
        }
        let store = Store::new(&plan.output_dir);
        if store.manifest(crate::artifact::StageId::Index)?.is_none() {
            return Err(Error::Invalid(format!(
                "{}: no finished index stage; run `ri-batch run {}` first",
                plan.output_dir.display(),
                pipeline.display()
            )));
        }
        let chunk_parts = crate::artifact::readers::Parts::of(&store, ChunkRow::TABLE)?;
        let dense = dense::Dense::new(&store)?;
        Ok(Run {
            dense,
            analyzer: plan.index.analyzer(),
            counter: TokenCounter::from_setting(&plan.pack.tokenizer, &plan.root)?,
            store,
            plan,
            scopes: Mutex::new(HashMap::new()),
            chunk_parts,
            files: Mutex::new(HashMap::new()),
            commits: Mutex::new(HashMap::new()),
        })
    }

    /// The scope a query for `repo` searches (`*` when none is given).
    fn scope(&self, repo: Option<&str>) -> Result<Arc<Bm25Scope>> {
        let scope = scope_for(repo)?;
        let key = scope.as_str();
        if let Some(s) = self.scopes.lock().expect("no poisoned lock").get(key) {
            return Ok(s.clone());
        }
        let opened = Bm25Scopes::new(&self.store)?
            .open(&scope, true)?
            .ok_or_else(|| {
                Error::Invalid(match repo {
                    Some(r) => format!("no index for repository `{r}` in this run"),
                    None => "this run has no index over all repositories: give a repo".into(),
                })
            })?;
        let s = Arc::new(opened);
        cache_put(&self.scopes, key, s.clone(), CACHED_SCOPES);
        Ok(s)
    }

    /// The top `k` commits of `repo` for `query` by BM25 over their messages (`repo` may be left
    /// out when the run has one repository).
    pub fn commits(&self, query: &str, repo: Option<&str>, k: usize) -> Result<Vec<CommitHit>> {
        let repo = match (repo, self.plan.repos.as_slice()) {
            (Some(r), _) => r,
            (None, [only]) => only.name.as_str(),
            (None, _) => {
                return Err(Error::Invalid(
                    "give a repo: commits are searched one repository at a time".into(),
                ))
            }
        };
        let c = self.commit_index(repo)?;
        let params = self.plan.index.params();
        Ok(c.index
            .search(&self.analyzer.terms(query), k, params)
            .into_iter()
            .map(|(d, score)| {
                let r = &c.rows[d as usize];
                CommitHit {
                    repo: r.repo.clone(),
                    commit: r.commit.clone(),
                    time: r.time,
                    subject: r.subject.clone(),
                    score,
                }
            })
            .collect())
    }

    fn commit_index(&self, repo: &str) -> Result<Arc<Commits>> {
        if let Some(c) = self.commits.lock().expect("no poisoned lock").get(repo) {
            return Ok(c.clone());
        }
        let scope = scope_for(Some(repo))?;
        let repo = scope.repo_name();
        if self.plan.repo(repo).is_none() {
            return Err(Error::Invalid(format!(
                "no repository `{repo}` in this run"
            )));
        }
        let part = self.part(CommitRow::TABLE, repo)?.ok_or_else(|| {
            Error::Invalid(format!(
                "no commits of `{repo}` in this run (a plain directory, or [scan] max_commits = 0)"
            ))
        })?;
        let rows: Vec<CommitRow> = self.store.read_rows(&part)?;
        let index = crate::retrieval::bm25::Index::build(rows.iter().map(|r| {
            let text = format!("{}\n{}", r.subject, r.body);
            (r.commit.clone(), self.analyzer.terms(&text))
        }));
        let c = Arc::new(Commits { rows, index });
        cache_put(&self.commits, repo, c.clone(), CACHED_REPOS);
        Ok(c)
    }

    /// The committed partition of `table` for `repo`, if there is one.
    fn part(
        &self,
        table: crate::artifact::schema::Table,
        repo: &str,
    ) -> Result<Option<crate::artifact::FileEntry>> {
        Ok(crate::artifact::readers::Parts::of(&self.store, table)?
            .get(repo)
            .cloned())
    }

    /// A repository's scanned files.
    fn files(&self, repo: &str) -> Result<Arc<Files>> {
        if let Some(f) = self.files.lock().expect("no poisoned lock").get(repo) {
            return Ok(f.clone());
        }
        let mut files = HashMap::new();
        if let Some(part) = self.part(FileRow::TABLE, repo)? {
            for f in self.store.read_rows::<FileRow>(&part)? {
                files.insert((f.path.clone(), f.commit.clone()), f);
            }
        }
        let f = Arc::new(files);
        cache_put(&self.files, repo, f.clone(), CACHED_REPOS);
        Ok(f)
    }

    /// The chunk rows of scope hits `(document number, chunk id, score)`, in hit order. A
    /// repository's document `n` is row `n` of its `chunks` partition (the index was built in
    /// that order), so only the rows hit are read; `*` hits are read by id.
    fn rows(
        &self,
        repo: Option<&str>,
        hits: &[(u32, String, f64)],
    ) -> Result<Vec<(ChunkRow, f64)>> {
        let parts = &self.chunk_parts;
        let scope = scope_for(repo)?;
        if let Some(part) = parts.get(scope.group()) {
            let mut at: Vec<u32> = hits.iter().map(|h| h.0).collect();
            at.sort_unstable();
            at.dedup();
            let fields = ChunkRow::fields();
            let cols: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
            let rows: Vec<ChunkRow> = self.store.read_rows_at(part, &at, &cols)?;
            let by_doc: HashMap<u32, ChunkRow> = at.into_iter().zip(rows).collect();
            return hits
                .iter()
                .map(|(d, id, s)| match by_doc.get(d) {
                    Some(c) if &c.chunk_id == id => Ok((c.clone(), *s)),
                    _ => Err(Error::artifact(
                        &part.path,
                        format!("row {d} is not chunk {id} of the index"),
                    )),
                })
                .collect();
        }
        let wanted = hits.iter().map(|(_, id, _)| id.as_str()).collect();
        let all = parts.of_scope(&Scope::all());
        let mut by_id = crate::artifact::readers::chunks_by_id(&self.store, &all, &wanted)?;
        Ok(hits
            .iter()
            .filter_map(|(_, id, s)| by_id.remove(id).map(|c| (c, *s)))
            .collect())
    }

    /// The top `k` chunks for `query` in `repo`'s scope (all repositories without one), by BM25,
    /// by cosine to the query's vector, or fused as the run's hybrid variant fuses.
    pub fn search(
        &self,
        query: &str,
        repo: Option<&str>,
        k: usize,
        retriever: Retriever,
    ) -> Result<Vec<Hit>> {
        let scope = &scope_for(repo)?;
        // A revision's dense search is over its own chunks' rows.
        let members = match retriever {
            Retriever::Bm25 => None,
            _ => self
                .scope(repo)?
                .subset
                .as_ref()
                .map(|s| s.members().to_vec()),
        };
        let allowed = members.as_deref();
        let hits = match retriever {
            Retriever::Bm25 => self.lexical(query, repo, k)?,
            Retriever::Dense => {
                self.dense
                    .search(&self.store, &self.plan, scope, query, k, allowed)?
            }
            Retriever::Hybrid => {
                let depth = crate::retrieval::FUSION_DEPTH.max(k);
                let lexical = self.lexical(query, repo, depth)?;
                let dense =
                    self.dense
                        .search(&self.store, &self.plan, scope, query, depth, allowed)?;
                dense::fuse(&self.plan, lexical, dense, k)
            }
        };
        Ok(self
            .rows(repo, &hits)?
            .into_iter()
            .map(|(c, score)| Hit {
                chunk_id: c.chunk_id,
                repo: c.repo,
                path: c.path,
                start_line: c.start_line,
                end_line: c.end_line,
                score,
                text: c.text,
            })
            .collect())
    }

    /// The BM25 hits of `query` in `repo`'s scope: (document, chunk id, score).
    fn lexical(
        &self,
        query: &str,
        repo: Option<&str>,
        k: usize,
    ) -> Result<Vec<(u32, String, f64)>> {
        let scope = self.scope(repo)?;
        let params = self.plan.index.params();
        Ok(scope
            .search(&self.analyzer.terms(query), k, params)
            .into_iter()
            .map(|(d, s)| (d, scope.chunk_ids[d as usize].clone(), s))
            .collect())
    }

    /// The chunk rows of the BM25 search with their scores.
    fn ranked(&self, query: &str, repo: Option<&str>, k: usize) -> Result<Vec<(ChunkRow, f64)>> {
        let hits = self.lexical(query, repo, k)?;
        self.rows(repo, &hits)
    }

    /// The variant an answer follows: the one named, else the first BM25 variant.
    pub fn variant(&self, name: Option<&str>) -> Result<&Variant> {
        let vs = &self.plan.variants;
        let v = match name {
            Some(n) => vs.iter().find(|v| v.name == n).ok_or_else(|| {
                Error::Invalid(format!(
                    "no variant `{n}` in {}",
                    self.plan.config_path.display()
                ))
            })?,
            None => vs
                .iter()
                .find(|v| {
                    v.retrieval.retriever == Retriever::Bm25
                        && !v.packing.packer.reads_repository()
                        && v.packing.unit_dense == 0.0
                        && v.retrieval.chunker.is_none()
                })
                .ok_or_else(|| Error::Invalid("the pipeline has no BM25 variant".into()))?,
        };
        if v.retrieval.retriever != Retriever::Bm25
            || v.packing.packer.reads_repository()
            || v.packing.unit_dense > 0.0
        {
            return Err(Error::Invalid(format!(
                "variant `{}`: answers support BM25 retrieval with the rank, marginal-gain or \
                 compact packer (units scored by terms only, no `unit_dense`)",
                v.name
            )));
        }
        if let Some(c) = &v.retrieval.chunker {
            return Err(Error::Invalid(format!(
                "variant `{}`: answers search the `[chunk]` chunks; this variant's are \
                 `[chunkers.{c}]`'s",
                v.name
            )));
        }
        Ok(v)
    }

    /// Answers `question` from `repo` as `variant` would (its pool depth, packer, budget unless
    /// `budget` is given, and selector; `oracle` and `llm` selectors need more than a question,
    /// so they answer as `calibrated`).
    pub fn answer(
        &self,
        question: &str,
        repo: Option<&str>,
        budget: Option<crate::config::Budget>,
        variant: Option<&str>,
    ) -> Result<Answer> {
        let v = self.variant(variant)?;
        let budget = budget.unwrap_or(v.packing.budget).get();
        let hits = self.ranked(question, repo, self.plan.retrieve.top_k)?;
        let scope = self.scope(repo)?;
        let cands: Vec<Candidate> = hits
            .iter()
            .map(|(c, score)| Candidate::of(c, self.counter.count(&c.text) as u32, *score))
            .collect();
        let count = |t: &str| self.counter.count(t);
        let params = v.packing.compact_params(self.plan.pack.compact_params());
        let idf = |t: &str| scope.idf(t);
        let inputs = PackInputs {
            question,
            analyzer: &self.analyzer,
            idf: &idf,
            count: &count,
            params: &params,
            dense: None,
            repo: None,
        };
        let packed = answer::pack(v.packing.packer, budget, &cands, &inputs);
        let tokens = crate::packing::tokens_of(&packed);
        // Each packed chunk's file version: its repository, path and first commit. A repository
        // read at several revisions packs chunks of one path scanned at several commits: each
        // piece is hashed and rendered at its own chunk's.
        let commit_of: HashMap<&str, &str> = hits
            .iter()
            .map(|(c, _)| (c.chunk_id.as_str(), c.commit.as_str()))
            .collect();
        let mut data: HashMap<String, Arc<Files>> = HashMap::new();
        for p in &packed {
            if !data.contains_key(&p.repo) {
                data.insert(p.repo.clone(), self.files(&p.repo)?);
            }
        }
        let pieces = packed.iter().map(Piece::from);
        let mut evidence = answer::label(pieces, |p| {
            let commit = commit_of.get(p.passage).copied().unwrap_or("");
            let scanned = data[p.repo]
                .get(&(p.path.to_string(), commit.to_string()))
                .and_then(|f| lines_of(&f.text, p.start_line, p.end_line))
                .unwrap_or_default();
            sha256_hex(scanned.as_bytes())
        });
        for (e, p) in evidence.iter_mut().zip(&packed) {
            e.commit = commit_of.get(p.chunk_id.as_str()).map(|c| c.to_string());
        }
        let idf = |t: &str| scope.idf_or_max(t);
        let terms = selectors::weighted_terms(question, &self.analyzer, &idf);
        let support = selectors::support(&terms, &evidence, &self.analyzer);
        // `oracle` and `llm` need more than a question: they answer as `calibrated`.
        let selector = match v.selector {
            Selector::Lexical => Selector::Lexical,
            _ => Selector::Calibrated,
        };
        let ask = Ask {
            question,
            terms: &terms,
            support,
            quotes: &[],
        };
        let x = &self.plan.extract;
        let reply = answer::reply(selector, &ask, &evidence, &self.analyzer, x, None);
        // Each source file version is read from git once, however many of its spans were accepted.
        let sources: RefCell<HashMap<(String, String, String), Option<String>>> =
            Default::default();
        let read_lines = |e: &Evidence| -> Option<String> {
            let commit = e.commit.clone()?;
            let mut sources = sources.borrow_mut();
            let text = sources
                .entry((e.repo.clone(), e.path.clone(), commit.clone()))
                .or_insert_with(|| read_source(&self.plan, &e.repo, &commit, &e.path).ok())
                .as_deref()?;
            lines_of(text, e.start_line, e.end_line)
        };
        let settled = answer::settle(reply, &evidence, x.max_ids, &read_lines);
        let answered = settled.reason == Reason::Ok;
        Ok(Answer {
            variant: v.name.clone(),
            outcome: if answered {
                Outcome::Answered
            } else {
                Outcome::Refused
            },
            reason: if answered {
                String::new()
            } else {
                settled.reason.to_string()
            },
            reply: settled.raw_reply,
            support,
            tokens,
            evidence: settled
                .parts
                .unwrap_or_default()
                .into_iter()
                .map(|(e, lines)| Cited {
                    repo: e.repo,
                    path: e.path,
                    start_line: e.start_line,
                    end_line: e.end_line,
                    lines,
                })
                .collect(),
            rendered: settled.rendered,
        })
    }
}
/// The scope a request for `repo` searches: the one named (a repository, `<repository>@<revision>`
/// or `*`), or `*` when none is.
fn scope_for(repo: Option<&str>) -> Result<Scope> {
    match repo {
        None => Ok(Scope::all()),
        Some(r) => r
            .parse()
            .map_err(|e: crate::artifact::scope::BadScope| Error::Invalid(e.to_string())),
    }
}
