//! The `reader` selector end to end: a tiny Qwen2 GGUF the test writes (random weights, a
//! byte-level vocabulary with the contract's tokens, ChatML) run over the bundled repositories and
//! questions, for the contract's mechanics; the real Qwen2.5-Coder-0.5B model (fetched by
//! scripts/test) for its tokenizer against llama.cpp's ids and for a real reading.

mod common;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use common::*;
use ri_batch::answer::selectors::reader::{self, ReaderSpec};
use ri_batch::answer::selectors::Evidence;
use ri_batch::artifact::outcomes::{Outcome, Reason};
use ri_batch::artifact::schema::{ExtractRow, FileRow, PackRow};
use ri_batch::artifact::Store;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// GPT-2's byte-level alphabet: the character each byte is written as in the vocabulary.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut extra = 0;
    (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap()
            }
        })
        .collect()
}

/// Writes a one-block Qwen2 model with random weights (fixed seed) to `path`.
fn tiny_gguf(path: &Path) {
    let mut tokens: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
    let merges = ["\u{0120} E", "N O", "NO N", "NON E"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    let mut types = vec![1i32; tokens.len()];
    for special in ["<|im_start|>", "<|im_end|>", "<|endoftext|>"] {
        tokens.push(special.into());
        types.push(3);
    }
    let (vocab, hidden, heads, kv_heads, ffn) = (tokens.len(), 16usize, 2u32, 1u32, 32usize);
    let head_dim = hidden / heads as usize;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut tensor = |dims: &[usize], scale: f32| {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            })
            .collect();
        let t = Tensor::from_vec(v, dims, &Device::Cpu).unwrap();
        QTensor::quantize(&t, GgmlDType::F32).unwrap()
    };
    let kv = kv_heads as usize * head_dim;
    let named = vec![
        ("token_embd.weight", tensor(&[vocab, hidden], 2.0)),
        ("output_norm.weight", tensor(&[hidden], 0.5)),
        ("output.weight", tensor(&[vocab, hidden], 2.0)),
        ("blk.0.attn_norm.weight", tensor(&[hidden], 0.5)),
        ("blk.0.ffn_norm.weight", tensor(&[hidden], 0.5)),
        ("blk.0.attn_q.weight", tensor(&[hidden, hidden], 1.0)),
        ("blk.0.attn_k.weight", tensor(&[kv, hidden], 1.0)),
        ("blk.0.attn_v.weight", tensor(&[kv, hidden], 1.0)),
        ("blk.0.attn_q.bias", tensor(&[hidden], 0.1)),
        ("blk.0.attn_k.bias", tensor(&[kv], 0.1)),
        ("blk.0.attn_v.bias", tensor(&[kv], 0.1)),
        ("blk.0.attn_output.weight", tensor(&[hidden, hidden], 1.0)),
        ("blk.0.ffn_gate.weight", tensor(&[ffn, hidden], 1.0)),
        ("blk.0.ffn_up.weight", tensor(&[ffn, hidden], 1.0)),
        ("blk.0.ffn_down.weight", tensor(&[hidden, ffn], 1.0)),
    ];
    let s = |v: &str| Value::String(v.into());
    let strings = |vs: &[String]| Value::Array(vs.iter().map(|v| s(v)).collect());
    let merges: Vec<String> = merges.iter().map(|m| m.to_string()).collect();
    let template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n";
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", s("qwen2")),
        ("general.name", s("tiny test model")),
        ("qwen2.attention.head_count", Value::U32(heads)),
        ("qwen2.attention.head_count_kv", Value::U32(kv_heads)),
        ("qwen2.embedding_length", Value::U32(hidden as u32)),
        ("qwen2.context_length", Value::U32(32768)),
        ("qwen2.block_count", Value::U32(1)),
        ("qwen2.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("qwen2.rope.freq_base", Value::F32(10000.0)),
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.pre", s("qwen2")),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.merges", strings(&merges)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.chat_template", s(template)),
    ];
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = named.iter().map(|(k, t)| (*k, t)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md, &ts).unwrap();
}

