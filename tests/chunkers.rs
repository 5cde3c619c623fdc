//! Chunkers side by side: a pipeline whose variants name `[chunkers.*]` sections chunks, indexes
//! and packs with each, and every variant's retrievals, packs and evaluation rows equal those of
//! a run with that chunker alone (bundled repositories, `*` questions included, and a repository
//! read at several revisions); a variant naming an undeclared chunker is an error that names it.

mod common;

use common::*;
use ri_batch::artifact::schema::{ChunkRow, EvaluationRow, PackRow, RetrievalRow, Row, SummaryRow};
use ri_batch::artifact::Store;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The variants of one chunker, named with `prefix`, naming `chunker` when given.
fn variants(prefix: &str, chunker: Option<&str>) -> String {
    let c = chunker.map_or(String::new(), |c| format!("chunker = \"{c}\"\n"));
    let mut out = String::new();
    for (name, packer, extra) in [
        ("rank", "rank", ""),
        ("compact", "compact", ""),
        ("marginal", "marginal-gain", ""),
        ("files", "rank", "files = \"fused\"\nfile_weight = 1.0\n"),
    ] {
        out.push_str(&format!(
            "[[variants]]\nname = \"{prefix}{name}\"\nretriever = \"bm25\"\npacker = \"{packer}\"\nbudget = 500\n{extra}{c}"
        ));
    }
    out
}

/// Rows of `R`'s table by (variant, question, rank or order), as JSON, for the variants in `names`.
fn rows_of<R: ri_batch::artifact::schema::Row>(
    out: &Path,
    names: &[&str],
) -> BTreeMap<String, Value> {
    let rows: Vec<R> = Store::new(out).read().unwrap();
    let mut by = BTreeMap::new();
    for r in rows {
        let v = serde_json::to_value(&r).unwrap();
        let variant = v["variant"].as_str().unwrap().to_string();
        if !names.iter().any(|n| variant.starts_with(n)) {
            continue;
        }
        // A retrieval by its rank, a pack by its order; an evaluation row is one per question.
        let pos = v.get("rank").or_else(|| v.get("order")).cloned();
        let key = format!(
            "{variant}/{}/{}",
            v["question_id"].as_str().unwrap(),
            pos.map_or(String::new(), |p| p.to_string())
        );
        assert!(by.insert(key, v).is_none(), "two rows at one key");
    }
    by
}

/// Checks that `together`'s rows of the variants named `prefix…` equal `alone`'s.
fn same_rows(together: &Path, alone: &Path, prefix: &str) {
    let n = [prefix];
    let ret = rows_of::<RetrievalRow>(together, &n);
    assert!(!ret.is_empty(), "no retrievals for {prefix}");
    assert_eq!(ret, rows_of::<RetrievalRow>(alone, &n));
    let packs = rows_of::<PackRow>(together, &n);
    assert!(!packs.is_empty());
    assert_eq!(packs, rows_of::<PackRow>(alone, &n));
    let ev = rows_of::<EvaluationRow>(together, &n);
    assert!(!ev.is_empty());
    assert_eq!(
        ev,
        rows_of::<EvaluationRow>(alone, &n),
        "{prefix}: evaluation differs from the run with that chunker alone"
    );
}

#[test]
fn bundled_chunkers_side_by_side_equal_their_runs_alone() {
    let t = tempfile::tempdir().unwrap();
    let syntax = "[chunkers.syntax]\nmethod = \"syntax\"\nmax_tokens = 200\n";
    let [both, lines, alone] = ["both", "lines", "alone"].map(|d| t.path().join(d));
    for d in [&both, &lines, &alone] {
        std::fs::create_dir_all(d).unwrap();
    }
    let plan = bundled_plan(
        &both,
        &format!(
            "{syntax}{}{}",
            variants("lines-", None),
            variants("syntax-", Some("syntax"))
        ),
    );
    run_quiet(&plan);
    run_quiet(&bundled_plan(&lines, &variants("lines-", None)));
    run_quiet(&bundled_plan(
        &alone,
        &format!(
            "[chunk]\nmethod = \"syntax\"\nmax_tokens = 200\n{}",
            variants("syntax-", None)
        ),
    ));
    // Each chunker has its own partitions; the named one's are `repo~syntax`.
    let chunks: Vec<ChunkRow> = Store::new(both.join("out")).read().unwrap();
    let parts: Vec<String> = Store::new(both.join("out"))
        .files_of(ChunkRow::TABLE)
        .unwrap()
        .into_iter()
        .map(|f| f.part)
        .collect();
    assert!(parts.contains(&"anyhow".to_string()) && parts.contains(&"anyhow~syntax".to_string()));
    assert!(chunks.iter().any(|c| c.kind == "syntax"));
    same_rows(&both.join("out"), &lines.join("out"), "lines-");
    same_rows(&both.join("out"), &alone.join("out"), "syntax-");
    // One summary holds the variants of both chunkers.
    let summary: Vec<SummaryRow> = Store::new(both.join("out")).read().unwrap();
    for v in ["lines-compact", "syntax-compact", "syntax-files"] {
        assert!(summary.iter().any(|r| r.variant == v), "{v} not summarised");
    }
}

