//! The typed sections of a pipeline file (`[scan]`, `[chunk]`, ... `[evaluate]`) and their
//! documented defaults.

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// `[scan]`: which files are read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScanConfig {
    /// Globs a path must match (default: everything).
    pub include: Vec<Spanned<String>>,
    /// Globs that drop a path.
    pub exclude: Vec<Spanned<String>>,
    /// Files larger than this are skipped with reason `too_large`.
    pub max_file_bytes: u64,
    /// For plain directories: honour `.gitignore` files.
    pub gitignore: bool,
    /// Commits kept per git repository in `commits`, newest first (0: none).
    pub max_commits: u32,
    /// Keep each commit's author e-mail in `commits` (personal data: off unless asked for).
    pub commit_emails: bool,
}

impl Default for ScanConfig {
    fn default() -> Self {
        ScanConfig {
            include: Vec::new(),
            exclude: Vec::new(),
            max_file_bytes: 512 * 1024,
            gitignore: true,
            max_commits: 1000,
            commit_emails: false,
        }
    }
}

/// How files are cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChunkMethod {
    /// ri-batch's: whole lines, split at Markdown headings and code boundaries.
    #[default]
    Lines,
    /// IntelliRAG's recursive character chunker (2,048 characters, 100 of overlap); chunks
    /// still know their file lines. `max_tokens` and `overlap_lines` do not apply.
    Intellirag,
    /// Along the syntax tree (tree-sitter) for Python, Rust, JavaScript, TypeScript, Go, Java,
    /// C and C++: whole definitions merged or split under `max_tokens`, headed by their scope
    /// path; other files, and files that do not parse, by `lines`.
    Syntax,
}

/// `[chunk]`: how files become line-addressed chunks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChunkConfig {
    /// `lines` (default), `syntax` or `intellirag`.
    pub method: ChunkMethod,
    /// Largest chunk, in tokens of the `approx` counter.
    pub max_tokens: usize,
    /// Lines repeated at the start of the next chunk of the same section.
    pub overlap_lines: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig {
            method: ChunkMethod::Lines,
            max_tokens: 500,
            overlap_lines: 0,
        }
    }
}

/// `[index]`: BM25 parameters and the lexical analyser.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IndexConfig {
    pub k1: f64,
    pub b: f64,
    /// English (Porter 2) stemming of every term.
    pub stem: bool,
    /// Drop common English stop words.
    pub stopwords: bool,
    /// Index `maxAge` as `maxage` as well as `max` and `age` (false: only the parts).
    pub whole_identifiers: bool,
    /// Split identifiers between letters and digits (`utf8` → `utf`, `8`).
    pub split_digits: bool,
    /// Index and embed each chunk with its path and heading path, not its text alone.
    pub with_path: bool,
    /// Build the index over all repositories (`*`): `true`, `false`, or unset: unless a
    /// repository is read at several revisions and no question asks `*`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_repos: Option<bool>,
}

impl IndexConfig {
    /// The analyser the index is built and queried with.
    pub fn analyzer(&self) -> crate::text::analyze::Analyzer {
        crate::text::analyze::Analyzer::new(self.stem, self.stopwords)
            .whole_identifiers(self.whole_identifiers)
            .split_digits(self.split_digits)
    }

    /// The BM25 parameters (`k1`, `b`) the index is scored with.
    pub fn params(&self) -> crate::bm25::Params {
        crate::bm25::Params {
            k1: self.k1,
            b: self.b,
        }
    }
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            k1: 1.2,
            b: 0.75,
            stem: false,
            stopwords: false,
            whole_identifiers: true,
            split_digits: true,
            with_path: true,
            all_repos: None,
        }
    }
}

/// `[embed]`: the embedding model; absent means dense and hybrid variants are not run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedConfig {
    /// Model directory (config.json, tokenizer.json, model.safetensors).
    pub model: Spanned<String>,
    /// `auto`, `cpu` or `cuda:N`.
    #[serde(default = "default_device")]
    pub device: crate::models::Device,
    /// Tokens per batch (sum of padded lengths).
    #[serde(default = "default_batch_tokens")]
    pub batch_tokens: usize,
    /// Longest input in tokens; longer texts are truncated.
    #[serde(default = "default_max_length")]
    pub max_length: usize,
    /// Matryoshka truncation (nomic v1.5 only); default: the model's full width.
    #[serde(default)]
    pub dims: Option<usize>,
    /// Content-keyed cache shared by runs; default `<output_dir>/../.embedding-cache`.
    #[serde(default)]
    pub cache_dir: Option<String>,
    /// Precision of the model's weights and activations: `f32`, `f16` or `bf16` (half precision
    /// for NomicBERT only); default bf16 for NomicBERT on a GPU, else f32. Vectors are always
    /// stored as f32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<crate::models::Precision>,
}

