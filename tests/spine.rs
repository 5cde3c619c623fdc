//! End-to-end tests of the pipeline spine on real git repositories: secrets stay out of every
//! artifact, broken repositories are recorded while the rest completes, config errors name their
//! line and key, chunks reproduce their source lines, and unchanged inputs are skipped.

mod common;

use common::*;
use ri_batch::artifact::outcomes::StageStatus;
use ri_batch::artifact::schema::{ChunkRow, ErrorRow, FileRow, SkippedRow};
use ri_batch::artifact::{StageId, Store};
use ri_batch::config::Plan;
use ri_batch::pipeline::{run, RunOptions};
use std::path::Path;

const KEY_BODY: &str =
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQAAACBq";
const AWS_KEY: &str = "AKIAZ7Q4EXAMPLE12345";
const ENV_TOKEN: &str = "tok_live_9f8e7d6c5b4a";
const ENV_PASSWORD: &str = "hunter2-correct-horse";

fn every_artifact_text(out: &Path) -> String {
    decoded_outputs(out).into_iter().map(|(_, t)| t).collect()
}

#[test]
fn planted_secrets_leave_no_byte_in_any_artifact() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("app");
    let key = format!(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\nAAAEC3NzaC1lZDI1NTE5AAAAIGpVxLPk9w7kq2J1Lr0h1Wm6sYqQ\n-----END OPENSSH PRIVATE KEY-----\n"
    );
    commit_files(
        &repo,
        &[
            (
                "README.md",
                "# App\n\nThe app reads its settings at start-up.\n",
            ),
            (
                ".env",
                &format!("API_TOKEN={ENV_TOKEN}\nDB_PASSWORD={ENV_PASSWORD}\n"),
            ),
            ("deploy/id_ed25519", &key),
            (
                "docs/ops.md",
                &format!("# Ops\n\nThe deploy key, for reference:\n\n```\n{key}```\n"),
            ),
            (
                "src/config.js",
                &format!("const region = 'eu-west-1';\nconst awsKey = '{AWS_KEY}';\n"),
            ),
            ("src/app.js", "function start() {\n  return 1;\n}\n"),
        ],
        "app",
    );
    let questions = t.path().join("q.jsonl");
    std::fs::write(
        &questions,
        r#"{"id":"q1","repo":"app","split":"dev","answerable":true,"question":"when are settings read?","evidence":[{"path":"README.md","quote":"reads its settings at start-up"}]}"#,
    )
    .unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"s\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n[[repos]]\nname = \"app\"\ngit = \"app\"\n\n[[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 200\n",
    );
    let plan = Plan::load(&p).unwrap();
    let report = run_quiet(&plan);
    assert_eq!(report.errors, 0);
    let store = Store::new(&plan.output_dir);
    let skipped: Vec<SkippedRow> = store.read().unwrap();
    let reason = |p: &str| {
        skipped
            .iter()
            .find(|s| s.path == p)
            .map(|s| s.reason.clone())
    };
    assert_eq!(
        reason(".env").as_deref(),
        Some("sensitive_path: dotenv file")
    );
    assert_eq!(
        reason("deploy/id_ed25519").as_deref(),
        Some("sensitive_path: ssh key")
    );
    assert_eq!(
        reason("docs/ops.md").as_deref(),
        Some("sensitive_content: private key block")
    );
    // One line holds the key: that line is redacted and the file kept.
    assert_eq!(
        reason("src/config.js").as_deref(),
        Some("redacted: aws access key id (1 line)")
    );
    let files: Vec<FileRow> = store.read().unwrap();
    let mut kept: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    kept.sort();
    assert_eq!(kept, ["README.md", "src/app.js", "src/config.js"]);
    let config = files.iter().find(|f| f.path == "src/config.js").unwrap();
    assert_eq!(config.text, "const region = 'eu-west-1';\n[redacted]\n");

    let everything = every_artifact_text(&plan.output_dir);
    assert!(
        everything.contains("reads its settings"),
        "the scan of the text itself is there"
    );
    for secret in [
        KEY_BODY,
        AWS_KEY,
        ENV_TOKEN,
        ENV_PASSWORD,
        "BEGIN OPENSSH PRIVATE KEY",
    ] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked into an artifact"
        );
    }
}

