//! Pipeline TOML → checked [`Plan`]: typed sections with documented defaults, `deny_unknown_fields`,
//! and errors that name the file, line, column and key, all reported before any work starts.

use crate::error::{Error, IoContext, Result};
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The raw file, exactly as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    pipeline: RawPipeline,
    #[serde(default)]
    repos: Vec<RawRepo>,
    #[serde(default)]
    scan: ScanConfig,
    #[serde(default)]
    chunk: ChunkConfig,
    #[serde(default)]
    index: IndexConfig,
    #[serde(default)]
    embed: Option<EmbedConfig>,
    #[serde(default)]
    retrieve: RetrieveConfig,
    #[serde(default)]
    pack: PackConfig,
    #[serde(default)]
    extract: ExtractConfig,
    #[serde(default)]
    evaluate: EvaluateConfig,
    #[serde(default)]
    variants: Vec<RawVariant>,
    #[serde(default)]
    import: Option<RawImport>,
}

/// `[import]`: the pipeline's repository and questions come from a standard dataset layout,
/// imported into `<output_dir>/import/` before the stages run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImport {
    /// `beir` or `cosqa`.
    format: Spanned<String>,
    /// The dataset directory.
    source: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    name: Spanned<String>,
    /// Directory that relative paths in this file are resolved against, itself relative to the file.
    #[serde(default)]
    root: Option<String>,
    /// Where artifacts go; default `outputs/<name>`.
    #[serde(default)]
    output_dir: Option<String>,
    /// Question set (JSONL), see `dataset.rs`.
    #[serde(default)]
    questions: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRepo {
    name: Spanned<String>,
    /// A git repository (bare or not), read at `rev` without a checkout.
    #[serde(default)]
    git: Option<Spanned<String>>,
    /// A plain directory, walked honouring `.gitignore`.
    #[serde(default)]
    dir: Option<Spanned<String>>,
    #[serde(default)]
    rev: Option<String>,
}

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
}

impl Default for ScanConfig {
    fn default() -> Self {
        ScanConfig {
            include: Vec::new(),
            exclude: Vec::new(),
            max_file_bytes: 512 * 1024,
            gitignore: true,
        }
    }
}

/// `[chunk]`: how files become line-addressed chunks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChunkConfig {
    /// Largest chunk, in tokens of the `approx` counter.
    pub max_tokens: usize,
    /// Lines repeated at the start of the next chunk of the same section.
    pub overlap_lines: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig {
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
    pub device: String,
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
}

fn default_device() -> String {
    "auto".into()
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
    /// Budget token counter: `approx`, or a path to a Hugging Face tokenizer.json.
    pub tokenizer: String,
    /// Compaction: how many top chunks are split into units.
    pub compact_top_chunks: usize,
    /// Compaction: bonus (share of the best neighbour's score) for neighbours of strong units.
    pub neighbour_bonus: f64,
    /// Compaction: bonus (share of the unit's own score, added) for units under a matching heading.
    pub heading_bonus: f64,
    /// Compaction: drop units scoring below this share of the best unit (0 keeps all).
    pub lean: f64,
}

