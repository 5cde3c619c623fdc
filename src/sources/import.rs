//! Standard retrieval datasets as ri-batch inputs: a BEIR layout (`corpus.jsonl`, `queries.jsonl`,
//! `qrels/<split>.tsv`) or the CoSQA layout (`code_idx_map.txt`, `cosqa-retrieval-*.json`) becomes a
//! plain directory with one file per document (stable, injective file names from the document
//! ids) and a question file whose gold documents are those files, with their relevance grades.

use crate::artifact::{hash_json, sha256_hex, write_atomic};
use crate::error::{because, Error, IoContext, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Which layout to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Beir,
    Cosqa,
    /// SWE-bench instances at their repositories' base commits (see [`crate::sources::swebench`]).
    Swebench,
}

/// What an import produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub corpus_dir: PathBuf,
    pub questions: PathBuf,
    pub documents: usize,
    pub queries: usize,
    /// False when an earlier import of the same source was still in place.
    pub written: bool,
}

/// A file name for a document id: letters, digits, `-`, `_` and `.` are kept, everything else
/// (and a leading `.`) is percent-encoded, so distinct ids never share a file.
pub fn file_name(id: &str, ext: &str) -> String {
    let mut s = String::new();
    for (i, b) in id.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    format!("{s}.{ext}")
}

struct Doc {
    path: String,
    text: String,
}

struct Query {
    id: String,
    split: String,
    text: String,
    gold: Vec<(String, u32)>,
}

fn jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let f = std::fs::File::open(path).at(path)?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.at(path)?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|e| Error::Dataset {
            file: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?);
    }
    Ok(out)
}

fn read_beir(src: &Path) -> Result<(Vec<Doc>, Vec<Query>)> {
    #[derive(Deserialize)]
    struct C {
        #[serde(rename = "_id")]
        id: String,
        #[serde(default)]
        title: String,
        text: String,
    }
    #[derive(Deserialize)]
    struct Q {
        #[serde(rename = "_id")]
        id: String,
        text: String,
    }
    let corpus: Vec<C> = jsonl(&src.join("corpus.jsonl"))?;
    let queries: Vec<Q> = jsonl(&src.join("queries.jsonl"))?;
    let mut path_of = BTreeMap::new();
    let docs: Vec<Doc> = corpus
        .into_iter()
        .map(|c| {
            let path = format!("docs/{}", file_name(&c.id, "txt"));
            path_of.insert(c.id.clone(), path.clone());
            let text = if c.title.is_empty() {
                c.text
            } else {
                format!("{}\n\n{}", c.title, c.text)
            };
            Doc { path, text }
        })
        .collect();
    let text_of: BTreeMap<String, String> = queries.into_iter().map(|q| (q.id, q.text)).collect();
    let qrels_dir = src.join("qrels");
    let mut out: BTreeMap<(String, String), Query> = BTreeMap::new();
    let mut splits: Vec<PathBuf> = std::fs::read_dir(&qrels_dir)
        .at(&qrels_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
        .collect();
    splits.sort();
    for file in splits {
        let split = file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let text = std::fs::read_to_string(&file).at(&file)?;
        for (i, line) in text.lines().enumerate() {
            let cols: Vec<&str> = line.split('\t').collect();
            if i == 0 && cols.first().is_some_and(|c| c.contains("query")) {
                continue;
            }
            let err = |m: String| Error::Dataset {
                file: file.clone(),
                line: i + 1,
                message: m,
            };
            let [qid, did, score] = cols[..] else {
                return Err(err("expected query-id, corpus-id, score".into()));
            };
            let grade: i64 = score
                .trim()
                .parse()
                .map_err(|_| err(format!("bad score {score:?}")))?;
            let doc = path_of
                .get(did)
                .ok_or_else(|| err(format!("corpus-id {did} is not in corpus.jsonl")))?;
            let qtext = text_of
                .get(qid)
                .ok_or_else(|| err(format!("query-id {qid} is not in queries.jsonl")))?;
            let q = out
                .entry((split.clone(), qid.to_string()))
                .or_insert_with(|| Query {
                    id: qid.to_string(),
                    split: split.clone(),
                    text: qtext.clone(),
                    gold: Vec::new(),
                });
            if grade > 0 {
                q.gold.push((doc.clone(), grade as u32));
            }
        }
    }
    Ok((
        docs,
        out.into_values().filter(|q| !q.gold.is_empty()).collect(),
    ))
}

fn read_cosqa(src: &Path) -> Result<(Vec<Doc>, Vec<Query>)> {
    #[derive(Deserialize)]
    struct Q {
        idx: String,
        doc: String,
        retrieval_idx: u64,
    }
    let map_path = src.join("code_idx_map.txt");
    let text = std::fs::read_to_string(&map_path).at(&map_path)?;
    let map: BTreeMap<String, u64> = serde_json::from_str(&text)
        .map_err(|e| Error::artifact(&map_path, because("not a JSON object of code → id", e)))?;
    let path_of = |id: u64| format!("functions/{id:05}.py");
    let mut docs: Vec<Doc> = map
        .into_iter()
        .map(|(code, id)| Doc {
            path: path_of(id),
            text: code,
        })
        .collect();
    docs.sort_by(|a, b| a.path.cmp(&b.path));
    let mut files: Vec<PathBuf> = std::fs::read_dir(src)
        .at(src)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with("cosqa-retrieval-") && n.ends_with(".json")
        })
        .collect();
    files.sort();
    let mut queries = Vec::new();
    for f in files {
        // cosqa-retrieval-dev-500.json → split "dev"
        let stem = f
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let split = stem
            .trim_start_matches("cosqa-retrieval-")
            .split('-')
            .next()
            .unwrap_or("dev")
            .to_string();
        let text = std::fs::read_to_string(&f).at(&f)?;
        let qs: Vec<Q> = serde_json::from_str(&text).map_err(|e| Error::artifact(&f, e))?;
        for q in qs {
            queries.push(Query {
                id: q.idx,
                split: split.clone(),
                text: q.doc,
                gold: vec![(path_of(q.retrieval_idx), 1)],
            });
        }
    }
    Ok((docs, queries))
}

