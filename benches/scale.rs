//! Scale: the whole pipeline (BM25 variants, no embeddings) over 50, 150, all and 1,000
//! repositories of a reproducible corpus: the sources of the crates in Cargo.lock, as the local
//! cargo registry holds them (past the number of crates, crates repeat under new names). Each size
//! is a separate `ri-batch run` process, so its peak RSS is its own; per-stage wall times come from
//! the manifests. Beside them, in this process and on the same chunks: the in-memory BM25 build
//! (analysis and index over every chunk), the baseline the index stage is compared with.
//!
//! The largest size is also run as `RI_SCALE_SHARDS` shards (default 4; 0 skips) one after
//! another, then merged: the sum of the shards' walls, each shard's peak RSS and the merge, with
//! the merged tables checked equal to the one-process run's.
//!
//! With `RI_SCALE_S3=1` (and `RI_BATCH_PYTHON` with moto, as scripts/test installs it), the
//! largest size is also run into a loopback S3 server (moto) against local disk: the first run,
//! an unchanged rerun, and a machine with an empty mirror pulling the whole run.
//!
//! `cargo bench --bench scale` (sizes: `RI_SCALE_SIZES=50,150,457,1000`; `all` is every crate present); writes a Markdown table
//! to stdout and `<target>/scale-bench/report.md`.

#[path = "common/child.rs"]
mod child;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/harness.rs"]
mod harness;
#[path = "../tests/common/s3.rs"]
mod s3;

use child::{run_args, run_child};
use common::stage_hashes;
use ri_batch::artifact::schema::{ChunkRow, FileRow, Row};
use ri_batch::artifact::Store;
use ri_batch::retrieval::bm25::Index;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

const STAGES: [&str; 8] = [
    "scan",
    "chunk",
    "questions",
    "index",
    "retrieve",
    "pack",
    "extract",
    "evaluate",
];

/// Two questions per repository from its first `pub fn` lines (answerable, with that line as the
/// evidence quote), or one unanswerable question when it has none.
fn questions_for(name: &str, dir: &Path, out: &mut String) {
    let mut found = Vec::new();
    let mut stack = vec![dir.join("src")];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        entries.sort();
        for p in entries.into_iter().rev() {
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    'files: for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        // Evidence only from files the scan keeps (not too large, no long lines, no secret).
        if text.len() > 512 * 1024
            || text.lines().any(|l| l.len() > 5000)
            || ri_batch::secrets::sensitive::sensitive_content(&text).is_some()
        {
            continue;
        }
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with("pub fn ") && t.len() > 12 && !t.contains('"') && !t.contains('\\') {
                let rel = f.strip_prefix(dir).unwrap().to_string_lossy().to_string();
                found.push((rel, t.to_string()));
                if found.len() == 2 {
                    break 'files;
                }
            }
        }
    }
    if found.is_empty() {
        let _ = writeln!(
            out,
            r#"{{"id": "{name}-0", "repo": "{name}", "split": "dev", "answerable": false, "question": "How do I configure the colour theme of the {name} web dashboard?", "evidence": []}}"#
        );
    }
    for (i, (path, quote)) in found.iter().enumerate() {
        let fname = quote
            .trim_start_matches("pub fn ")
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .next()
            .unwrap_or("it");
        let q = serde_json::json!({
            "id": format!("{name}-{i}"), "repo": name, "split": "dev", "answerable": true,
            "question": format!("What does {fname} take and return in {name}?"),
            "evidence": [{"path": path, "quote": quote}],
        });
        let _ = writeln!(out, "{q}");
    }
}

struct Measured {
    repos: usize,
    chunks: u64,
    wall: f64,
    peak_mb: f64,
    stages: Vec<f64>,
    questions: u64,
    memory_build: f64,
}