impl Default for PackConfig {
    fn default() -> Self {
        PackConfig {
            tokenizer: "approx".into(),
            compact_top_chunks: 10,
            neighbour_bonus: 0.3,
            heading_bonus: 0.5,
            lean: 0.0,
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
    /// `llm` selector settings.
    pub llm: Option<LlmConfig>,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        ExtractConfig {
            lexical_threshold: 0.5,
            max_ids: 8,
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
}

impl Default for EvaluateConfig {
    fn default() -> Self {
        EvaluateConfig {
            baseline: None,
            bootstrap: 2000,
            seed: 7,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVariant {
    name: Spanned<String>,
    retriever: Spanned<String>,
    #[serde(default = "default_packer")]
    packer: Spanned<String>,
    #[serde(default)]
    budget: Option<usize>,
    /// A sweep: one variant per budget, named `<name>@<budget>`.
    #[serde(default)]
    budgets: Option<Spanned<Vec<usize>>>,
    /// Hybrid fusion weights, e.g. `{ bm25 = 1.0, dense = 1.0 }`.
    #[serde(default)]
    weights: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    selector: Option<Spanned<String>>,
}

fn default_packer() -> Spanned<String> {
    Spanned::new(0..0, "rank".to_string())
}

/// How a repository is read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum RepoSource {
    Git { path: PathBuf, rev: String },
    Dir { path: PathBuf },
}

/// One checked repository.
#[derive(Debug, Clone, Serialize)]
pub struct RepoSpec {
    pub name: String,
    pub source: RepoSource,
}

/// Which retriever a variant uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retriever {
    Bm25,
    Dense,
    Hybrid,
}

/// Which packer a variant uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Packer {
    Rank,
    MarginalGain,
    Compact,
}

/// Which selector the extract stage uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selector {
    Lexical,
    Oracle,
    Llm,
}

/// One expanded variant (a sweep is already split into one per budget).
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    pub name: String,
    pub retriever: Retriever,
    pub packer: Packer,
    pub budget: usize,
    pub weight_bm25: f64,
    pub weight_dense: f64,
    pub selector: Selector,
}

/// The checked configuration every stage works from.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub config_path: PathBuf,
    /// Directory relative paths of the config were resolved against.
    pub root: PathBuf,
    pub output_dir: PathBuf,
    pub questions: Option<PathBuf>,
    pub repos: Vec<RepoSpec>,
    pub scan: ScanConfig,
    pub include: Option<GlobSet>,
    pub exclude: GlobSet,
    pub chunk: ChunkConfig,
    pub index: IndexConfig,
    pub embed: Option<EmbedConfig>,
    pub embed_model_dir: Option<PathBuf>,
    pub embed_cache_dir: Option<PathBuf>,
    pub retrieve: RetrieveConfig,
    pub pack: PackConfig,
    pub extract: ExtractConfig,
    pub evaluate: EvaluateConfig,
    pub baseline: String,
    pub variants: Vec<Variant>,
    /// The dataset this pipeline imports before running (format, source directory).
    pub import: Option<(crate::import::Format, PathBuf)>,
}

