//! The typed sections of a pipeline file (`[scan]`, `[chunk]`, ... `[evaluate]`). Each key is
//! declared once, in a [`section!`]: its doc, type, default and range checks together; the
//! struct, its `Default`, its checks and its entry in the generated reference
//! (`docs/pipeline-reference.md`, see [`super::reference`]) all come from that declaration.

use crate::models::{Device, Precision};
use crate::secrets::redact::Secrets;
use crate::text::tokens::Tokenizer;
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// The deepest pool a variant may ask for.
pub const MAX_TOP_K: usize = 100_000;

/// One declared key of a section, for the reference.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    /// The Rust type, as declared.
    pub ty: &'static str,
    /// The default, as declared (for keys whose default is left out when serialized).
    pub default: &'static str,
    /// The field's attributes, as declared (its doc comment among them).
    pub attrs: &'static [&'static str],
    /// What the checks require, in words.
    pub checks: &'static [&'static str],
}

impl Key {
    /// The key's doc comment, one line.
    pub fn doc(&self) -> String {
        doc_of(self.attrs)
    }
}

/// The text of the `doc = "…"` attributes among `attrs` (as `stringify!` gives them: plain or
/// raw string literals, the `=` perhaps on its own line), joined into one line.
pub fn doc_of(attrs: &[&str]) -> String {
    let mut out = Vec::new();
    for a in attrs {
        let Some(rest) = a.trim().strip_prefix("doc") else {
            continue;
        };
        let Some(lit) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let lit = lit.trim();
        let text = match lit.strip_prefix('r') {
            // A raw literal: r"…" or r#"…"#, no escapes.
            Some(raw) => {
                let hashes = raw.len() - raw.trim_start_matches('#').len();
                let body = &raw[hashes..raw.len() - hashes];
                let body = body.strip_prefix('"').unwrap_or(body);
                body.strip_suffix('"').unwrap_or(body).to_string()
            }
            None => unescape(
                lit.strip_prefix('"')
                    .and_then(|l| l.strip_suffix('"'))
                    .unwrap_or(lit),
            ),
        };
        out.push(text.trim().to_string());
    }
    out.join(" ")
}

/// A plain string literal's text: `\\n` as a space, other escapes as the character they escape.
fn unescape(inner: &str) -> String {
    let mut text = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            text.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => text.push(' '),
            Some(other) => text.push(other),
            None => {}
        }
    }
    text
}

/// Runs one check on a value (a closure's argument type comes from the value).
fn holds<T>(v: &T, check: impl Fn(&T) -> bool) -> bool {
    check(v)
}

