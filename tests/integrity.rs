//! Nothing wrong is ever answered: every kind of artifact changed with its size kept is an error
//! naming the file (exit 3) in `run`, `ask` and `sql`, never a different answer (a changed
//! embedding-cache part is dropped: see the cache's unit tests); inputs are bounded (a deep SQL
//! expression, a huge budget); a plain directory's file edited with its size and time kept is
//! scanned again; a FIFO is recorded, not lost.

mod common;

use common::{commit_files, pipeline, ri_batch};
use ri_batch::artifact::Store;
use std::path::{Path, PathBuf};

const QUESTIONS: &str = "{\"id\":\"q1\",\"repo\":\"app\",\"split\":\"dev\",\"answerable\":true,\"question\":\"How are invoices retried?\",\"evidence\":[{\"path\":\"README.md\",\"quote\":\"retries failed payments\"}]}\n";

fn setup(t: &Path) -> PathBuf {
    commit_files(
        &t.join("app"),
        &[
            (
                "README.md",
                "# Billing\n\nThe worker sends invoices and retries failed payments nightly.\n\nInvoices are retried three times.\n",
            ),
            ("src/lib.rs", "pub fn retry() -> u32 {\n    3\n}\n"),
        ],
        "init",
    );
    std::fs::write(t.join("q.jsonl"), QUESTIONS).unwrap();
    pipeline(
        t,
        "[pipeline]\nname = \"i\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n[[repos]]\nname = \"app\"\ngit = \"app\"\n[[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 300\n",
    )
}

/// Flips `n` bytes in the middle of `path`, keeping its size and modification time.
fn corrupt(path: &Path, n: usize) {
    let md = std::fs::metadata(path).unwrap();
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + n] {
        *b ^= 0x5a;
    }
    std::fs::write(path, &bytes).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(md.modified().unwrap()).unwrap();
}

/// The committed file of `table` in `out`.
fn file_of(out: &Path, table: &str) -> PathBuf {
    let f = &Store::new(out)
        .files_of(ri_batch::artifact::schema::Table::named(table).unwrap())
        .unwrap()[0];
    out.join(&f.path)
}

#[test]
fn every_changed_artifact_is_an_error_naming_it_never_another_answer() {
    for table in ["bm25_index", "bm25_docs", "chunks", "files", "retrievals"] {
        let t = tempfile::tempdir().unwrap();
        let p = setup(t.path());
        let first = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        let out = t.path().join("out");
        let victim = file_of(&out, table);
        corrupt(&victim, 4);
        let sql = ri_batch(&[
            "sql",
            out.to_str().unwrap(),
            &format!("SELECT count(*) FROM {table}"),
        ]);
        assert_eq!(
            sql.status.code(),
            Some(3),
            "{table}: sql {}",
            String::from_utf8_lossy(&sql.stderr)
        );
        // Every stage that reads it again refuses it.
        let again = ri_batch(&[
            "run",
            p.to_str().unwrap(),
            "--quiet",
            "--force",
            "--stages",
            "retrieve,pack,extract,evaluate",
        ]);
        let err = String::from_utf8_lossy(&again.stderr);
        if table != "retrievals" {
            assert_eq!(again.status.code(), Some(3), "{table}: {err}");
            assert!(
                err.contains(&victim.file_name().unwrap().to_string_lossy().to_string())
                    && err.contains("does not match its manifest"),
                "{table}: {err}"
            );
        }
        let ask = ri_batch(&[
            "ask",
            out.to_str().unwrap(),
            "How are invoices retried?",
            "--repo",
            "app",
        ]);
        if ["bm25_index", "bm25_docs", "chunks"].contains(&table) {
            assert_eq!(
                ask.status.code(),
                Some(3),
                "{table}: ask {}",
                String::from_utf8_lossy(&ask.stderr)
            );
        }
    }
}

#[test]
fn inputs_are_bounded_before_they_are_used() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path());
    assert!(ri_batch(&["run", p.to_str().unwrap(), "--quiet"])
        .status
        .success());
    let out = t.path().join("out");
    let deep = format!("SELECT 1{}", "+1".repeat(5000));
    let r = ri_batch(&["sql", out.to_str().unwrap(), &deep]);
    assert_eq!(
        r.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(String::from_utf8_lossy(&r.stderr).contains("nests more than 256 levels"));
    let shallow = format!("SELECT 1{}", "+1".repeat(100));
    assert!(ri_batch(&["sql", out.to_str().unwrap(), &shallow])
        .status
        .success());
    let huge = std::fs::read_to_string(&p)
        .unwrap()
        .replace("budget = 300", "budget = 9223372036854775807");
    let q = pipeline(t.path(), &huge);
    let r = ri_batch(&["run", q.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("pipeline.toml:") && err.contains("budget must be within"),
        "{err}"
    );
}

#[test]
fn a_plain_directory_file_edited_in_place_is_scanned_again_and_a_fifo_is_recorded() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("docs");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("a.md"), "# A\n\nalpha beta\n").unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(d.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"d\"\noutput_dir = \"out\"\n[[repos]]\nname = \"docs\"\ndir = \"docs\"\n",
    );
    assert!(ri_batch(&["run", p.to_str().unwrap(), "--quiet"])
        .status
        .success());
    let out = t.path().join("out");
    let skipped: Vec<ri_batch::artifact::schema::SkippedRow> = Store::new(&out).read().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s.path == "pipe" && s.reason == "special_file"),
        "{skipped:?}"
    );
    // Same size, same modification time, other words.
    let f = d.join("a.md");
    let md = std::fs::metadata(&f).unwrap();
    std::fs::write(&f, "# A\n\ngamma delt\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(md.modified().unwrap())
        .unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().len(), md.len());
    assert!(ri_batch(&["run", p.to_str().unwrap(), "--quiet"])
        .status
        .success());
    let files: Vec<ri_batch::artifact::schema::FileRow> = Store::new(&out).read().unwrap();
    assert!(files[0].text.contains("gamma"), "{}", files[0].text);
}
