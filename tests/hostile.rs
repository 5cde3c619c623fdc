//! Hostile use, end to end on a real run: `sql` statements built to crash or hang the engine (a
//! recursive string doubling, thousands of `UNION ALL` branches, functions asked to build
//! gigabytes, an unbounded recursion) end with exit status 2 and a message; statements longer
//! than a command line come from a file or standard input; a closed pipe is a normal end; and an
//! output directory copied elsewhere answers only from itself.

mod common;

use common::{commit_files, pipeline, ri_batch, root};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A finished run over one small git repository, in `t/out`.
fn finished_run(t: &Path) -> PathBuf {
    commit_files(
        &t.join("app"),
        &[
            (
                "README.md",
                "# Billing\n\nThe worker sends invoices and retries failed payments nightly.\n",
            ),
            ("src/lib.rs", "pub fn retry() -> u32 {\n    3\n}\n"),
        ],
        "init",
    );
    std::fs::write(
        t.join("q.jsonl"),
        "{\"id\":\"q1\",\"repo\":\"app\",\"split\":\"dev\",\"answerable\":true,\"question\":\"How are invoices retried?\",\"evidence\":[{\"path\":\"README.md\",\"quote\":\"retries failed payments\"}]}\n",
    )
    .unwrap();
    let p = pipeline(
        t,
        "[pipeline]\nname = \"h\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\
         [[repos]]\nname = \"app\"\ngit = \"app\"\n\
         [[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 300\n",
    );
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    t.join("out")
}

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ri-batch"))
}

