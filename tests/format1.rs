//! An output directory of an older format is still read. `tests/data/format1/out` was written
//! by ri-batch at 597c7ba, the last release that wrote format 1 (the `*` scope's partitions named
//! `_-….parquet`), from `tests/data/format1/pipeline.toml`: three bundled repositories, 44
//! questions (one over all of them), BM25 variants. Today's `sql`, `report` and `compare` read it
//! as it is, and a resumed `run` finishes it in today's format with the very tables a fresh run
//! writes.

mod common;

use common::{bundled_repos, ri_batch, root, walk};
use std::path::{Path, PathBuf};

/// Each table the runs are compared by, as ordered rows.
const QUERIES: &[(&str, &str)] = &[
    (
        "retrievals",
        "SELECT variant, question_id, rank, chunk_id, score FROM retrievals \
         ORDER BY variant, question_id, rank",
    ),
    (
        "packs",
        "SELECT variant, question_id, \"order\", chunk_id, start_line, end_line, tokens, text \
         FROM packs ORDER BY variant, question_id, \"order\"",
    ),
    (
        "extracts",
        "SELECT variant, question_id, outcome, reason, rendered FROM extracts \
         ORDER BY variant, question_id",
    ),
    (
        "evaluation",
        "SELECT variant, question_id, repo, pool_recall, packed_recall, tokens_used FROM evaluation \
         ORDER BY variant, question_id",
    ),
    (
        "summary",
        "SELECT variant, split, questions, pool_recall, packed_recall FROM summary \
         ORDER BY variant, split",
    ),
    (
        "bm25_docs",
        "SELECT scope, chunk_id, length FROM bm25_docs ORDER BY scope, chunk_id",
    ),
];

fn fixture() -> PathBuf {
    root().join("tests/data/format1")
}

/// A copy of the checked-in directory to work on (report and run write into it).
fn copy_of_fixture(to: &Path) -> PathBuf {
    let from = fixture().join("out");
    for f in walk(&from) {
        let dest = to.join(f.strip_prefix(&from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&f, &dest).unwrap();
    }
    to.to_path_buf()
}

/// The fixture's pipeline, its paths from the project root and its output directory `out`.
fn pipeline_for(dir: &Path, out: &Path) -> PathBuf {
    let text = std::fs::read_to_string(fixture().join("pipeline.toml")).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("root = ") {
                format!("root = {:?}", root().display().to_string())
            } else if l.starts_with("output_dir = ") {
                format!("output_dir = {:?}", out.display().to_string())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn rows(dir: &Path, query: &str) -> String {
    let out = ri_batch(&["sql", dir.to_str().unwrap(), query, "--format", "csv"]);
    assert!(
        out.status.success(),
        "{query}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn format_versions(dir: &Path) -> Vec<u64> {
    walk(dir)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "manifest.json"))
        .map(|p| {
            let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            m["format_version"].as_u64().unwrap()
        })
        .collect()
}

fn old_named(dir: &Path) -> usize {
    walk(dir)
        .iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("_-"))
        .count()
}

#[test]
fn the_checked_in_directory_is_format_1() {
    let out = fixture().join("out");
    let versions = format_versions(&out);
    assert!(versions.len() >= 8, "{versions:?}");
    assert!(versions.iter().all(|v| *v == 1), "{versions:?}");
    assert!(old_named(&out) > 0, "format 1 named the * scope's files _-");
}

#[test]
fn sql_report_and_compare_read_a_format_1_directory() {
    let t = tempfile::tempdir().unwrap();
    let old = copy_of_fixture(&t.path().join("old"));
    // Every table, `*` partitions included: the question over all repositories has its rows.
    let evaluation = rows(&old, QUERIES[3].1);
    let lines = evaluation.lines().filter(|l| !l.is_empty()).count();
    assert_eq!(lines, 1 + 44 * 5, "{evaluation}");
    assert!(evaluation.contains(",all-02,*,"), "{evaluation}");
    let docs = rows(
        &old,
        "SELECT scope, count(*) AS n FROM bm25_docs GROUP BY scope ORDER BY scope",
    );
    assert!(docs.lines().any(|l| l.starts_with("*,")), "{docs}");
    for (name, q) in QUERIES {
        assert!(rows(&old, q).lines().count() > 1, "{name}");
    }
    let report = ri_batch(&["report", old.to_str().unwrap()]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let html = std::fs::read_to_string(old.join("report.html")).unwrap();
    assert!(html.contains("bm25-compact") && html.contains("<svg"));
    // The same run compared with itself: nothing changed.
    let json = ri_batch(&[
        "compare",
        old.to_str().unwrap(),
        old.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let c: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(c.is_object(), "{c}");
}

#[test]
fn a_resumed_run_finishes_a_format_1_directory_as_a_fresh_run_would() {
    bundled_repos();
    let t = tempfile::tempdir().unwrap();
    let old = copy_of_fixture(&t.path().join("old"));
    let fresh = t.path().join("fresh");
    for (out, name) in [(&old, "resumed"), (&fresh, "fresh")] {
        let dir = t.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let p = pipeline_for(&dir, out);
        let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
        assert!(
            run.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    // The resumed directory is today's format throughout, with no file left under an old name.
    assert!(format_versions(&old).iter().all(|v| *v == 2));
    assert_eq!(old_named(&old), 0);
    for (name, q) in QUERIES {
        let (a, b) = (rows(&old, q), rows(&fresh, q));
        assert!(a == b, "{name}: the resumed run differs from a fresh one");
    }
    // Compare across the two formats' runs: the same figures.
    let json = ri_batch(&[
        "compare",
        fixture().join("out").to_str().unwrap(),
        fresh.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
}
