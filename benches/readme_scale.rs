//! The shipped README setting at many repositories: the READMEs of the crates in Cargo.lock (each
//! crate one repository whose corpus is its README, IntelliRAG's chunker and chars/4 tokens, as in
//! `pipelines/readme-wide.toml`), run as `fused-compact-dense` (MiniLM unit scores, a score-fused
//! pool) beside its lexical baseline `bm25-compact` (the same packer on a BM25 pool, no
//! embeddings), each size and pipeline a separate `ri-batch run` process so its peak RSS is its
//! own. Then the largest fused run again, unchanged: what a nightly run costs when nothing moved.
//!
//! Questions are made from the READMEs (a heading's text, with the first prose line under it as
//! the evidence), two per README, or one unanswerable one when it has no such heading. They
//! check that both pipelines work at size; they were not written by a person, so their recall is
//! a sanity figure, not a quality claim (docs/intellirag.md has those).
//!
//! Needs MiniLM in `models/all-minilm-l6-v2` (`ri-batch model fetch all-minilm-l6-v2`); without it
//! the bench says so and measures nothing. `cargo bench --bench readme_scale` (sizes:
//! `RI_README_SIZES=50,150,all`; past the number of READMEs, crates repeat under new names);
//! writes a Markdown table to stdout and `<target>/readme-scale-bench/report.md`.

#[path = "common/child.rs"]
mod child;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/harness.rs"]
mod harness;

use child::run_child;
use common::stage_hashes;
use ri_batch::artifact::Store;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/all-minilm-l6-v2");
/// The shipped README pipeline whose sections and variant this bench runs.
const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pipelines/readme-wide.toml");
const SHIPPED_VARIANT: &str = "fused-compact-dense";
/// A crate's README, whatever its case.
const README_NAMES: [&str; 3] = ["README.md", "readme.md", "Readme.md"];
const STAGES: [&str; 4] = ["embed", "retrieve", "pack", "evaluate"];

/// The crates whose source holds a README, with its file name.
fn readmes(dirs: &[(String, PathBuf)]) -> Vec<(String, PathBuf, String)> {
    dirs.iter()
        .filter_map(|(name, dir)| {
            README_NAMES
                .into_iter()
                .find(|f| dir.join(f).is_file())
                .map(|f| (name.replace('+', "_"), dir.clone(), f.to_string()))
        })
        .collect()
}

/// A prose line fit to be a quote: plain text of some length, not markup.
fn prose(line: &str) -> bool {
    let t = line.trim();
    (30..=200).contains(&t.len())
        && t.chars().next().is_some_and(|c| c.is_alphabetic())
        && !t.contains('|')
        && !t.contains('<')
        && !t.contains("](")
}

/// Up to two questions from `readme`'s headings (level two or deeper), or one unanswerable one.
fn questions_for(repo: &str, path: &Path, file: &str, out: &mut String) {
    let text = std::fs::read_to_string(path.join(file)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut made = 0;
    for (i, l) in lines.iter().enumerate() {
        let Some(heading) = l.strip_prefix("##") else {
            continue;
        };
        let heading = heading.trim_start_matches('#').trim().trim_matches('`');
        if heading.len() < 4 || !heading.chars().all(|c| c.is_alphanumeric() || c == ' ') {
            continue;
        }
        let next = lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty());
        let Some(quote) = next.filter(|l| prose(l)) else {
            continue;
        };
        made += 1;
        let q = serde_json::json!({
            "id": format!("{repo}-{made:02}"), "repo": repo, "split": "dev", "answerable": true,
            "question": format!("What does {repo} say about {}?", heading.to_lowercase()),
            "evidence": [{"path": file, "quote": quote}],
        });
        let _ = writeln!(out, "{q}");
        if made == 2 {
            return;
        }
    }
    if made == 0 {
        let q = serde_json::json!({
            "id": format!("{repo}-00"), "repo": repo, "split": "dev", "answerable": false,
            "question": format!("How do I tune the flux capacitor of {repo}?"), "evidence": [],
        });
        let _ = writeln!(out, "{q}");
    }
}