/// Runs `ri-batch sql OUT QUERY EXTRA…`, killed (and the test failed) after 120 s.
fn sql_bounded(out: &Path, query: &str, extra: &[&str]) -> Output {
    let mut child = Command::new(binary())
        .arg("sql")
        .arg(out)
        .arg(query)
        .args(extra)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("`sql` did not end within 120 s: {query:.80}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The statement failed with exit status 2 and a message holding `says`, without a panic.
fn refused(o: &Output, says: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: sql") && err.contains(says), "{err}");
}

#[test]
fn statements_built_to_crash_or_hang_the_engine_end_with_a_message() {
    let t = tempfile::tempdir().unwrap();
    let out = finished_run(t.path());
    // A recursive CTE doubling a string: past the memory limit, or arrow's offset overflow, it
    // is an error either way.
    let doubling = "WITH RECURSIVE t(s, n) AS (SELECT 'ab', 1 UNION ALL SELECT s || s, n + 1 FROM t WHERE n < 40) SELECT max(length(s)) FROM t";
    refused(&sql_bounded(&out, doubling, &["--memory", "256"]), "");
    let branches = vec!["SELECT 1 AS x"; 2000].join(" UNION ALL ");
    refused(&sql_bounded(&out, &branches, &[]), "set operations");
    refused(
        &sql_bounded(&out, "SELECT length(repeat('a', 2000000000))", &[]),
        "repeat",
    );
    refused(
        &sql_bounded(&out, "SELECT cardinality(array_repeat(1, 1000000000))", &[]),
        "array_repeat",
    );
    let endless =
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t";
    let started = Instant::now();
    let o = sql_bounded(&out, endless, &["--timeout", "3"]);
    refused(&o, "");
    assert!(started.elapsed() < Duration::from_secs(60));
    // Bounded calls of the same functions still answer.
    let fine = sql_bounded(
        &out,
        "SELECT length(repeat('ab', 1000)) AS a, cardinality(array_repeat(1, 10)) AS b",
        &["--format", "csv"],
    );
    assert!(fine.status.success());
    assert_eq!(String::from_utf8_lossy(&fine.stdout), "a,b\n2000,10\n\n");
}

#[test]
fn a_long_statement_comes_from_a_file_or_standard_input() {
    let t = tempfile::tempdir().unwrap();
    let out = finished_run(t.path());
    // Over 128 KiB, more than one command-line argument may hold.
    let names: Vec<String> = (0..12_000)
        .map(|i| format!("'no/such/file{i}.rs'"))
        .collect();
    let long = format!(
        "SELECT count(*) AS n FROM files WHERE path NOT IN ({})",
        names.join(", ")
    );
    assert!(long.len() > 128 * 1024);
    let file = t.path().join("long.sql");
    std::fs::write(&file, &long).unwrap();
    let from_file = ri_batch(&[
        "sql",
        out.to_str().unwrap(),
        "--file",
        file.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&from_file.stdout), "n\n2\n\n");
    let mut child = Command::new(binary())
        .args(["sql", out.to_str().unwrap(), "-", "--format", "csv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(long.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, from_file.stdout);
}

#[test]
fn a_closed_pipe_is_a_normal_end() {
    let t = tempfile::tempdir().unwrap();
    let out = finished_run(t.path());
    let mut child = Command::new(binary())
        .args([
            "sql",
            out.to_str().unwrap(),
            "SELECT value FROM generate_series(1, 2000000)",
            "--format",
            "csv",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_copied_output_directory_answers_only_from_itself() {
    let t = tempfile::tempdir().unwrap();
    let out = finished_run(t.path());
    let copy = t.path().join("copy");
    let cp = Command::new("cp").arg("-a").arg(&out).arg(&copy).status();
    assert!(cp.unwrap().success());
    let ask = |dir: &Path| {
        ri_batch(&[
            "ask",
            dir.to_str().unwrap(),
            "How are invoices retried?",
            "--repo",
            "app",
            "--json",
        ])
    };
    // A whole copy answers, from its own tables.
    let whole = ask(&copy);
    assert!(
        String::from_utf8_lossy(&whole.stdout).contains("retries failed payments"),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    // Without its index and chunks it refuses, although the pipeline's output still has both.
    std::fs::remove_dir_all(copy.join("index")).unwrap();
    std::fs::remove_dir_all(copy.join("chunk")).unwrap();
    let gone = ask(&copy);
    let err = String::from_utf8_lossy(&gone.stderr);
    assert!(!gone.status.success(), "answered from elsewhere");
    assert!(err.contains("copy") && err.contains("index"), "{err}");
    assert!(!String::from_utf8_lossy(&gone.stdout).contains("retries failed payments"));
    assert!(ask(&out).status.success());
}

#[test]
fn files_of_a_killed_history_append_are_gone_after_the_next_run() {
    let t = tempfile::tempdir().unwrap();
    let out = finished_run(t.path());
    // What a kill between the history's files and its manifest leaves: files no manifest lists.
    let mut planted = Vec::new();
    for table in ["history", "history_questions", "history_runs"] {
        let dir = out.join("history").join(table);
        let listed = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap();
        let orphan = dir.join("20261206T000000Z-deadbeef.parquet");
        std::fs::copy(listed.path(), &orphan).unwrap();
        planted.push(orphan);
    }
    let p = t.path().join("pipeline.toml");
    let again = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(again.status.success());
    for orphan in &planted {
        assert!(!orphan.exists(), "{} is still there", orphan.display());
    }
    // Every file left in the folders is a run the manifest lists: two runs.
    let runs = std::fs::read_dir(out.join("history/history_runs"))
        .unwrap()
        .count();
    assert_eq!(runs, 2);
}

#[test]
fn stages_print_progress_lines_when_stderr_is_a_file() {
    let t = tempfile::tempdir().unwrap();
    finished_run(t.path());
    let p = t.path().join("pipeline.toml");
    // `--force` redoes every stage; stderr is a pipe here, as in a nightly job's log.
    let run = Command::new(binary())
        .args(["run", p.to_str().unwrap(), "--force"])
        .env("RI_BATCH_PROGRESS_SECONDS", "0.001")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains("/1 repos,") && l.contains("ETA")),
        "{err}"
    );
    assert!(!err.contains('\r'), "no bar redrawn in place: {err}");
}

#[test]
fn a_missing_model_is_named_before_any_stage_runs() {
    let t = tempfile::tempdir().unwrap();
    finished_run(t.path());
    let p = t.path().join("pipeline.toml");
    let mut text = std::fs::read_to_string(&p).unwrap();
    text.push_str("[embed]\nmodel = \"models/not-fetched\"\n");
    std::fs::write(&p, text).unwrap();
    let check = ri_batch(&["dataset", "check", p.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{said}");
    assert!(
        said.contains("not-fetched") && said.contains("no such model directory"),
        "{said}"
    );
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    let err = String::from_utf8_lossy(&run.stderr);
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("warning: [embed] model:") && first.contains("model fetch"),
        "{err}"
    );
}

#[test]
fn input_errors_name_the_key_and_line_and_exit_2() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("repo")).unwrap();
    let base = "[pipeline]\nname = \"r\"\n[[repos]]\nname = \"a\"\ndir = \"repo\"\n[[variants]]\nname = \"v\"\nretriever = \"bm25\"\n";
    for (extra, line, key) in [
        ("budget = 0\n", 9, "budget"),
        ("budgets = [100, 0]\n", 9, "budgets"),
        ("weights = { bm25 = -1.0 }\n", 9, "weights"),
    ] {
        let p = pipeline(t.path(), &format!("{base}{extra}"));
        let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("pipeline.toml:{line}:")) && err.contains(key),
            "{extra}: {err}"
        );
    }
    // A pipeline path that is a directory, a question file that is not UTF-8, and one that
    // starts with a byte-order mark.
    let dir = ri_batch(&["run", t.path().to_str().unwrap()]);
    assert_eq!(dir.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&dir.stderr).contains("is a directory"));
    let q = "{\"id\":\"q1\",\"repo\":\"a\",\"split\":\"dev\",\"answerable\":false,\"question\":\"why?\"}\n";
    let mut latin = q.as_bytes().to_vec();
    latin.extend(b"{\"id\":\"q2\",\"repo\":\"a\",\"split\":\"dev\",\"answerable\":false,\"question\":\"caf\xe9?\"}\n");
    std::fs::write(t.path().join("latin.jsonl"), latin).unwrap();
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend(q.as_bytes());
    std::fs::write(t.path().join("bom.jsonl"), bom).unwrap();
    let with = |questions: &str| {
        pipeline(
            t.path(),
            &format!(
                "[pipeline]\nname = \"r\"\nquestions = \"{questions}\"\n[[repos]]\nname = \"a\"\ndir = \"repo\"\n[[variants]]\nname = \"v\"\nretriever = \"bm25\"\n"
            ),
        )
    };
    let p = with("latin.jsonl");
    let latin = ri_batch(&["dataset", "check", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&latin.stderr);
    assert_eq!(latin.status.code(), Some(2), "{err}");
    assert!(err.contains("latin.jsonl:2: not UTF-8"), "{err}");
    let p = with("bom.jsonl");
    let bom = ri_batch(&["dataset", "check", p.to_str().unwrap()]);
    assert!(
        !String::from_utf8_lossy(&bom.stderr).contains("expected value"),
        "{}",
        String::from_utf8_lossy(&bom.stderr)
    );
}

#[test]
fn a_pipeline_names_its_held_out_splits_and_the_summary_says_what_tokens_average() {
    let t = tempfile::tempdir().unwrap();
    finished_run(t.path());
    let mut q = std::fs::read_to_string(t.path().join("q.jsonl")).unwrap();
    q.push_str("{\"id\":\"q2\",\"repo\":\"app\",\"split\":\"test\",\"answerable\":true,\"question\":\"What does retry return?\",\"evidence\":[{\"path\":\"src/lib.rs\",\"quote\":\"pub fn retry\"}]}\n");
    std::fs::write(t.path().join("q.jsonl"), q).unwrap();
    let p = t.path().join("pipeline.toml");
    let mut text = std::fs::read_to_string(&p).unwrap();
    text.push_str("[evaluate]\nheld_out = [\"test\"]\n");
    std::fs::write(&p, text).unwrap();
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        out.contains("split test: 1 questions evaluated, not shown"),
        "{out}"
    );
    assert!(
        out.contains("* tokens: mean packed tokens over all 1 questions; pool and packed: recall over the 1 answerable"),
        "{out}"
    );
    let shown = ri_batch(&["run", p.to_str().unwrap(), "--quiet", "--show-holdout"]);
    let out = String::from_utf8_lossy(&shown.stdout);
    assert!(
        out.contains("split test: 1 questions, 1 answerable"),
        "{out}"
    );
}

#[test]
fn a_committed_file_that_is_gone_is_a_storage_error() {
    let t = tempfile::tempdir().unwrap();
    let out = finished_run(t.path());
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("chunk/manifest.json")).unwrap())
            .unwrap();
    let f = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["table"] == "chunks")
        .unwrap();
    std::fs::remove_file(out.join(f["path"].as_str().unwrap())).unwrap();
    let o = ri_batch(&["sql", out.to_str().unwrap(), "SELECT count(*) FROM chunks"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn a_budget_is_checked_the_same_way_by_ask_and_the_pipeline() {
    let t = tempfile::tempdir().unwrap();
    let out = finished_run(t.path());
    for bad in ["0", "10000001"] {
        let a = ri_batch(&[
            "ask",
            out.to_str().unwrap(),
            "How are invoices retried?",
            "--budget",
            bad,
        ]);
        let err = String::from_utf8_lossy(&a.stderr);
        assert_eq!(a.status.code(), Some(2), "{err}");
        assert!(err.contains("1..=10000000") && err.contains(bad), "{err}");
    }
    let ok = ri_batch(&[
        "ask",
        out.to_str().unwrap(),
        "How are invoices retried?",
        "--repo",
        "app",
        "--budget",
        "200",
        "--json",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
