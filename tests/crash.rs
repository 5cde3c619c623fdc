//! kill -9 at points spread over a whole run of the bundled pipeline, then a plain re-run: every
//! re-run completes, every stage's tables are identical to an uninterrupted run's, and nothing
//! is left that no manifest lists (no journal, no temporary file).

mod common;

use common::stage_hashes as tables;

use ri_batch::artifact::Store;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const VARIANTS: &str = "[[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n\
[[variants]]\nname = \"marginal\"\nretriever = \"bm25\"\npacker = \"marginal-gain\"\nbudget = 1400\n\
[[variants]]\nname = \"compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 1400\n";

fn start(pipeline: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ri-batch"))
        .args(["run", pipeline.to_str().unwrap(), "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Files under `out` that no manifest lists (besides manifests, the report and the lock).
fn unlisted(out: &Path) -> Vec<String> {
    let listed: Vec<String> = Store::new(out)
        .manifests()
        .unwrap()
        .values()
        .flat_map(|m| m.files.iter().map(|f| f.path.clone()))
        .collect();
    let mut stray = Vec::new();
    for p in common::walk(out) {
        let rel = p
            .strip_prefix(out)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let known = listed.contains(&rel)
            || rel.ends_with("/manifest.json")
            || rel == "report.html"
            || rel == ".lock"
            || rel == "run.json";
        if !known {
            stray.push(rel);
        }
    }
    stray
}

#[test]
fn kill_9_anywhere_then_rerun_gives_identical_tables() {
    let t = tempfile::tempdir().unwrap();
    common::bundled_plan(t.path(), VARIANTS);
    let pipeline = t.path().join("pipeline.toml");
    let out = t.path().join("out");
    assert!(start(&pipeline).wait().unwrap().success());
    let reference = tables(&out);
    // Timed on a second whole run, warm like the runs that are killed (a cold first run takes
    // longer, and kills timed by it would land after the end).
    std::fs::remove_dir_all(&out).unwrap();
    let t0 = Instant::now();
    assert!(start(&pipeline).wait().unwrap().success());
    let whole = t0.elapsed();
    assert_eq!(tables(&out), reference, "two whole runs agree");
    assert!(reference.len() >= 8, "{reference:?}");
    let mut killed_in = 0;
    for k in 1..=8u32 {
        std::fs::remove_dir_all(&out).unwrap();
        let mut child = start(&pipeline);
        std::thread::sleep(whole * k / 9);
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            killed_in += 1;
        }
        child.wait().unwrap();
        let status = start(&pipeline).wait().unwrap();
        assert!(
            status.success(),
            "the re-run after a kill at {k}/9 completes"
        );
        assert_eq!(tables(&out), reference, "tables after a kill at {k}/9");
        assert_eq!(
            unlisted(&out),
            Vec::<String>::new(),
            "after a kill at {k}/9"
        );
    }
    assert!(killed_in >= 6, "only {killed_in} runs were killed mid-way");
    // A kill during a re-run (of a run already killed) resumes as well.
    std::fs::remove_dir_all(&out).unwrap();
    for k in [3u32, 5] {
        let mut child = start(&pipeline);
        std::thread::sleep(whole * k / 9);
        let _ = child.kill();
        child.wait().unwrap();
    }
    assert!(start(&pipeline).wait().unwrap().success());
    assert_eq!(tables(&out), reference);
}