/// One of this bench's pipelines, made from the shipped README pipeline: its sections, with this
/// bench's repositories, questions, README names and output folder, and one variant: the shipped
/// `fused-compact-dense` at 900 tokens or, `lexical`, the same packer on a BM25 pool without
/// embeddings.
fn pipeline_toml(lexical: bool) -> String {
    use toml::{Table, Value};
    let text = std::fs::read_to_string(SHIPPED).expect(SHIPPED);
    let mut t: Table = text.parse().expect(SHIPPED);
    let section = |t: &mut Table, name: &str| -> Table {
        t.remove(name)
            .and_then(|v| v.as_table().cloned())
            .unwrap_or_else(|| panic!("{SHIPPED}: no [{name}]"))
    };
    let mut variant = t["variants"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_table)
        .find(|v| v["name"].as_str() == Some(SHIPPED_VARIANT) && v.contains_key("budget"))
        .cloned()
        .unwrap_or_else(|| panic!("{SHIPPED}: no single-budget {SHIPPED_VARIANT}"));
    variant.insert("budget".into(), 900.into());
    let mut embed = section(&mut t, "embed");
    if lexical {
        variant.insert("name".into(), "bm25-compact".into());
        variant.insert("retriever".into(), "bm25".into());
        for key in ["fusion", "weights", "unit_dense"] {
            variant.remove(key);
        }
    } else {
        embed.insert("model".into(), MODEL.into());
        t.insert("embed".into(), Value::Table(embed));
    }
    t.insert("variants".into(), Value::Array(vec![Value::Table(variant)]));
    t.insert("repos".into(), "repos.tsv".into());
    let mut pipeline = section(&mut t, "pipeline");
    pipeline.remove("root");
    pipeline.insert("name".into(), "readme-scale".into());
    pipeline.insert("questions".into(), "questions.jsonl".into());
    let out = if lexical { "out-bm25" } else { "out-fused" };
    pipeline.insert("output_dir".into(), out.into());
    t.insert("pipeline".into(), Value::Table(pipeline));
    let mut scan = section(&mut t, "scan");
    let names = README_NAMES.iter().map(|&n| Value::from(n)).collect();
    scan.insert("include".into(), Value::Array(names));
    t.insert("scan".into(), Value::Table(scan));
    // The shipped baseline is a variant this bench does not run.
    let mut evaluate = section(&mut t, "evaluate");
    evaluate.remove("baseline");
    t.insert("evaluate".into(), Value::Table(evaluate));
    toml::to_string(&t).expect("the bench pipeline")
}

/// Writes the repository list, questions and both pipelines of `n` READMEs under `dir`.
fn prepare(dir: &Path, crates: &[(String, PathBuf, String)], n: usize) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut tsv = String::from("name\tdir\n");
    let mut questions = String::new();
    for i in 0..n {
        let (base, path, file) = &crates[i % crates.len()];
        let name = if i < crates.len() {
            base.clone()
        } else {
            format!("{base}-copy{}", i / crates.len() + 1)
        };
        let _ = writeln!(tsv, "{name}\t{}", path.display());
        questions_for(&name, path, file, &mut questions);
    }
    std::fs::write(dir.join("repos.tsv"), tsv).unwrap();
    std::fs::write(dir.join("questions.jsonl"), questions).unwrap();
    std::fs::write(dir.join("bm25.toml"), pipeline_toml(true)).unwrap();
    std::fs::write(dir.join("fused.toml"), pipeline_toml(false)).unwrap();
}

/// One finished run's figures: stage seconds, chunks, questions and answerable packed recall.
struct Run {
    wall: f64,
    peak_mb: f64,
    stages: Vec<f64>,
    chunks: u64,
    questions: u64,
    recall: f64,
}

fn measure(bin: &str, pipeline: &Path, out: &Path) -> Run {
    let (wall, peak_mb) = run_child(bin, pipeline);
    let manifests = Store::new(out).manifests().unwrap();
    let stages = STAGES
        .iter()
        .map(|s| manifests.get(*s).map_or(0.0, |m| m.seconds))
        .collect();
    let chunks = manifests["chunk"].rows(ri_batch::artifact::schema::Table::Chunks);
    let questions = manifests["questions"].rows(ri_batch::artifact::schema::Table::Questions);
    let sql = std::process::Command::new(bin)
        .args(["sql", out.to_str().unwrap(), "--format", "csv"])
        .arg("SELECT avg(packed_recall) FROM evaluation WHERE answerable")
        .output()
        .expect("ri-batch sql");
    let text = String::from_utf8_lossy(&sql.stdout);
    let recall = text
        .lines()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .unwrap_or(f64::NAN);
    Run {
        wall,
        peak_mb,
        stages,
        chunks,
        questions,
        recall,
    }
}

