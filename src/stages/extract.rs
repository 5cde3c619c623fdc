//! extract: labels each pack's units E1..En, asks the variant's selector (`lexical`, `oracle` or
//! `llm`) for evidence IDs, holds the reply to the contract, renders accepted evidence from the
//! source lines at the scanned commit, and classifies the outcome (`extracts`).

use crate::answer::selectors::{self, llm, reader, Evidence};
use crate::answer::{self, Ask, Piece};
use crate::artifact::outcomes::{NotRun, Reason};
use crate::artifact::readers::{questions_by_scope, Bm25Batch, Bm25Scopes, Parts};
use crate::artifact::schema::{ExtractRow, FileRow, PackRow, QuestionRow, Row, Scope};
use crate::artifact::sha256_hex;
use crate::artifact::StageId;
use crate::artifact::Store;
use crate::config::{Plan, Selector, Variant};
use crate::error::{Error, Result};
use crate::stages::{scope_keys, Ctx, Stage};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub struct Extract;

/// Source files kept re-read at once while rendering (a bound on memory, not on correctness).
const SOURCE_CACHE_FILES: usize = 256;

/// A file version: its repository, path and the commit it was first scanned at.
type FileVersion<'a> = (&'a str, &'a str, &'a str);

/// The hash of the scanned source lines each packed span claims, and the lines, by (repository,
/// path, the commit its version was first scanned at, lines): the revisions of a batch may hold
/// other versions of one path.
type SpanLines = HashMap<(String, String, String, u32, u32), (String, String)>;

/// Source files re-read for rendering, by (repository, path, commit).
type Sources = HashMap<(String, String, String), Option<Arc<String>>>;

/// A run of packed rows read as one piece: the rows' range, its first line and its last line.
type Run = (std::ops::Range<usize>, u32, u32);

/// What a (variant, question) reads: its packed rows in pack order and their runs.
type Keyed<'p> = (&'p Variant, &'p QuestionRow, Vec<&'p PackRow>, Vec<Run>);

/// What the scopes of one batch (revisions of one repository) share: each scope's packs, and the
/// source lines of every span any of them claims.
struct Batch {
    packs: HashMap<Scope, Vec<PackRow>>,
    span_lines: SpanLines,
    /// The indexes of the batch's scopes: idf of a question's terms.
    bm25: Bm25Batch,
    /// Source files re-read for rendering, by (repository, path, commit), shared by the batch's
    /// scopes (at most [`SOURCE_CACHE_FILES`] at once); `None` for one that could not be read.
    sources: Mutex<Sources>,
}

/// `runs` of `rows` with their lines.
fn spans_of(rows: &[&PackRow], runs: Vec<std::ops::Range<usize>>) -> Vec<Run> {
    runs.into_iter()
        .map(|r| {
            let end = rows[r.clone()].iter().map(|p| p.end_line).max();
            let first = rows[r.start];
            (r, first.start_line, end.unwrap_or(first.end_line))
        })
        .collect()
}

/// The columns of a scanned file that extract needs.
#[derive(serde::Deserialize)]
struct PackedFile {
    repo: String,
    commit: String,
    path: String,
    text: String,
}

pub use crate::text::lines_of;

pub use crate::repos::read_source;

fn selector_name(s: Selector) -> &'static str {
    match s {
        Selector::Lexical => "lexical",
        Selector::Oracle => "oracle",
        Selector::Llm => "llm",
        Selector::Calibrated => "calibrated",
        Selector::Reader => "reader",
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
        // 2: each extract carries its pack's `support`; 3: one partition per question scope;
        // 4: `refusal_prob`; 5: `id_probs`.
        5
    }
    fn config(&self, plan: &Plan) -> Value {
        let vs: Vec<_> = plan
            .variants
            .iter()
            .map(|v| json!([v.name, v.selector]))
            .collect();
        // The reader's model by its contents: a replaced GGUF file reruns the stage.
        let model = plan.extract.reader.as_ref().and_then(|cfg| {
            reader::ReaderSpec::of(cfg, &plan.root)
                .and_then(|s| s.fingerprint())
                .ok()
        });
        let mut config = json!({ "extract": plan.extract, "index": plan.index, "variants": vs });
        if let Some(m) = model {
            config["reader_model"] = json!(m);
        }
        config
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
        let not_run = crate::artifact::readers::not_run(store)?;
        let config = self.config(plan);
        let chunkers = plan.chunker_names();
        let jobs = scope_keys(&by_scope, &(self.version(), &config, &not_run), |scope| {
            (
                pack_parts.own(scope.as_str()),
                file_parts.checksums(scope),
                scopes.checksums_of(scope, &chunkers),
            )
        });
        // The reader's readings as lines (scopes read at once add theirs): a cold run reads
        // for many minutes inside a few scopes.
        let readings = ctx.progress.lines("reader", 0, "readings");
        let inputs = ScopeInputs {
            plan,
            store,
            pack_parts: &pack_parts,
            file_parts: &file_parts,
            scopes: &scopes,
            not_run: &not_run,
            readings: &readings,
        };
        let prepare = |scopes: &[Scope]| inputs.batch(scopes, &by_scope);
        let done = crate::stages::per_scope(ctx, jobs, &by_scope, prepare, |batch, scope| {
            inputs.extract(batch, scope, &by_scope[scope])
        });
        readings.finish_and_clear();
        done
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
    /// Counts the reader's readings.
    readings: &'a indicatif::ProgressBar,
}