/// The tiny model, written once per test binary.
fn tiny_model() -> PathBuf {
    static ONCE: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tiny.gguf");
        tiny_gguf(&p);
        (d, p)
    })
    .1
    .clone()
}

fn reader_variant(model: &Path, cache: &Path, refuse_at: f64) -> String {
    format!(
        "[extract.reader]\nmodel = \"{}\"\ndevice = \"cpu\"\nrefuse_at = {refuse_at}\ncache_dir = \"{}\"\n\
         [[variants]]\nname = \"bm25-compact-reader\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 700\nselector = \"reader\"\n\
         [[variants]]\nname = \"bm25-rank-reader\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 700\nselector = \"reader\"\n",
        model.display(),
        cache.display()
    )
}

/// The source lines `s..=e` of `path` in the bundled repository `repo` at `commit`.
fn git_lines(repo: &str, commit: &str, path: &str, s: u32, e: u32) -> String {
    let show = std::process::Command::new("git")
        .args(["show", &format!("{commit}:{path}")])
        .current_dir(root().join("datasets/repos").join(repo))
        .output()
        .unwrap();
    let text = String::from_utf8(show.stdout).unwrap();
    let lines = ri_batch::text::chunker::split_lines(&text);
    lines[s as usize - 1..e as usize].join("\n")
}

