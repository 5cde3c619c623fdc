//! BM25 index build and query throughput on a large real corpus: every chunk of the sources of the
//! crates in Cargo.lock. Queries: the 500 CoSQA web queries when `../shared/data/cosqa-dev` is
//! present, else the bundled question set. The tokenized corpus, the queries, our top-10 lists and
//! our timings are written to `<target>/bm25-bench/` for `benches/bm25s_compare.sh`, which runs
//! bm25s on the same input and reports identical top-10 share and throughput ratios.

#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/harness.rs"]
mod harness;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ri_batch::retrieval::bm25::{Index, Params, Searcher};
use ri_batch::text::analyze::Analyzer;
use std::io::Write;
use std::time::Duration;

fn corpus_docs() -> Vec<(String, Vec<String>)> {
    corpus::chunk_terms_by_crate()
        .into_iter()
        .flatten()
        .collect()
}

fn queries() -> (String, Vec<Vec<String>>) {
    let an = Analyzer::new(false, false);
    let dedup = |t: Vec<String>| {
        let mut seen = std::collections::HashSet::new();
        t.into_iter()
            .filter(|x| seen.insert(x.clone()))
            .collect::<Vec<_>>()
    };
    let cosqa = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/cosqa-dev/cosqa-retrieval-dev-500.json"
    );
    if let Ok(text) = std::fs::read_to_string(cosqa) {
        let v: serde_json::Value = serde_json::from_str(&text).expect("cosqa json");
        let qs: Vec<Vec<String>> = v
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|q| {
                q.get("doc")
                    .or_else(|| q.get("query"))
                    .and_then(|d| d.as_str())
            })
            .map(|q| dedup(an.terms(q)))
            .collect();
        if !qs.is_empty() {
            return ("cosqa-dev (500 web queries)".into(), qs);
        }
    }
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/datasets/questions.jsonl"
    ))
    .expect("questions");
    let qs = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["question"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .map(|q| dedup(an.terms(&q)))
        .collect();
    ("bundled question set".into(), qs)
}

fn bench(c: &mut Criterion) {
    let docs = corpus_docs();
    let (qname, qs) = queries();
    let tokens: usize = docs.iter().map(|d| d.1.len()).sum();
    eprintln!(
        "corpus: {} chunks, {tokens} tokens; queries: {} from {qname}",
        docs.len(),
        qs.len()
    );
    let p = Params::default();

    let mut g = c.benchmark_group("bm25");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(docs.len() as u64));
    let borrowed = || docs.iter().map(|(id, terms)| (id.clone(), terms));
    g.bench_function("build", |b| b.iter(|| Index::build(borrowed()).len()));
    let ix = Index::build(borrowed());
    g.throughput(Throughput::Elements(qs.len() as u64));
    g.bench_function("query_top10", |b| {
        b.iter(|| {
            let mut s = Searcher::new(&ix, p);
            qs.iter().map(|q| s.search(q, 10).len()).sum::<usize>()
        })
    });
    g.finish();

    // Direct timings for the bm25s comparison (medians of 5, single thread, same process).
    let build_s = harness::median_seconds(5, || Index::build(borrowed()));
    let query_s = harness::median_seconds(5, || {
        let mut s = Searcher::new(&ix, p);
        for q in &qs {
            std::hint::black_box(s.search(q, 10));
        }
    });
    let dir = harness::out_dir("bm25-bench");
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("corpus.jsonl")).unwrap());
    for (_, terms) in &docs {
        writeln!(f, "{}", serde_json::to_string(terms).unwrap()).unwrap();
    }
    f.flush().unwrap();
    std::fs::write(
        dir.join("queries.json"),
        serde_json::to_string(&qs).unwrap(),
    )
    .unwrap();
    let top: Vec<Vec<u32>> = qs
        .iter()
        .map(|q| ix.search(q, 10, p).into_iter().map(|(d, _)| d).collect())
        .collect();
    let scores: Vec<Vec<f64>> = qs
        .iter()
        .map(|q| ix.search(q, 10, p).into_iter().map(|(_, s)| s).collect())
        .collect();
    let result = serde_json::json!({
        "docs": docs.len(), "tokens": tokens, "queries": qs.len(), "query_set": qname,
        "build_seconds": build_s, "query_seconds": query_s, "top10": top, "top10_scores": scores,
    });
    std::fs::write(dir.join("ri_batch.json"), result.to_string()).unwrap();
    eprintln!(
        "ri-batch: build {:.3}s ({:.0} docs/s), {} queries in {:.4}s ({:.0} q/s); data in {}",
        build_s,
        docs.len() as f64 / build_s,
        qs.len(),
        query_s,
        qs.len() as f64 / query_s,
        dir.display()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
