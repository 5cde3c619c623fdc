//! scan + chunk throughput (MB/s, chunks/s) over the sources of every crate in Cargo.lock, with a
//! baseline measured in the same run: reading the same files and splitting them into lines. The
//! `chunk_only` group times line chunks against syntax chunks (`method = "syntax"`) on the same
//! scanned files, in bytes per second; the ratio is the syntax chunker's cost.

#[path = "common/corpus.rs"]
mod corpus;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ri_batch::repos::walk::scan_repo;
use ri_batch::stages::chunk::chunk_file;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let dirs = corpus::crate_dirs();
    assert!(
        dirs.len() > 100,
        "expected the locked crates in the cargo registry; found {}",
        dirs.len()
    );
    let plan = corpus::plan(&dirs);
    let scanned: Vec<_> = plan
        .repos
        .iter()
        .map(|r| scan_repo(&plan, r).expect("scan"))
        .collect();
    let bytes: u64 = scanned.iter().flat_map(|(f, _)| f).map(|f| f.bytes).sum();
    let files: usize = scanned.iter().map(|(f, _)| f.len()).sum();
    let chunks: usize = scanned
        .iter()
        .flat_map(|(f, _)| f)
        .map(|f| chunk_file(f, &Default::default()).len())
        .sum();
    eprintln!(
        "corpus: {} crates, {files} files, {:.1} MB, {chunks} chunks",
        dirs.len(),
        bytes as f64 / 1e6
    );
    let paths: Vec<std::path::PathBuf> = plan
        .repos
        .iter()
        .zip(&scanned)
        .flat_map(|(r, (f, _))| {
            let root = match &r.source {
                ri_batch::config::RepoSource::Dir { path } => path.clone(),
                _ => unreachable!(),
            };
            f.iter().map(move |f| root.join(&f.path))
        })
        .collect();

    let mut g = c.benchmark_group("scan_chunk");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .throughput(Throughput::Bytes(bytes));
    g.bench_function("baseline_read_and_split_lines", |b| {
        b.iter(|| {
            let mut lines = 0usize;
            for p in &paths {
                lines += std::fs::read_to_string(p)
                    .map(|t| t.split('\n').count())
                    .unwrap_or(0);
            }
            lines
        })
    });
    g.bench_function("scan", |b| {
        b.iter(|| {
            plan.repos
                .iter()
                .map(|r| scan_repo(&plan, r).expect("scan").0.len())
                .sum::<usize>()
        })
    });
    g.bench_function("scan_and_chunk", |b| {
        b.iter(|| {
            plan.repos
                .iter()
                .map(|r| {
                    let (files, _) = scan_repo(&plan, r).expect("scan");
                    files
                        .iter()
                        .map(|f| chunk_file(f, &Default::default()).len())
                        .sum::<usize>()
                })
                .sum::<usize>()
        })
    });
    g.finish();
    let syntax = ri_batch::config::ChunkConfig {
        method: ri_batch::config::ChunkMethod::Syntax,
        ..Default::default()
    };
    let syntax_chunks: usize = scanned
        .iter()
        .flat_map(|(f, _)| f)
        .map(|f| chunk_file(f, &syntax).len())
        .sum();
    let parsed = scanned
        .iter()
        .flat_map(|(f, _)| f)
        .filter(|f| ri_batch::text::syntax::supported(&f.language))
        .count();
    eprintln!("syntax: {syntax_chunks} chunks; {parsed} of {files} files have a grammar");
    let mut g = c.benchmark_group("chunk_only");
    g.sample_size(10).throughput(Throughput::Bytes(bytes));
    g.bench_function("chunk_syntax", |b| {
        b.iter(|| {
            scanned
                .iter()
                .flat_map(|(f, _)| f)
                .map(|f| chunk_file(f, &syntax).len())
                .sum::<usize>()
        })
    });
    g.bench_function("chunk", |b| {
        b.iter(|| {
            scanned
                .iter()
                .flat_map(|(f, _)| f)
                .map(|f| chunk_file(f, &Default::default()).len())
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
