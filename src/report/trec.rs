//! The field's formats: TREC run files (`qid Q0 docid rank score tag`) and qrels
//! (`qid 0 docid grade`) from a finished run, at file level (the ranking `evaluate` scores) or
//! chunk level (the pool, judged by the evidence spans), so trec_eval, ranx and ir_measures read
//! what ri-batch measured; and question sets from TREC topics and qrels.

use crate::artifact::schema::{FileRetrievalRow, QuestionRow, RetrievalRow, Row};
use crate::artifact::Store;
use crate::error::{Error, Result};
use crate::evaluation::metrics::ranked_files;
use crate::text::normalize_ws;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What a document of the export is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Level {
    /// Files, as `evaluate` ranks them for MRR, nDCG and Recall (qrels: the gold documents).
    File,
    /// Chunks of the pool in rank order (qrels: chunks that hold an evidence span).
    Chunk,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::File => "file",
            Level::Chunk => "chunk",
        }
    }
}

/// Bytes a TREC field cannot hold (whitespace separates fields) and `%` itself, encoded.
const FIELD: &AsciiSet = &CONTROLS.add(b' ').add(b'%');

/// A question id or document id as one TREC field.
pub fn field(s: &str) -> String {
    utf8_percent_encode(s, FIELD).to_string()
}

/// The files written by [`export`].
#[derive(Debug)]
pub struct Exported {
    pub run: PathBuf,
    pub qrels: PathBuf,
    pub queries: usize,
    pub lines: usize,
}

/// Writes `<out>/<variant>.<level>.run` and `<out>/<level>.qrels` for the questions of `split`
/// (all when None).
pub fn export(
    store: &Store,
    out: &Path,
    variant: &str,
    level: Level,
    split: Option<&str>,
) -> Result<Exported> {
    let questions: Vec<QuestionRow> = store.read()?;
    let questions: Vec<QuestionRow> = questions
        .into_iter()
        .filter(|q| split.is_none_or(|s| q.split == s))
        .collect();
    let wanted: HashSet<&str> = questions.iter().map(|q| q.question_id.as_str()).collect();
    let retrievals: Vec<RetrievalRow> = store.read()?;
    let retrievals: Vec<RetrievalRow> = retrievals
        .into_iter()
        .filter(|r| r.variant == variant && wanted.contains(r.question_id.as_str()))
        .collect();
    if retrievals.is_empty() {
        return Err(Error::Invalid(format!(
            "variant `{variant}` has no retrievals in {}{}",
            store.root().display(),
            split.map(|s| format!(" (split {s})")).unwrap_or_default()
        )));
    }
    let chunk_ids: HashSet<&str> = retrievals.iter().map(|r| r.chunk_id.as_str()).collect();
    let located = locate_chunks(store, &chunk_ids)?;
    let (run, qrels) = match level {
        Level::File => {
            let files: Vec<FileRetrievalRow> =
                if store.files_of(FileRetrievalRow::TABLE)?.is_empty() {
                    Vec::new()
                } else {
                    store.read()?
                };
            (
                file_run(&questions, &retrievals, &files, &located, variant),
                file_qrels(&questions),
            )
        }
        Level::Chunk => (
            chunk_run(&retrievals, variant),
            chunk_qrels(store, &questions)?,
        ),
    };
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let run_path = out.join(format!(
        "{}.{}.run",
        crate::artifact::safe_name(variant),
        level.name()
    ));
    let qrels_path = out.join(format!("{}.qrels", level.name()));
    crate::artifact::write_atomic(&run_path, run.as_bytes())?;
    crate::artifact::write_atomic(&qrels_path, qrels.as_bytes())?;
    Ok(Exported {
        run: run_path,
        qrels: qrels_path,
        queries: questions.len(),
        lines: run.lines().count(),
    })
}