impl Plan {
    /// Reads and checks `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Plan> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).at(path)?;
        Plan::parse(path, &text)
    }

    /// Checks `text` as if read from `path` (relative paths resolve against `path`'s directory).
    pub fn parse(path: &Path, text: &str) -> Result<Plan> {
        let loc = Locator { file: path, text };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            loc.error(span, e.message().to_string())
        })?;
        let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let root = clean(&match &raw.pipeline.root {
            Some(r) => base.join(r),
            None => base,
        });
        let name = raw.pipeline.name.get_ref().clone();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(loc.error(
                raw.pipeline.name.span(),
                "name must be non-empty and use only letters, digits, '-', '_' and '.'",
            ));
        }
        let output_dir = match &raw.pipeline.output_dir {
            Some(d) => root.join(d),
            None => root.join("outputs").join(&name),
        };
        let import = match &raw.import {
            None => None,
            Some(imp) => {
                let format = parse_enum::<crate::import::Format>(&loc, &imp.format, "beir, cosqa")?;
                let source = clean(&root.join(imp.source.get_ref()));
                if !raw.repos.is_empty() || raw.pipeline.questions.is_some() {
                    return Err(loc.error(
                        imp.format.span(),
                        "an [import] pipeline takes its repository and questions from the import: drop [[repos]] and `questions`",
                    ));
                }
                if !source.is_dir() {
                    return Err(Error::Skipped(format!(
                        "{}: skipped, the dataset to import is not here: {} does not exist",
                        path.display(),
                        source.display()
                    )));
                }
                Some((format, source))
            }
        };
        let questions = match &import {
            Some(_) => Some(output_dir.join("import/questions.jsonl")),
            None => raw
                .pipeline
                .questions
                .as_ref()
                .map(|q| root.join(q.get_ref())),
        };
        if let (Some(q), Some(spanned)) = (&questions, &raw.pipeline.questions) {
            if !q.is_file() {
                return Err(loc.error(
                    spanned.span(),
                    format!("question file {} does not exist", q.display()),
                ));
            }
        }

        if raw.repos.is_empty() && import.is_none() {
            return Err(loc.error(
                0..0,
                "no [[repos]]: a pipeline needs at least one repository",
            ));
        }
        let mut repos = Vec::new();
        if import.is_some() {
            repos.push(RepoSpec {
                name: "corpus".into(),
                source: RepoSource::Dir {
                    path: output_dir.join("import/corpus"),
                },
            });
        }
        for r in &raw.repos {
            let repo_name = r.name.get_ref().clone();
            if repo_name.is_empty()
                || !repo_name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(loc.error(
                    r.name.span(),
                    "repository names use only letters, digits, '-', '_' and '.'",
                ));
            }
            if repos.iter().any(|x: &RepoSpec| x.name == repo_name) {
                return Err(loc.error(
                    r.name.span(),
                    format!("repository `{repo_name}` is listed twice"),
                ));
            }
            let source = match (&r.git, &r.dir) {
                (Some(g), None) => RepoSource::Git {
                    path: root.join(g.get_ref()),
                    rev: r.rev.clone().unwrap_or_else(|| "HEAD".into()),
                },
                (None, Some(d)) => {
                    if r.rev.is_some() {
                        return Err(loc.error(d.span(), "`rev` applies to `git` repositories only"));
                    }
                    RepoSource::Dir {
                        path: root.join(d.get_ref()),
                    }
                }
                _ => {
                    return Err(loc.error(
                        r.name.span(),
                        format!("repository `{repo_name}` needs exactly one of `git` or `dir`"),
                    ))
                }
            };
            repos.push(RepoSpec {
                name: repo_name,
                source,
            });
        }

        let include = if raw.scan.include.is_empty() {
            None
        } else {
            Some(build_globs(&loc, &raw.scan.include)?)
        };
        let exclude = build_globs(&loc, &raw.scan.exclude)?;
        if raw.chunk.max_tokens < 16 {
            return Err(loc.key_error("chunk.max_tokens", "must be at least 16"));
        }
        if raw.index.k1 < 0.0 || !(0.0..=1.0).contains(&raw.index.b) {
            return Err(loc.key_error("index", "k1 must be >= 0 and b within [0, 1]"));
        }
        if raw.retrieve.top_k == 0 {
            return Err(loc.key_error("retrieve.top_k", "must be at least 1"));
        }
        if !(0.0..=1.0).contains(&raw.pack.lean) {
            return Err(loc.key_error("pack.lean", "must be within [0, 1]"));
        }
        if raw.pack.tokenizer != "approx" && !root.join(&raw.pack.tokenizer).is_file() {
            return Err(loc.key_error(
                "pack.tokenizer",
                format!(
                    "`approx` or a tokenizer.json file; {} does not exist",
                    raw.pack.tokenizer
                ),
            ));
        }
        let (embed_model_dir, embed_cache_dir) = match &raw.embed {
            Some(e) => {
                crate::models::Device::parse(&e.device)
                    .map_err(|m| loc.key_error("embed.device", m))?;
                let cache = match &e.cache_dir {
                    Some(c) => root.join(c),
                    None => output_dir
                        .parent()
                        .unwrap_or(Path::new("."))
                        .join(".embedding-cache"),
                };
                (Some(root.join(e.model.get_ref())), Some(cache))
            }
            None => (None, None),
        };

        let variants = expand_variants(&loc, &raw.variants)?;
        let baseline = match &raw.evaluate.baseline {
            Some(b) => {
                if !variants.iter().any(|v| &v.name == b.get_ref()) {
                    return Err(loc.error(
                        b.span(),
                        format!("baseline `{}` is not a variant", b.get_ref()),
                    ));
                }
                b.get_ref().clone()
            }
            None => variants.first().map(|v| v.name.clone()).unwrap_or_default(),
        };
        if variants.iter().any(|v| v.selector == Selector::Llm) && raw.extract.llm.is_none() {
            return Err(loc.key_error(
                "extract.llm",
                "a variant uses selector `llm` but [extract.llm] is missing",
            ));
        }

        Ok(Plan {
            name,
            config_path: path.to_path_buf(),
            root,
            output_dir,
            questions,
            repos,
            scan: raw.scan,
            include,
            exclude,
            chunk: raw.chunk,
            index: raw.index,
            embed: raw.embed,
            embed_model_dir,
            embed_cache_dir,
            retrieve: raw.retrieve,
            pack: raw.pack,
            extract: raw.extract,
            evaluate: raw.evaluate,
            baseline,
            variants,
            import,
        })
    }

    /// The repositories, by name.
    pub fn repo(&self, name: &str) -> Option<&RepoSpec> {
        self.repos.iter().find(|r| r.name == name)
    }
}

