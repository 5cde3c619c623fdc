//! GGUF reader models (Qwen2 family): the file's metadata checked, the tokenizer built from the
//! file's own vocabulary, merges and pre-tokenizer name, and the weights loaded into
//! `qwen2.rs`'s model. A model is named by a fetched name (`qwen2.5-coder-1.5b-instruct`), a
//! local `.gguf` path, or `ollama:<name:tag>` (resolved in an Ollama store's manifests and blobs).

use super::qwen2::Qwen2;
use crate::error::{because, Error, IoContext, Result};
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::k_quants::QK_K;
use candle_core::quantized::{GgmlDType, QTensor};
use std::path::{Path, PathBuf};
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Qwen2's pre-tokenizer pattern (`tokenizer.ggml.pre = "qwen2"`), as in its `tokenizer.json`.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GGUF token types that are special (control) or user-defined added tokens.
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// A GGUF file's metadata, read once.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: Content,
}

impl GgufFile {
    /// Reads the header and metadata of `path`; anything but a readable GGUF is an error naming it.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let mut f = std::io::BufReader::new(std::fs::File::open(path).at(path)?);
        let content = Content::read(&mut f)
            .map_err(|e| Error::model(path, because("not a readable GGUF file", e)))?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            content,
        })
    }

    fn get(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| Error::model(&self.path, format!("GGUF metadata lacks `{key}`")))
    }

    fn string(&self, key: &str) -> Result<String> {
        self.get(key)?
            .to_string()
            .cloned()
            .map_err(|e| Error::model(&self.path, format!("GGUF `{key}`: {e}")))
    }

    fn strings(&self, key: &str) -> Result<Vec<String>> {
        let bad = |e: String| Error::model(&self.path, format!("GGUF `{key}`: {e}"));
        let vs = self.get(key)?.to_vec().map_err(|e| bad(e.to_string()))?;
        vs.iter()
            .map(|v| v.to_string().cloned().map_err(|e| bad(e.to_string())))
            .collect()
    }

    /// The model's architecture; only `qwen2` is read.
    pub fn check_architecture(&self) -> Result<()> {
        let arch = self.string("general.architecture")?;
        if arch != "qwen2" {
            return Err(Error::model(
                &self.path,
                format!(
                    "architecture `{arch}` is not supported: the reader runs qwen2 GGUF models"
                ),
            ));
        }
        Ok(())
    }

    /// The id of `token` in the vocabulary.
    pub fn token_id(&self, tokens: &[String], token: &str) -> Result<u32> {
        tokens
            .iter()
            .position(|t| t == token)
            .map(|i| i as u32)
            .ok_or_else(|| {
                Error::model(
                    &self.path,
                    format!("the vocabulary lacks the token `{token}`"),
                )
            })
    }

    /// The chat template must be ChatML (`<|im_start|>role\n…<|im_end|>`), the one the reader
    /// writes its prompts in.
    pub fn check_chat_template(&self) -> Result<()> {
        let t = self.string("tokenizer.chat_template")?;
        if !(t.contains("<|im_start|>") && t.contains("<|im_end|>")) {
            return Err(Error::model(
                &self.path,
                "the chat template is not ChatML (<|im_start|> … <|im_end|>)",
            ));
        }
        Ok(())
    }

    /// The vocabulary, in id order.
    pub fn tokens(&self) -> Result<Vec<String>> {
        self.strings("tokenizer.ggml.tokens")
    }

    /// The tokenizer the file describes: byte-level BPE over its tokens and merges, Qwen2's
    /// pre-tokenizer, NFC, and its control and user-defined tokens as special tokens.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        let model = self.string("tokenizer.ggml.model")?;
        let pre = self.string("tokenizer.ggml.pre")?;
        if model != "gpt2" || pre != "qwen2" {
            return Err(Error::model(
                &self.path,
                format!("tokenizer `{model}` with pre-tokenizer `{pre}` is not supported (gpt2 with qwen2 is)"),
            ));
        }
        let tokens = self.tokens()?;
        let merges = self.strings("tokenizer.ggml.merges")?;
        let types: Vec<i32> = match self.content.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|e| Error::model(&self.path, because("token types", e)))?
                .iter()
                .map(|t| t.to_i32().unwrap_or(1))
                .collect(),
            None => vec![1; tokens.len()],
        };
        let bad = |e: String| Error::model(&self.path, because("cannot build the tokenizer", e));
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let merges: Vec<(String, String)> = merges
            .iter()
            .filter_map(|m| m.split_once(' '))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(false)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        let split = Split::new(
            SplitPattern::Regex(QWEN2_SPLIT.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| bad(e.to_string()))?;
        let mut tok = Tokenizer::new(bpe);
        tok.with_normalizer(Some(NFC))
            .map_err(|e| bad(e.to_string()))?;
        tok.with_pre_tokenizer(Some(Sequence::new(vec![
            PreTokenizerWrapper::Split(split),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
        ])));
        tok.with_decoder(Some(ByteLevel::default()));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, &t)| t == CONTROL || t == USER_DEFINED)
            .map(|(s, _)| AddedToken::from(s.clone(), true))
            .collect();
        tok.add_special_tokens(special)
            .map_err(|e| bad(e.to_string()))?;
        Ok(tok)
    }
}