#[test]
fn broken_repositories_are_recorded_while_the_others_complete() {
    let t = tempfile::tempdir().unwrap();
    commit_files(
        &t.path().join("good"),
        &[("README.md", "# Good\n\nAll fine here.\n")],
        "good",
    );
    commit_files(
        &t.path().join("corrupt"),
        &[("data.txt", "some content that will be corrupted\n")],
        "c",
    );
    // Corrupt the blob's loose object: git still lists it in the tree, but it cannot be read.
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD:data.txt"])
        .current_dir(t.path().join("corrupt"))
        .output()
        .unwrap();
    let oid = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let obj = t
        .path()
        .join("corrupt/.git/objects")
        .join(&oid[..2])
        .join(&oid[2..]);
    let mut perms = std::fs::metadata(&obj).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&obj, perms).unwrap();
    std::fs::write(&obj, b"not a zlib stream at all").unwrap();
    commit_files(&t.path().join("badrev"), &[("a.md", "# A\n")], "a");
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"b\"\noutput_dir = \"out\"\n\
         [[repos]]\nname = \"good\"\ngit = \"good\"\n\
         [[repos]]\nname = \"missing\"\ngit = \"no/such/repo\"\n\
         [[repos]]\nname = \"corrupt\"\ngit = \"corrupt\"\n\
         [[repos]]\nname = \"badrev\"\ngit = \"badrev\"\nrev = \"no-such-branch\"\n",
    );
    let out = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 errors recorded"));
    let store = Store::new(t.path().join("out"));
    let errors: Vec<ErrorRow> = store.read().unwrap();
    let mut failed: Vec<&str> = errors.iter().filter_map(|e| e.repo.as_deref()).collect();
    failed.sort();
    // A blob that cannot be read is its file's problem: the repository goes on without it.
    assert_eq!(failed, ["badrev", "missing"]);
    let skipped: Vec<ri_batch::artifact::schema::SkippedRow> = store.read().unwrap();
    let corrupt = skipped
        .iter()
        .find(|s| s.repo == "corrupt" && s.path == "data.txt")
        .unwrap();
    assert!(
        corrupt.reason.starts_with("corrupt_object") && corrupt.reason.contains(&oid),
        "{}",
        corrupt.reason
    );
    let msg = |r: &str| {
        errors
            .iter()
            .find(|e| e.repo.as_deref() == Some(r))
            .unwrap()
            .message
            .clone()
    };
    assert!(
        msg("missing").contains("does not exist"),
        "{}",
        msg("missing")
    );
    assert!(
        msg("badrev").contains("no-such-branch"),
        "{}",
        msg("badrev")
    );
    let files: Vec<FileRow> = store.read().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].repo, "good");
    let revisions: Vec<ri_batch::artifact::schema::RevisionRow> = store.read().unwrap();
    let mut read: Vec<&str> = revisions.iter().map(|r| r.repo.as_str()).collect();
    read.sort();
    assert_eq!(read, ["corrupt", "good"]);
    let chunks: Vec<ChunkRow> = store.read().unwrap();
    assert!(!chunks.is_empty());
}

#[test]
fn malformed_toml_reports_file_line_and_key() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("r")).unwrap();
    let base = "[pipeline]\nname = \"m\"\n\n[[repos]]\nname = \"r\"\ndir = \"r\"\n\n[chunk]\n";
    let cases = [
        (
            format!("{base}max_tokens = \"lots\"\n"),
            ":9:",
            "chunk.max_tokens",
        ),
        (format!("{base}max_tokns = 300\n"), ":9:", "chunk.max_tokns"),
        (format!("{base}max_tokens = 300\n[scan\n"), ":10:", "scan"),
        (
            format!("{base}max_tokens = 300\n\n[[variants]]\nname = \"v\"\nretriever = \"bm52\"\n"),
            ":13:",
            "variants[0].retriever",
        ),
    ];
    for (text, line, key) in cases {
        let p = pipeline(t.path(), &text);
        let out = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("pipeline.toml{line}")),
            "want line {line} in: {err}"
        );
        assert!(err.contains(key), "want key {key} in: {err}");
        assert!(
            !t.path().join("outputs").exists(),
            "no work starts on a bad config"
        );
    }
}

