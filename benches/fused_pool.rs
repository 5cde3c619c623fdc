//! The cost of a score-fused pool against the BM25 pool it replaces, per question, in the
//! retrieve stage's own calls: BM25 top `TOP_K` (the baseline) against BM25 and exact dense
//! search to `FUSION_DEPTH` each, then normalised score fusion (1.0 : 0.1, as the shipped
//! `fused-compact-dense`) cut to `TOP_K`. Scopes are per repository as in a run: one index and one
//! vector block per crate of Cargo.lock (every source file, the default chunker), so scopes run
//! from a handful of chunks to thousands. Every bundled question is asked in every scope.
//!
//! Vectors are random unit vectors of MiniLM's 384 dimensions: exact search costs the same for
//! any values, and random lists barely overlap, so fusion merges the most distinct ids it can
//! (an upper bound on its work). Embedding is not timed: the embed stage makes chunk vectors for
//! any variant that scores units densely, which the README pipelines already had.
//!
//! `cargo bench --bench fused_pool`: medians of 5 timings of every search in each third of the
//! scopes by size, the whole as their sum, and the ratio; also `<target>/fused-pool-bench/report.md`.

#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/harness.rs"]
mod harness;

use ri_batch::config::Fusion;
use ri_batch::retrieval::bm25::{Index, Params, Searcher};
use ri_batch::retrieval::{dense_search, fuse_hybrid, FUSION_DEPTH};
use ri_batch::rng::Rng;
use ri_batch::text::analyze::Analyzer;
use std::fmt::Write as _;

/// The pool depth the README pipelines retrieve (`[retrieve] top_k`).
const TOP_K: usize = 20;
/// MiniLM's dimensions.
const DIMS: usize = 384;
/// The shipped variant's weights (bm25, dense).
const WEIGHTS: [f64; 2] = [1.0, 0.1];

/// One repository's searchable state, as the retrieve stage holds it.
struct Scope {
    ix: Index,
    vectors: Vec<f32>,
}

/// `n` random unit vectors, row-major.
fn unit_vectors(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * DIMS);
    for _ in 0..n {
        let v: Vec<f32> = (0..DIMS)
            .map(|_| (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32 - 0.5)
            .collect();
        let norm = v
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        out.extend(v.iter().map(|x| x / norm));
    }
    out
}

fn scopes(rng: &mut Rng) -> Vec<Scope> {
    corpus::chunk_terms_by_crate()
        .into_iter()
        .filter(|docs| !docs.is_empty())
        .map(|docs| Scope {
            vectors: unit_vectors(rng, docs.len()),
            ix: Index::build(docs),
        })
        .collect()
}

/// The bundled questions, analysed, each with a random query vector.
fn questions(rng: &mut Rng) -> Vec<(Vec<String>, Vec<f32>)> {
    let an = Analyzer::new(false, false);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/datasets/questions.jsonl"
    ))
    .expect("datasets/questions.jsonl");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("question json");
            let terms = an.terms(v["question"].as_str().expect("question text"));
            (terms, unit_vectors(rng, 1))
        })
        .collect()
}

/// The BM25 pool of one question: top `TOP_K`, as chunk ids.
fn bm25_pool(s: &mut Searcher<'_>, ix: &Index, q: &[String]) -> Vec<(String, f64)> {
    s.search(q, TOP_K)
        .into_iter()
        .map(|(d, sc)| (ix.docs[d as usize].clone(), sc))
        .collect()
}

/// The score-fused pool of one question: both lists to `FUSION_DEPTH`, fused, cut to `TOP_K`.
fn fused_pool(s: &mut Searcher<'_>, scope: &Scope, q: &[String], qv: &[f32]) -> Vec<(String, f64)> {
    let depth = FUSION_DEPTH.max(TOP_K);
    let ids = |hits: Vec<(u32, f64)>| -> Vec<(String, f64)> {
        hits.into_iter()
            .map(|(d, sc)| (scope.ix.docs[d as usize].clone(), sc))
            .collect()
    };
    let a = ids(s.search(q, depth));
    let b = ids(dense_search(qv, &scope.vectors, DIMS, None, depth));
    fuse_hybrid(WEIGHTS, Fusion::Score, a, b, 60.0)
        .into_iter()
        .take(TOP_K)
        .map(|f| (f.doc, f.score))
        .collect()
}