/// Where an Ollama store keeps its models: `$OLLAMA_MODELS`, else `~/.ollama/models`.
fn ollama_root() -> Option<PathBuf> {
    std::env::var_os("OLLAMA_MODELS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".ollama/models")))
}

/// The GGUF blob of `ollama:<name[:tag]>` in the store under `root`: the manifest
/// `manifests/registry.ollama.ai/library/<name>/<tag>` (or `<host>/<namespace>/<name>/<tag>` when
/// the name has slashes) names the layer of media type `application/vnd.ollama.image.model`,
/// stored as `blobs/sha256-<hex>`.
pub fn ollama_blob(root: &Path, spec: &str) -> Result<PathBuf> {
    let (name, tag) = spec.rsplit_once(':').unwrap_or((spec, "latest"));
    let parts: Vec<&str> = name.split('/').collect();
    let rel = match parts.as_slice() {
        [n] => format!("registry.ollama.ai/library/{n}/{tag}"),
        [ns, n] => format!("registry.ollama.ai/{ns}/{n}/{tag}"),
        _ => format!("{name}/{tag}"),
    };
    let manifest = root.join("manifests").join(rel);
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| Error::model(&manifest, format!("no Ollama manifest for `{spec}` ({e})")))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::model(&manifest, because("not a JSON manifest", e)))?;
    let digest = v["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["mediaType"] == "application/vnd.ollama.image.model")
        .and_then(|l| l["digest"].as_str())
        .ok_or_else(|| Error::model(&manifest, "the manifest names no model layer"))?;
    let blob = root.join("blobs").join(digest.replace(':', "-"));
    if !blob.is_file() {
        return Err(Error::model(
            &blob,
            format!("the model blob of `{spec}` is missing"),
        ));
    }
    Ok(blob)
}

/// The GGUF file a reader model spec names, and the SHA-256 that identifies its contents when it
/// is known without reading the file (a pinned fetched model, an Ollama blob's digest).
pub fn resolve(spec: &str, models_dir: &Path) -> Result<(PathBuf, Option<String>)> {
    if let Some(name) = spec.strip_prefix("ollama:") {
        let root = ollama_root()
            .ok_or_else(|| Error::Invalid("no Ollama store: set OLLAMA_MODELS".into()))?;
        let blob = ollama_blob(&root, name)?;
        let sha = blob
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("sha256-"))
            .map(str::to_string);
        return Ok((blob, sha));
    }
    if let Some(pinned) = super::fetch::gguf_pin(spec) {
        let path = models_dir.join(spec).join("model.gguf");
        if !path.is_file() {
            return Err(Error::model(
                &path,
                format!("model `{spec}` is not fetched: run `ri-batch model fetch {spec}`"),
            ));
        }
        return Ok((path, Some(pinned.to_string())));
    }
    let path = PathBuf::from(spec);
    if path.extension().is_some_and(|x| x == "gguf") && path.is_file() {
        return Ok((path, None));
    }
    Err(Error::Invalid(format!(
        "reader model `{spec}` is neither a fetched model ({}), a .gguf file nor ollama:<name:tag>",
        super::fetch::GGUF_MODELS.join(", ")
    )))
}