/// (repo, path) of each chunk id.
fn locate_chunks(store: &Store, ids: &HashSet<&str>) -> Result<HashMap<String, (String, String)>> {
    #[derive(serde::Deserialize)]
    struct Loc {
        chunk_id: String,
        repo: String,
        path: String,
    }
    let files = store.files_of(crate::artifact::schema::ChunkRow::TABLE)?;
    let refs: Vec<&crate::artifact::FileEntry> = files.iter().collect();
    let rows: Vec<Loc> =
        store.read_where(&refs, &["chunk_id", "repo", "path"], "chunk_id", |id| {
            ids.contains(id)
        })?;
    Ok(rows
        .into_iter()
        .map(|l| (l.chunk_id, (l.repo, l.path)))
        .collect())
}

/// One run line per (question, rank). Readers order by score, not by the rank column (trec_eval
/// breaks ties by document id, and pytrec_eval keeps scores as 32-bit floats), so a score that
/// would not sort strictly below the one before it, at 32-bit precision, is lowered to the
/// next 32-bit value below: every reader then sees ri-batch's order, scores change only there.
fn lines(out: &mut String, qid: &str, docs: &[(String, f64)], tag: &str) {
    let mut last = f32::INFINITY;
    for (i, (doc, score)) in docs.iter().enumerate() {
        let s = if score.is_finite() { *score } else { 0.0 };
        let s = if (s as f32) < last {
            s
        } else {
            f64::from(last.next_down())
        };
        last = s as f32;
        let _ = writeln!(
            out,
            "{} Q0 {} {} {s:e} {}",
            field(qid),
            field(doc),
            i + 1,
            field(tag)
        );
    }
}

fn file_run(
    questions: &[QuestionRow],
    retrievals: &[RetrievalRow],
    files: &[FileRetrievalRow],
    located: &HashMap<String, (String, String)>,
    variant: &str,
) -> String {
    let pool = crate::artifact::readers::pools(retrievals);
    let mut ranked: HashMap<&str, Vec<&FileRetrievalRow>> = HashMap::new();
    for f in files.iter().filter(|f| f.variant == variant) {
        ranked.entry(&f.question_id).or_default().push(f);
    }
    for list in ranked.values_mut() {
        list.sort_by_key(|f| f.rank);
    }
    let mut out = String::new();
    for q in questions {
        let key = (variant, q.question_id.as_str());
        let own = ranked.get(q.question_id.as_str());
        if own.is_none() && !pool.contains_key(&key) {
            continue;
        }
        // The ranking `evaluate` scores.
        let own = own.map(|l| {
            l.iter()
                .map(|f| (f.repo.as_str(), f.path.as_str(), f.score))
        });
        let pooled = pool.get(&key).into_iter().flatten().filter_map(|r| {
            let (repo, path) = located.get(&r.chunk_id)?;
            Some((repo.as_str(), path.as_str(), r.score))
        });
        let docs = ranked_files(&q.scope, own, pooled);
        lines(&mut out, &q.question_id, &docs, variant);
    }
    out
}

fn file_qrels(questions: &[QuestionRow]) -> String {
    let mut out = String::new();
    for q in questions {
        for (doc, grade) in q.gold_paths.iter().zip(&q.gold_grades) {
            let _ = writeln!(out, "{} 0 {} {grade}", field(&q.question_id), field(doc));
        }
    }
    out
}

fn chunk_run(retrievals: &[RetrievalRow], variant: &str) -> String {
    let pools: BTreeMap<_, _> = crate::artifact::readers::pools(retrievals)
        .into_iter()
        .collect();
    let mut out = String::new();
    for ((_, qid), list) in pools {
        let docs: Vec<(String, f64)> = list.iter().map(|r| (r.chunk_id.clone(), r.score)).collect();
        lines(&mut out, qid, &docs, variant);
    }
    out
}

