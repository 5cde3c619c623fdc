//! Embedding models in-process with candle: a small [`Backend`] trait with one file per
//! architecture (`bert` for MiniLM / BGE / E5-style models, `nomic` for nomic-embed-text), the
//! tokenizer with ri-batch's own padding and truncation, task prefixes, and length-sorted batching
//! to a token budget.

mod bert;
mod bert_fused;
pub mod fetch;
pub mod gguf;
pub mod layers;
mod nomic;
mod nomic_fused;
pub mod qwen2;
pub mod threads;

use threads::{cpu_workers, run_workers};

use crate::artifact::sha256_hex;
use crate::error::{because, Error, IoContext, Result};
use candle_core::{DType, Tensor};
use std::path::Path;
use std::sync::Mutex;

/// Where the model runs; `[embed] device` as `auto`, `cpu` or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Device {
    /// A GPU when this build and machine have one, else the CPU.
    Auto,
    Cpu,
    Cuda(usize),
}

impl Device {
    /// Parses `auto`, `cpu` or `cuda:N` (`cuda` means `cuda:0`).
    pub fn parse(s: &str) -> std::result::Result<Device, String> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device `{s}`; use auto, cpu or cuda:N")),
        }
    }

    /// The candle device; asking for CUDA where there is none is an error.
    /// Whether models run on a GPU here: a CUDA device named (usable or not: a named device that
    /// fails fails the load), or `auto` where a GPU opens. The default precision follows it, for
    /// the load and for the embed stage's fingerprint alike ([`precision_for`]).
    pub fn is_gpu(self) -> bool {
        match self {
            Device::Cuda(_) => true,
            Device::Auto => self.open().is_ok_and(|d| !d.is_cpu()),
            Device::Cpu => false,
        }
    }

    pub fn open(self) -> std::result::Result<candle_core::Device, String> {
        match self {
            Device::Cpu => Ok(candle_core::Device::Cpu),
            Device::Auto => {
                if candle_core::utils::cuda_is_available() {
                    candle_core::Device::new_cuda(0).or(Ok(candle_core::Device::Cpu))
                } else {
                    Ok(candle_core::Device::Cpu)
                }
            }
            Device::Cuda(n) => {
                if !candle_core::utils::cuda_is_available() {
                    return Err(format!(
                        "cuda:{n} was asked for, but this build has no CUDA support (rebuild with `--features cuda`)"
                    ));
                }
                // candle appends a backtrace to its errors: the first line says what failed.
                candle_core::Device::new_cuda(n).map_err(|e| {
                    let e = e.to_string();
                    format!("cuda:{n} is not usable: {}", e.lines().next().unwrap_or(""))
                })
            }
        }
    }
}

/// Whether a text is a document (chunk) or a query (question): models may prefix them differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Document,
    Query,
}

/// One architecture's forward pass: token ids (padded, with a 1/0 mask) → pooled vectors.
pub trait Backend: Send + Sync {
    /// Hidden states (batch, seq, hidden) for `ids` and `mask`, both (batch, seq) u32.
    fn hidden(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor>;
    /// Width of the hidden states.
    fn hidden_size(&self) -> usize;
    /// Longest input the model accepts, in tokens.
    fn max_positions(&self) -> usize;
    /// The (document, query) prefixes of this model family.
    fn prefixes(&self) -> (&'static str, &'static str) {
        ("", "")
    }
    /// Whether Matryoshka truncation is meaningful for this model.
    fn matryoshka(&self) -> bool {
        false
    }
}

/// A loaded embedding model with its tokenizer.
pub struct Embedder {
    backend: Box<dyn Backend>,
    tokenizer: tokenizers::Tokenizer,
    device: candle_core::Device,
    max_length: usize,
    dims: usize,
    id: String,
    workers: usize,
    /// The allocator's model policy, while this model lives (dropped last).
    _memory: crate::memory::ModelPhase,
}

/// Reads a JSON file of the model directory.
fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).at(path)?;
    serde_json::from_str(&text).map_err(|e| Error::model(path, because("invalid JSON", e)))
}

