//! Syntax chunks (`[chunk] method = "syntax"`): on the bundled repositories every file still has
//! chunks and every chunk is exactly its file's lines; code with a grammar is cut along its
//! definitions and headed by them; a file that does not parse gets line chunks and is counted;
//! the compact packer's units in syntax chunks are whole statements.

mod common;

use common::*;
use ri_batch::artifact::schema::{ChunkRow, FileRow, PackRow, Row};
use ri_batch::artifact::Store;
use std::collections::{BTreeMap, HashMap};

fn rows<R: Row>(store: &Store) -> Vec<R> {
    let mut out = Vec::new();
    for f in store.files_of(R::TABLE).unwrap() {
        out.extend(store.read_rows::<R>(&f).unwrap());
    }
    out
}

fn syntax_stats(store: &Store) -> BTreeMap<String, u64> {
    let m = store.manifests().unwrap();
    serde_json::from_value(m["chunk"].stats["syntax_files"].clone()).unwrap()
}

#[test]
fn bundled_repositories_lose_no_file_and_code_follows_its_definitions() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(
        t.path(),
        "[chunk]\nmethod = \"syntax\"\nmax_tokens = 200\n\
         [[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 400\n",
    );
    run_quiet(&plan);
    let store = Store::new(plan.output_dir.clone());
    let files: Vec<FileRow> = rows(&store);
    let chunks: Vec<ChunkRow> = rows(&store);
    let text_of: HashMap<(&str, &str), &FileRow> = files
        .iter()
        .map(|f| ((f.repo.as_str(), f.path.as_str()), f))
        .collect();
    let mut chunked: HashMap<(&str, &str), usize> = HashMap::new();
    for c in &chunks {
        let f = text_of[&(c.repo.as_str(), c.path.as_str())];
        let lines = ri_batch::text::lines_of(&f.text, c.start_line, c.end_line);
        assert_eq!(
            lines.as_deref(),
            Some(c.text.as_str()),
            "{}:{}",
            c.path,
            c.start_line
        );
        *chunked.entry((&c.repo, &c.path)).or_default() += 1;
        let supported = ri_batch::text::syntax::supported(&f.language);
        if c.kind == "syntax" {
            assert!(supported, "{} cut by syntax", c.path);
        }
    }
    for f in &files {
        if !f.text.trim().is_empty() {
            assert!(
                chunked.contains_key(&(f.repo.as_str(), f.path.as_str())),
                "{} has no chunk",
                f.path
            );
        }
    }
    // Rust (anyhow, humantime) and JavaScript (the npm packages) are parsed; Markdown is not.
    let stats = syntax_stats(&store);
    assert!(stats.get("parsed").copied().unwrap_or(0) > 20, "{stats:?}");
    let graded: u64 = stats.values().sum();
    assert_eq!(graded as usize, files.len(), "{stats:?}");
    let supported = files
        .iter()
        .filter(|f| ri_batch::text::syntax::supported(&f.language))
        .count() as u64;
    assert_eq!(
        stats.get("parsed").copied().unwrap_or(0)
            + stats.get("parse_error").copied().unwrap_or(0)
            + stats.get("too_large").copied().unwrap_or(0),
        supported,
        "{stats:?}"
    );
    // A method cut out of its impl block or class is headed by both names.
    let nested = chunks
        .iter()
        .filter(|c| c.kind == "syntax" && c.heading.contains(" > "))
        .count();
    assert!(nested > 0, "no chunk inside a named definition");
    let impl_method = chunks.iter().find(|c| {
        c.kind == "syntax"
            && c.path.ends_with(".rs")
            && c.heading.contains(" > ")
            && c.text.contains("fn ")
    });
    assert!(impl_method.is_some(), "no Rust method headed by its type");
    // Packed units of syntax chunks are line-addressed like every unit: their text is their
    // file's lines (statements are whole lines).
    let kind_of: HashMap<&str, &str> = chunks
        .iter()
        .map(|c| (c.chunk_id.as_str(), c.kind.as_str()))
        .collect();
    let packs: Vec<PackRow> = rows(&store);
    let units: Vec<&PackRow> = packs
        .iter()
        .filter(|p| {
            p.unit == ri_batch::artifact::outcomes::PackedKind::Unit
                && kind_of[p.chunk_id.as_str()] == "syntax"
        })
        .collect();
    assert!(!units.is_empty(), "no unit of a syntax chunk was packed");
    for u in units {
        let f = text_of[&(u.repo.as_str(), u.path.as_str())];
        let lines = ri_batch::text::lines_of(&f.text, u.start_line, u.end_line).unwrap();
        assert_eq!(lines.trim(), u.text.trim(), "{}:{}", u.path, u.start_line);
    }
}

#[test]
fn a_file_that_does_not_parse_keeps_line_chunks_and_is_counted() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("r");
    let class = "class Store:\n    def add(self, row):\n        self.rows.append(row)\n        return len(self.rows)\n\n    def flush(self):\n        with open(self.path,\n                  \"w\") as f:\n            for r in self.rows:\n                f.write(r)\n";
    commit_files(
        &repo,
        &[
            ("store.py", class),
            ("broken.py", "def f(:\n    return (\n\nx = [1,\n"),
            ("NOTES.md", "# Notes\n\nStore keeps rows.\n"),
        ],
        "init",
    );
    std::fs::write(
        t.path().join("q.jsonl"),
        "{\"id\":\"q1\",\"repo\":\"r\",\"split\":\"dev\",\"answerable\":true,\"question\":\"how are rows flushed\",\"evidence\":[{\"path\":\"store.py\",\"quote\":\"f.write(r)\"}]}\n",
    )
    .unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"s\"\nquestions = \"q.jsonl\"\n[[repos]]\nname = \"r\"\ngit = \"r\"\n\
         [chunk]\nmethod = \"syntax\"\nmax_tokens = 40\n\
         [[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 400\n",
    );
    let plan = ri_batch::config::Plan::load(&p).unwrap();
    run_quiet(&plan);
    let store = Store::new(plan.output_dir.clone());
    let stats = syntax_stats(&store);
    assert_eq!(stats.get("parsed"), Some(&1), "{stats:?}");
    assert_eq!(stats.get("parse_error"), Some(&1), "{stats:?}");
    assert_eq!(stats.get("unsupported_language"), Some(&1), "{stats:?}");
    let chunks: Vec<ChunkRow> = rows(&store);
    let broken: Vec<_> = chunks.iter().filter(|c| c.path == "broken.py").collect();
    assert!(!broken.is_empty() && broken.iter().all(|c| c.kind == "code"));
    let flush = chunks
        .iter()
        .find(|c| c.text.contains("def flush"))
        .expect("flush is chunked");
    assert_eq!(flush.kind, "syntax");
    assert_eq!(flush.heading, "Store > flush");
    assert!(flush.text.contains("f.write(r)") && !flush.text.contains("def add"));
    // The compact packer takes whole statements of syntax chunks: the `with` statement, whose
    // bracket closes on the next line, is one unit of lines 7-8, never line 7 alone.
    let packs: Vec<PackRow> = rows(&store);
    let with: Vec<_> = packs
        .iter()
        .filter(|p| p.path == "store.py" && p.start_line <= 8 && p.end_line >= 7)
        .collect();
    assert!(
        !with.is_empty(),
        "the with statement was not packed: {packs:#?}"
    );
    for p in with {
        assert!(p.start_line <= 7 && p.end_line >= 8, "{p:#?}");
    }
}
