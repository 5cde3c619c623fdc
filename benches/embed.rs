//! CPU embedding throughput of MiniLM (models/all-minilm-l6-v2) on real chunks of the bundled
//! repositories, and, in the same run, the machine's f32 GEMM throughput on the model's own
//! matrix shapes, and the int8 model (`dtype = "int8"`) against f32 in alternating rounds, with
//! their vectors' agreement. Efficiency = tokens/s × FLOPs per token ÷ GEMM FLOP/s. With
//! `RI_EMBED_PEERS=<python>` each round is followed by one round of the peers on the same texts
//! and threads (`benches/embed_peers.py`: sentence-transformers, ONNX Runtime f32 and int8), so the
//! rounds alternate; `benches/embed_compare.sh` sets that Python up. Texts, vectors and figures go
//! to `<target>/embed-bench/`.

#[path = "common/harness.rs"]
mod harness;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, Criterion, Throughput};
use ri_batch::models::{Embedder, TextKind};
use std::time::{Duration, Instant};

const TEXTS: usize = 96;

fn texts() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/datasets/repos");
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for repo in std::fs::read_dir(root).expect("run datasets/build-repos.sh first") {
        let repo = repo.unwrap().path();
        for f in ["README.md", "readme.md"] {
            if repo.join(f).is_file() {
                files.push(repo.join(f));
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for c in ri_batch::text::chunker::chunk_text(&text, "markdown", 300, 0) {
            out.push(c.text);
        }
    }
    out.truncate(TEXTS);
    out
}

/// FLOPs per token of a BERT encoder at sequence length `seq` (2 per multiply-add).
fn flops_per_token(hidden: f64, inter: f64, layers: f64, seq: f64) -> f64 {
    layers * 2.0 * (4.0 * hidden * hidden + 2.0 * hidden * inter + 2.0 * seq * hidden)
}

/// Median seconds of one call of `f`, over 5 runs of 10 calls.
fn time_per_call(f: &dyn Fn()) -> f64 {
    let mut v: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..10 {
                f();
            }
            t.elapsed().as_secs_f64() / 10.0
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[2]
}

/// Median seconds of `runs` embeddings of `texts` by `e`.
fn median_embed_seconds(e: &Embedder, texts: &[String], runs: usize) -> f64 {
    harness::median_seconds(runs, || {
        e.embed(texts, TextKind::Document, 512, |_, _| {}).unwrap()
    })
}

fn bench(c: &mut Criterion) {
    let a = Tensor::randn(0f32, 1.0, (2048, 384), &Device::Cpu).unwrap();
    let w = Tensor::randn(0f32, 1.0, (384, 1536), &Device::Cpu).unwrap();
    let gemm_flops = 2.0 * 2048.0 * 384.0 * 1536.0;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The machine's f32 GEMM peak, two ways, before the model sets candle to one thread per
    // worker: one GEMM split over every core, and one single-threaded GEMM per core at once.
    let mut g = c.benchmark_group("gemm");
    g.sample_size(10)
        .throughput(Throughput::Elements(gemm_flops as u64));
    g.bench_function("f32_2048x384x1536_all_cores", |b| {
        b.iter(|| a.matmul(&w).unwrap())
    });
    g.finish();
    let split_s = time_per_call(&|| {
        std::hint::black_box(a.matmul(&w).unwrap());
    });

    let dir = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/all-minilm-l6-v2"
    ));
    let m = Embedder::load(dir, ri_batch::models::Device::Cpu, 512, None)
        .expect("ri-batch model fetch all-minilm-l6-v2");
    let per_core_s = {
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..cores {
                s.spawn(|| {
                    for _ in 0..20 {
                        std::hint::black_box(a.matmul(&w).unwrap());
                    }
                });
            }
        });
        t.elapsed().as_secs_f64() / (20.0 * cores as f64)
    };
    let gflops = (gemm_flops / split_s).max(gemm_flops / per_core_s) / 1e9;
    eprintln!(
        "GEMM: {:.1} GFLOP/s one at a time, {:.1} GFLOP/s as {cores} concurrent single-threaded GEMMs",
        gemm_flops / split_s / 1e9,
        gemm_flops / per_core_s / 1e9
    );

    let texts = texts();
    let ids = m.tokenize(&texts).unwrap();
    let tokens: usize = ids.iter().map(|i| i.len()).sum();
    let batches = ri_batch::models::length_batches(&ids, 512);
    // Attention cost depends on the padded length each token is processed at.
    let attn_weighted: f64 = batches
        .iter()
        .map(|b| {
            let len = b.iter().map(|&i| ids[i].len()).max().unwrap() as f64;
            b.iter().map(|&i| ids[i].len() as f64 * len).sum::<f64>()
        })
        .sum::<f64>()
        / tokens as f64;
    let fpt = flops_per_token(384.0, 1536.0, 6.0, attn_weighted);
    eprintln!(
        "{} texts, {tokens} tokens, {} batches, {:.1} MFLOP/token",
        texts.len(),
        batches.len(),
        fpt / 1e6
    );

    let mut g = c.benchmark_group("embed");
    g.sample_size(10).measurement_time(Duration::from_secs(40));
    g.throughput(Throughput::Elements(tokens as u64));
    g.bench_function("minilm_cpu_tokens", |b| {
        b.iter(|| m.embed(&texts, TextKind::Document, 512, |_, _| {}).unwrap())
    });
    g.finish();

    let embed_s = median_embed_seconds(&m, &texts, 5);
    let tps = tokens as f64 / embed_s;
    let eff = tps * fpt / (gflops * 1e9);
    eprintln!(
        "GEMM peak {gflops:.1} GFLOP/s; MiniLM {tps:.0} tokens/s; efficiency {:.1}%",
        eff * 100.0
    );
    // Int8 linear layers against f32, same texts, alternating rounds (each the median of 3).
    let q8 = Embedder::load_with(
        dir,
        ri_batch::models::Device::Cpu,
        512,
        None,
        Some(ri_batch::models::Precision::Int8),
    )
    .expect("int8 MiniLM");
    let a = m.embed(&texts, TextKind::Document, 512, |_, _| {}).unwrap();
    let b = q8
        .embed(&texts, TextKind::Document, 512, |_, _| {})
        .unwrap();
    let (mean_cos, min_cos) = agreement(&a, &b);
    eprintln!("int8 vectors: mean cosine to f32 {mean_cos:.5}, minimum {min_cos:.5}");
    let d = harness::out_dir("embed-bench");
    std::fs::write(d.join("texts.json"), serde_json::to_string(&texts).unwrap()).unwrap();
    std::fs::write(
        d.join("ri_batch_vectors.json"),
        serde_json::to_string(&a).unwrap(),
    )
    .unwrap();

    // Rounds alternate: ri-batch f32, ri-batch int8, then (with RI_EMBED_PEERS naming a Python
    // with sentence-transformers and onnxruntime, as benches/embed_compare.sh sets up) one round
    // of the peers on the same texts and threads.
    let peers = std::env::var("RI_EMBED_PEERS").ok();
    let round = |e: &Embedder| tokens as f64 / median_embed_seconds(e, &texts, 3);
    let mut rounds = Vec::new();
    for r in 0..3 {
        let f = round(&m);
        let q = round(&q8);
        eprintln!(
            "round {r}: f32 {f:.0} tokens/s, int8 {q:.0} tokens/s, int8 ÷ f32 {:.2}",
            q / f
        );
        let peer = peers.as_deref().map(|py| peer_round(py, &d, dir, cores));
        if let Some(p) = &peer {
            let tps = |k: &str| p[k]["tokens_per_second"].as_f64().unwrap();
            eprintln!(
                "round {r} peers: sentence-transformers {:.0}, ONNX Runtime f32 {:.0}, int8 {:.0} tokens/s; \
                 ri-batch f32 ÷ ST {:.2}, f32 ÷ ORT f32 {:.2}, int8 ÷ ORT int8 {:.2}",
                tps("sentence_transformers_f32"),
                tps("onnxruntime_f32"),
                tps("onnxruntime_int8"),
                f / tps("sentence_transformers_f32"),
                f / tps("onnxruntime_f32"),
                q / tps("onnxruntime_int8"),
            );
        }
        rounds.push(serde_json::json!({"f32": f, "int8": q, "peers": peer}));
    }
    std::fs::write(
        d.join("ri_batch.json"),
        serde_json::json!({"tokens": tokens, "seconds": embed_s, "tokens_per_second": tps,
            "gemm_gflops": gflops, "flops_per_token": fpt, "efficiency": eff,
            "int8_mean_cosine": mean_cos, "int8_min_cosine": min_cos, "rounds": rounds})
        .to_string(),
    )
    .unwrap();
}

