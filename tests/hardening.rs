//! Hardening, end to end on real git repositories and plain directories: paths from manifests
//! never leave the output directory; cleanup removes only what this pipeline's manifests and
//! journals name; one run per output directory; `sql` refuses changed files; broken manifests,
//! disabled stages, the gitignore setting, bad questions, range errors and empty repositories.

mod common;

use common::{commit_files, pipeline, ri_batch};
use ri_batch::config::Plan;
use std::path::Path;
use std::process::{Command, Stdio};

const QUESTIONS: &str = "{\"id\":\"q1\",\"repo\":\"app\",\"split\":\"dev\",\"answerable\":true,\"question\":\"How are invoices retried?\",\"evidence\":[{\"path\":\"README.md\",\"quote\":\"retries failed payments\"}]}\n";

const VARIANT: &str =
    "[[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 300\n";

/// A git repository `app` and a pipeline over it (questions and one variant) in `t`.
fn setup(t: &Path, extra: &str) -> std::path::PathBuf {
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
    std::fs::write(t.join("q.jsonl"), QUESTIONS).unwrap();
    pipeline(
        t,
        &format!(
            "[pipeline]\nname = \"h\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\
             [[repos]]\nname = \"app\"\ngit = \"app\"\n{VARIANT}{extra}"
        ),
    )
}

fn run(p: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run", p.to_str().unwrap()];
    args.extend(extra);
    ri_batch(&args)
}

fn ok(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

/// `ri-batch sql` over `t/out`, as CSV.
fn sql(t: &Path, query: &str) -> std::process::Output {
    let out = t.join("out");
    ri_batch(&["sql", out.to_str().unwrap(), query, "--format", "csv"])
}

fn manifest_json(t: &Path, stage: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(t.join("out").join(stage).join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_manifest_path_outside_the_output_is_refused_and_nothing_there_is_deleted() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    ok(&run(&p, &["--quiet"]));
    let victim = t.path().join("victim.parquet");
    std::fs::write(&victim, b"user data").unwrap();
    let mut m = manifest_json(t.path(), "scan");
    let files = m["files"].as_array().unwrap();
    let at = files.iter().position(|f| f["table"] == "files").unwrap();
    m["files"][at]["path"] = "../victim.parquet".into();
    std::fs::write(
        t.path().join("out/scan/manifest.json"),
        serde_json::to_vec(&m).unwrap(),
    )
    .unwrap();
    let out = run(&p, &["--quiet", "--force"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("refusing the path `../victim.parquet`"),
        "{err}"
    );
    let sql = sql(t.path(), "SELECT count(*) FROM files");
    assert!(!sql.status.success());
    assert!(String::from_utf8_lossy(&sql.stderr).contains("leaves the output directory"));
    assert_eq!(std::fs::read(&victim).unwrap(), b"user data");
}

#[test]
fn cleanup_removes_only_what_manifests_and_journals_name() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    ok(&run(&p, &["--quiet"]));
    let old: Vec<String> = manifest_json(t.path(), "scan")["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    // Files of the user's beside ours, even with our names' shapes.
    let users = [
        "out/scan/files/mine.parquet",
        "out/scan/.notes.tmp-1",
        "out/scan/files/app-000000000000.parquet",
    ];
    for u in users {
        std::fs::write(t.path().join(u), b"keep me").unwrap();
    }
    // A changed scan setting re-runs scan, which commits new files and drops its old ones.
    let text = std::fs::read_to_string(&p).unwrap() + "[scan]\nmax_file_bytes = 100000\n";
    std::fs::write(&p, text).unwrap();
    ok(&run(&p, &["--quiet"]));
    for u in users {
        assert_eq!(std::fs::read(t.path().join(u)).unwrap(), b"keep me", "{u}");
    }
    let new: Vec<String> = manifest_json(t.path(), "scan")["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    for o in old.iter().filter(|o| !new.contains(o)) {
        assert!(!t.path().join("out").join(o).exists(), "{o} was cleaned");
    }
}

#[test]
fn a_killed_force_run_leaves_nothing_once_the_stage_is_skipped() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    ok(&run(&p, &["--quiet"]));
    // What a `--force` run killed midway leaves: its journal, a finished file, a temp file.
    let chunk = t.path().join("out/chunk");
    std::fs::write(chunk.join("chunks/app-aaaaaaaaaaaa.parquet"), b"half").unwrap();
    std::fs::write(chunk.join("chunks/.app.tmp-99999"), b"partial").unwrap();
    let fp = manifest_json(t.path(), "chunk")["fingerprint"].clone();
    let journal = format!(
        "{}\n{}\n{}\n",
        serde_json::json!({ "fingerprint": fp }),
        serde_json::json!({ "named": "chunk/chunks/.app.tmp-99999" }),
        serde_json::json!({"table":"chunks","path":"chunk/chunks/app-aaaaaaaaaaaa.parquet","part":"app","key":"k","rows":1,"bytes":4,"sha256":"x"}),
    );
    std::fs::write(chunk.join("journal.jsonl"), journal).unwrap();
    let err = ok(&run(&p, &[]));
    assert!(err.contains("chunk  unchanged, skipped"), "{err}");
    assert!(!chunk.join("journal.jsonl").exists());
    assert!(!chunk.join("chunks/app-aaaaaaaaaaaa.parquet").exists());
    assert!(!chunk.join("chunks/.app.tmp-99999").exists());
    let sql = sql(t.path(), "SELECT count(*) AS n FROM chunks");
    assert!(sql.status.success(), "the committed chunks are intact");
}

#[test]
fn a_broken_manifest_is_treated_as_absent_with_a_warning() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    ok(&run(&p, &["--quiet"]));
    std::fs::write(t.path().join("out/chunk/manifest.json"), b"").unwrap();
    let err = ok(&run(&p, &[]));
    assert!(
        err.contains("warning:") && err.contains("unreadable manifest"),
        "{err}"
    );
    assert!(err.contains("chunk  ran"), "{err}");
    assert!(manifest_json(t.path(), "chunk")["files"].is_array());
}

#[test]
fn sql_refuses_a_file_that_changed_since_its_commit() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    ok(&run(&p, &["--quiet"]));
    let m = manifest_json(t.path(), "scan");
    let f = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["table"] == "files")
        .unwrap();
    let path = t.path().join("out").join(f["path"].as_str().unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a; // same size, different content
    std::fs::write(&path, bytes).unwrap();
    let bad = sql(t.path(), "SELECT count(*) FROM files");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        err.contains(f["path"].as_str().unwrap()) && err.contains("checksum"),
        "{err}"
    );
    // Tables the query does not read are still served.
    let good = sql(t.path(), "SELECT count(*) FROM chunks");
    assert!(good.status.success());
}