impl<'a> ScopeInputs<'a> {
    /// Per span of `spans` (by file version: repository, path, the commit it was first scanned
    /// at), the source lines it claims at that commit. Only those file versions are read, one
    /// repository partition at a time; the texts are dropped with their partition.
    fn span_lines(
        &self,
        scope: &Scope,
        spans: &HashMap<FileVersion, Vec<(u32, u32)>>,
    ) -> Result<SpanLines> {
        let store = self.store;
        let repos: HashSet<&str> = spans.keys().map(|(r, _, _)| *r).collect();
        let mut span_lines: SpanLines = HashMap::new();
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
                    // The file split once for all its spans.
                    let lines = crate::text::chunker::split_lines(&f.text);
                    for &(s, e) in ss {
                        let source = crate::text::lines_in(&lines, s, e).unwrap_or_default();
                        let hash = sha256_hex(source.as_bytes());
                        let key = (f.repo.clone(), f.path.clone(), f.commit.clone(), s, e);
                        span_lines.insert(key, (hash, source));
                    }
                }
                Ok(())
            })?;
        }
        Ok(span_lines)
    }

    /// What every (variant, question) of a scope that ran reads from `packs`: its packed rows, in
    /// pack order, or for a `reader` their blocks (see [`answer::blocks`]), as (rows, range of
    /// them) runs.
    fn keyed<'p>(&self, packs: &'p [PackRow], questions: &'p [QuestionRow]) -> Vec<Keyed<'p>>
    where
        'a: 'p,
    {
        let (plan, not_run) = (self.plan, self.not_run);
        let mut by_key: HashMap<(&str, &str), Vec<&PackRow>> = HashMap::new();
        for p in packs {
            by_key
                .entry((&p.variant, &p.question_id))
                .or_default()
                .push(p);
        }
        for rows in by_key.values_mut() {
            rows.sort_by_key(|r| r.order);
        }
        let mut keyed = Vec::new();
        for v in plan
            .variants
            .iter()
            .filter(|v| !not_run.contains_key(&v.name))
        {
            for q in questions {
                // An empty pack still gets an answer: the selector has nothing to choose from.
                let rows = by_key
                    .get(&(v.name.as_str(), q.question_id.as_str()))
                    .cloned()
                    .unwrap_or_default();
                let pieces: Vec<Piece> = rows.iter().map(|r| Piece::from(*r)).collect();
                let runs = if v.selector == Selector::Reader {
                    answer::blocks(&pieces)
                } else {
                    (0..pieces.len()).map(|i| i..i + 1).collect()
                };
                let runs = spans_of(&rows, runs);
                keyed.push((v, q, rows, runs));
            }
        }
        keyed
    }

    /// The packs of a batch of `scopes` (revisions of one repository) and the source lines of
    /// every span they claim, read in one pass over the repository's files.
    fn batch(
        &self,
        scopes: &[Scope],
        by_scope: &BTreeMap<Scope, Vec<QuestionRow>>,
    ) -> Result<Batch> {
        let packs: HashMap<Scope, Vec<PackRow>> = self.pack_parts.read_each(self.store, scopes)?;
        let no_questions = Vec::new();
        let mut spans: HashMap<FileVersion, Vec<(u32, u32)>> = HashMap::new();
        for (scope, rows) in &packs {
            let questions = by_scope.get(scope).unwrap_or(&no_questions);
            for (_, _, rows, runs) in self.keyed(rows, questions) {
                for (r, s, e) in runs {
                    let p = rows[r.start];
                    spans
                        .entry((p.repo.as_str(), p.path.as_str(), p.commit.as_str()))
                        .or_default()
                        .push((s, e));
                }
            }
        }
        // Each span once: the variants of a question pack many of the same.
        for ss in spans.values_mut() {
            ss.sort_unstable();
            ss.dedup();
        }
        let span_lines = match scopes.first() {
            Some(first) => self.span_lines(first, &spans)?,
            None => HashMap::new(),
        };
        drop(spans);
        let bm25 = self
            .scopes
            .open_batch_of(scopes, &self.plan.chunker_names(), false)?;
        Ok(Batch {
            packs,
            span_lines,
            bm25,
            sources: Mutex::new(HashMap::new()),
        })
    }

    /// The extracts of one scope's questions, for every variant that ran.
    fn extract(
        &self,
        batch: &Batch,
        scope: &Scope,
        questions: &[QuestionRow],
    ) -> Result<Vec<ExtractRow>> {
        let plan = self.plan;
        let no_rows = Vec::new();
        let packs = batch.packs.get(scope).unwrap_or(&no_rows);
        let an = plan.index.analyzer();
        let keyed = self.keyed(packs, questions);
        let span_lines = &batch.span_lines;
        let jobs = evidence_of(&keyed, span_lines);
        // Each pack's support, with idf from the scope's index under the variant's chunker.
        // A question's weighted terms are the same for every variant of one chunker: each
        // (chunker, question) is weighed once.
        let bm25s = batch.bm25.scopes_of(scope, &plan.chunker_names());
        let mut weighed: HashMap<(usize, &str), Vec<(String, f64)>> = HashMap::new();
        let terms: Vec<Vec<(String, f64)>> = jobs
            .iter()
            .map(|(v, q, _)| {
                let ci = plan.chunker_index(v);
                let weigh = || {
                    let bm25 = &bm25s[ci];
                    let idf = |t: &str| bm25.as_ref().map_or(1.0, |s| s.idf_or_max(t));
                    selectors::weighted_terms(&q.question, &an, &idf)
                };
                weighed
                    .entry((ci, q.question_id.as_str()))
                    .or_insert_with(weigh)
                    .clone()
            })
            .collect();
        let support: Vec<f64> = jobs
            .iter()
            .zip(&terms)
            .map(|((_, _, ev), t)| selectors::support(t, ev, &an))
            .collect();
        drop(bm25s);
        let mut llm_replies = ask_llm(plan, &jobs)?;
        let mut readings = ask_reader(plan, &jobs, self.readings)?;

        // Source files are re-read at the commit each piece was hashed at (`evidence_of` names
        // it for every piece), once each for the batch: its revisions share their reads.
        let read_lines = |e: &Evidence| -> Option<String> {
            let commit = e.commit.as_deref()?;
            let key = (e.repo.clone(), e.path.clone(), commit.to_string());
            let text = {
                let mut cache = batch.sources.lock().expect("no poisoned lock");
                if cache.len() >= SOURCE_CACHE_FILES && !cache.contains_key(&key) {
                    cache.clear();
                }
                match cache.get(&key) {
                    Some(text) => text.clone(),
                    None => {
                        // Read without the lock held: other scopes of the batch go on.
                        drop(cache);
                        let text = read_source(plan, &e.repo, commit, &e.path)
                            .ok()
                            .map(Arc::new);
                        let mut cache = batch.sources.lock().expect("no poisoned lock");
                        cache.insert(key, text.clone());
                        text
                    }
                }
            }?;
            lines_of(&text, e.start_line, e.end_line)
        };

        let mut rows = Vec::with_capacity(jobs.len());
        for (i, (v, q, ev)) in jobs.iter().enumerate() {
            let quotes = crate::evaluation::dataset::quotes(q);
            let ask = Ask {
                question: &q.question,
                terms: &terms[i],
                support: support[i],
                quotes: &quotes,
            };
            let x = &plan.extract;
            let reading = readings.remove(&i);
            let refusal_prob = reading.as_ref().map(|r| r.refusal_prob);
            let asked = match (&reading, &x.reader) {
                (Some(r), Some(cfg)) => Some(Ok(r.reply(
                    cfg.refuse_at,
                    cfg.selection,
                    cfg.select_mass,
                    x.max_ids,
                ))),
                _ => llm_replies.remove(&i),
            };
            let id_probs = reading.map(|r| r.id_probs);
            let reply = answer::reply(v.selector, &ask, ev, &an, x, asked);
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
                refusal_prob,
                id_probs,
            });
        }
        Ok(rows)
    }
}