fn default_device() -> crate::models::Device {
    crate::models::Device::Auto
}
fn default_batch_tokens() -> usize {
    512
}
fn default_max_length() -> usize {
    512
}

/// `[retrieve]`: pool size and fusion.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrieveConfig {
    /// Chunks kept per question and variant.
    pub top_k: usize,
    /// Reciprocal rank fusion constant.
    pub rrf_k: f64,
}

impl Default for RetrieveConfig {
    fn default() -> Self {
        RetrieveConfig {
            top_k: 20,
            rrf_k: 60.0,
        }
    }
}

/// `[pack]`: settings of the packers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PackConfig {
    /// Budget token counter: `approx`, `chars4` (IntelliRAG's `max(1, ceil(utf16_len(trim(s)) / 4))`
    /// per packed text), or a path to a Hugging Face tokenizer.json.
    pub tokenizer: String,
    /// Compaction: how many top chunks are split into units.
    pub compact_top_chunks: usize,
    /// Compaction: bonus (share of the best neighbour's score) for neighbours of strong units.
    pub neighbour_bonus: f64,
    /// Compaction: bonus (share of the unit's own score, added) for units under a matching heading.
    pub heading_bonus: f64,
    /// Compaction: drop units scoring below this share of the best unit (0 keeps all).
    pub lean: f64,
    /// Compaction: weight w of a chunk's rank prior; each unit's score is multiplied by
    /// `(1 - w) + w × chunk score / best chunk score` (IntelliRAG: 0.2; 0 leaves scores alone).
    #[serde(skip_serializing_if = "is_zero")]
    pub rank_prior: f64,
}

/// Whether a weight is 0 (its key is then left out of serialized configs).
pub(super) fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl PackConfig {
    /// The compact packer's settings.
    pub fn compact_params(&self) -> crate::packers::CompactParams {
        crate::packers::CompactParams {
            top_chunks: self.compact_top_chunks,
            neighbour_bonus: self.neighbour_bonus,
            heading_bonus: self.heading_bonus,
            lean: self.lean,
            rank_prior: self.rank_prior,
        }
    }
}

impl Default for PackConfig {
    fn default() -> Self {
        PackConfig {
            tokenizer: "approx".into(),
            compact_top_chunks: 10,
            neighbour_bonus: 0.3,
            heading_bonus: 0.5,
            lean: 0.0,
            rank_prior: 0.0,
        }
    }
}

/// `[extract]`: selectors of the extract stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExtractConfig {
    /// `lexical` selector: share of question terms a unit must cover to be selected.
    pub lexical_threshold: f64,
    /// Largest number of IDs a reply may hold before it is refused as a whole.
    pub max_ids: usize,
    /// `calibrated` selector: refuse when the pack's support (the idf-weighted share of the
    /// question's terms found anywhere in it) is under this. Chosen on the bundled dev split.
    pub refuse_below: f64,
    /// `llm` selector settings.
    pub llm: Option<LlmConfig>,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        ExtractConfig {
            lexical_threshold: 0.5,
            max_ids: 8,
            refuse_below: 0.35,
            llm: None,
        }
    }
}

/// `[extract.llm]`: any OpenAI-compatible chat endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL, e.g. `http://127.0.0.1:11434/v1`.
    pub url: String,
    pub model: String,
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
}

fn default_timeout() -> f64 {
    30.0
}
fn default_retries() -> u32 {
    2
}
fn default_concurrency() -> usize {
    2
}

/// `[evaluate]`: statistics.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvaluateConfig {
    /// Variant the others are compared with (default: the first).
    pub baseline: Option<Spanned<String>>,
    /// Paired bootstrap resamples.
    pub bootstrap: usize,
    pub seed: u64,
    /// Also compare every pair of variants (not only each with the baseline); Holm's
    /// adjustment then runs over all of them.
    pub pairs: bool,
    /// When an evidence quote counts as found: `merged` (inside its file's packed text, adjacent
    /// pieces joined) or `passage` (IntelliRAG's: inside one returned passage).
    pub recall: crate::metrics::RecallRule,
}

impl Default for EvaluateConfig {
    fn default() -> Self {
        EvaluateConfig {
            baseline: None,
            bootstrap: 2000,
            seed: 7,
            pairs: false,
            recall: crate::metrics::RecallRule::Merged,
        }
    }
}