#[test]
fn a_second_run_waits_for_the_first_or_fails_with_no_wait() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    std::fs::create_dir_all(t.path().join("out")).unwrap();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(t.path().join("out/.lock"))
        .unwrap();
    lock.lock().unwrap();
    let refused = run(&p, &["--quiet", "--no-wait"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("another ri-batch run"));
    assert!(!t.path().join("out/scan").exists(), "nothing ran");
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_ri-batch"))
        .args(["run", p.to_str().unwrap(), "--quiet"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(waiting.try_wait().unwrap().is_none(), "it waits");
    assert!(!t.path().join("out/scan").exists(), "and does nothing yet");
    drop(lock);
    let out = waiting.wait_with_output().unwrap();
    let err = ok(&out);
    assert!(err.contains("waiting: another ri-batch run"), "{err}");
    assert!(t.path().join("out/evaluate/manifest.json").exists());
}

#[test]
fn fingerprints_do_not_depend_on_how_the_pipeline_path_is_written() {
    let t = tempfile::tempdir().unwrap();
    setup(t.path(), "");
    let rel = Command::new(env!("CARGO_BIN_EXE_ri-batch"))
        .args(["run", "pipeline.toml", "--quiet"])
        .current_dir(t.path())
        .output()
        .unwrap();
    ok(&rel);
    let abs = run(&t.path().join("pipeline.toml"), &[]);
    let err = ok(&abs);
    assert!(err.contains("0 stages ran"), "{err}");
}

#[test]
fn a_disabled_stage_is_retired_not_read() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    ok(&run(&p, &["--quiet"]));
    assert!(t.path().join("out/retrieve/manifest.json").exists());
    // The same pipeline without variants: retrieve and everything after it are disabled.
    let text = std::fs::read_to_string(&p).unwrap().replace(VARIANT, "");
    std::fs::write(&p, text).unwrap();
    let err = ok(&run(&p, &[]));
    assert!(err.contains("its earlier artifacts are removed"), "{err}");
    for s in ["retrieve", "pack", "extract", "evaluate"] {
        assert!(
            !t.path().join("out").join(s).join("manifest.json").exists(),
            "{s}"
        );
    }
    let sql = sql(t.path(), "SELECT count(*) FROM retrievals");
    assert!(!sql.status.success(), "the old retrievals are gone");
}

#[test]
fn the_gitignore_probe_follows_the_setting() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("notes");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(d.join("a.md"), "# A\n\nalpha\n").unwrap();
    std::fs::write(d.join("run.log"), "first run\n").unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"g\"\noutput_dir = \"out\"\n[[repos]]\nname = \"notes\"\ndir = \"notes\"\n[scan]\ngitignore = false\n",
    );
    ok(&run(&p, &["--quiet"]));
    std::fs::write(d.join("run.log"), "second run, longer\n").unwrap();
    let err = ok(&run(&p, &[]));
    assert!(err.contains("scan  ran"), "{err}");
    let sql = sql(t.path(), "SELECT text FROM files WHERE path = 'run.log'");
    assert!(String::from_utf8_lossy(&sql.stdout).contains("second run"));
}