/// What a [`section!`] declaration gives its struct: its name, doc and keys for the reference,
/// and its range checks.
pub trait Section: Default + Serialize {
    /// The section's name in a pipeline file.
    const SECTION: &'static str;
    /// The section's doc comment.
    fn doc() -> String;
    /// Every key, in declaration order.
    fn keys() -> Vec<Key>;
    /// The first key out of its range, as `<prefix>.<key>` with what it must be.
    fn check(&self, prefix: &str) -> Option<(String, &'static str)>;
    /// [`Section::check`] under the section's own name.
    fn out_of_range(&self) -> Option<(String, &'static str)> {
        self.check(Self::SECTION)
    }
}

/// Declares a section: its struct (every key defaulted, unknown keys refused), its `Default`,
/// and its [`Section`] impl: name, doc, keys and range checks.
macro_rules! section {
    (
        $(#[$smeta:meta])*
        pub struct $name:ident = $section:literal {
            $(
                $(#[$fmeta:meta])*
                $field:ident : $ty:ty = $default:expr $(, check $check:expr => $why:literal)* ;
            )*
        }
    ) => {
        $(#[$smeta])*
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }

        impl Section for $name {
            const SECTION: &'static str = $section;

            fn doc() -> String {
                doc_of(&[$(stringify!($smeta)),*])
            }

            fn keys() -> Vec<Key> {
                vec![$(Key {
                    name: stringify!($field),
                    ty: stringify!($ty),
                    default: stringify!($default),
                    attrs: &[$(stringify!($fmeta)),*],
                    checks: &[$($why),*],
                }),*]
            }

            fn check(&self, prefix: &str) -> Option<(String, &'static str)> {
                $($(
                    if !holds(&self.$field, $check) {
                        return Some((format!("{prefix}.{}", stringify!($field)), $why));
                    }
                )*)*
                None
            }
        }
    };
}

section! {
    /// `[scan]`: which files are read.
    pub struct ScanConfig = "scan" {
        /// Globs a path must match (default: everything).
        include: Vec<Spanned<String>> = Vec::new();
        /// Globs that drop a path.
        exclude: Vec<Spanned<String>> = Vec::new();
        /// Files larger than this are skipped with reason `too_large`.
        max_file_bytes: u64 = 512 * 1024,
            check |v| *v >= 1 => "must be at least 1",
            check |v| *v <= 1 << 30 => "must be at most 1073741824 (1 GiB)";
        /// For plain directories: honour `.gitignore` files.
        gitignore: bool = true;
        /// Commits kept per git repository in `commits`, newest first (0: none).
        max_commits: u32 = 1000;
        /// Keep each commit's author e-mail in `commits` (personal data: off unless asked for).
        commit_emails: bool = false;
        /// A file the sensitivity filter flags: `redact` keeps it with the lines that hold the
        /// secret replaced (left out whole when the secret spans lines), `skip` leaves it out.
        secrets: Secrets = Secrets::Redact;
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

section! {
    /// `[chunk]` (and each `[chunkers.<name>]`): how files become line-addressed chunks.
    pub struct ChunkConfig = "chunk" {
        /// `lines`, `syntax` or `intellirag` (docs/chunking.md).
        method: ChunkMethod = ChunkMethod::Lines;
        /// Largest chunk, in tokens of the `approx` counter.
        max_tokens: usize = 500,
            check |v| *v >= 16 => "must be at least 16",
            check |v| *v <= 1_000_000 => "must be at most 1000000";
        /// Lines repeated at the start of the next chunk of the same section.
        overlap_lines: usize = 0,
            check |v| *v <= 10_000 => "must be at most 10000";
    }
}

section! {
    /// `[index]`: BM25 parameters and the lexical analyser.
    pub struct IndexConfig = "index" {
        /// BM25 term-frequency saturation.
        k1: f64 = 1.2,
            check |v| v.is_finite() && *v >= 0.0 => "must be a finite number >= 0";
        /// BM25 length normalisation.
        b: f64 = 0.75,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// English (Porter 2) stemming of every term.
        stem: bool = false;
        /// Drop common English stop words.
        stopwords: bool = false;
        /// Index `maxAge` as `maxage` as well as `max` and `age` (false: only the parts).
        whole_identifiers: bool = true;
        /// Split identifiers between letters and digits (`utf8` → `utf`, `8`).
        split_digits: bool = true;
        /// Index and embed each chunk with its path and heading path, not its text alone.
        with_path: bool = true;
        /// Build the index over all repositories (`*`): `true`, `false`, or unset: unless a
        /// repository is read at several revisions and no question asks `*`.
        #[serde(skip_serializing_if = "Option::is_none")]
        all_repos: Option<bool> = None;
    }
}

impl IndexConfig {
    /// The analyser the index is built and queried with.
    pub fn analyzer(&self) -> crate::text::analyze::Analyzer {
        crate::text::analyze::Analyzer::new(self.stem, self.stopwords)
            .whole_identifiers(self.whole_identifiers)
            .split_digits(self.split_digits)
    }

    /// The BM25 parameters (`k1`, `b`) the index is scored with.
    pub fn params(&self) -> crate::retrieval::bm25::Params {
        crate::retrieval::bm25::Params {
            k1: self.k1,
            b: self.b,
        }
    }
}

section! {
    /// `[embed]`: the embedding model; absent means dense and hybrid variants are not run.
    pub struct EmbedConfig = "embed" {
        /// Model directory (config.json, tokenizer.json, model.safetensors).
        model: String = String::new(),
            check |v| !v.is_empty() => "is required: the model directory";
        /// `auto`, `cpu` or `cuda:N`.
        device: Device = Device::Auto;
        /// Tokens per batch (sum of padded lengths).
        batch_tokens: usize = 512,
            check |v| *v >= 16 => "must be at least 16 tokens";
        /// Longest input in tokens; longer texts are truncated.
        max_length: usize = 512,
            check |v| (2..=8192).contains(v) => "must be within 2..=8192 tokens";
        /// Matryoshka truncation (nomic v1.5 only); default: the model's full width.
        dims: Option<usize> = None,
            check |v| *v != Some(0) => "must be at least 1";
        /// Content-keyed cache shared by runs; default `<output_dir>/../.embedding-cache`.
        cache_dir: Option<String> = None;
        /// Precision of the model's weights and activations: `f32`, `f16`, `bf16` (half precision
        /// for NomicBERT only) or `int8` (on the CPU); default bf16 for NomicBERT on a GPU, else
        /// f32. Vectors are always stored as f32.
        #[serde(skip_serializing_if = "Option::is_none")]
        dtype: Option<Precision> = None;
    }
}

section! {
    /// `[retrieve]`: pool size and fusion.
    pub struct RetrieveConfig = "retrieve" {
        /// Chunks kept per question and variant.
        top_k: usize = 20,
            check |v| *v >= 1 => "must be at least 1",
            check |v| *v <= MAX_TOP_K => "must be at most 100000 (ranks are 32-bit)";
        /// Reciprocal rank fusion constant.
        rrf_k: f64 = 60.0,
            check |v| v.is_finite() && *v >= 0.0 => "must be a finite number >= 0";
    }
}

section! {
    /// `[pack]`: settings of the packers.
    pub struct PackConfig = "pack" {
        /// Budget token counter: `approx`, `chars4` (IntelliRAG's
        /// `max(1, ceil(utf16_len(trim(s)) / 4))` per packed text), or a path to a Hugging Face
        /// tokenizer.json.
        tokenizer: Tokenizer = Tokenizer::Approx;
        /// Compaction: how many top chunks are split into units.
        compact_top_chunks: usize = 10,
            check |v| *v >= 1 => "must be at least 1",
            check |v| *v <= MAX_TOP_K => "must be at most 100000";
        /// Compaction: bonus (share of the best neighbour's score) for neighbours of strong units.
        neighbour_bonus: f64 = 0.3,
            check |v| v.is_finite() && *v >= 0.0 => "must be a finite number >= 0";
        /// Compaction: bonus (share of the unit's own score, added) for units under a matching
        /// heading.
        heading_bonus: f64 = 0.5,
            check |v| v.is_finite() && *v >= 0.0 => "must be a finite number >= 0";
        /// Compaction: drop units scoring below this share of the best unit (0 keeps all and
        /// fills the budget).
        lean: f64 = 0.0,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// Compaction: weight w of a chunk's rank prior; each unit's score is multiplied by
        /// `(1 - w) + w × chunk score / best chunk score` (IntelliRAG: 0.2; 0 leaves scores alone).
        #[serde(skip_serializing_if = "is_zero")]
        rank_prior: f64 = 0.0,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// Compaction: novelty discount c. Units are chosen one at a time, and each question
        /// term's weight in a unit's term score is multiplied by `(1 - c)^n`, n the units already
        /// chosen that hold the term, so a pack covers more of the question before repeating it
        /// (0 scores every unit on its own).
        #[serde(skip_serializing_if = "is_zero")]
        coverage: f64 = 0.0,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// Compaction: continuation bonus f. When a unit is chosen, the unit it introduces and
        /// the one that introduces it (a heading, a line ending in `:`, a code comment) gain f ×
        /// its score, so a lead-in ("// Get previous date", "You need to escape special
        /// characters:") and the line it introduces are packed together (0: no bonus).
        #[serde(skip_serializing_if = "is_zero")]
        follow: f64 = 0.0,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
    }
}

/// Whether a weight is 0 (its key is then left out of serialized configs).
pub(super) fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl PackConfig {
    /// The compact packer's settings.
    pub fn compact_params(&self) -> crate::packing::CompactParams {
        crate::packing::CompactParams {
            top_chunks: self.compact_top_chunks,
            neighbour_bonus: self.neighbour_bonus,
            heading_bonus: self.heading_bonus,
            lean: self.lean,
            rank_prior: self.rank_prior,
            coverage: self.coverage,
            follow: self.follow,
        }
    }
}

section! {
    /// `[extract]`: selectors of the extract stage.
    pub struct ExtractConfig = "extract" {
        /// `lexical` selector: share of question terms a unit must cover to be selected.
        lexical_threshold: f64 = 0.5,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// Largest number of IDs a reply may hold before it is refused as a whole.
        max_ids: usize = 8,
            check |v| (1..=10_000).contains(v) => "must be within 1..=10000";
        /// `calibrated` selector: refuse when the pack's support (the idf-weighted share of the
        /// question's terms found anywhere in it) is under this. Chosen on the bundled dev split.
        refuse_below: f64 = 0.35,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// `llm` selector settings (`[extract.llm]`).
        llm: Option<LlmConfig> = None;
        /// `reader` selector settings (`[extract.reader]`).
        reader: Option<ReaderConfig> = None;
    }
}

/// How the reader's selection is made from its reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReaderSelection {
    /// The IDs decoded greedily under the grammar, digit by digit (which favours a label whose
    /// first digit many labels share: `E1` or `E15` of `E1`, `E10`..`E19`), then by `id_probs`.
    #[default]
    Greedy,
    /// The labels by the model's probability of naming each first (`id_probs`), the likeliest
    /// first.
    Likeliest,
}

section! {
    /// `[extract.reader]`: a GGUF chat model (Qwen2 family) run in-process.
    pub struct ReaderConfig = "extract.reader" {
        /// A fetched model (`qwen2.5-coder-1.5b-instruct`, `qwen2.5-coder-0.5b-instruct`, looked
        /// for in `models/<name>/model.gguf` under the pipeline's root), a `.gguf` path, or
        /// `ollama:<name:tag>` (from the Ollama store at `$OLLAMA_MODELS` or `~/.ollama/models`).
        model: String = String::new(),
            check |v| !v.is_empty() => "is required: the model";
        /// `auto`, `cpu` or `cuda:N`.
        device: Device = Device::Auto;
        /// Refuse when the model's probability of refusing (stored per extract as
        /// `refusal_prob`) reaches this; 0.5 is the greedy reply.
        refuse_at: f64 = 0.5,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// `greedy`: the greedily decoded IDs, then the likeliest others; `likeliest`: the label
        /// the model most likely names first (`id_probs`), then the next likeliest.
        selection: ReaderSelection = ReaderSelection::Greedy;
        /// Add the next likeliest labels (`id_probs`) until the selection holds this much of the
        /// first-ID probability (at most `max_ids` labels); 0 keeps the greedy list (or the one
        /// likeliest label).
        select_mass: f64 = 0.0,
            check |v| (0.0..=1.0).contains(v) => "must be within [0, 1]";
        /// Where readings are cached by (model, prompt); default: `.reader-cache` beside the
        /// output directory.
        cache_dir: Option<String> = None;
    }
}

section! {
    /// `[extract.llm]`: any OpenAI-compatible chat endpoint.
    pub struct LlmConfig = "extract.llm" {
        /// Base URL, e.g. `http://127.0.0.1:11434/v1`.
        url: String = String::new(),
            check |v| !v.is_empty() => "is required: the endpoint's base URL";
        /// The model's name at the endpoint.
        model: String = String::new(),
            check |v| !v.is_empty() => "is required: the model's name";
        /// Seconds a request may take.
        timeout_s: f64 = 30.0,
            check |v| v.is_finite() && *v > 0.0 => "must be a finite number > 0";
        /// Retries after a timeout, a 429 or a 5xx, with exponential backoff.
        retries: u32 = 2;
        /// Requests in flight at once, from the whole process.
        concurrency: usize = 2,
            check |v| *v >= 1 => "must be at least 1";
    }
}

section! {
    /// `[evaluate]`: statistics.
    pub struct EvaluateConfig = "evaluate" {
        /// Variant the others are compared with (default: the first).
        baseline: Option<Spanned<String>> = None;
        /// Paired bootstrap resamples.
        bootstrap: usize = 2000,
            check |v| (100..=1_000_000).contains(v)
                => "must be within 100..=1000000 resamples (fewer give no meaningful interval)";
        /// Seed of the bootstrap and randomization tests.
        seed: u64 = 7;
        /// Also compare every pair of variants (not only each with the baseline); Holm's
        /// adjustment then runs over all of them.
        pairs: bool = false;
        /// When an evidence quote counts as found: `merged` (inside its file's packed text,
        /// adjacent pieces joined) or `passage` (IntelliRAG's: inside one returned passage).
        recall: crate::evaluation::metrics::RecallRule = crate::evaluation::metrics::RecallRule::Merged;
        /// Splits held out for the final check: evaluated and stored, but not printed by `run`
        /// without `--show-holdout` (so that settings are not chosen on them).
        held_out: Vec<String> = vec!["holdout".to_string()];
    }
}
