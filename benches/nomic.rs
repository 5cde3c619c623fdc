//! NomicBERT on the CPU: ri-batch's own forward (`src/models/nomic_fused.rs`, f32 and int8)
//! against candle's `nomic_bert`, the forward it replaces there, in alternating rounds on the same
//! token ids and batches, one thread each (the binary's worker layout), with the vectors'
//! agreement. The model has nomic-embed-text v1.5's shape (768 wide, 12 layers of 12 heads, 3,072
//! inner, rotary positions, SwiGLU) and random weights: no nomic weights can be fetched here, and
//! the time a forward takes does not depend on the weights' values (their agreement figures are
//! not a quality claim; `tests/embed.rs` checks the forward against numpy). Its tokenizer is
//! MiniLM's (`ri-batch model fetch all-minilm-l6-v2`), the same BERT uncased vocabulary; the texts
//! are the bundled READMEs' chunks. Figures go to `<target>/nomic-bench/figures.json`.
//!
//!     cargo bench --bench nomic [-- ROUNDS]

#[path = "common/harness.rs"]
mod harness;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::nomic_bert::{self, NomicBertModel};
use ri_batch::models::{Embedder, Precision};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[path = "../tests/common/nomic_model.rs"]
mod nomic_model;

const TEXTS: usize = 32;
const VOCAB: usize = 30528;
const WIDTH: usize = 768;
const LAYERS: usize = 12;
const INNER: usize = 3072;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The model directory: v1.5's config, MiniLM's tokenizer, random weights (written once).
fn model(dir: &Path) -> PathBuf {
    let m = dir.join("model");
    let shape = nomic_model::Shape {
        vocab: VOCAB,
        width: WIDTH,
        heads: 12,
        layers: LAYERS,
        inner: INNER,
        positions: 8192,
    };
    let config = nomic_model::config(&shape).to_string();
    if std::fs::read_to_string(m.join("config.json"))
        .ok()
        .as_deref()
        == Some(config.as_str())
    {
        return m;
    }
    std::fs::create_dir_all(&m).unwrap();
    let minilm = root().join("models/all-minilm-l6-v2/tokenizer.json");
    std::fs::copy(&minilm, m.join("tokenizer.json"))
        .expect("ri-batch model fetch all-minilm-l6-v2 (its tokenizer is the bench model's)");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = |dims: &[usize], scale: f32, offset: f32| -> Tensor {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                offset + scale * ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0)
            })
            .collect();
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
    };
    let t = nomic_model::tensors(&shape, 0.5, false, &mut rand);
    candle_core::safetensors::save(&t, m.join("model.safetensors")).unwrap();
    std::fs::write(m.join("config.json"), config).unwrap();
    m
}

/// The bundled READMEs' chunks, as the embed bench takes them.
fn texts() -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("datasets/repos"))
        .expect("run datasets/build-repos.sh first")
        .flat_map(|r| {
            let r = r.unwrap().path();
            ["README.md", "readme.md"].map(|f| r.join(f))
        })
        .filter(|f| f.is_file())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        out.extend(
            ri_batch::text::chunker::chunk_text(&text, "markdown", 300, 0)
                .into_iter()
                .map(|c| c.text),
        );
    }
    out.truncate(TEXTS);
    out
}

/// One batch as (ids, mask) tensors, right-padded.
fn tensors(batch: &[&Vec<u32>]) -> (Tensor, Tensor) {
    let len = batch.iter().map(|b| b.len()).max().unwrap();
    let (mut ids, mut mask) = (vec![0u32; batch.len() * len], vec![0u32; batch.len() * len]);
    for (i, b) in batch.iter().enumerate() {
        ids[i * len..i * len + b.len()].copy_from_slice(b);
        mask[i * len..(i + 1) * len][..b.len()].fill(1);
    }
    let n = batch.len();
    (
        Tensor::from_vec(ids, (n, len), &Device::Cpu).unwrap(),
        Tensor::from_vec(mask, (n, len), &Device::Cpu).unwrap(),
    )
}

/// candle's forward, mean-pooled and normalized as the embedder does.
fn candle_vectors(m: &NomicBertModel, batch: &[&Vec<u32>]) -> Vec<Vec<f32>> {
    let (ids, mask) = tensors(batch);
    let h = m.forward(&ids, None, Some(&mask)).unwrap();
    let pooled = nomic_bert::mean_pooling(&h, &mask).unwrap();
    nomic_bert::l2_normalize(&pooled)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let d = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(p, q)| *p as f64 * *q as f64)
            .sum::<f64>()
    };
    d(a, b) / (d(a, a) * d(b, b)).sqrt()
}

