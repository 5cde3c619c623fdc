//! Shards: the bundled pipeline split over three `run --shard I/3` processes running at once (one
//! of them killed mid-run and re-run), then `merge`, gives every table of an unsharded run, file
//! for file; the merge reuses what the shards computed and redoes only the cross-repository work;
//! a merge with a shard missing names it. With embeddings, shards share one embedding cache.

mod common;

use common::{commit_files, minilm_dir, pipeline, ri_batch, stage_hashes as tables};
use ri_batch::artifact::Store;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Instant;

const VARIANTS: &str = "[[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n\
[[variants]]\nname = \"marginal\"\nretriever = \"bm25\"\npacker = \"marginal-gain\"\nbudget = 1400\n\
[[variants]]\nname = \"compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 1400\nselector = \"calibrated\"\n";

fn start(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ri-batch"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The stage lines of a run's stderr: stage → the line.
fn stage_lines(stderr: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let (stage, rest) = t.split_once("  ")?;
            Some((stage.to_string(), rest.to_string()))
        })
        .collect()
}

#[test]
fn three_shards_then_a_merge_equal_one_run_even_after_a_kill() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    common::bundled_plan(a.path(), VARIANTS);
    common::bundled_plan(b.path(), VARIANTS);
    let whole = a.path().join("pipeline.toml");
    let sharded = b.path().join("pipeline.toml");
    let p = sharded.to_str().unwrap();

    let t0 = Instant::now();
    let one = ri_batch(&["run", whole.to_str().unwrap(), "--quiet"]);
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let elapsed = t0.elapsed();
    let reference = tables(&a.path().join("out"));
    assert!(reference.len() >= 8, "{reference:?}");

    // A merge before any shard has run says what to do.
    let early = ri_batch(&["merge", p]);
    assert!(!early.status.success());
    assert!(String::from_utf8_lossy(&early.stderr).contains("--shard I/N"));

    // Shard 1 is killed part-way, then the three run at once, shard 1 resuming.
    let mut first = start(&["run", p, "--shard", "1/3", "--quiet"]);
    std::thread::sleep(elapsed / 4);
    let _ = first.kill();
    first.wait().unwrap();
    let shards: Vec<_> = (0..3)
        .map(|i| start(&["run", p, "--shard", &format!("{i}/3"), "--quiet"]))
        .collect();
    for mut s in shards {
        assert!(s.wait().unwrap().success());
    }
    let out = b.path().join("out");
    for i in 0..3 {
        let dir = out.join(format!("shards/{i}-of-3"));
        let m = tables(&dir);
        assert!(m.contains_key("extract"), "shard {i}: {m:?}");
        assert!(!m.contains_key("evaluate"), "a shard does not evaluate");
        // Nothing is left that its manifests do not list.
        for f in common::walk(&dir) {
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            assert!(
                !name.contains(".tmp-") && name != "journal.jsonl",
                "left behind: {}",
                f.display()
            );
        }
    }

    // A merge with a shard missing names it.
    let moved = b.path().join("moved");
    std::fs::rename(out.join("shards/2-of-3"), &moved).unwrap();
    let missing = ri_batch(&["merge", p]);
    assert!(!missing.status.success());
    let why = String::from_utf8_lossy(&missing.stderr);
    assert!(
        why.contains("shard 2-of-3") && why.contains("--shard 2/3"),
        "{why}"
    );
    std::fs::rename(&moved, out.join("shards/2-of-3")).unwrap();

    let merged = ri_batch(&["merge", p]);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    assert_eq!(tables(&out), reference, "merged tables equal one run's");
    // The merge recomputed only the cross-repository work: every repository's partitions came
    // from the shards (10 repositories: files, skipped, revisions, trees and commits, chunks, 3
    // index tables, and one retrieval, pack and extract partition per repository scope; `*` is
    // the merge's own).
    let lines = stage_lines(&merged.stderr);
    for (stage, reused) in [
        ("scan", 50),
        ("chunk", 10),
        ("index", 30),
        ("retrieve", 10),
        ("pack", 10),
        ("extract", 10),
    ] {
        let line = &lines[stage];
        assert!(
            line.ends_with(&format!(", {reused} partitions reused")),
            "{stage}: {line}"
        );
    }
    // The shard files are linked in: the merged directory stands alone.
    std::fs::remove_dir_all(out.join("shards")).unwrap();
    let again = ri_batch(&["run", p]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("0 stages ran, 8 skipped"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn shards_with_embeddings_share_one_cache_and_merge_to_one_runs_tables() {
    let t = tempfile::tempdir().unwrap();
    let mut repos = String::new();
    for (i, name) in ["alpha", "beta", "gamma", "delta"].iter().enumerate() {
        let dir = t.path().join("repos").join(name);
        commit_files(
            &dir,
            &[
                (
                    "README.md",
                    &format!(
                        "# {name}\n\n{name} parses configuration files.\n\n## Install\n\nRun make install {i} times.\n"
                    ),
                ),
                (
                    "src/lib.rs",
                    &format!("/// Adds {i}.\npub fn add_{name}(x: u32) -> u32 {{\n    x + {i}\n}}\n"),
                ),
            ],
            name,
        );
        repos.push_str(&format!(
            "[[repos]]\nname = \"{name}\"\ngit = \"{}\"\n",
            dir.display()
        ));
    }
    let questions = t.path().join("questions.jsonl");
    let mut q = String::new();
    for name in ["alpha", "beta", "gamma", "delta", "*"] {
        q.push_str(&format!(
            "{{\"id\": \"q-{}\", \"repo\": \"{name}\", \"split\": \"dev\", \"answerable\": false, \"question\": \"How do I install it?\", \"evidence\": []}}\n",
            name.replace('*', "all")
        ));
    }
    std::fs::write(&questions, q).unwrap();
    let body = |out: &str| {
        format!(
            "[pipeline]\nname = \"e\"\noutput_dir = \"{out}\"\nquestions = \"{}\"\n{repos}\
             [embed]\nmodel = \"{}\"\ncache_dir = \"cache\"\n\
             [[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\nbudget = 300\n\
             [[variants]]\nname = \"dense\"\nretriever = \"dense\"\nbudget = 300\n\
             [[variants]]\nname = \"hybrid\"\nretriever = \"hybrid\"\nbudget = 300\n",
            questions.display(),
            minilm_dir().display()
        )
    };
    let whole = pipeline(t.path(), &body("one"));
    let run = ri_batch(&["run", whole.to_str().unwrap(), "--quiet"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let sharded = t.path().join("sharded.toml");
    std::fs::write(&sharded, body("two")).unwrap();
    let p = sharded.to_str().unwrap();
    // Both shards open the same cache at once (its vectors were computed by the first run).
    let shards: Vec<_> = (0..2)
        .map(|i| start(&["run", p, "--shard", &format!("{i}/2"), "--quiet"]))
        .collect();
    for mut s in shards {
        assert!(s.wait().unwrap().success());
    }
    let merged = ri_batch(&["merge", p, "--quiet"]);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    assert_eq!(tables(&t.path().join("two")), tables(&t.path().join("one")));
    let dense: Vec<ri_batch::artifact::schema::RetrievalRow> =
        Store::new(t.path().join("two")).read().unwrap();
    assert!(dense
        .iter()
        .any(|r| r.variant == "dense" && r.question_id == "q-all"));
}