#[test]
fn every_reply_keeps_the_contract_and_blocks_render_their_source_lines() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("readings");
    // Refusing only at P(NONE) = 1: every reading with evidence answers with its IDs.
    let plan = bundled_plan(t.path(), &reader_variant(&tiny_model(), &cache, 1.0));
    run_quiet(&plan);
    let store = Store::new(&plan.output_dir);
    let extracts: Vec<ExtractRow> = store.read().unwrap();
    let packs: Vec<PackRow> = store.read().unwrap();
    let files: Vec<FileRow> = store.read().unwrap();
    let commit: HashMap<&str, &str> = files
        .iter()
        .map(|f| (f.repo.as_str(), f.commit.as_str()))
        .collect();
    assert_eq!(extracts.len(), 2 * 140);
    let (mut accepted, mut refused, mut blocks_of_many) = (0, 0, 0);
    for e in &extracts {
        assert_eq!(e.selector, "reader");
        // Every reading keeps its refusal probability (an empty pack is not read).
        if let Some(p) = e.refusal_prob {
            assert!((0.0..1.0).contains(&p), "{p}");
        }
        // And its first ID's distribution over the labelled set.
        if let Some(ps) = &e.id_probs {
            assert!(!ps.is_empty() && ps.iter().all(|p| (0.0..=1.0).contains(p)));
            assert!((ps.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{ps:?}");
        }
        // Greedy decoding under the grammar: a refusal or IDs from the labelled set, never a
        // contract violation.
        match e.reason {
            Reason::Ok => {
                accepted += 1;
                assert!(e.refusal_prob.is_some());
                assert!(!e.accepted_ids.is_empty() && e.accepted_ids.len() <= 8);
            }
            Reason::Refused => {
                refused += 1;
                assert_eq!(e.raw_reply, "NONE");
                assert!(e.refusal_prob.is_none(), "only empty packs refuse here");
            }
            ref other => panic!("{} {}: {other:?}", e.variant, e.question_id),
        }
        // A refusal is a correct or a false refusal; an accepted answer never is.
        let refusal = matches!(e.outcome, Outcome::CorrectRefusal | Outcome::FalseRefusal);
        assert_eq!(
            e.reason == Reason::Refused,
            refusal,
            "{} {}",
            e.variant,
            e.question_id
        );
        // Each accepted block is a run of the pack's rows of one file, rendered from its source
        // lines at the scanned commit.
        let mine: Vec<&PackRow> = packs
            .iter()
            .filter(|p| p.variant == e.variant && p.question_id == e.question_id)
            .collect();
        let mut rest = e.rendered.as_str();
        while !rest.is_empty() {
            let (head, after) = rest.split_once('\n').unwrap();
            let (path, lines) = head.rsplit_once(':').unwrap();
            let (s, end) = lines.split_once('-').unwrap();
            let (s, end): (u32, u32) = (s.parse().unwrap(), end.parse().unwrap());
            let rows: Vec<&&PackRow> = mine.iter().filter(|p| p.path == path).collect();
            assert!(
                rows.iter().any(|p| p.start_line == s) && rows.iter().any(|p| p.end_line == end),
                "{} {}: block {head} is not made of packed rows",
                e.variant,
                e.question_id
            );
            if rows
                .iter()
                .filter(|p| s <= p.start_line && p.end_line <= end)
                .count()
                > 1
            {
                blocks_of_many += 1;
            }
            let repo = &rows[0].repo;
            let body = git_lines(repo, commit[repo.as_str()], path, s, end);
            assert!(after.starts_with(&format!("{body}\n")), "{head}");
            rest = &after[body.len() + 1..];
        }
    }
    assert!(accepted > 200, "{accepted} accepted, {refused} refused");
    assert!(
        blocks_of_many > 0,
        "the compact packs' adjacent units join into blocks"
    );
    // Every reading is cached with the prompt the model saw.
    let cached = walk(&cache).len();
    assert!(cached > 0 && cached <= accepted, "{cached} cached");

    // Refusing at any P(NONE): the same readings, from the cache, all refused.
    let t2 = tempfile::tempdir().unwrap();
    let plan = bundled_plan(t2.path(), &reader_variant(&tiny_model(), &cache, 0.0));
    run_quiet(&plan);
    let again: Vec<ExtractRow> = Store::new(&plan.output_dir).read().unwrap();
    assert_eq!(walk(&cache).len(), cached, "nothing new was read");
    let prob = |rows: &[ExtractRow]| -> HashMap<(String, String), Option<f64>> {
        rows.iter()
            .map(|e| ((e.variant.clone(), e.question_id.clone()), e.refusal_prob))
            .collect()
    };
    assert_eq!(prob(&again), prob(&extracts));
    let questions: Vec<ri_batch::artifact::schema::QuestionRow> =
        Store::new(&plan.output_dir).read().unwrap();
    let answerable: HashMap<&str, bool> = questions
        .iter()
        .map(|q| (q.question_id.as_str(), q.answerable))
        .collect();
    for e in &again {
        assert_eq!(
            (&e.reason, e.raw_reply.as_str()),
            (&Reason::Refused, "NONE")
        );
        let want = if answerable[e.question_id.as_str()] {
            Outcome::FalseRefusal
        } else {
            Outcome::CorrectRefusal
        };
        assert_eq!(e.outcome, want, "{}", e.question_id);
    }
}

/// Evidence from the bundled `ms` repository's readme (real text, real line numbers).
fn ms_evidence() -> Vec<Evidence> {
    ms_spans(&[(1, 8), (20, 31), (40, 47)])
}

/// The bundled `ms` readme's lines `spans` as evidence E1..En.
fn ms_spans(spans: &[(usize, usize)]) -> Vec<Evidence> {
    bundled_repos();
    let text = std::fs::read_to_string(root().join("datasets/repos/ms/readme.md")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    spans
        .iter()
        .enumerate()
        .map(|(i, &(s, e))| {
            let e = e.min(lines.len());
            Evidence {
                label: format!("E{}", i + 1),
                repo: "ms".into(),
                path: "readme.md".into(),
                start_line: s as u32,
                end_line: e as u32,
                text: lines[s - 1..e].join("\n"),
                source_hash: String::new(),
                commit: None,
            }
        })
        .collect()
}

#[test]
fn a_cached_reading_asks_nothing_and_a_bad_model_is_an_error_naming_its_file() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("readings");
    let jobs = vec![
        (
            "How do I convert 2 days to milliseconds?".to_string(),
            ms_evidence(),
        ),
        ("What is the colour of the logo?".to_string(), ms_evidence()),
    ];
    let spec = ReaderSpec {
        path: tiny_model(),
        sha256: None,
        device: ri_batch::models::Device::Cpu,
    };
    // As the extract stage makes it: a count that scopes add their readings to.
    let asked = indicatif::ProgressBar::hidden();
    asked.set_length(0);
    let first = reader::read_all(&spec, &jobs, 8, Some(&cache), 2, Some(&asked)).unwrap();
    assert_eq!((asked.position(), asked.length()), (2, Some(2)));
    assert_eq!(first.len(), 2);
    for r in &first {
        assert!((0.0..=1.0).contains(&r.refusal_prob));
        assert!(!r.ids.is_empty() && r.ids.len() <= 3, "{:?}", r.ids);
        assert!(r.prompt_tokens > 100);
    }
    // The same model without a cache reads the same (greedy, deterministic).
    assert_eq!(
        reader::read_all(&spec, &jobs, 8, None, 1, None).unwrap(),
        first
    );
    // A model that is not there, known by the same contents: everything comes from the cache.
    let fingerprint = ri_batch::artifact::sha256_file(&tiny_model()).unwrap();
    let gone = ReaderSpec {
        path: t.path().join("moved-away.gguf"),
        sha256: Some(fingerprint.clone()),
        device: ri_batch::models::Device::Cpu,
    };
    assert_eq!(
        reader::read_all(&gone, &jobs, 8, Some(&cache), 2, Some(&asked)).unwrap(),
        first
    );
    assert_eq!(
        (asked.position(), asked.length()),
        (2, Some(2)),
        "none asked"
    );
    // Another question is not cached: then the model is needed, and its absence is named.
    let more = vec![("Another question?".to_string(), ms_evidence())];
    let e = reader::read_all(&gone, &more, 8, Some(&cache), 1, None).unwrap_err();
    assert!(e.to_string().contains("moved-away.gguf"), "{e}");
    // A file that is not a GGUF model.
    let bad = t.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF but not really").unwrap();
    let spec = ReaderSpec {
        path: bad.clone(),
        sha256: None,
        device: ri_batch::models::Device::Cpu,
    };
    let e = reader::read_all(&spec, &more, 8, None, 1, None).unwrap_err();
    assert!(e.to_string().contains("bad.gguf"), "{e}");
}

/// The fetched 0.5B model (scripts/test fetches it).
fn qwen05() -> PathBuf {
    let p = root().join("models/qwen2.5-coder-0.5b-instruct/model.gguf");
    assert!(
        p.exists(),
        "{} is missing: run `ri-batch model fetch qwen2.5-coder-0.5b-instruct` (scripts/test does)",
        p.display()
    );
    p
}

#[test]
fn the_qwen_tokenizer_from_the_gguf_matches_llama_cpp_ids() {
    let file = ri_batch::models::gguf::GgufFile::open(&qwen05()).unwrap();
    file.check_architecture().unwrap();
    file.check_chat_template().unwrap();
    let tok = file.tokenizer().unwrap();
    let data: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/data/qwen_tokens.json")).unwrap(),
    )
    .unwrap();
    let cases = data["cases"].as_array().unwrap();
    assert!(cases.len() >= 7);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, false).unwrap();
        assert_eq!(got.get_ids(), &want[..], "{}", &text[..text.len().min(80)]);
        // And back: byte-level BPE loses nothing.
        assert_eq!(tok.decode(&want, false).unwrap(), text);
    }
}