#[test]
fn every_chunk_reproduces_its_lines_of_the_bundled_sources() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(t.path(), "");
    let opts = RunOptions {
        stages: Some(vec![StageId::Scan, StageId::Chunk]),
        quiet: true,
        force: false,
        no_wait: false,
        merge: false,
    };
    run(&plan, &opts).unwrap();
    let store = Store::new(&plan.output_dir);
    let files: Vec<FileRow> = store.read().unwrap();
    let chunks: Vec<ChunkRow> = store.read().unwrap();
    assert!(
        files.len() >= 150 && chunks.len() > files.len(),
        "{} files, {} chunks",
        files.len(),
        chunks.len()
    );
    let by_path: std::collections::HashMap<(&str, &str), &FileRow> = files
        .iter()
        .map(|f| ((f.repo.as_str(), f.path.as_str()), f))
        .collect();
    for c in &chunks {
        let f = by_path[&(c.repo.as_str(), c.path.as_str())];
        let lines = ri_batch::text::chunker::split_lines(&f.text);
        let rebuilt = lines[c.start_line as usize - 1..c.end_line as usize].join("\n");
        assert_eq!(
            rebuilt, c.text,
            "{}:{}-{}",
            c.path, c.start_line, c.end_line
        );
        assert!(
            c.tokens <= 500 || c.start_line == c.end_line,
            "{}:{} has {} tokens",
            c.path,
            c.start_line,
            c.tokens
        );
    }
    // The scanned text is the blob at the pinned commit, byte for byte.
    let f = files
        .iter()
        .find(|f| f.repo == "semver" && f.path == "README.md")
        .unwrap();
    let show = std::process::Command::new("git")
        .args(["show", &format!("{}:README.md", f.commit)])
        .current_dir(common::root().join("datasets/repos/semver"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(show.stdout).unwrap(), f.text);
}

#[test]
fn parquet_is_read_by_pyarrow_and_duckdb_and_sql_agrees() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(
        t.path(),
        "[[variants]]\nname = \"bm25-rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 700\n\
         [[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 700\n",
    );
    run_quiet(&plan);
    let query = "SELECT variant, split, questions, answerable, packed_recall, pool_recall FROM summary ORDER BY variant, split";
    let ours = ri_batch(&[
        "sql",
        plan.output_dir.to_str().unwrap(),
        query,
        "--format",
        "json",
    ]);
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let out = std::process::Command::new(python())
        .arg(common::root().join("tests/clients.py"))
        .arg(&plan.output_dir)
        .arg(query)
        .arg(String::from_utf8(ours.stdout).unwrap())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for table in [
        "files",
        "chunks",
        "skipped",
        "errors",
        "summary",
        "packs",
        "retrievals",
    ] {
        assert!(
            stdout.contains(&format!("table {table} ")),
            "{table} not read: {stdout}"
        );
    }
    assert!(stdout.contains("query results equal"), "{stdout}");
}