/// A short identity of a model directory: its name and a hash of its config, tokenizer and
/// weights (size, first and last MiB), so that a changed model never reuses cached vectors.
pub fn model_id(dir: &Path) -> Result<String> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    let mut h = Vec::new();
    for f in ["config.json", "tokenizer.json"] {
        let p = dir.join(f);
        h.extend(std::fs::read(&p).at(&p)?);
    }
    // The weights' first and last MiB and their length: read by seeking, not the whole file.
    use std::io::{Read, Seek, SeekFrom};
    let w = dir.join("model.safetensors");
    let mut file = std::fs::File::open(&w).at(&w)?;
    let len = file.metadata().at(&w)?.len() as usize;
    let mib = 1 << 20;
    let mut head = vec![0u8; len.min(mib)];
    file.read_exact(&mut head).at(&w)?;
    let tail_start = len.saturating_sub(mib);
    let mut tail = vec![0u8; len - tail_start];
    file.seek(SeekFrom::Start(tail_start as u64)).at(&w)?;
    file.read_exact(&mut tail).at(&w)?;
    h.extend(head);
    h.extend(tail);
    h.extend(len.to_le_bytes());
    Ok(format!("{name}@{}", &sha256_hex(&h)[..12]))
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for Device {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Device, String> {
        Device::parse(&s)
    }
}

/// The floating-point precision the model's weights and activations run in; `[embed] dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Precision {
    F32,
    F16,
    Bf16,
    /// Int8 linear layers on the CPU (`bert_fused.rs`, `nomic_fused.rs`, `int8.rs`).
    Int8,
}

impl From<Precision> for String {
    fn from(p: Precision) -> String {
        p.name().to_string()
    }
}

impl TryFrom<String> for Precision {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Precision, String> {
        Precision::parse(&s)
    }
}

impl Precision {
    /// Parses `f32`, `f16`, `bf16` or `int8`.
    pub fn parse(s: &str) -> std::result::Result<Precision, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            "bf16" => Ok(Precision::Bf16),
            "int8" => Ok(Precision::Int8),
            _ => Err(format!("`{s}` is not a precision: f32, f16, bf16 or int8")),
        }
    }

    /// The dtype of the model's tensors (an int8 model's are f32 outside its linear layers).
    fn dtype(self) -> DType {
        match self {
            Precision::F32 | Precision::Int8 => DType::F32,
            Precision::F16 => DType::F16,
            Precision::Bf16 => DType::BF16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        }
    }
}

/// Whether a model directory's `config.json` describes a NomicBERT model.
fn is_nomic(config: &serde_json::Value) -> bool {
    config.get("model_type").and_then(|v| v.as_str()) == Some("nomic_bert")
        || config.get("n_embd").is_some()
}

/// The precision a model runs in when `[embed] dtype` is not given: bf16 for NomicBERT on a GPU
/// (half precision, as GPU embedding servers run), else f32. candle's BERT cannot run in half
/// precision (see `bert.rs`).
pub fn default_precision(config: &serde_json::Value, gpu: bool) -> Precision {
    if gpu && is_nomic(config) {
        Precision::Bf16
    } else {
        Precision::F32
    }
}

/// The precision the model in `dir` runs in on `device`: `asked`, else its default there
/// ([`default_precision`]; f32 when its config cannot be read). The one place that decides it.
pub fn precision_for(dir: &Path, device: Device, asked: Option<Precision>) -> Precision {
    asked.unwrap_or_else(|| {
        read_json(&dir.join("config.json"))
            .map(|c| default_precision(&c, device.is_gpu()))
            .unwrap_or(Precision::F32)
    })
}

impl Embedder {
    /// Loads a Hugging Face model directory (config.json, tokenizer.json, model.safetensors) and
    /// picks the architecture from its config, in the device's default precision.
    pub fn load(
        dir: &Path,
        device: Device,
        max_length: usize,
        dims: Option<usize>,
    ) -> Result<Embedder> {
        Embedder::load_with(dir, device, max_length, dims, None)
    }