/// The in-memory build over every chunk of a finished run: analysis plus index, as the bm25
/// bench does it.
fn memory_build(store: &Store) -> f64 {
    let mut chunks: Vec<ChunkRow> = Vec::new();
    for f in store.files_of(ChunkRow::TABLE).unwrap() {
        chunks.extend(store.read_rows::<ChunkRow>(&f).unwrap());
    }
    let an = ri_batch::config::IndexConfig::default().analyzer();
    let t = Instant::now();
    use rayon::prelude::*;
    let docs: Vec<(String, Vec<String>)> = chunks
        .par_iter()
        .map(|c| (c.chunk_id.clone(), an.terms(&c.indexed_text(true))))
        .collect();
    let ix = Index::build(docs);
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(ix.len(), chunks.len());
    secs
}

/// Bytes of the files under `dir`.
/// Bytes of the files the scan kept, by repository.
fn kept_bytes(store: &Store) -> std::collections::HashMap<String, u64> {
    #[derive(serde::Deserialize)]
    struct Kept {
        repo: String,
        bytes: u64,
    }
    let mut out = std::collections::HashMap::new();
    for f in store.files_of(FileRow::TABLE).expect("the scan's manifest") {
        for k in store
            .read_rows_of::<Kept>(&f, Some(&["repo", "bytes"]))
            .expect("the files table")
        {
            *out.entry(k.repo).or_insert(0) += k.bytes;
        }
    }
    out
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

fn measure(bin: &str, work: &Path, dirs: &[(String, PathBuf)], n: usize) -> Measured {
    measure_named(bin, work, dirs, n, &format!("n{n}"))
}

/// Writes the repository list, questions and pipeline of `n` repositories under `work/label`;
/// returns the pipeline's path.
fn prepare(work: &Path, dirs: &[(String, PathBuf)], n: usize, label: &str) -> PathBuf {
    let dir = work.join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut tsv = String::from("name\tdir\n");
    let mut questions = String::new();
    for i in 0..n {
        let (crate_name, path) = &dirs[i % dirs.len()];
        let base = crate_name.replace('+', "_");
        let name = if i < dirs.len() {
            base
        } else {
            format!("{base}-copy{}", i / dirs.len() + 1)
        };
        let _ = writeln!(tsv, "{name}\t{}", path.display());
        questions_for(&name, path, &mut questions);
    }
    std::fs::write(dir.join("repos.tsv"), tsv).unwrap();
    std::fs::write(dir.join("questions.jsonl"), &questions).unwrap();
    let pipeline = dir.join("pipeline.toml");
    std::fs::write(
        &pipeline,
        "repos = \"repos.tsv\"\n\
         [pipeline]\nname = \"scale\"\noutput_dir = \"out\"\nquestions = \"questions.jsonl\"\n\
         [scan]\nexclude = [\"**/*.json\"]\n\
         [[variants]]\nname = \"bm25-rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n\
         [[variants]]\nname = \"bm25-marginal\"\nretriever = \"bm25\"\npacker = \"marginal-gain\"\nbudget = 1400\n\
         [[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 1400\n",
    )
    .unwrap();
    pipeline
}

fn measure_named(
    bin: &str,
    work: &Path,
    dirs: &[(String, PathBuf)],
    n: usize,
    label: &str,
) -> Measured {
    let pipeline = prepare(work, dirs, n, label);
    let (wall, peak_mb) = run_child(bin, &pipeline);
    let store = Store::new(work.join(label).join("out"));
    let manifests = store.manifests().unwrap();
    let stages = STAGES
        .iter()
        .map(|s| manifests.get(*s).map_or(0.0, |m| m.seconds))
        .collect();
    let chunks = manifests["chunk"].rows(ChunkRow::TABLE);
    let questions = manifests["questions"].rows(ri_batch::artifact::schema::Table::Questions);
    Measured {
        repos: n,
        chunks,
        wall,
        peak_mb,
        stages,
        questions,
        memory_build: 0.0,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a test run (`cargo test --benches`) passes nothing to do.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dirs = corpus::crate_dirs();
    let bin = env!("CARGO_BIN_EXE_ri-batch");
    let sizes = harness::sizes("RI_SCALE_SIZES", "50,150,457,1000", dirs.len());
    let work = harness::out_dir("scale-bench");
    // Every run first, while this process is small: a child's peak RSS counts the memory of
    // the process it was started from (Linux carries it over at exec).
    let mut rows = Vec::new();
    for &n in &sizes {
        eprintln!("scale: {n} repositories ...");
        let m = measure(bin, &work, &dirs, n);
        eprintln!(
            "scale: {n} repositories: {:.1}s, peak {:.0} MB",
            m.wall, m.peak_mb
        );
        rows.push(m);
    }
    // The largest size again as `shards` shards run one after another (each its own process,
    // so each peak is its own), then the merge; its tables must equal the one-process run's.
    let shards: u32 = std::env::var("RI_SCALE_SHARDS")
        .map(|s| s.parse().expect("RI_SCALE_SHARDS: a number"))
        .unwrap_or(4);
    let mut sharded = None;
    if let (Some(&n), true) = (sizes.iter().max(), shards > 1) {
        eprintln!("scale: {n} repositories as {shards} shards, then the merge ...");
        let pipeline = prepare(&work, &dirs, n, &format!("n{n}-shards"));
        let p = pipeline.to_str().unwrap();
        let runs: Vec<(f64, f64)> = (0..shards)
            .map(|i| {
                run_args(
                    bin,
                    &["run", p, "--shard", &format!("{i}/{shards}"), "--quiet"],
                )
            })
            .collect();
        let merge = run_args(bin, &["merge", p, "--quiet"]);
        let merged = work.join(format!("n{n}-shards/out"));
        assert_eq!(
            stage_hashes(&merged),
            stage_hashes(&work.join(format!("n{n}/out"))),
            "the merged shards' tables equal the one-process run's"
        );
        let _ = std::fs::remove_dir_all(&merged);
        sharded = Some((n, runs, merge));
    }
    let s3_rows = match (sizes.iter().max(), std::env::var("RI_SCALE_S3").as_deref()) {
        (Some(&n), Ok("1")) => {
            let wall = rows.iter().find(|m| m.repos == n).expect("measured").wall;
            Some(measure_s3(bin, &work, &dirs, n, wall))
        }
        _ => None,
    };
    // The floor that memory should follow: the two largest crates alone (two workers build two
    // repositories at once), largest by the bytes the scan kept in the largest run (a crate's
    // size on disk may be binaries the scan skips).
    let kept = kept_bytes(&Store::new(
        work.join(format!("n{}/out", sizes.iter().max().expect("a size"))),
    ));
    let mut by_size: Vec<(u64, (String, PathBuf))> = dirs
        .iter()
        .map(|d| (kept.get(&d.0).copied().unwrap_or(0), d.clone()))
        .collect();
    by_size.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let largest: Vec<(String, PathBuf)> = by_size.into_iter().take(2).map(|(_, d)| d).collect();
    let names: Vec<&str> = largest.iter().map(|d| d.0.as_str()).collect();
    eprintln!(
        "scale: the two largest crates alone ({}) ...",
        names.join(", ")
    );
    let floor = measure_named(bin, &work, &largest, 2, "largest");
    let _ = std::fs::remove_dir_all(work.join("largest/out"));
    for m in &mut rows {
        let out = work.join(format!("n{}/out", m.repos));
        m.memory_build = memory_build(&Store::new(&out));
        let _ = std::fs::remove_dir_all(out);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| repositories | chunks | questions | wall s | peak RSS MB | {} | in-memory BM25 build s | index / build | retrieve q/s |",
        STAGES.join(" s | ") + " s"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(9 + STAGES.len()));
    for m in &rows {
        let stages: Vec<String> = m.stages.iter().map(|s| format!("{s:.2}")).collect();
        let index = m.stages[3];
        let retrieve = m.stages[4];
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.0} | {} | {:.2} | {:.2}× | {:.0} |",
            m.repos,
            m.chunks,
            m.questions,
            m.wall,
            m.peak_mb,
            stages.join(" | "),
            m.memory_build,
            index / m.memory_build.max(1e-9),
            m.questions as f64 / retrieve.max(1e-9),
        );
    }
    let _ = writeln!(
        out,
        "\nthe two largest crates alone ({}): {:.1} s, peak RSS {:.0} MB",
        names.join(", "),
        floor.wall,
        floor.peak_mb
    );
    for m in &rows {
        let _ = writeln!(
            out,
            "peak RSS at {} repositories: {:.2}× the {}-repository run, {:.2}× the two largest alone",
            m.repos,
            m.peak_mb / rows[0].peak_mb,
            rows[0].repos,
            m.peak_mb / floor.peak_mb
        );
    }
    if let Some((n, runs, merge)) = &sharded {
        let one = rows.iter().find(|m| m.repos == *n).expect("measured");
        let sum: f64 = runs.iter().map(|r| r.0).sum();
        let peaks: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.1)).collect();
        let _ = writeln!(
            out,
            "\n| {n} repositories | wall s | peak RSS MB |\n|---|---|---|\n\
             | 1 process | {:.1} | {:.0} |\n\
             | {} shards, one after another: sum of their walls | {sum:.1} ({:.2}× one process) | {} (each shard) |\n\
             | the merge | {:.1} | {:.0} |\n\
             | shards + merge | {:.1} ({:.2}×) | |",
            one.wall,
            one.peak_mb,
            runs.len(),
            sum / one.wall,
            peaks.join(", "),
            merge.0,
            merge.1,
            sum + merge.0,
            (sum + merge.0) / one.wall,
        );
    }
    if let Some(t) = &s3_rows {
        out.push_str(t);
    }
    print!("{out}");
    std::fs::write(work.join("report.md"), &out).unwrap();
}