/// Removes `.` and resolves `..` lexically, so paths print the way users wrote them.
fn clean(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

fn build_globs(loc: &Locator, globs: &[Spanned<String>]) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        let glob =
            Glob::new(g.get_ref()).map_err(|e| loc.error(g.span(), format!("bad glob: {e}")))?;
        b.add(glob);
    }
    b.build().map_err(|e| loc.key_error("scan", e.to_string()))
}

fn expand_variants(loc: &Locator, raw: &[RawVariant]) -> Result<Vec<Variant>> {
    let mut out: Vec<Variant> = Vec::new();
    for v in raw {
        let retriever = parse_enum::<Retriever>(loc, &v.retriever, "bm25, dense, hybrid")?;
        let packer = parse_enum::<Packer>(loc, &v.packer, "rank, marginal-gain, compact")?;
        let selector = match &v.selector {
            Some(s) => parse_enum::<Selector>(loc, s, "lexical, oracle, llm")?,
            None => Selector::Lexical,
        };
        let weights = v.weights.clone().unwrap_or_default();
        for k in weights.keys() {
            if k != "bm25" && k != "dense" {
                return Err(loc.error(
                    v.name.span(),
                    format!("unknown weight `{k}`: use bm25 and dense"),
                ));
            }
        }
        let budgets: Vec<(String, usize)> = match (&v.budget, &v.budgets) {
            (Some(b), None) => vec![(v.name.get_ref().clone(), *b)],
            (None, Some(bs)) if !bs.get_ref().is_empty() => bs
                .get_ref()
                .iter()
                .map(|b| (format!("{}@{b}", v.name.get_ref()), *b))
                .collect(),
            (None, None) => vec![(v.name.get_ref().clone(), 1400)],
            _ => {
                return Err(loc.error(
                    v.name.span(),
                    "give either `budget` or a non-empty `budgets`, not both",
                ))
            }
        };
        for (name, budget) in budgets {
            if out.iter().any(|x| x.name == name) {
                return Err(loc.error(v.name.span(), format!("variant `{name}` is defined twice")));
            }
            if budget == 0 {
                return Err(loc.error(v.name.span(), "a budget must be at least 1 token"));
            }
            out.push(Variant {
                name,
                retriever,
                packer,
                budget,
                weight_bm25: *weights.get("bm25").unwrap_or(&1.0),
                weight_dense: *weights.get("dense").unwrap_or(&1.0),
                selector,
            });
        }
    }
    Ok(out)
}

fn parse_enum<T: serde::de::DeserializeOwned>(
    loc: &Locator,
    s: &Spanned<String>,
    allowed: &str,
) -> Result<T> {
    serde_json::from_value(serde_json::Value::String(s.get_ref().clone())).map_err(|_| {
        loc.error(
            s.span(),
            format!("unknown value `{}`; expected one of {allowed}", s.get_ref()),
        )
    })
}

/// Turns byte offsets of the TOML text into file:line:column:key errors.
struct Locator<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Locator<'_> {
    fn error(&self, span: Range<usize>, message: impl Into<String>) -> Error {
        let (line, column) = line_col(self.text, span.start);
        Error::Config {
            file: self.file.to_path_buf(),
            line,
            column,
            key: key_at(self.text, span.start),
            message: message.into(),
        }
    }

    /// An error about a key path, located at the key's first appearance.
    fn key_error(&self, key: &str, message: impl Into<String>) -> Error {
        let last = key.rsplit('.').next().unwrap_or(key);
        let section = key.split('.').next().unwrap_or(key);
        let header = format!("[{section}]");
        let start = self.text.find(&header).unwrap_or(0);
        let offset = self.text[start..]
            .lines()
            .scan(start, |pos, l| {
                let here = *pos;
                *pos += l.len() + 1;
                Some((here, l))
            })
            .find(|(_, l)| l.trim_start().starts_with(last))
            .map(|(p, _)| p)
            .unwrap_or(start);
        let (line, column) = line_col(self.text, offset);
        Error::Config {
            file: self.file.to_path_buf(),
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = offset - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, column)
}