/// What a (variant, question) that ran is asked about: its evidence, labelled E1..En, each run of
/// rows one piece (a single row its packed text, a block its scanned source lines) with the hash
/// of the lines it claims.
fn evidence_of<'a>(
    keyed: &[(&'a Variant, &'a QuestionRow, Vec<&PackRow>, Vec<Run>)],
    span_lines: &SpanLines,
) -> Vec<(&'a Variant, &'a QuestionRow, Vec<Evidence>)> {
    let empty_hash = sha256_hex(b"");
    keyed
        .iter()
        .map(|(v, q, rows, runs)| {
            let blocks: Vec<(&PackRow, u32, u32, String)> = runs
                .iter()
                .map(|(r, s, e)| {
                    let p = rows[r.start];
                    // A single row keeps its packed text; a block reads its source lines.
                    let text = match r.len() {
                        1 => p.text.clone(),
                        _ => span_lines
                            .get(&(p.repo.clone(), p.path.clone(), p.commit.clone(), *s, *e))
                            .map(|(_, lines)| lines.clone())
                            .unwrap_or_else(|| {
                                let texts: Vec<&str> =
                                    rows[r.clone()].iter().map(|p| p.text.as_str()).collect();
                                texts.join("\n")
                            }),
                    };
                    (p, *s, *e, text)
                })
                .collect();
            let pieces = blocks.iter().map(|(p, s, e, text)| Piece {
                start_line: *s,
                end_line: *e,
                text,
                ..Piece::from(*p)
            });
            // Each block's hash of its scanned lines, at the commit its rows were scanned at (the
            // first block of the same lines wins); it is rendered from that commit's version.
            let mut hashes: HashMap<(&str, &str, u32, u32), (&str, &str)> = HashMap::new();
            for (b, s, e, _) in &blocks {
                let key = (b.repo.clone(), b.path.clone(), b.commit.clone(), *s, *e);
                let hash = span_lines.get(&key).map_or(empty_hash.as_str(), |(h, _)| h);
                hashes
                    .entry((&b.repo, &b.path, *s, *e))
                    .or_insert((hash, &b.commit));
            }
            let mut ev = answer::label(pieces, |p| {
                let key = (p.repo, p.path, p.start_line, p.end_line);
                hashes
                    .get(&key)
                    .map_or(empty_hash.as_str(), |h| h.0)
                    .to_string()
            });
            for e in &mut ev {
                let key = (e.repo.as_str(), e.path.as_str(), e.start_line, e.end_line);
                e.commit = hashes.get(&key).map(|h| h.1.to_string());
            }
            (*v, *q, ev)
        })
        .collect()
}