/// The largest size into a loopback S3 server against local disk (the one-process run's output
/// is still there): the first run, an unchanged rerun, and an empty mirror pulling the whole run;
/// the bucket's tables must equal local disk's. Returns a Markdown table.
fn measure_s3(
    bin: &str,
    work: &Path,
    dirs: &[(String, PathBuf)],
    n: usize,
    local_first: f64,
) -> String {
    let python =
        std::env::var("RI_BATCH_PYTHON").expect("RI_SCALE_S3 needs RI_BATCH_PYTHON with moto");
    let server = s3::S3Server::start(&python, "bench");
    for (k, v) in server.env() {
        std::env::set_var(k, v);
    }
    let local = work.join(format!("n{n}/pipeline.toml"));
    let local_again = run_child(bin, &local);
    let one = work.join(format!("n{n}/out"));
    eprintln!("scale: {n} repositories into loopback S3 ...");
    let pipeline = prepare(work, dirs, n, &format!("n{n}-s3"));
    let dir = pipeline.parent().unwrap().to_path_buf();
    let text = std::fs::read_to_string(&pipeline).unwrap().replace(
        "output_dir = \"out\"",
        "output_dir = \"s3://bench/scale\"\nmirror_dir = \"mirror\"",
    );
    std::fs::write(&pipeline, text).unwrap();
    let first = run_child(bin, &pipeline);
    let again = run_child(bin, &pipeline);
    let mirror = dir.join("mirror/bench/scale");
    let bytes = dir_bytes(&mirror);
    std::fs::remove_dir_all(dir.join("mirror")).unwrap();
    let fresh = run_child(bin, &pipeline);
    assert_eq!(
        stage_hashes(&mirror),
        stage_hashes(&one),
        "the run pulled from the bucket equals the local run"
    );
    let _ = std::fs::remove_dir_all(dir.join("mirror"));
    format!(
        "\n| {n} repositories | local disk | loopback S3 (moto) |\n|---|---|---|\n\
         | first run | {:.1} s | {:.1} s, peak {:.0} MB ({:.0} MB published) |\n\
         | unchanged rerun | {:.2} s | {:.2} s |\n\
         | empty mirror: pull the run, nothing to do | | {:.1} s, peak {:.0} MB |\n",
        local_first,
        first.0,
        first.1,
        bytes as f64 / 1e6,
        local_again.0,
        again.0,
        fresh.0,
        fresh.1,
    )
}