/// Chunks judged relevant (grade 1): those of an evidence anchor's file whose lines overlap the
/// anchor's, or, for an anchor with a quote only, whose text holds the quote.
fn chunk_qrels(store: &Store, questions: &[QuestionRow]) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct Span {
        chunk_id: String,
        repo: String,
        path: String,
        start_line: u32,
        end_line: u32,
        text: String,
    }
    let paths: HashSet<&str> = questions
        .iter()
        .flat_map(|q| {
            crate::evaluation::dataset::anchors(q)
                .into_iter()
                .map(|a| a.path)
        })
        .collect();
    let files = store.files_of(crate::artifact::schema::ChunkRow::TABLE)?;
    let refs: Vec<&crate::artifact::FileEntry> = files.iter().collect();
    let spans: Vec<Span> = store.read_where(
        &refs,
        &["chunk_id", "repo", "path", "start_line", "end_line", "text"],
        "path",
        |p| paths.contains(p),
    )?;
    let mut by_file: HashMap<(&str, &str), Vec<&Span>> = HashMap::new();
    for s in &spans {
        by_file.entry((&s.repo, &s.path)).or_default().push(s);
    }
    let mut out = String::new();
    for q in questions.iter().filter(|q| q.answerable) {
        let mut judged: Vec<&str> = Vec::new();
        for a in crate::evaluation::dataset::anchors(q) {
            let Some(chunks) = by_file.get(&(a.repo, a.path)) else {
                continue;
            };
            let quote = normalize_ws(a.quote);
            for c in chunks {
                let hit = match a.lines {
                    Some((s, e)) => c.start_line <= e && s <= c.end_line,
                    None => !quote.is_empty() && normalize_ws(&c.text).contains(&quote),
                };
                if hit && !judged.contains(&c.chunk_id.as_str()) {
                    judged.push(&c.chunk_id);
                }
            }
        }
        for id in judged {
            let _ = writeln!(out, "{} 0 {} 1", field(&q.question_id), field(id));
        }
    }
    Ok(out)
}

/// What [`import`] wrote.
#[derive(Debug)]
pub struct ImportedTopics {
    pub questions: PathBuf,
    /// Topics written, and how many of them have at least one relevant document.
    pub topics: usize,
    pub judged: usize,
}

/// A question set from TREC topics and qrels, over a repository whose file paths are the qrels'
/// document ids: `<out>/questions.jsonl`, one question per topic in `repo` and `split`, its gold
/// documents the qrels with a grade above 0 (a topic without one is unanswerable). Topics are
/// `qid<TAB>text` lines, or TREC `<top>` blocks (`<num>`, `<title>`); ids may be
/// percent-encoded as [`field`] writes them. A bad line is an error naming the file and line.
pub fn import(
    topics: &Path,
    qrels: &Path,
    repo: &str,
    split: &str,
    out: &Path,
) -> Result<ImportedTopics> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| Error::io(p, e));
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .to_string()
    };
    let text = read(topics)?;
    let parsed: Vec<(String, String)> = if text.contains("<top>") {
        topic_blocks(&text, topics)?
    } else {
        let mut v = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let (id, q) = line.split_once('\t').ok_or_else(|| {
                Error::Invalid(format!(
                    "{}:{}: a topic line is `id<TAB>text`",
                    topics.display(),
                    i + 1
                ))
            })?;
            v.push((decode(id.trim()), q.trim().to_string()));
        }
        v
    };
    let mut gold: HashMap<String, Vec<(String, u32)>> = HashMap::new();
    for (i, line) in read(qrels)?
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let grade = match f.as_slice() {
            [_, _, _, g] => g.parse::<i64>().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            Error::Invalid(format!(
                "{}:{}: a qrels line is `qid iteration docid grade`",
                qrels.display(),
                i + 1
            ))
        })?;
        if grade > 0 {
            gold.entry(decode(f[0]))
                .or_default()
                .push((decode(f[2]), grade.min(u32::MAX as i64) as u32));
        }
    }
    let mut lines = String::new();
    let mut judged = 0;
    for (id, question) in &parsed {
        let docs = gold.get(id).cloned().unwrap_or_default();
        judged += usize::from(!docs.is_empty());
        let g: Vec<serde_json::Value> = docs
            .iter()
            .map(|(p, grade)| serde_json::json!({"path": p, "grade": grade}))
            .collect();
        let row = serde_json::json!({
            "id": id, "repo": repo, "split": split, "answerable": !g.is_empty(),
            "question": question, "gold": g,
        });
        lines.push_str(&row.to_string());
        lines.push('\n');
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let questions = out.join("questions.jsonl");
    crate::artifact::write_atomic(&questions, lines.as_bytes())?;
    Ok(ImportedTopics {
        questions,
        topics: parsed.len(),
        judged,
    })
}