/// The model's replies, by job, for the `llm` variants' jobs with evidence, asked in one batch.
/// An endpoint that fails (after its retries) for any job fails the scope: an unreachable server
/// is an error of the run, never a row of refusals.
fn ask_llm(
    plan: &Plan,
    jobs: &[(&crate::config::Variant, &QuestionRow, Vec<Evidence>)],
) -> Result<HashMap<usize, std::result::Result<String, Reason>>> {
    let llm_jobs: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].0.selector == Selector::Llm && !jobs[i].2.is_empty())
        .collect();
    let mut replies = HashMap::new();
    if let (false, Some(cfg)) = (llm_jobs.is_empty(), &plan.extract.llm) {
        let batch: Vec<(String, Vec<Evidence>)> = llm_jobs
            .iter()
            .map(|&i| (jobs[i].1.question.clone(), jobs[i].2.clone()))
            .collect();
        let answers = llm::ask_all(cfg, &batch);
        let failed: Vec<Reason> = answers
            .iter()
            .filter_map(|r| r.as_ref().err().copied())
            .filter(|r| r.is_infrastructure())
            .collect();
        if let Some(first) = failed.first() {
            return Err(Error::stage(
                StageId::Extract.name(),
                format!(
                    "the llm endpoint {} failed for {} of {} questions ({first}, after {} retries); nothing of this scope was recorded: check the server and run again",
                    cfg.url,
                    failed.len(),
                    answers.len(),
                    cfg.retries
                ),
            ));
        }
        for (i, r) in llm_jobs.iter().zip(answers) {
            replies.insert(*i, r);
        }
    }
    Ok(replies)
}

/// The reader's readings, by job, for the `reader` variants' jobs with evidence. The model is
/// loaded only when some job is not in the reading cache.
fn ask_reader(
    plan: &Plan,
    jobs: &[(&crate::config::Variant, &QuestionRow, Vec<Evidence>)],
    progress: &indicatif::ProgressBar,
) -> Result<HashMap<usize, reader::Reading>> {
    let ids: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].0.selector == Selector::Reader && !jobs[i].2.is_empty())
        .collect();
    let mut out = HashMap::new();
    let (false, Some(cfg)) = (ids.is_empty(), &plan.extract.reader) else {
        return Ok(out);
    };
    let batch: Vec<(String, Vec<Evidence>)> = ids
        .iter()
        .map(|&i| (jobs[i].1.question.clone(), jobs[i].2.clone()))
        .collect();
    let spec = reader::ReaderSpec::of(cfg, &plan.root)?;
    let readings = reader::read_all(
        &spec,
        &batch,
        plan.extract.max_ids,
        Some(&plan.reader_cache_dir()),
        crate::models::threads::cpu_workers(),
        Some(progress),
    )?;
    out.extend(ids.into_iter().zip(readings));
    Ok(out)
}