/// Every input file of an import source, for the import's identity.
fn source_hash(format: Format, src: &Path) -> Result<String> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).at(&d)? {
            let p = e.at(&d)?.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut sums = Vec::new();
    for f in files {
        sums.push((
            f.strip_prefix(src)
                .unwrap_or(&f)
                .to_string_lossy()
                .to_string(),
            sha256_hex(&std::fs::read(&f).at(&f)?),
        ));
    }
    Ok(hash_json(&(format, sums)))
}

/// Imports `src` into `out` (`out/corpus/`, `out/questions.jsonl`), unless an import of the same
/// source is already there. The corpus is built beside and renamed into place; the stamp is last.
pub fn import(format: Format, src: &Path, out: &Path) -> Result<Imported> {
    if !src.is_dir() {
        return Err(Error::Invalid(format!(
            "{}: no such directory to import",
            src.display()
        )));
    }
    let corpus_dir = out.join("corpus");
    let questions = out.join("questions.jsonl");
    let stamp = out.join("import.stamp");
    let id = source_hash(format, src)?;
    let (docs, queries) =
        match format {
            Format::Beir => read_beir(src)?,
            Format::Cosqa => read_cosqa(src)?,
            Format::Swebench => return Err(Error::Invalid(
                "a swebench import reads an instance file and its mirrors: see swebench::import"
                    .into(),
            )),
        };
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == id)
        && corpus_dir.is_dir()
        && questions.is_file()
    {
        return Ok(Imported {
            corpus_dir,
            questions,
            documents: docs.len(),
            queries: queries.len(),
            written: false,
        });
    }
    std::fs::create_dir_all(out).at(out)?;
    let _ = std::fs::remove_file(&stamp);
    let staging = out.join(format!(".corpus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    for d in &docs {
        let p = staging.join(&d.path);
        std::fs::create_dir_all(p.parent().expect("document paths have a folder")).at(&p)?;
        std::fs::write(&p, &d.text).at(&p)?;
    }
    let _ = std::fs::remove_dir_all(&corpus_dir);
    std::fs::rename(&staging, &corpus_dir).at(&corpus_dir)?;
    let mut lines = String::new();
    for q in &queries {
        let gold: Vec<serde_json::Value> = q
            .gold
            .iter()
            .map(|(p, g)| serde_json::json!({"path": p, "grade": g}))
            .collect();
        let row = serde_json::json!({
            "id": q.id, "repo": "corpus", "split": q.split, "answerable": true,
            "question": q.text, "gold": gold,
        });
        lines.push_str(&row.to_string());
        lines.push('\n');
    }
    write_atomic(&questions, lines.as_bytes())?;
    write_atomic(&stamp, id.as_bytes())?;
    Ok(Imported {
        corpus_dir,
        questions,
        documents: docs.len(),
        queries: queries.len(),
        written: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_safe_and_injective() {
        assert_eq!(file_name("doc1", "txt"), "doc1.txt");
        assert_eq!(file_name("a/b", "txt"), "a%2Fb.txt");
        assert_eq!(file_name("a%2Fb", "txt"), "a%252Fb.txt");
        assert_eq!(file_name(".hidden", "txt"), "%2Ehidden.txt");
        assert_ne!(file_name("a b", "txt"), file_name("a_b", "txt"));
    }

    #[test]
    fn beir_with_graded_qrels_and_cosqa_import() {
        let t = tempfile::tempdir().unwrap();
        let b = t.path().join("beir");
        std::fs::create_dir_all(b.join("qrels")).unwrap();
        std::fs::write(
            b.join("corpus.jsonl"),
            "{\"_id\": \"d1\", \"title\": \"Sorting\", \"text\": \"how to sort a list\"}\n{\"_id\": \"d/2\", \"text\": \"parse json\"}\n",
        )
        .unwrap();
        std::fs::write(
            b.join("queries.jsonl"),
            "{\"_id\": \"q1\", \"text\": \"sort list\"}\n{\"_id\": \"q2\", \"text\": \"json\"}\n",
        )
        .unwrap();
        std::fs::write(
            b.join("qrels/test.tsv"),
            "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td/2\t0\nq2\td/2\t1\n",
        )
        .unwrap();
        let out = t.path().join("out");
        let r = import(Format::Beir, &b, &out).unwrap();
        assert_eq!((r.documents, r.queries, r.written), (2, 2, true));
        assert_eq!(
            std::fs::read_to_string(out.join("corpus/docs/d1.txt")).unwrap(),
            "Sorting\n\nhow to sort a list"
        );
        assert!(out.join("corpus/docs/d%2F2.txt").is_file());
        let qs = crate::evaluation::dataset::load_questions(&r.questions).unwrap();
        assert_eq!(qs[0].gold_paths, ["docs/d1.txt"]);
        assert_eq!(qs[0].gold_grades, [2]);
        assert_eq!(qs[0].split, "test");
        assert!(
            !import(Format::Beir, &b, &out).unwrap().written,
            "same source: nothing rewritten"
        );
        std::fs::write(b.join("qrels/test.tsv"), "q1\tnope\t1\n").unwrap();
        let e = import(Format::Beir, &b, &out).unwrap_err().to_string();
        assert!(e.contains("test.tsv:1") && e.contains("nope"), "{e}");

        let c = t.path().join("cosqa");
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(
            c.join("code_idx_map.txt"),
            "{\"def a():\\n    return 1\": 0, \"def b(): pass\": 1}",
        )
        .unwrap();
        std::fs::write(
            c.join("cosqa-retrieval-dev-2.json"),
            "[{\"idx\": \"cosqa-1\", \"doc\": \"python return one\", \"retrieval_idx\": 0, \"code\": \"\"}]",
        )
        .unwrap();
        let r = import(Format::Cosqa, &c, &t.path().join("cq")).unwrap();
        assert_eq!((r.documents, r.queries), (2, 1));
        let qs = crate::evaluation::dataset::load_questions(&r.questions).unwrap();
        assert_eq!(
            (qs[0].split.as_str(), qs[0].gold_paths[0].as_str()),
            ("dev", "functions/00000.py")
        );
        assert_eq!(
            std::fs::read_to_string(t.path().join("cq/corpus/functions/00000.py")).unwrap(),
            "def a():\n    return 1"
        );
    }
}