#[test]
fn the_real_05b_model_reads_within_the_contract() {
    let spec = ReaderSpec {
        path: qwen05(),
        sha256: None,
        device: ri_batch::models::Device::Cpu,
    };
    let jobs = vec![(
        "How do I convert 2 days to milliseconds with ms?".to_string(),
        ms_evidence(),
    )];
    let r = reader::read_all(&spec, &jobs, 8, None, 1, None).unwrap();
    let r = &r[0];
    assert!(r.refusal_prob.is_finite() && (0.0..=1.0).contains(&r.refusal_prob));
    assert!(!r.ids.is_empty());
    for id in &r.ids {
        assert!(["E1", "E2", "E3"].contains(&id.as_str()), "{id}");
    }
    let prompt = reader::chat_prompt(&jobs[0].0, &jobs[0].1);
    assert!(
        prompt.starts_with("<|im_start|>system\n") && prompt.ends_with("<|im_start|>assistant\n")
    );
    let file = ri_batch::models::gguf::GgufFile::open(&qwen05()).unwrap();
    let n = file
        .tokenizer()
        .unwrap()
        .encode(prompt.as_str(), false)
        .unwrap()
        .len();
    assert_eq!(r.prompt_tokens, n);
}

#[test]
fn the_real_05b_models_first_id_distribution_agrees_with_its_greedy_choice() {
    let spec = ReaderSpec {
        path: qwen05(),
        sha256: None,
        device: ri_batch::models::Device::Cpu,
    };
    // Twelve blocks of the readme: labels E10..E12 take two digit tokens.
    let spans: Vec<(usize, usize)> = (0..12).map(|i| (1 + 4 * i, 4 + 4 * i)).collect();
    let evidence = ms_spans(&spans);
    assert_eq!(evidence.len(), 12);
    let jobs = vec![(
        "How do I turn 60000 milliseconds into a long spelled-out string?".to_string(),
        evidence,
    )];
    let r = &reader::read_all(&spec, &jobs, 8, None, 1, None).unwrap()[0];
    assert_eq!(r.id_probs.len(), 12);
    assert!((r.id_probs.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    // Greedy decoding takes the likeliest first digit, then the likeliest way on from it: the
    // greedy first ID's digit holds the most first-ID probability, and the ID is the likeliest
    // of those starting with that digit.
    let first: usize = r.ids[0][1..].parse().unwrap();
    let digit = |k: usize| k.to_string().as_bytes()[0];
    let mass = |d: u8| -> f64 {
        (1..=12)
            .filter(|&k| digit(k) == d)
            .map(|k| r.id_probs[k - 1])
            .sum()
    };
    for d in b'1'..=b'9' {
        assert!(
            mass(digit(first)) >= mass(d) - 1e-12,
            "{:?} {:?}",
            r.ids,
            r.id_probs
        );
    }
    // (A two-digit greedy ID is weighed against the other two-digit ones: greedy decoding
    // weighs ending the ID and going on to another apart, the distribution adds them.)
    let siblings = (1..=12).filter(|&k| digit(k) == digit(first) && (first < 10 || k >= 10));
    for k in siblings {
        assert!(
            r.id_probs[first - 1] >= r.id_probs[k - 1] - 1e-12,
            "{:?} {:?}",
            r.ids,
            r.id_probs
        );
    }
    // The likeliest selection is the label of the most first-ID probability.
    let one = r.selection(ri_batch::config::ReaderSelection::Likeliest, 0.0, 8);
    let top = r.id_probs.iter().cloned().fold(0.0, f64::max);
    assert_eq!(one.len(), 1);
    assert_eq!(r.id_probs[one[0][1..].parse::<usize>().unwrap() - 1], top);
    // A selection by mass starts with the greedy list and adds the likeliest others.
    let wide = r.selection(ri_batch::config::ReaderSelection::Greedy, 0.99, 8);
    assert_eq!(wide[..r.ids.len()], r.ids[..]);
    let held: f64 = wide
        .iter()
        .map(|l| r.id_probs[l[1..].parse::<usize>().unwrap() - 1])
        .sum();
    assert!(held >= 0.99 || wide.len() == 8, "{wide:?} {:?}", r.id_probs);
}