/// (id, title) of each `<top>` block: `<num> Number: 301` (or `<num> 301`) and `<title>`.
fn topic_blocks(text: &str, path: &Path) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (n, block) in text.split("<top>").skip(1).enumerate() {
        let tag = |name: &str| {
            let at = block.find(&format!("<{name}>"))? + name.len() + 2;
            let rest = &block[at..];
            let end = rest.find('<').unwrap_or(rest.len());
            Some(rest[..end].trim().to_string())
        };
        let num = tag("num").map(|s| s.trim_start_matches("Number:").trim().to_string());
        match (num, tag("title")) {
            (Some(id), Some(title)) if !id.is_empty() => {
                out.push((id, title.trim_start_matches("Topic:").trim().to_string()))
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "{}: topic block {} has no <num> or <title>",
                    path.display(),
                    n + 1
                )))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_hold_no_whitespace_and_decode_back() {
        let id = field("src/my file%.rs");
        assert_eq!(id, "src/my%20file%25.rs");
        let back = percent_encoding::percent_decode_str(&id)
            .decode_utf8()
            .unwrap();
        assert_eq!(back, "src/my file%.rs");
    }

    #[test]
    fn run_scores_strictly_decrease_in_rank_order() {
        let mut out = String::new();
        let docs = vec![
            ("a".to_string(), 2.0),
            ("b".to_string(), 2.0),
            ("c".to_string(), 3.0),
            ("d".to_string(), 1.0),
        ];
        lines(&mut out, "q", &docs, "t");
        let scores: Vec<f64> = out
            .lines()
            .map(|l| l.split(' ').nth(4).unwrap().parse().unwrap())
            .collect();
        assert!(
            scores.windows(2).all(|w| (w[0] as f32) > (w[1] as f32)),
            "{scores:?}"
        );
        assert_eq!(scores[0], 2.0);
        assert_eq!(scores[3], 1.0);
        let ranks: Vec<&str> = out.lines().map(|l| l.split(' ').nth(3).unwrap()).collect();
        assert_eq!(ranks, ["1", "2", "3", "4"]);
    }

    #[test]
    fn topics_and_qrels_become_questions_with_graded_gold() {
        let t = tempfile::tempdir().unwrap();
        let topics = t.path().join("topics.txt");
        std::fs::write(
            &topics,
            "<top>\n<num> Number: 301\n<title> parse a duration\n<desc> Description:\nlong\n</top>\n\
             <top>\n<num> 302\n<title> Topic: nothing\n</top>\n",
        )
        .unwrap();
        let qrels = t.path().join("qrels.txt");
        std::fs::write(
            &qrels,
            "301 0 src/my%20file.rs 2\n301 0 README.md 0\n302 0 x.rs 0\n",
        )
        .unwrap();
        let r = import(&topics, &qrels, "ms", "test", &t.path().join("q")).unwrap();
        assert_eq!((r.topics, r.judged), (2, 1));
        let text = std::fs::read_to_string(&r.questions).unwrap();
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows[0]["question"], "parse a duration");
        assert_eq!(
            rows[0]["gold"],
            serde_json::json!([{"path": "src/my file.rs", "grade": 2}])
        );
        assert_eq!(rows[1]["question"], "nothing");
        assert_eq!(rows[1]["answerable"], false);
        std::fs::write(&qrels, "301 0 a.rs\n").unwrap();
        let e = import(&topics, &qrels, "ms", "test", t.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("qrels.txt:1"), "{e}");
        std::fs::write(&topics, "301 no tab here\n").unwrap();
        let e = import(&topics, &qrels, "ms", "test", t.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("topics.txt:1"), "{e}");
    }
}