#[test]
fn a_malformed_question_file_stops_the_run_before_any_stage() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    std::fs::write(
        t.path().join("q.jsonl"),
        format!("{QUESTIONS}{{\"id\": \"q2\", \"repo\": \n"),
    )
    .unwrap();
    let out = run(&p, &["--quiet"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("q.jsonl:2"), "{err}");
    assert!(!t.path().join("out/scan").exists(), "scan did not run");
}

#[test]
fn out_of_range_values_name_their_key_and_line() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("repo")).unwrap();
    let base = "[pipeline]\nname = \"r\"\n[[repos]]\nname = \"a\"\ndir = \"repo\"\n";
    for (section, key, value, line) in [
        ("embed", "max_length", "0", 8),
        ("embed", "batch_tokens", "0", 8),
        ("extract", "max_ids", "0", 7),
        ("extract", "lexical_threshold", "1.5", 7),
        ("evaluate", "bootstrap", "0", 7),
        ("retrieve", "rrf_k", "-1.0", 7),
    ] {
        let model = if section == "embed" {
            "model = \"m\"\n"
        } else {
            ""
        };
        let text = format!("{base}[{section}]\n{model}{key} = {value}\n");
        let p = pipeline(t.path(), &text);
        let e = Plan::load(&p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("pipeline.toml:{line}:"))
                && e.contains(&format!("`{section}.{key}`")),
            "{section}.{key}: {e}"
        );
    }
}

#[test]
fn an_empty_repository_says_it_has_no_commits() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "[[repos]]\nname = \"empty\"\ngit = \"empty\"\n");
    common::git(t.path(), &["init", "-q", "empty"]);
    let out = run(&p, &["--quiet"]);
    assert_eq!(out.status.code(), Some(1), "recorded, and the rest ran");
    let sql = sql(t.path(), "SELECT message FROM errors WHERE repo = 'empty'");
    let text = String::from_utf8_lossy(&sql.stdout);
    assert!(text.contains("has no commits yet"), "{text}");
    assert!(t.path().join("out/evaluate/manifest.json").exists());
}

#[test]
fn a_latin1_file_name_is_stored_byte_exact_and_read_again() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.md");
    let text = "# Caf\u{e9}\n\nThe menu lists espresso.\n";
    for repo in ["latin-git", "latin-dir"] {
        let d = t.path().join(repo);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), text).unwrap();
    }
    let g = t.path().join("latin-git");
    common::git(&g, &["init", "-q", "-b", "main"]);
    common::git(&g, &["add", "-A"]);
    common::git(
        &g,
        &["-c", "commit.gpgsign=false", "commit", "-q", "-m", "menu"],
    );
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"l\"\noutput_dir = \"out\"\n\
         [[repos]]\nname = \"latin-git\"\ngit = \"latin-git\"\n\
         [[repos]]\nname = \"latin-dir\"\ndir = \"latin-dir\"\n",
    );
    ok(&run(&p, &["--quiet"]));
    let plan = Plan::load(&p).unwrap();
    let store = ri_batch::artifact::Store::new(&plan.output_dir);
    let files: Vec<ri_batch::artifact::schema::FileRow> = store.read().unwrap();
    assert_eq!(files.len(), 2);
    for f in &files {
        assert!(!f.path.contains('\u{FFFD}'), "stored lossily: {}", f.path);
        assert_eq!(
            ri_batch::text::pathname::decode(&f.path),
            b"caf\xe9.md",
            "{}",
            f.repo
        );
        let again =
            ri_batch::stages::extract::read_source(&plan, &f.repo, &f.commit, &f.path).unwrap();
        assert_eq!(again, text, "{}", f.repo);
    }
}

#[test]
fn a_corrupt_tree_names_its_cause() {
    let t = tempfile::tempdir().unwrap();
    let p = setup(t.path(), "");
    let out = Command::new("git")
        .args(["rev-parse", "HEAD^{tree}"])
        .current_dir(t.path().join("app"))
        .output()
        .unwrap();
    let tree = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let object = t
        .path()
        .join("app/.git/objects")
        .join(&tree[..2])
        .join(&tree[2..]);
    std::fs::remove_file(&object).unwrap();
    let out = run(&p, &["--quiet"]);
    assert_eq!(out.status.code(), Some(1));
    let sql = sql(t.path(), "SELECT message FROM errors WHERE repo = 'app'");
    let text = String::from_utf8_lossy(&sql.stdout);
    assert!(
        text.contains("cannot read the tree of `HEAD`") && text.contains(&tree[..7]),
        "{text}"
    );
}