#[test]
fn unchanged_runs_skip_everything_and_a_changed_repo_is_redone_alone() {
    let t = tempfile::tempdir().unwrap();
    for name in ["a", "b", "c"] {
        commit_files(
            &t.path().join(name),
            &[("README.md", &format!("# {name}\n\nText of {name}.\n"))],
            name,
        );
    }
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"i\"\noutput_dir = \"out\"\n\
         [[repos]]\nname = \"a\"\ngit = \"a\"\n[[repos]]\nname = \"b\"\ngit = \"b\"\n[[repos]]\nname = \"c\"\ngit = \"c\"\n",
    );
    let plan = Plan::load(&p).unwrap();
    let opts = RunOptions {
        quiet: true,
        ..Default::default()
    };
    let first = run(&plan, &opts).unwrap();
    assert!(first
        .stages
        .iter()
        .filter(|s| s.status != StageStatus::Ran)
        .all(|s| matches!(s.status, StageStatus::Disabled(_))));
    let second = run(&plan, &opts).unwrap();
    for s in &second.stages {
        assert!(
            s.status == StageStatus::Skipped || matches!(s.status, StageStatus::Disabled(_)),
            "{} {}",
            s.stage,
            s.status
        );
    }
    commit_files(
        &t.path().join("b"),
        &[("NEW.md", "# New\n\nAdded later.\n")],
        "more",
    );
    let third = run(&plan, &opts).unwrap();
    let scan = third
        .stages
        .iter()
        .find(|s| s.stage == StageId::Scan)
        .unwrap();
    assert_eq!(
        (&scan.status, scan.reused),
        (&StageStatus::Ran, 10),
        "files, skipped and commits of a and c reused"
    );
    let chunk = third
        .stages
        .iter()
        .find(|s| s.stage == StageId::Chunk)
        .unwrap();
    assert_eq!((&chunk.status, chunk.reused), (&StageStatus::Ran, 2));
    let files: Vec<FileRow> = Store::new(&plan.output_dir).read().unwrap();
    assert_eq!(files.len(), 4);
    // --force redoes a stage even when nothing changed.
    let forced = run(
        &plan,
        &RunOptions {
            stages: Some(vec![StageId::Scan]),
            force: true,
            quiet: true,
            no_wait: false,
            merge: false,
        },
    )
    .unwrap();
    assert_eq!(
        (&forced.stages[0].status, forced.stages[0].reused),
        (&StageStatus::Ran, 0)
    );
}

#[test]
fn chars4_budgets_count_the_way_intellirag_does() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(
        t.path(),
        "[pack]\ntokenizer = \"chars4\"\n\
         [[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 300\n\
         [[variants]]\nname = \"compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 300\n",
    );
    run_quiet(&plan);
    let store = Store::new(&plan.output_dir);
    let packs: Vec<ri_batch::artifact::schema::PackRow> = store.read().unwrap();
    let evaluation: Vec<ri_batch::artifact::schema::EvaluationRow> = store.read().unwrap();
    assert!(!packs.is_empty());
    let mut checked = 0;
    for e in &evaluation {
        let used: usize = packs
            .iter()
            .filter(|p| p.variant == e.variant && p.question_id == e.question_id)
            .map(|p| ri_batch::text::tokens::chars4_tokens(&p.text))
            .sum();
        assert_eq!(
            used, e.tokens_used as usize,
            "{} {}",
            e.variant, e.question_id
        );
        assert!(used <= 300, "{} {}: {used}", e.variant, e.question_id);
        checked += 1;
    }
    assert_eq!(checked, 2 * 140);
}

#[test]
fn the_passage_recall_rule_is_never_more_generous_than_the_merged_one() {
    let t = tempfile::tempdir().unwrap();
    let variants = "[[variants]]\nname = \"compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 700\n\
                    [[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 2800\n";
    let merged = bundled_plan(t.path(), variants);
    run_quiet(&merged);
    std::fs::create_dir_all(t.path().join("p")).unwrap();
    let passage = bundled_plan(
        &t.path().join("p"),
        &format!("[evaluate]\nrecall = \"passage\"\n{variants}"),
    );
    run_quiet(&passage);
    let rows = |plan: &Plan| -> Vec<ri_batch::artifact::schema::EvaluationRow> {
        let mut r: Vec<_> = Store::new(&plan.output_dir).read().unwrap();
        r.sort_by(|a: &ri_batch::artifact::schema::EvaluationRow, b| {
            (&a.variant, &a.question_id).cmp(&(&b.variant, &b.question_id))
        });
        r
    };
    let (m, p) = (rows(&merged), rows(&passage));
    assert_eq!(m.len(), p.len());
    let mut compared = 0;
    for (a, b) in m.iter().zip(&p) {
        assert_eq!((&a.variant, &a.question_id), (&b.variant, &b.question_id));
        for (x, y) in [
            (a.packed_recall, b.packed_recall),
            (a.pool_recall, b.pool_recall),
        ] {
            if let (Some(x), Some(y)) = (x, y) {
                assert!(y <= x, "{}: passage {y} > merged {x}", a.question_id);
                compared += 1;
            }
        }
    }
    assert_eq!(
        compared,
        2 * 2 * 116,
        "every answerable question, both variants"
    );
}