    /// [`Embedder::load`] in `precision` (`None`: [`default_precision`]). Vectors of another
    /// precision than f32 carry it in the model's id (`…@bf16`), so caches and fingerprints keep
    /// them apart.
    pub fn load_with(
        dir: &Path,
        device: Device,
        max_length: usize,
        dims: Option<usize>,
        precision: Option<Precision>,
    ) -> Result<Embedder> {
        if !dir.is_dir() {
            return Err(Error::model(
                dir,
                "no such model directory; fetch one with `ri-batch model fetch all-minilm-l6-v2`",
            ));
        }
        let precision = precision_for(dir, device, precision);
        let device = device.open().map_err(|m| Error::model(dir, m))?;
        let memory = crate::memory::ModelPhase::enter();
        let workers = if device.is_cpu() { cpu_workers() } else { 1 };
        if device.is_cpu() {
            // Every layer frees and allocates its activations again: handing them back to the
            // kernel made about 5% of the CPU forward's time zeroing fresh pages.
            threads::keep_freed_memory();
        }
        let config = read_json(&dir.join("config.json"))?;
        let dtype = precision.dtype();
        let weights = dir.join("model.safetensors");
        if !weights.is_file() {
            return Err(Error::model(dir, "model.safetensors is missing"));
        }
        // The CPU's f32 and int8 run ri-batch's own forward; GPUs and half precision candle's.
        let own = device.is_cpu() && matches!(precision, Precision::F32 | Precision::Int8);
        let int8 = precision == Precision::Int8;
        if int8 && !own {
            return Err(Error::model(
                dir,
                "dtype int8 runs on the CPU only; use f32, or bf16 on a GPU",
            ));
        }
        let backend: Box<dyn Backend> = match (is_nomic(&config), own) {
            (true, true) => Box::new(nomic_fused::FusedNomic::load(dir, &config, &weights, int8)?),
            (true, false) => Box::new(nomic::Nomic::load(dir, &config, &weights, &device, dtype)?),
            (false, true) => Box::new(bert_fused::FusedBert::load(dir, &config, &weights, int8)?),
            (false, false) => Box::new(bert::Bert::load(dir, &config, &weights, &device, dtype)?),
        };
        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer =
            tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| Error::model(&tok_path, e))?;
        // The packaged tokenizers carry fixed padding and truncation (MiniLM: 128); batching and
        // truncation are ri-batch's job.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::model(&tok_path, e))?;
        // sentence-transformers' own limit, when the directory says it.
        let st_max = read_json(&dir.join("sentence_bert_config.json"))
            .ok()
            .and_then(|v| v.get("max_seq_length").and_then(|m| m.as_u64()))
            .map(|m| m as usize);
        let max_length = [Some(max_length), st_max, Some(backend.max_positions())]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(max_length);
        let hidden = backend.hidden_size();
        let dims = match dims {
            None => hidden,
            Some(d) if d == hidden => d,
            Some(d) if backend.matryoshka() && d > 0 && d < hidden => d,
            Some(d) => {
                return Err(Error::model(
                    dir,
                    format!("dims = {d} is not possible: this model gives {hidden} and supports no Matryoshka truncation"),
                ))
            }
        };
        Ok(Embedder {
            backend,
            tokenizer,
            device,
            max_length,
            dims,
            id: match precision {
                Precision::F32 => model_id(dir)?,
                p => format!("{}@{}", model_id(dir)?, p.name()),
            },
            workers,
            _memory: memory,
        })
    }

    /// The model's identity (name and content hash).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Width of the vectors this embedder returns.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Longest input, in tokens, after which text is truncated.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The text actually embedded: the model family's task prefix, then `text`.
    pub fn prefixed(&self, text: &str, kind: TextKind) -> String {
        let (doc, query) = self.backend.prefixes();
        match kind {
            TextKind::Document => format!("{doc}{text}"),
            TextKind::Query => format!("{query}{text}"),
        }
    }

    /// Token ids of already-prefixed texts, with special tokens, truncated to `max_length`.
    pub fn tokenize(&self, texts: &[String]) -> Result<Vec<Vec<u32>>> {
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::Invalid(format!("tokenizing: {e}")))?;
        Ok(enc
            .into_iter()
            .map(|e| {
                let mut ids = e.get_ids().to_vec();
                if ids.len() > self.max_length {
                    // Keep the final [SEP]-like token, as truncation in the tokenizer would.
                    let last = *ids.last().expect("non-empty");
                    ids.truncate(self.max_length);
                    if let Some(l) = ids.last_mut() {
                        *l = last;
                    }
                }
                ids
            })
            .collect())
    }

    /// Embeds one batch of token id lists (padded here to the longest): L2-normalised vectors.
    pub fn embed_ids(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let err = |e: candle_core::Error| Error::Invalid(format!("model {}: {e}", self.id));
        let n = batch.len();
        let len = batch.iter().map(|b| b.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; n * len];
        let mut mask = vec![0u32; n * len];
        for (i, b) in batch.iter().enumerate() {
            ids[i * len..i * len + b.len()].copy_from_slice(b);
            mask[i * len..i * len + b.len()].fill(1);
        }
        let ids = Tensor::from_vec(ids, (n, len), &self.device).map_err(err)?;
        let mask = Tensor::from_vec(mask, (n, len), &self.device).map_err(err)?;
        // Pooling and normalisation in f32 whatever the model's precision (a no-op at f32).
        let hidden = self
            .backend
            .hidden(&ids, &mask)
            .and_then(|h| h.to_dtype(DType::F32))
            .map_err(err)?;
        let pooled = mean_pool(&hidden, &mask).map_err(err)?;
        let pooled = if self.dims < self.backend.hidden_size() {
            // Matryoshka: layer norm without affine parameters, then truncate.
            let mean = pooled.mean_keepdim(1).map_err(err)?;
            let centered = pooled.broadcast_sub(&mean).map_err(err)?;
            let var = centered
                .sqr()
                .and_then(|v| v.mean_keepdim(1))
                .map_err(err)?;
            let normed = centered
                .broadcast_div(&(var + 1e-5).and_then(|v| v.sqrt()).map_err(err)?)
                .map_err(err)?;
            normed.narrow(1, 0, self.dims).map_err(err)?
        } else {
            pooled
        };
        let norm = pooled
            .sqr()
            .and_then(|s| s.sum_keepdim(1))
            .and_then(|s| s.sqrt())
            .and_then(|s| s.clamp(1e-12, f64::MAX))
            .map_err(err)?;
        let out = pooled.broadcast_div(&norm).map_err(err)?;
        out.to_dtype(DType::F32)
            .and_then(|t| t.to_vec2::<f32>())
            .map_err(err)
    }

    /// Embeds texts of one kind: sorted by token length and batched so that each batch's padded
    /// size stays within `batch_tokens`; batches go to the workers longest first. `done` is told
    /// (texts, tokens) after each batch.
    pub fn embed(
        &self,
        texts: &[String],
        kind: TextKind,
        batch_tokens: usize,
        done: impl FnMut(usize, usize) + Send,
    ) -> Result<Vec<Vec<f32>>> {
        let prefixed: Vec<String> = texts.iter().map(|t| self.prefixed(t, kind)).collect();
        let ids = self.tokenize(&prefixed)?;
        let batches = length_batches(&ids, batch_tokens);
        let out: Mutex<Vec<Option<Vec<f32>>>> = Mutex::new(vec![None; texts.len()]);
        let done = Mutex::new(done);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || -> Result<()> {
            loop {
                let b = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(batch) = batches.get(b) else {
                    return Ok(());
                };
                let group: Vec<Vec<u32>> = batch.iter().map(|&i| ids[i].clone()).collect();
                let vectors = self.embed_ids(&group)?;
                let tokens: usize = group.iter().map(|g| g.len()).sum();
                let mut o = out.lock().expect("no poisoned lock");
                for (&i, v) in batch.iter().zip(vectors) {
                    o[i] = Some(v);
                }
                drop(o);
                (done.lock().expect("no poisoned lock"))(batch.len(), tokens);
            }
        };
        let workers = self.workers.min(batches.len()).max(1);
        run_workers(workers, &format!("embedding model {}", self.id), work)?;
        Ok(out
            .into_inner()
            .expect("no poisoned lock")
            .into_iter()
            .map(|v| v.expect("every text is in one batch"))
            .collect())
    }
}

