//! extract: labels each pack's units E1..En, asks the variant's selector (`lexical`, `oracle` or
//! `llm`) for evidence IDs, holds the reply to the contract, renders accepted evidence from the
//! source lines at the scanned commit, and classifies the outcome (`extracts`).

use crate::answer::{self, Ask, Piece};
use crate::artifact::sha256_hex;
use crate::artifact::StageId;
use crate::artifact::Store;
use crate::config::{Plan, Selector};
use crate::error::Result;
use crate::outcomes::{NotRun, Reason};
use crate::readers::{questions_by_scope, Bm25Scopes, Parts};
use crate::schema::{ExtractRow, FileRow, PackRow, QuestionRow, Row};
use crate::selectors::{self, llm, Evidence};
use crate::stages::{scope_keys, Ctx, Stage};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

pub struct Extract;

/// Source files kept re-read at once while rendering (a bound on memory, not on correctness).
const SOURCE_CACHE_FILES: usize = 256;

/// A file version: its repository, path and the commit it was first scanned at.
type FileVersion<'a> = (&'a str, &'a str, &'a str);

/// The hash of the scanned source lines each packed span claims, by (repository, path, lines).
type SpanHashes = HashMap<(String, String, u32, u32), String>;

/// The columns of a scanned file that extract needs.
#[derive(serde::Deserialize)]
struct PackedFile {
    repo: String,
    commit: String,
    path: String,
    text: String,
}

pub use crate::text::lines_of;

pub use crate::source::read_source;

fn selector_name(s: Selector) -> &'static str {
    match s {
        Selector::Lexical => "lexical",
        Selector::Oracle => "oracle",
        Selector::Llm => "llm",
        Selector::Calibrated => "calibrated",
    }
}

impl Stage for Extract {
    fn id(&self) -> StageId {
        StageId::Extract
    }
    fn inputs(&self) -> &'static [StageId] {
        &[
            StageId::Scan,
            StageId::Questions,
            StageId::Index,
            StageId::Pack,
        ]
    }
    fn version(&self) -> u32 {
        // 2: each extract carries its pack's `support`; 3: one partition per question scope.
        3
    }
    fn config(&self, plan: &Plan) -> Value {
        let vs: Vec<_> = plan
            .variants
            .iter()
            .map(|v| json!([v.name, v.selector]))
            .collect();
        json!({ "extract": plan.extract, "index": plan.index, "variants": vs })
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        plan.answers_questions()
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let store = ctx.store;
        let by_scope = questions_by_scope(store)?;
        let pack_parts = Parts::of(store, PackRow::TABLE)?;
        let file_parts = Parts::of(store, FileRow::TABLE)?;
        let scopes = Bm25Scopes::new(store)?;
        let not_run = crate::readers::not_run(store)?;
        let config = self.config(plan);
        let chunkers = plan.chunker_names();
        let jobs = scope_keys(&by_scope, &(self.version(), &config, &not_run), |scope| {
            (
                pack_parts.own(scope),
                file_parts.checksums(scope),
                scopes.checksums_of(scope, &chunkers),
            )
        });
        let inputs = ScopeInputs {
            plan,
            store,
            pack_parts: &pack_parts,
            file_parts: &file_parts,
            scopes: &scopes,
            not_run: &not_run,
        };
        crate::stages::per_scope(ctx, jobs, |scope| inputs.extract(scope, &by_scope[scope]))
    }
}

/// What every scope's extracts are computed from.
struct ScopeInputs<'a> {
    plan: &'a Plan,
    store: &'a Store,
    pack_parts: &'a Parts,
    file_parts: &'a Parts,
    scopes: &'a Bm25Scopes<'a>,
    not_run: &'a BTreeMap<String, NotRun>,
}