/// Mean and minimum cosine between paired vectors.
fn agreement(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f64, f64) {
    let dot = |p: &[f32], q: &[f32]| p.iter().zip(q).map(|(u, v)| (u * v) as f64).sum::<f64>();
    let cos: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| dot(x, y) / (dot(x, x) * dot(y, y)).sqrt())
        .collect();
    let mean = cos.iter().sum::<f64>() / cos.len() as f64;
    (mean, cos.iter().copied().fold(1.0, f64::min))
}

/// One round of `benches/embed_peers.py` under `python`: its JSON, with each peer's tokens/s and
/// vector agreement with ri-batch's f32 vectors.
fn peer_round(
    python: &str,
    d: &std::path::Path,
    model: &std::path::Path,
    threads: usize,
) -> serde_json::Value {
    let out = d.join("peers.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/embed_peers.py");
    let status = std::process::Command::new(python)
        .arg(script)
        .arg(d)
        .arg(model)
        .arg(threads.to_string())
        .arg(&out)
        .env("HF_HUB_OFFLINE", "1")
        .status()
        .expect("start the peers' Python");
    assert!(status.success(), "{script} failed: {status}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for k in [
        "sentence_transformers_f32",
        "onnxruntime_f32",
        "onnxruntime_int8",
    ] {
        eprintln!(
            "  {k}: mean cosine to ri-batch f32 {:.5}, minimum {:.5}",
            v[k]["mean_cosine"].as_f64().unwrap(),
            v[k]["min_cosine"].as_f64().unwrap()
        );
    }
    v
}

criterion_group!(benches, bench);

fn main() {
    // The binary's thread layout (models/threads.rs): the bench starts itself once more with
    // candle's per-operation threading off and one single-threaded embedding worker per core, as
    // `ri-batch` does; without it the bench measured one worker whose products candle split.
    ri_batch::models::threads::configure();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
