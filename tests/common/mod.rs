//! Helpers shared by the end-to-end tests: real git repositories built in temp dirs, pipeline
//! files, the ri-batch binary, the test Python (with pyarrow, duckdb, numpy) and the bundled data.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs git with a fixed identity and no user or system configuration.
pub fn git(dir: &Path, args: &[&str]) {
    git_env(dir, args, &[]);
}

/// [`git`] with extra environment variables (e.g. `GIT_COMMITTER_DATE`).
#[allow(dead_code)] // not every test binary uses it
pub fn git_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `files` into `dir` and commits them (a new repository if needed).
pub fn commit_files(dir: &Path, files: &[(&str, &str)], message: &str) {
    if !dir.join(".git").exists() {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q", "-b", "main"]);
    }
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(dir, &["add", "-A", "-f"]);
    git(
        dir,
        &[
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
        ],
    );
}

/// Writes a pipeline file in `dir`.
pub fn pipeline(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, body).unwrap();
    p
}

/// Runs the ri-batch binary.
pub fn ri_batch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ri-batch"))
        .args(args)
        .output()
        .expect("ri-batch runs")
}

/// The Python with the test clients (pyarrow, duckdb, numpy): `RI_BATCH_PYTHON`, else `.venv`.
pub fn python() -> String {
    if let Ok(p) = std::env::var("RI_BATCH_PYTHON") {
        return p;
    }
    let venv = root().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no test Python: run scripts/test (it creates .venv with pyarrow, duckdb and numpy) or set RI_BATCH_PYTHON"
    );
    venv.to_string_lossy().into_owned()
}

/// Makes sure the bundled repositories exist (datasets/build-repos.sh is idempotent).
pub fn bundled_repos() {
    // Once per test binary: its tests run in parallel, and two builds of one folder would collide.
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let out = Command::new(root().join("datasets/build-repos.sh"))
            .output()
            .expect("build-repos runs");
        assert!(
            out.status.success(),
            "build-repos.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// The default model directory, fetched by scripts/test.
pub fn minilm_dir() -> PathBuf {
    let d = std::env::var("RI_BATCH_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("models/all-minilm-l6-v2"));
    assert!(
        d.join("model.safetensors").exists(),
        "{} is missing: run `ri-batch model fetch all-minilm-l6-v2` (scripts/test does)",
        d.display()
    );
    d
}

/// The shipped `pipelines/<file>`, writing into `dir` (its outputs and embedding cache), with the
/// default model from [`minilm_dir`].
pub fn shipped(file: &str, dir: &Path) -> String {
    let text = std::fs::read_to_string(root().join("pipelines").join(file)).unwrap();
    text.replace(
        "root = \"..\"",
        &format!(
            "root = \"{}\"\noutput_dir = \"{}\"",
            root().display(),
            dir.join("out").display()
        ),
    )
    .replace(
        "model = \"models/all-minilm-l6-v2\"",
        &format!(
            "model = \"{}\"\ncache_dir = \"{}\"",
            minilm_dir().display(),
            dir.join("cache").display()
        ),
    )
}

/// A pipeline over the bundled repositories and question set, writing to `dir/out`, with `extra`
/// (variants, sections) appended.
pub fn bundled_plan(dir: &Path, extra: &str) -> ri_batch::config::Plan {
    bundled_plan_with(dir, "datasets/questions.jsonl", extra)
}

/// [`bundled_plan`] with another bundled question set (a path under the project root).
pub fn bundled_plan_with(dir: &Path, questions: &str, extra: &str) -> ri_batch::config::Plan {
    let mut toml = format!(
        "[pipeline]\nname = \"bundled\"\noutput_dir = \"{}\"\nquestions = \"{}\"\n",
        dir.join("out").display(),
        root().join(questions).display()
    );
    for r in bundled_repo_dirs() {
        let name = r.file_name().unwrap().to_string_lossy().to_string();
        toml.push_str(&format!(
            "[[repos]]\nname = \"{name}\"\ngit = \"{}\"\n",
            r.display()
        ));
    }
    toml.push_str(extra);
    ri_batch::config::Plan::load(pipeline(dir, &toml)).unwrap()
}

/// The bundled repositories' directories (built first), sorted.
pub fn bundled_repo_dirs() -> Vec<PathBuf> {
    bundled_repos();
    let mut repos: Vec<PathBuf> = std::fs::read_dir(root().join("datasets/repos"))
        .unwrap()
        .map(|r| r.unwrap().path())
        .collect();
    repos.sort();
    repos
}

/// Runs every stage of `plan` without progress output.
pub fn run_quiet(plan: &ri_batch::config::Plan) -> ri_batch::pipeline::RunReport {
    let opts = ri_batch::pipeline::RunOptions {
        quiet: true,
        ..Default::default()
    };
    ri_batch::pipeline::run(plan, &opts).unwrap()
}

/// Every file under `dir`, recursively.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Every output file under `dir` with what it holds as text: its bytes (lossy UTF-8) and, for
/// Parquet and Arrow IPC files, every column of every row, decoded.
pub fn decoded_outputs(dir: &Path) -> Vec<(PathBuf, String)> {
    walk(dir)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            let batches: Option<Vec<arrow::array::RecordBatch>> =
                match p.extension().and_then(|e| e.to_str()) {
                    Some("parquet") => Some(
                        ri_batch::artifact::read_parquet_bytes(&p, bytes::Bytes::from(bytes))
                            .unwrap(),
                    ),
                    Some("arrow") => Some(
                        arrow::ipc::reader::FileReader::try_new(std::io::Cursor::new(bytes), None)
                            .unwrap()
                            .map(|b| b.unwrap())
                            .collect(),
                    ),
                    _ => None,
                };
            if let Some(b) = batches {
                text.push_str(
                    &arrow::util::pretty::pretty_format_batches(&b)
                        .unwrap()
                        .to_string(),
                );
            }
            (p, text)
        })
        .collect()
}

/// Stage → content hash of its committed files (equal hashes: the same files). The run history
/// is not a stage: it differs between any two runs by design.
#[allow(dead_code)] // not every test binary uses it
pub fn stage_hashes(out: &Path) -> std::collections::BTreeMap<String, String> {
    ri_batch::artifact::Store::new(out)
        .manifests()
        .unwrap()
        .iter()
        .filter(|(s, _)| s.as_str() != ri_batch::artifact::history::DIR)
        .map(|(s, m)| (s.clone(), ri_batch::pipeline::content_hash(m)))
        .collect()
}