/// Reruns the fused pipeline of `dir` with a section appended to the first README (a copy of its
/// crate); returns the wall seconds and how many texts and tokens the embed stage embedded.
fn one_readme_changed(bin: &str, dir: &Path, first: &(String, PathBuf, String)) -> (f64, u64, u64) {
    let (name, path, file) = first;
    let copy = dir.join("changed-crate");
    std::fs::create_dir_all(&copy).unwrap();
    let mut text = std::fs::read_to_string(path.join(file)).unwrap();
    text.push_str(
        "\n## Changed tonight\n\nThis line was added to see what a nightly run embeds.\n",
    );
    std::fs::write(copy.join(file), text).unwrap();
    let tsv = std::fs::read_to_string(dir.join("repos.tsv")).unwrap();
    let tsv: String = tsv
        .lines()
        .map(|l| match l.split_once('\t') {
            Some((n, _)) if n == name => format!("{n}\t{}\n", copy.display()),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(dir.join("repos.tsv"), tsv).unwrap();
    let (wall, _) = run_child(bin, &dir.join("fused.toml"));
    let manifests = Store::new(dir.join("out-fused")).manifests().unwrap();
    let stat = |k: &str| {
        manifests["embed"]
            .stats
            .get(k)
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    };
    (wall, stat("embedded_texts"), stat("embedded_tokens"))
}

fn main() {
    // `cargo bench` passes `--bench`; a test run (`cargo test --benches`) passes nothing to do.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if !Path::new(MODEL).join("config.json").is_file() {
        eprintln!("readme_scale: no MiniLM in {MODEL} (ri-batch model fetch all-minilm-l6-v2); measured nothing");
        return;
    }
    let crates = readmes(&corpus::crate_dirs());
    assert!(
        crates.len() > 100,
        "expected READMEs in the cargo registry; found {}",
        crates.len()
    );
    let bin = env!("CARGO_BIN_EXE_ri-batch");
    let sizes = harness::sizes("RI_README_SIZES", "50,150,all", crates.len());
    let target = harness::out_dir("readme-scale-bench");
    let mut md = String::from(
        "| READMEs | chunks | questions | pipeline | wall | peak RSS | embed | retrieve | pack | evaluate | recall@900 | wall / bm25 | RSS / bm25 |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut last = None;
    for &n in &sizes {
        let dir = target.join(format!("n{n}"));
        prepare(&dir, &crates, n);
        let lexical = measure(bin, &dir.join("bm25.toml"), &dir.join("out-bm25"));
        let fused = measure(bin, &dir.join("fused.toml"), &dir.join("out-fused"));
        for (name, r) in [("bm25-compact", &lexical), ("fused-compact-dense", &fused)] {
            let s = &r.stages;
            let _ = writeln!(
                md,
                "| {n} | {} | {} | {name} | {:.1} s | {:.0} MB | {:.1} s | {:.2} s | {:.2} s | {:.2} s | {:.1}% | {:.2}× | {:.2}× |",
                r.chunks, r.questions, r.wall, r.peak_mb, s[0], s[1], s[2], s[3],
                100.0 * r.recall, r.wall / lexical.wall, r.peak_mb / lexical.peak_mb
            );
        }
        eprintln!("{n} READMEs done");
        last = Some(dir);
    }
    if let Some(dir) = last {
        let out = dir.join("out-fused");
        let before = stage_hashes(&out);
        let (wall, peak) = run_child(bin, &dir.join("fused.toml"));
        assert_eq!(
            before,
            stage_hashes(&out),
            "an unchanged rerun changed a table"
        );
        let _ = writeln!(
            md,
            "\nThe largest fused run again, unchanged: {wall:.2} s, {peak:.0} MB peak, every stage's tables the same."
        );
        let (wall, texts, tokens) = one_readme_changed(bin, &dir, &crates[0]);
        let _ = writeln!(
            md,
            "Then with a section added to one README: {wall:.2} s, {texts} texts ({tokens} tokens) embedded."
        );
    }
    println!("{md}");
    std::fs::write(target.join("report.md"), &md).unwrap();
}