impl ScopeInputs<'_> {
    /// Per packed span of `packs` (repository, path, lines), the hash of the source lines it
    /// claims at the commit it was scanned at. Only the file versions something was packed from
    /// are read, one repository partition at a time; the texts are dropped with their partition.
    fn span_hashes(&self, scope: &str, packs: &[PackRow]) -> Result<SpanHashes> {
        let store = self.store;
        // Only the file versions that something was packed from, one repository partition at a
        // time: a file version is its repository, path and the commit it was first scanned at.
        let mut spans: HashMap<FileVersion, Vec<(u32, u32)>> = HashMap::new();
        for p in packs {
            spans
                .entry((p.repo.as_str(), p.path.as_str(), p.commit.as_str()))
                .or_default()
                .push((p.start_line, p.end_line));
        }
        let repos: HashSet<&str> = spans.keys().map(|(r, _, _)| *r).collect();
        // Per packed span, the hash of the source lines it claims. The texts themselves are
        // dropped with their partition.
        let mut span_hash: SpanHashes = HashMap::new();
        for part in self.file_parts.of_scope(scope) {
            if !repos.contains(part.part.as_str()) {
                continue;
            }
            // A few files at a time: memory follows them, not the repository.
            let columns = ["repo", "commit", "path", "text"];
            store.for_each_rows(part, Some(&columns), 8, |rows: Vec<PackedFile>| {
                for f in rows {
                    let key = (f.repo.as_str(), f.path.as_str(), f.commit.as_str());
                    let Some(ss) = spans.get(&key) else {
                        continue;
                    };
                    for &(s, e) in ss {
                        let source = lines_of(&f.text, s, e).unwrap_or_default();
                        span_hash.insert(
                            (f.repo.clone(), f.path.clone(), s, e),
                            sha256_hex(source.as_bytes()),
                        );
                    }
                }
                Ok(())
            })?;
        }
        Ok(span_hash)
    }

    /// The extracts of one scope's questions, for every variant that ran.
    fn extract(&self, scope: &str, questions: &[QuestionRow]) -> Result<Vec<ExtractRow>> {
        let (plan, store, not_run) = (self.plan, self.store, self.not_run);
        let packs: Vec<PackRow> = self.pack_parts.read(store, scope)?;
        let span_hash = self.span_hashes(scope, &packs)?;
        let empty_hash = sha256_hex(b"");
        let mut by_key: HashMap<(&str, &str), Vec<&PackRow>> = HashMap::new();
        for p in &packs {
            by_key
                .entry((&p.variant, &p.question_id))
                .or_default()
                .push(p);
        }
        let an = plan.index.analyzer();

        // Evidence for every (variant, question) that was packed.
        let mut jobs: Vec<(&crate::config::Variant, &QuestionRow, Vec<Evidence>)> = Vec::new();
        for v in plan
            .variants
            .iter()
            .filter(|v| !not_run.contains_key(&v.name))
        {
            for q in questions {
                // An empty pack still gets an answer: the selector has nothing to choose from.
                let mut rows = by_key
                    .get(&(v.name.as_str(), q.question_id.as_str()))
                    .cloned()
                    .unwrap_or_default();
                rows.sort_by_key(|r| r.order);
                let ev = answer::label(rows.iter().map(|r| Piece::from(*r)), |p| {
                    let key = (
                        p.repo.to_string(),
                        p.path.to_string(),
                        p.start_line,
                        p.end_line,
                    );
                    span_hash.get(&key).unwrap_or(&empty_hash).clone()
                });
                jobs.push((v, q, ev));
            }
        }
        // Each pack's support, with idf from the scope's index under the variant's chunker.
        let bm25s = self.scopes.open_each(scope, &plan.chunker_names(), false)?;
        let terms: Vec<Vec<(String, f64)>> = jobs
            .iter()
            .map(|(v, q, _)| {
                let bm25 = &bm25s[plan.chunker_index(v)];
                let idf = |t: &str| bm25.as_ref().map_or(1.0, |s| s.idf_or_max(t));
                selectors::weighted_terms(&q.question, &an, &idf)
            })
            .collect();
        let support: Vec<f64> = jobs
            .iter()
            .zip(&terms)
            .map(|((_, _, ev), t)| selectors::support(t, ev, &an))
            .collect();
        drop(bm25s);
        let mut llm_replies = ask_llm(plan, &jobs);

        // Source files are re-read once each, at the scanned commit.
        let commit_of: HashMap<(&str, &str), &str> = packs
            .iter()
            .map(|p| ((p.repo.as_str(), p.path.as_str()), p.commit.as_str()))
            .collect();
        let sources: Mutex<HashMap<(String, String), Option<String>>> = Mutex::new(HashMap::new());
        let read_lines = |e: &Evidence| -> Option<String> {
            let commit = commit_of
                .get(&(e.repo.as_str(), e.path.as_str()))?
                .to_string();
            let key = (e.repo.clone(), e.path.clone());
            let mut cache = sources.lock().expect("no poisoned lock");
            if cache.len() >= SOURCE_CACHE_FILES && !cache.contains_key(&key) {
                cache.clear();
            }
            let text = cache
                .entry(key)
                .or_insert_with(|| read_source(plan, &e.repo, &commit, &e.path).ok())
                .clone()?;
            lines_of(&text, e.start_line, e.end_line)
        };

        let mut rows = Vec::with_capacity(jobs.len());
        for (i, (v, q, ev)) in jobs.iter().enumerate() {
            let quotes = crate::dataset::quotes(q);
            let ask = Ask {
                question: &q.question,
                terms: &terms[i],
                support: support[i],
                quotes: &quotes,
            };
            let x = &plan.extract;
            let reply = answer::reply(v.selector, &ask, ev, &an, x, llm_replies.remove(&i));
            let settled = answer::settle(reply, ev, x.max_ids, &read_lines);
            let outcome = selectors::outcome(q.answerable, &quotes, settled.parts.as_deref());
            rows.push(ExtractRow {
                variant: v.name.clone(),
                question_id: q.question_id.clone(),
                selector: selector_name(v.selector).into(),
                raw_reply: settled.raw_reply,
                accepted_ids: settled.accepted,
                outcome,
                reason: settled.reason,
                rendered: settled.rendered,
                support: support[i],
            });
        }
        Ok(rows)
    }
}

/// The model's replies, by job, for the `llm` variants' jobs with evidence, asked in one batch.
fn ask_llm(
    plan: &Plan,
    jobs: &[(&crate::config::Variant, &QuestionRow, Vec<Evidence>)],
) -> HashMap<usize, std::result::Result<String, Reason>> {
    let llm_jobs: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].0.selector == Selector::Llm && !jobs[i].2.is_empty())
        .collect();
    let mut replies = HashMap::new();
    if let (false, Some(cfg)) = (llm_jobs.is_empty(), &plan.extract.llm) {
        let batch: Vec<(String, Vec<Evidence>)> = llm_jobs
            .iter()
            .map(|&i| (jobs[i].1.question.clone(), jobs[i].2.clone()))
            .collect();
        for (i, r) in llm_jobs.iter().zip(llm::ask_all(cfg, &batch)) {
            replies.insert(*i, r);
        }
    }
    replies
}