/// Weight types candle multiplies with SIMD kernels on x86 (the others run scalar code: the 0.5B
/// model's Q5_0 tensors made it ~10× slower than llama.cpp).
const FAST: [GgmlDType; 7] = [
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::Q4_0,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// How the matrix `name` (of `info`) is kept for `device`: `None` as stored, else re-encoded to
/// the returned type. On a CPU a quantized matrix whose rows candle cannot tile (the 0.5B model's
/// width, 896) is dequantized to f32, exactly, so that a prompt runs through the f32 GEMM rather
/// than row-by-row dot products (about 4× faster on the reader's prompts); the output matrix,
/// multiplied by one row per forward pass, keeps its compact form. Elsewhere a type without a
/// SIMD kernel is re-quantized to Q8_0 (8 bits a weight: it loses nothing it had). The embedding
/// table is looked up, not multiplied, and is kept as stored.
fn re_encoding(name: &str, info: &TensorInfo, cpu: bool) -> Option<GgmlDType> {
    if name == "token_embd.weight" || info.shape.rank() != 2 {
        return None;
    }
    let quantized = !matches!(
        info.ggml_dtype,
        GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
    );
    let row = info.shape.dims().last().copied().unwrap_or(0);
    // candle's CPU kernels that reuse a weight across activation rows (its repacked tiles) take
    // only rows of whole super-blocks (QK_K values); others run one dot product per (row, column).
    if cpu && quantized && row % QK_K != 0 && name != "output.weight" {
        Some(GgmlDType::F32)
    } else if !FAST.contains(&info.ggml_dtype) {
        Some(GgmlDType::Q8_0)
    } else {
        None
    }
}

/// The weights of the Qwen2 GGUF model `file` (its metadata already read) on `device`, each
/// matrix kept or re-encoded as [`re_encoding`] says. Re-encoded matrices are made one at a time
/// as candle reads them (see [`Overlay`]), so loading holds the model and one matrix, not a
/// second copy of the file.
pub fn load_qwen2(file: GgufFile, device: &candle_core::Device) -> Result<Qwen2> {
    let path = file.path.clone();
    let (content, mut reader) = served(file, device.is_cpu())?;
    Qwen2::from_gguf(content, &mut reader, device).map_err(|e| {
        Error::model(
            &path,
            e.to_string().lines().next().unwrap_or("").to_string(),
        )
    })
}

/// The metadata and reader candle's loader is given for `file`: the tensor infos of re-encoded
/// matrices point past the file's end, where [`Overlay`] serves them.
fn served(mut file: GgufFile, cpu: bool) -> Result<(Content, Overlay)> {
    let path = file.path.as_path();
    let f = std::fs::File::open(path).at(path)?;
    let file_len = f.metadata().at(path)?.len();
    let data_offset = file.content.tensor_data_offset;
    let mut extra: Vec<Reencoded> = Vec::new();
    for (name, info) in file.content.tensor_infos.iter_mut() {
        let Some(to) = re_encoding(name, info, cpu) else {
            continue;
        };
        let start = extra.last().map_or(file_len, Reencoded::end);
        let stored = TensorInfo {
            ggml_dtype: std::mem::replace(&mut info.ggml_dtype, to),
            shape: info.shape.clone(),
            offset: std::mem::replace(&mut info.offset, start - data_offset),
        };
        extra.push(Reencoded {
            start,
            len: (info.shape.elem_count() / to.block_size() * to.type_size()) as u64,
            stored,
            to,
        });
    }
    let overlay = Overlay {
        file: f,
        file_len,
        data_offset,
        extra,
        pos: 0,
        made: None,
    };
    Ok((file.content, overlay))
}

/// A matrix served re-encoded: its place past the file's end, and how it is stored.
struct Reencoded {
    start: u64,
    len: u64,
    stored: TensorInfo,
    to: GgmlDType,
}

impl Reencoded {
    /// Where its bytes end, past the file's end.
    fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// The model file as candle's loader reads it, with each re-encoded matrix's bytes appended past
/// the file's end (where its changed tensor info points). A matrix is read from the file,
/// re-encoded when its first byte is asked for, and dropped when its last byte has been read.
struct Overlay {
    /// Read in whole tensors, one seek each: no buffer in between.
    file: std::fs::File,
    file_len: u64,
    data_offset: u64,
    /// In order of `start`.
    extra: Vec<Reencoded>,
    pos: u64,
    /// The matrix being read: its index in `extra` and its bytes.
    made: Option<(usize, Vec<u8>)>,
}

impl Overlay {
    /// The bytes of `extra[i]`, re-encoded from the file.
    fn make(&mut self, i: usize) -> candle_core::Result<Vec<u8>> {
        let r = &self.extra[i];
        let cpu = candle_core::Device::Cpu;
        let t = r.stored.read(&mut self.file, self.data_offset, &cpu)?;
        let w = t.dequantize(&cpu)?;
        drop(t);
        let q = QTensor::quantize(&w, r.to)?;
        drop(w);
        let bytes = q.data()?.into_owned();
        if bytes.len() as u64 != r.len {
            candle_core::bail!("re-encoded to {} bytes, expected {}", bytes.len(), r.len);
        }
        Ok(bytes)
    }
}

impl std::io::Read for Overlay {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::{Seek, SeekFrom};
        if self.pos < self.file_len {
            self.file.seek(SeekFrom::Start(self.pos))?;
            let n = buf.len().min((self.file_len - self.pos) as usize);
            let n = self.file.read(&mut buf[..n])?;
            self.pos += n as u64;
            return Ok(n);
        }
        let Some(i) = self.extra.iter().position(|r| self.pos < r.end()) else {
            return Ok(0);
        };
        if self.made.as_ref().is_none_or(|(j, _)| *j != i) {
            self.made = None;
            let bytes = self.make(i).map_err(std::io::Error::other)?;
            self.made = Some((i, bytes));
        }
        let start = self.extra[i].start;
        let (_, bytes) = self.made.as_ref().expect("made above");
        let at = (self.pos - start) as usize;
        let n = buf.len().min(bytes.len() - at);
        buf[..n].copy_from_slice(&bytes[at..at + n]);
        self.pos += n as u64;
        if at + n == bytes.len() {
            self.made = None;
        }
        Ok(n)
    }
}

impl std::io::Seek for Overlay {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        use std::io::SeekFrom;
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => {
                let end = self.extra.last().map_or(self.file_len, Reencoded::end);
                end.checked_add_signed(d)
            }
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::other("seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ollama_manifests_name_their_model_blob_and_a_missing_one_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let m = t
            .path()
            .join("manifests/registry.ollama.ai/library/qwen2.5-coder");
        std::fs::create_dir_all(&m).unwrap();
        std::fs::create_dir_all(t.path().join("blobs")).unwrap();
        std::fs::write(
            m.join("1.5b"),
            r#"{"layers":[{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:aa"},
                {"mediaType":"application/vnd.ollama.image.model","digest":"sha256:bb"}]}"#,
        )
        .unwrap();
        let err = ollama_blob(t.path(), "qwen2.5-coder:1.5b")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sha256-bb") && err.contains("missing"),
            "{err}"
        );
        std::fs::write(t.path().join("blobs/sha256-bb"), b"GGUF").unwrap();
        assert_eq!(
            ollama_blob(t.path(), "qwen2.5-coder:1.5b").unwrap(),
            t.path().join("blobs/sha256-bb")
        );
        let err = ollama_blob(t.path(), "qwen2.5-coder:7b")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no Ollama manifest for `qwen2.5-coder:7b`"),
            "{err}"
        );
    }

    #[test]
    fn re_encoded_matrices_are_served_from_past_the_file_and_equal_their_stored_values() {
        use candle_core::{Device, Tensor};
        let cpu = Device::Cpu;
        let values = |n: usize, seed: f32| -> Vec<f32> {
            (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect()
        };
        // A 96-wide Q8_0 matrix (not whole 256-value super-blocks: f32 on a CPU), a Q8_0 matrix
        // 256 wide (kept), and a vector.
        let narrow = Tensor::from_vec(values(4 * 96, 0.1), (4, 96), &cpu).unwrap();
        let wide = Tensor::from_vec(values(2 * 256, 0.2), (2, 256), &cpu).unwrap();
        let norm = Tensor::from_vec(values(96, 0.3), 96, &cpu).unwrap();
        let narrow = QTensor::quantize(&narrow, GgmlDType::Q8_0).unwrap();
        let wide = QTensor::quantize(&wide, GgmlDType::Q8_0).unwrap();
        let norm = QTensor::quantize(&norm, GgmlDType::F32).unwrap();
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("m.gguf");
        let name = Value::String("tiny".into());
        let mut out = std::fs::File::create(&path).unwrap();
        candle_core::quantized::gguf_file::write(
            &mut out,
            &[("general.name", &name)],
            &[
                ("blk.0.attn_q.weight", &narrow),
                ("blk.0.ffn_down.weight", &wide),
                ("blk.0.attn_norm.weight", &norm),
            ],
        )
        .unwrap();
        drop(out);
        let stored = |q: &QTensor| -> Vec<f32> {
            q.dequantize(&cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        let (content, mut reader) = served(GgufFile::open(&path).unwrap(), true).unwrap();
        let file_len = std::fs::metadata(&path).unwrap().len();
        let q_info = &content.tensor_infos["blk.0.attn_q.weight"];
        assert_eq!(q_info.ggml_dtype, GgmlDType::F32);
        assert!(content.tensor_data_offset + q_info.offset >= file_len);
        // Read in candle's own order, then again: each read gives the stored values exactly.
        for _ in 0..2 {
            for (n, q) in [
                ("blk.0.attn_q.weight", &narrow),
                ("blk.0.ffn_down.weight", &wide),
                ("blk.0.attn_norm.weight", &norm),
            ] {
                let got = content.tensor(&mut reader, n, &cpu).unwrap();
                let want_dtype = if n == "blk.0.attn_q.weight" {
                    GgmlDType::F32
                } else {
                    q.dtype()
                };
                assert_eq!(got.dtype(), want_dtype, "{n}");
                assert_eq!(stored(&got), stored(q), "{n}");
            }
        }
        assert!(reader.made.is_none(), "a matrix read whole is dropped");
        // On a GPU the narrow Q8_0 matrix is kept: nothing is served past the file.
        let (content, _) = served(GgufFile::open(&path).unwrap(), false).unwrap();
        assert_eq!(
            content.tensor_infos["blk.0.attn_q.weight"].ggml_dtype,
            GgmlDType::Q8_0
        );
    }

    #[test]
    fn cpu_matrices_of_untileable_width_become_f32_and_the_rest_stay_compact() {
        let info = |ggml_dtype, dims: (usize, usize)| TensorInfo {
            ggml_dtype,
            shape: dims.into(),
            offset: 0,
        };
        // The 0.5B model: 896-wide rows (not whole 256-value blocks), 4864-wide ones (19 blocks).
        let q5 = info(GgmlDType::Q5_0, (4864, 896));
        assert_eq!(
            re_encoding("blk.0.ffn_up.weight", &q5, true),
            Some(GgmlDType::F32)
        );
        assert_eq!(
            re_encoding("blk.0.ffn_up.weight", &q5, false),
            Some(GgmlDType::Q8_0)
        );
        let q8 = info(GgmlDType::Q8_0, (128, 896));
        assert_eq!(
            re_encoding("blk.0.attn_v.weight", &q8, true),
            Some(GgmlDType::F32)
        );
        assert_eq!(re_encoding("blk.0.attn_v.weight", &q8, false), None);
        let q6 = info(GgmlDType::Q6K, (896, 4864));
        assert_eq!(re_encoding("blk.0.ffn_down.weight", &q6, true), None);
        // The output matrix meets one row a pass; the embedding table is looked up.
        let out = info(GgmlDType::Q8_0, (151936, 896));
        assert_eq!(re_encoding("output.weight", &out, true), None);
        let emb = info(GgmlDType::Q5_0, (151936, 896));
        assert_eq!(re_encoding("token_embd.weight", &emb, true), None);
        assert_eq!(re_encoding("token_embd.weight", &emb, false), None);
        // Unquantized weights and vectors are never re-encoded.
        let f = info(GgmlDType::F16, (896, 896));
        assert_eq!(re_encoding("blk.0.attn_q.weight", &f, true), None);
    }
}