/// Every question in every scope of `scopes`, with `pool`; returns the ids drawn (kept live).
fn sweep<F>(scopes: &[&Scope], qs: &[(Vec<String>, Vec<f32>)], mut pool: F) -> usize
where
    F: FnMut(&mut Searcher<'_>, &Scope, &[String], &[f32]) -> usize,
{
    let p = Params::default();
    let mut n = 0;
    for scope in scopes {
        let mut s = Searcher::new(&scope.ix, p);
        for (q, qv) in qs {
            n += pool(&mut s, scope, q, qv);
        }
    }
    n
}

/// Median seconds of one sweep of `part` with each pool: (BM25, fused, dense search alone).
fn timings(part: &[&Scope], qs: &[(Vec<String>, Vec<f32>)]) -> [f64; 3] {
    let bm25 =
        |s: &mut Searcher<'_>, sc: &Scope, q: &[String], _: &[f32]| bm25_pool(s, &sc.ix, q).len();
    let fused =
        |s: &mut Searcher<'_>, sc: &Scope, q: &[String], qv: &[f32]| fused_pool(s, sc, q, qv).len();
    let dense = |_: &mut Searcher<'_>, sc: &Scope, _: &[String], qv: &[f32]| {
        dense_search(qv, &sc.vectors, DIMS, None, FUSION_DEPTH).len()
    };
    [
        harness::median_seconds(5, || sweep(part, qs, bm25)),
        harness::median_seconds(5, || sweep(part, qs, fused)),
        harness::median_seconds(5, || sweep(part, qs, dense)),
    ]
}

fn main() {
    // `cargo bench` passes `--bench`; a test run (`cargo test --benches`) passes nothing to do.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mut rng = Rng::new(27);
    let all = scopes(&mut rng);
    let qs = questions(&mut rng);
    let chunks: usize = all.iter().map(|s| s.ix.len()).sum();
    eprintln!(
        "{} scopes, {chunks} chunks; {} questions in each",
        all.len(),
        qs.len()
    );
    // Thirds by scope size, each timed; the whole is their sum.
    let mut sizes: Vec<usize> = all.iter().map(|s| s.ix.len()).collect();
    sizes.sort_unstable();
    let cut = |f: f64| sizes[((sizes.len() - 1) as f64 * f) as usize];
    let (t1, t2) = (cut(1.0 / 3.0), cut(2.0 / 3.0));
    let bands = [
        (format!("≤ {t1} chunks"), 0..=t1),
        (format!("{}–{t2} chunks", t1 + 1), t1 + 1..=t2),
        (format!("> {t2} chunks"), t2 + 1..=usize::MAX),
    ];
    let mut rows = Vec::new();
    for (name, sizes) in bands {
        let part: Vec<&Scope> = all.iter().filter(|s| sizes.contains(&s.ix.len())).collect();
        let n_chunks: usize = part.iter().map(|s| s.ix.len()).sum();
        rows.push((name, part.len(), n_chunks, timings(&part, &qs)));
    }
    let sum = |i: usize| rows.iter().map(|r| r.3[i]).sum::<f64>();
    let whole = [sum(0), sum(1), sum(2)];
    rows.insert(0, ("all scopes".into(), all.len(), chunks, whole));
    let mut md = String::from(
        "| scopes | n | chunks | questions × scopes | BM25 pool µs/q | fused pool µs/q | of which dense search | fused / BM25 |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (name, n, n_chunks, [a, b, d]) in rows {
        let searches = n * qs.len();
        let us = |t: f64| t * 1e6 / searches as f64;
        writeln!(
            md,
            "| {name} | {n} | {n_chunks} | {searches} | {:.1} | {:.1} | {:.1} | {:.2} |",
            us(a),
            us(b),
            us(d),
            b / a
        )
        .unwrap();
    }
    eprintln!("\n{md}");
    std::fs::write(harness::out_dir("fused-pool-bench").join("report.md"), &md).unwrap();
}