#[test]
fn revisions_with_two_chunkers_equal_their_runs_alone() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("lib");
    let mut files = Vec::new();
    for i in 0..6 {
        let mut s = format!("\"\"\"Module {i}.\"\"\"\n\n\nclass Store{i}:\n");
        for m in 0..5 {
            s.push_str(&format!(
                "    def method_{m}(self, value):\n        \"\"\"Merge the stream window {m} of module {i}.\"\"\"\n        return value.merge(\n            window={m},\n        )\n\n"
            ));
        }
        files.push((format!("pkg/mod{i}.py"), s));
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, s)| (p.as_str(), s.as_str()))
        .collect();
    commit_files(&repo, &refs, "first");
    commit_files(
        &repo,
        &[(
            "pkg/mod2.py",
            "def replaced():\n    return 'stream window'\n",
        )],
        "second",
    );
    let mut qs = String::new();
    for (k, rev) in ["HEAD~1", "HEAD"].iter().enumerate() {
        qs.push_str(&format!(
            "{{\"id\":\"q{k}\",\"repo\":\"lib\",\"rev\":\"{rev}\",\"split\":\"dev\",\"answerable\":true,\"question\":\"merge the stream window 3\",\"evidence\":[{{\"path\":\"pkg/mod2.py\",\"quote\":\"return\"}}]}}\n"
        ));
    }
    let head = format!(
        "[pipeline]\nname = \"r\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n[[repos]]\nname = \"lib\"\ngit = \"{}\"\nrevs = [\"HEAD~1\", \"HEAD\"]\n[retrieve]\ntop_k = 8\n",
        repo.display()
    );
    let syntax = "method = \"syntax\"\nmax_tokens = 60\n";
    let bodies = [
        format!(
            "{head}[chunkers.syntax]\n{syntax}{}{}",
            variants("lines-", None),
            variants("syntax-", Some("syntax"))
        ),
        format!("{head}[chunk]\n{syntax}{}", variants("syntax-", None)),
    ];
    let dirs = ["both", "alone"].map(|d| t.path().join(d));
    for (d, body) in dirs.iter().zip(&bodies) {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("q.jsonl"), &qs).unwrap();
        let out = ri_batch(&["run", pipeline(d, body).to_str().unwrap(), "--quiet"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    same_rows(&dirs[0].join("out"), &dirs[1].join("out"), "syntax-");
}

#[test]
fn a_variant_naming_an_undeclared_chunker_is_an_error_that_names_it() {
    let t = tempfile::tempdir().unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"c\"\n[[repos]]\nname = \"x\"\ndir = \".\"\n[chunkers.syntax]\nmethod = \"syntax\"\n[[variants]]\nname = \"a\"\nretriever = \"bm25\"\nchunker = \"sintax\"\n",
    );
    let e = ri_batch::config::Plan::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("pipeline.toml:11") && e.contains("[chunkers.sintax]") && e.contains("syntax"),
        "{e}"
    );
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"c\"\n[[repos]]\nname = \"x\"\ndir = \".\"\n[chunkers.syntax]\nmethod = \"syntax\"\nmax_tokens = 3\n",
    );
    let e = ri_batch::config::Plan::load(&p).unwrap_err().to_string();
    assert!(e.contains("chunkers.syntax.max_tokens"), "{e}");
}

#[test]
fn dense_and_hybrid_variants_search_their_chunkers_vectors() {
    let t = tempfile::tempdir().unwrap();
    let [both, alone] = ["both", "alone"].map(|d| t.path().join(d));
    let cache = t.path().join("cache");
    let embed = format!(
        "[scan]\ninclude = [\"src/duration.rs\", \"src/date.rs\", \"src/context.rs\", \"index.js\"]\n[embed]\nmodel = \"{}\"\ncache_dir = \"{}\"\n",
        minilm_dir().display(),
        cache.display()
    );
    let dense = |prefix: &str, chunker: Option<&str>| {
        let c = chunker.map_or(String::new(), |c| format!("chunker = \"{c}\"\n"));
        format!(
            "[[variants]]\nname = \"{prefix}hybrid\"\nretriever = \"hybrid\"\npacker = \"rank\"\nbudget = 400\n{c}\
             [[variants]]\nname = \"{prefix}dense-units\"\nretriever = \"dense\"\npacker = \"compact\"\nbudget = 400\nunit_dense = 0.5\n{c}"
        )
    };
    for d in [&both, &alone] {
        std::fs::create_dir_all(d).unwrap();
    }
    let syntax = "method = \"syntax\"\nmax_tokens = 150\n";
    let plan = bundled_plan(
        &both,
        &format!(
            "{embed}[chunkers.syntax]\n{syntax}{}{}",
            dense("lines-", None),
            dense("syntax-", Some("syntax"))
        ),
    );
    run_quiet(&plan);
    run_quiet(&bundled_plan(
        &alone,
        &format!("{embed}[chunk]\n{syntax}{}", dense("syntax-", None)),
    ));
    // Each chunker's chunks have their own vectors, under their own partitions.
    let parts: Vec<String> = Store::new(both.join("out"))
        .files_of(ri_batch::artifact::schema::EmbeddingRow::CHUNKS)
        .unwrap()
        .into_iter()
        .map(|f| f.part)
        .collect();
    assert!(parts.iter().any(|p| p.ends_with("~syntax")), "{parts:?}");
    same_rows(&both.join("out"), &alone.join("out"), "syntax-");
}