/// Mean of the hidden states over real (mask = 1) tokens.
fn mean_pool(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let m = mask.to_dtype(hidden.dtype())?.unsqueeze(2)?;
    let summed = hidden.broadcast_mul(&m)?.sum(1)?;
    let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?;
    summed.broadcast_div(&counts)
}

/// Groups text indices into batches, longest first, so that (batch size × longest length) stays
/// within `budget` tokens (a single longer text gets a batch of its own).
pub fn length_batches(ids: &[Vec<u32>], budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by(|&a, &b| ids[b].len().cmp(&ids[a].len()).then(a.cmp(&b)));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut longest = 0;
    for i in order {
        let len = ids[i].len().max(1);
        let l = longest.max(len);
        if !cur.is_empty() && l * (cur.len() + 1) > budget {
            batches.push(std::mem::take(&mut cur));
            longest = 0;
        }
        longest = longest.max(len);
        cur.push(i);
    }
    if !cur.is_empty() {
        batches.push(cur);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_cuda_without_support_is_a_clear_error() {
        assert_eq!(Device::parse("cpu"), Ok(Device::Cpu));
        assert_eq!(Device::parse("cuda:1"), Ok(Device::Cuda(1)));
        assert!(Device::parse("gpu")
            .unwrap_err()
            .contains("auto, cpu or cuda:N"));
        if !candle_core::utils::cuda_is_available() {
            assert!(Device::Cuda(0)
                .open()
                .unwrap_err()
                .contains("no CUDA support"));
            assert!(Device::Auto.open().unwrap().is_cpu());
        }
    }

    #[test]
    fn batches_are_length_sorted_and_within_budget() {
        let ids: Vec<Vec<u32>> = [5, 50, 7, 49, 3, 200].iter().map(|&n| vec![1; n]).collect();
        let b = length_batches(&ids, 100);
        assert_eq!(b[0], vec![5]); // 200 tokens: alone
        assert_eq!(b[1], vec![1, 3]); // 50 and 49 padded to 50: 100
        assert_eq!(b[2], vec![2, 0, 4]);
        for batch in &b[1..] {
            let longest = batch.iter().map(|&i| ids[i].len()).max().unwrap();
            assert!(longest * batch.len() <= 100);
        }
        let mut all: Vec<usize> = b.concat();
        all.sort();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
    }
}