/// One embedder under test: a batch of token ids to its vectors.
type Embed<'a> = &'a dyn Fn(&[&Vec<u32>]) -> Vec<Vec<f32>>;

/// Seconds for `f` over every batch, and its vectors in batch order.
fn timed(batches: &[Vec<&Vec<u32>>], f: Embed) -> (f64, Vec<Vec<f32>>) {
    let t = Instant::now();
    let v: Vec<Vec<f32>> = batches.iter().flat_map(|b| f(b)).collect();
    (t.elapsed().as_secs_f64(), v)
}

fn main() {
    ri_batch::models::threads::configure();
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3);
    let dir = harness::out_dir("nomic-bench");
    let m = model(&dir);
    let own = Embedder::load(&m, ri_batch::models::Device::Cpu, 512, None).unwrap();
    let q8 = Embedder::load_with(
        &m,
        ri_batch::models::Device::Cpu,
        512,
        None,
        Some(Precision::Int8),
    )
    .unwrap();
    let cfg: nomic_bert::Config =
        serde_json::from_str(&std::fs::read_to_string(m.join("config.json")).unwrap()).unwrap();
    // SAFETY: the file is memory-mapped read-only and not modified while the model lives.
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(
            &[m.join("model.safetensors")],
            DType::F32,
            &Device::Cpu,
        )
    }
    .unwrap();
    let candle = NomicBertModel::load(vb, &cfg).unwrap();

    let texts = texts();
    let ids = own.tokenize(&texts).unwrap();
    let tokens: usize = ids.iter().map(|i| i.len()).sum();
    let batches: Vec<Vec<&Vec<u32>>> = ri_batch::models::length_batches(&ids, 2048)
        .into_iter()
        .map(|b| b.into_iter().map(|i| &ids[i]).collect())
        .collect();
    eprintln!(
        "{} texts, {tokens} tokens, {} batches, one thread each",
        texts.len(),
        batches.len()
    );
    let mut table = Vec::new();
    let mut last = None;
    for round in 0..rounds {
        let (c_s, c_v) = timed(&batches, &|b| candle_vectors(&candle, b));
        let (f_s, f_v) = timed(&batches, &|b| {
            own.embed_ids(&b.iter().map(|v| (*v).clone()).collect::<Vec<_>>())
                .unwrap()
        });
        let (q_s, q_v) = timed(&batches, &|b| {
            q8.embed_ids(&b.iter().map(|v| (*v).clone()).collect::<Vec<_>>())
                .unwrap()
        });
        let tps = |s: f64| tokens as f64 / s;
        eprintln!(
            "round {round}: candle f32 {:.0} tokens/s, ri-batch f32 {:.0} ({:.2}×), ri-batch int8 {:.0} ({:.2}× candle, {:.2}× f32)",
            tps(c_s),
            tps(f_s),
            c_s / f_s,
            tps(q_s),
            c_s / q_s,
            f_s / q_s
        );
        table.push(serde_json::json!({
            "candle_f32_tokens_per_second": tps(c_s),
            "own_f32_tokens_per_second": tps(f_s),
            "own_int8_tokens_per_second": tps(q_s),
        }));
        last = Some((c_v, f_v, q_v));
    }
    let (c_v, f_v, q_v) = last.unwrap();
    let worst = |a: &[Vec<f32>], b: &[Vec<f32>]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| cosine(x, y))
            .fold(1.0f64, f64::min)
    };
    let mean = |a: &[Vec<f32>], b: &[Vec<f32>]| {
        a.iter().zip(b).map(|(x, y)| cosine(x, y)).sum::<f64>() / a.len() as f64
    };
    let diff = c_v
        .iter()
        .zip(&f_v)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0f32, f32::max);
    eprintln!(
        "ri-batch f32 against candle: worst cosine {:.7}, largest difference {diff:.1e}; int8 against f32 (random weights): mean cosine {:.5}, worst {:.5}",
        worst(&f_v, &c_v),
        mean(&q_v, &f_v),
        worst(&q_v, &f_v)
    );
    let figures = serde_json::json!({
        "texts": texts.len(), "tokens": tokens, "rounds": table,
        "f32_against_candle": {"worst_cosine": worst(&f_v, &c_v), "max_abs_difference": diff},
        "int8_against_f32_random_weights": {"mean_cosine": mean(&q_v, &f_v), "worst_cosine": worst(&q_v, &f_v)},
    });
    std::fs::write(
        dir.join("figures.json"),
        serde_json::to_string_pretty(&figures).unwrap(),
    )
    .unwrap();
}