/// The dotted key at `offset`: the enclosing `[table]` header plus the key on that line.
fn key_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line_end = text[offset..]
        .find('\n')
        .map(|i| offset + i)
        .unwrap_or(text.len());
    let line = text[line_start..line_end].trim();
    let mut header = String::new();
    let mut array_index: BTreeMap<String, usize> = BTreeMap::new();
    for l in text[..line_start].lines() {
        let t = l.trim();
        if let Some(h) = t.strip_prefix("[[").and_then(|t| t.split("]]").next()) {
            let n = array_index.entry(h.trim().to_string()).or_insert(0);
            *n += 1;
            header = format!("{}[{}]", h.trim(), *n - 1);
        } else if let Some(h) = t.strip_prefix('[').and_then(|t| t.split(']').next()) {
            header = h.trim().to_string();
        }
    }
    if line.starts_with('[') {
        return line
            .trim_matches(|c| c == '[' || c == ']')
            .trim()
            .to_string();
    }
    let key = line.split('=').next().unwrap_or("").trim();
    match (header.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => header,
        (false, false) => format!("{header}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Plan> {
        let dir = std::env::temp_dir();
        std::fs::create_dir_all(dir.join("some-repo")).unwrap();
        Plan::parse(&dir.join("p.toml"), text)
    }

    const BASE: &str = "[pipeline]\nname = \"t\"\n\n[[repos]]\nname = \"a\"\ndir = \"some-repo\"\n";

    #[test]
    fn defaults_fill_every_section() {
        let p = parse(BASE).unwrap();
        assert_eq!(p.chunk.max_tokens, 500);
        assert_eq!(p.index.k1, 1.2);
        assert_eq!(p.retrieve.rrf_k, 60.0);
        assert!(p.variants.is_empty());
        assert!(p.output_dir.ends_with("outputs/t"));
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let text = format!("{BASE}\n[scan]\nmax_file_bytes = 10\ninclde = [\"*.md\"]\n");
        let e = parse(&text).unwrap_err();
        match e {
            Error::Config {
                line, key, message, ..
            } => {
                assert_eq!(line, 10);
                assert_eq!(key, "scan.inclde");
                assert!(message.contains("unknown field"), "{message}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let text = format!("{BASE}\n[chunk]\nmax_tokens = \"many\"\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains(":9:") && e.contains("chunk.max_tokens"), "{e}");
    }

    #[test]
    fn bad_glob_and_repo_without_source() {
        let text = format!("{BASE}\n[scan]\nexclude = [\"a[\"]\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains(":9:") && e.contains("bad glob"), "{e}");
        let e = parse("[pipeline]\nname = \"t\"\n[[repos]]\nname = \"x\"\n").unwrap_err();
        assert!(
            e.to_string().contains(":4:") && e.to_string().contains("exactly one of"),
            "{e}"
        );
    }

    #[test]
    fn sweeps_expand_and_baseline_must_exist() {
        let text = format!(
            "{BASE}\n[[variants]]\nname = \"b\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudgets = [350, 700]\n\n[evaluate]\nbaseline = \"b@350\"\n"
        );
        let p = parse(&text).unwrap();
        let names: Vec<_> = p.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["b@350", "b@700"]);
        assert_eq!(p.variants[1].packer, Packer::Compact);
        let bad = text.replace("b@350\"", "nope\"");
        assert!(parse(&bad)
            .unwrap_err()
            .to_string()
            .contains("baseline `nope`"));
        let bad = text.replace("\"bm25\"", "\"bm52\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(
            e.contains(":10:") && e.contains("variants[0].retriever"),
            "{e}"
        );
    }
}
