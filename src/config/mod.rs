//! Pipeline TOML → checked [`Plan`]: typed sections with documented defaults, `deny_unknown_fields`,
//! and errors that name the file, line, column and key, all reported before any work starts.

mod budget;
mod derived;
mod expect;
mod import;
mod locate;
mod reference;
mod repos;
mod sections;
mod spec;
mod variants;

use crate::artifact::scope::Scope;
pub use budget::Budget;
pub use expect::{Bound, Expect, Metric};
pub use import::Import;
use import::{import_of, RawImport};
use locate::{clean, Locator};
pub use reference::reference;
pub use repos::{name_from_path, valid_name};
pub use sections::*;
pub use spec::{CompactOverrides, PackingSpec, RetrievalSpec, Variant};
pub use variants::*;
use variants::{expand_variants, RawVariant};

use crate::artifact::RemoteUrl;
use crate::error::Result;
use crate::text::tokens::Tokenizer;
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The raw file, exactly as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    pipeline: RawPipeline,
    #[serde(default)]
    repos: repos::RawRepos,
    #[serde(default)]
    scan: ScanConfig,
    #[serde(default)]
    chunk: ChunkConfig,
    /// Named chunkers besides `[chunk]`, for variants that name one (`chunker = "…"`).
    #[serde(default)]
    chunkers: std::collections::BTreeMap<String, ChunkConfig>,
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
    /// Figures the run must reach (see [`Expect`]).
    #[serde(default)]
    expect: Vec<expect::RawExpect>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    name: Spanned<String>,
    /// Directory that relative paths in this file are resolved against, itself relative to the file.
    #[serde(default)]
    root: Option<String>,
    /// Where artifacts go; default `outputs/<name>`. An `s3://bucket/prefix` URL puts them on
    /// S3-compatible object storage (credentials and endpoint from the AWS environment
    /// variables), worked on in a local mirror under `mirror_dir`.
    #[serde(default)]
    output_dir: Option<String>,
    /// Local mirrors of `s3://` locations (the output directory, the embedding cache):
    /// `s3://bucket/prefix` is worked on in `<mirror_dir>/bucket/prefix`; default `outputs/.s3`.
    #[serde(default)]
    mirror_dir: Option<String>,
    /// Question set (JSONL), see `dataset.rs`.
    #[serde(default)]
    questions: Option<Spanned<String>>,
}

/// How a repository is read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum RepoSource {
    /// A git repository (bare or not), read at each of its revisions without a checkout.
    Git { path: PathBuf },
    /// A plain directory, read as it is (one revision, [`WORKTREE`]).
    Dir { path: PathBuf },
}

/// The rev of a plain directory's one revision.
pub const WORKTREE: &str = "(worktree)";

/// One revision a repository is read at, and the scope its questions search: the repository's
/// own name for its `rev` (default `HEAD`), `<name>@<label>` for each of `revs` and for each rev a
/// question names (see [`Scope::at`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Revision {
    pub scope: Scope,
    pub rev: String,
}

/// One checked repository. Its files, chunks, vectors and index are kept once for all its
/// revisions (by blob); each revision is a scope of its own.
#[derive(Debug, Clone, Serialize)]
pub struct RepoSpec {
    pub name: String,
    pub source: RepoSource,
    pub revisions: Vec<Revision>,
}

impl RepoSpec {
    /// Whether the repository is read at more than its own one revision: then its partitions hold
    /// every revision's files once, and `scope_members` says which belong to each.
    pub fn many(&self) -> bool {
        self.revisions.len() != 1 || self.revisions[0].scope != *self.name
    }
}

/// Shard `index` of `count` (0-based) of a run split by repository (see `crate::pipeline::shard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// The checked configuration every stage works from.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub config_path: PathBuf,
    /// Directory relative paths of the config were resolved against.
    pub root: PathBuf,
    /// Where the stages write: the output directory, or the local mirror of `remote`.
    pub output_dir: PathBuf,
    /// The `s3://` output location the mirror is published to, when `output_dir` is one.
    pub remote: Option<RemoteUrl>,
    pub questions: Option<PathBuf>,
    pub repos: Vec<RepoSpec>,
    pub scan: ScanConfig,
    pub include: Option<GlobSet>,
    pub exclude: GlobSet,
    pub chunk: ChunkConfig,
    /// The named chunkers variants use (`[chunkers.<name>]`), each with its own chunk
    /// partitions (`repo~name`), index and vectors; declared ones no variant names are not run.
    pub chunkers: std::collections::BTreeMap<String, ChunkConfig>,
    pub index: IndexConfig,
    /// `[embed]` and the directories it resolves to; `None`: dense and hybrid variants do not run.
    pub embed: Option<EmbedPlan>,
    pub retrieve: RetrieveConfig,
    pub pack: PackConfig,
    pub extract: ExtractConfig,
    pub evaluate: EvaluateConfig,
    pub baseline: String,
    pub variants: Vec<Variant>,
    /// The figures every run of this pipeline is checked against.
    pub expect: Vec<Expect>,
    /// The dataset this pipeline imports before running.
    pub import: Option<Import>,
    /// The shard this plan runs (`--shard`): its repositories only, no cross-repository work.
    pub shard: Option<Shard>,
}

impl Plan {
    /// Where the `reader` selector caches its readings: `[extract.reader] cache_dir` (relative to
    /// the root), else `.reader-cache` beside the output directory.
    pub fn reader_cache_dir(&self) -> PathBuf {
        match self
            .extract
            .reader
            .as_ref()
            .and_then(|r| r.cache_dir.as_ref())
        {
            Some(d) => self.root.join(d),
            None => self
                .output_dir
                .parent()
                .unwrap_or(Path::new("."))
                .join(".reader-cache"),
        }
    }

    /// Reads and checks `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Plan> {
        let path = path.as_ref();
        let text = crate::error::read_text(path)?;
        Plan::parse(path, &text)
    }

    /// Checks `text` as if read from `path` (relative paths resolve against `path`'s directory).
    pub fn parse(path: &Path, text: &str) -> Result<Plan> {
        let loc = Locator { file: path, text };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            loc.error(span, e.message().to_string())
        })?;
        // Relative paths resolve against the file's directory, made absolute and canonical, so
        // that `pipelines/x.toml` and `/abs/pipelines/x.toml` give the same plan (and the same
        // fingerprints: nothing re-runs because of how the path was typed).
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = std::fs::canonicalize(&base).unwrap_or(base);
        let root = clean(&match &raw.pipeline.root {
            Some(r) => base.join(r),
            None => base,
        });
        let name = raw.pipeline.name.get_ref().clone();
        if !repos::valid_name(&name) {
            return Err(loc.error(
                raw.pipeline.name.span(),
                "name must be non-empty, not `.` or `..`, and use only letters, digits, '-', '_' and '.'",
            ));
        }
        let mirror_root = clean(&match &raw.pipeline.mirror_dir {
            Some(d) => root.join(d),
            None => root.join("outputs").join(".s3"),
        });
        let location = |key: &str, text: &str| location_of(&loc, &root, &mirror_root, key, text);
        let (output_dir, remote) = match &raw.pipeline.output_dir {
            Some(d) => location("pipeline.output_dir", d)?,
            None => (root.join("outputs").join(&name), None),
        };
        let import = match &raw.import {
            None => None,
            Some(imp) => Some(import_of(&loc, &root, path, imp, &raw)?),
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

        let repos = repos_of(
            &loc,
            &root,
            &raw,
            import.as_ref(),
            &output_dir,
            questions.as_deref(),
        )?;

        let include = if raw.scan.include.is_empty() {
            None
        } else {
            Some(build_globs(&loc, &raw.scan.include)?)
        };
        let exclude = build_globs(&loc, &raw.scan.exclude)?;
        check_sections(&loc, &root, &raw)?;
        let embed = match raw.embed.clone() {
            Some(e) => Some(embed_plan(
                e,
                &loc,
                &root,
                &mirror_root,
                &output_dir,
                remote.as_ref(),
            )?),
            None => None,
        };

        let variants = expand_variants(&loc, &raw.variants, &raw.chunkers)?;
        let expect = expect::expand_expects(&loc, &raw.expect, &variants)?;
        let baseline = baseline_of(&loc, &raw, &variants)?;

        Ok(Plan {
            name,
            config_path: path.to_path_buf(),
            root,
            output_dir,
            remote,
            questions,
            repos,
            scan: raw.scan,
            include,
            exclude,
            chunk: raw.chunk,
            chunkers: used_chunkers(raw.chunkers, &variants),
            index: raw.index,
            embed,
            retrieve: raw.retrieve,
            pack: raw.pack,
            extract: raw.extract,
            evaluate: raw.evaluate,
            baseline,
            variants,
            expect,
            import,
            shard: None,
        })
    }
}

/// A location key's value: a local path (relative to `root`), or an `s3://` URL worked on in its
/// mirror under `mirror_root`.
fn location_of(
    loc: &Locator,
    root: &Path,
    mirror_root: &Path,
    key: &str,
    text: &str,
) -> Result<(PathBuf, Option<RemoteUrl>)> {
    match RemoteUrl::parse(text) {
        None => Ok((clean(&root.join(text)), None)),
        Some(Ok(url)) => Ok((url.mirror(mirror_root), Some(url))),
        Some(Err(why)) => Err(loc.key_error(key, why)),
    }
}

/// The named chunkers some variant uses; declared ones no variant names are not run.
fn used_chunkers(
    declared: std::collections::BTreeMap<String, ChunkConfig>,
    variants: &[Variant],
) -> std::collections::BTreeMap<String, ChunkConfig> {
    let used: std::collections::BTreeSet<&str> = variants
        .iter()
        .filter_map(|v| v.retrieval.chunker.as_deref())
        .collect();
    declared
        .into_iter()
        .filter(|(n, _)| used.contains(n.as_str()))
        .collect()
}

/// `[embed]` with its model directory and its vector cache (local, or the mirror of an `s3://`
/// cache; by default beside the output directory, in the same bucket when that is remote).
fn embed_plan(
    e: EmbedConfig,
    loc: &Locator,
    root: &Path,
    mirror_root: &Path,
    output_dir: &Path,
    remote: Option<&RemoteUrl>,
) -> Result<EmbedPlan> {
    // Beside the output directory by default: in the same bucket when that is remote.
    let (cache, cache_remote) = match (&e.cache_dir, remote) {
        (Some(c), _) => location_of(loc, root, mirror_root, "embed.cache_dir", c)?,
        (None, Some(url)) => {
            let url = url.parent().join(".embedding-cache");
            (url.mirror(mirror_root), Some(url))
        }
        (None, None) => (
            output_dir
                .parent()
                .unwrap_or(Path::new("."))
                .join(".embedding-cache"),
            None,
        ),
    };
    Ok(EmbedPlan {
        model_dir: root.join(&e.model),
        cache_dir: cache,
        cache_remote,
        config: e,
    })
}

/// `[embed]`, checked: its settings and the directories they resolve to.
#[derive(Debug, Clone)]
pub struct EmbedPlan {
    pub config: EmbedConfig,
    /// The model directory (config.json, tokenizer.json, model.safetensors).
    pub model_dir: PathBuf,
    /// The vector cache: a local directory, or the mirror of `cache_remote`.
    pub cache_dir: PathBuf,
    /// The `s3://` cache `cache_dir` mirrors, when `[embed] cache_dir` is one.
    pub cache_remote: Option<RemoteUrl>,
}

/// The plan's repositories: an import's (a SWE-bench instance file's, at their commits, or the
/// imported corpus), then `[[repos]]`, with the revisions the questions name joined to their own.
fn repos_of(
    loc: &Locator,
    root: &Path,
    raw: &RawConfig,
    import: Option<&Import>,
    output_dir: &Path,
    questions: Option<&Path>,
) -> Result<Vec<RepoSpec>> {
    if raw.repos.is_empty() && import.is_none() {
        return Err(loc.error(
            0..0,
            "no [[repos]]: a pipeline needs at least one repository",
        ));
    }
    let mut first = Vec::new();
    if let Some(Import {
        swebench: Some(opts),
        source,
        ..
    }) = import
    {
        // The repositories and revisions come from the instance file itself.
        let instances = crate::sources::swebench::read_instances(source)?;
        for (name, git, revs) in crate::sources::swebench::repositories(&instances, &opts.repos) {
            let revisions = revs
                .iter()
                .map(|r| Revision {
                    scope: Scope::at(&name, r),
                    rev: r.clone(),
                })
                .collect();
            first.push(RepoSpec {
                name,
                source: RepoSource::Git { path: git },
                revisions,
            });
        }
    } else if import.is_some() {
        first.push(RepoSpec {
            name: "corpus".into(),
            source: RepoSource::Dir {
                path: output_dir.join("import/corpus"),
            },
            revisions: vec![Revision {
                scope: Scope::repo("corpus"),
                rev: WORKTREE.into(),
            }],
        });
    }
    let mut repos = repos::expand(loc, root, &raw.repos, first)?;
    // Revisions the questions name join their repositories' own.
    if let (Some(q), None) = (questions, import) {
        let asked = crate::evaluation::dataset::question_revisions(q)?;
        repos::add_asked(&mut repos, &asked).map_err(|m| {
            loc.error(
                raw.pipeline.questions.as_ref().map_or(0..0, |q| q.span()),
                m,
            )
        })?;
    }
    Ok(repos)
}

/// The sections' own checks: chunk sizes, chunker names, BM25 parameters, pool depth, packing
/// shares, the token counter, then every range (see [`check_ranges`]).
fn check_sections(loc: &Locator, root: &Path, raw: &RawConfig) -> Result<()> {
    for name in raw.chunkers.keys() {
        if name.is_empty()
            || !name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_".contains(ch))
        {
            return Err(loc.key_error(
                &format!("chunkers.{name}"),
                "a chunker's name is letters, digits, `-` and `_`",
            ));
        }
    }
    if let Tokenizer::File(file) = &raw.pack.tokenizer {
        if !root.join(file).is_file() {
            return Err(loc.key_error(
                "pack.tokenizer",
                format!(
                    "`approx`, `chars4` or a tokenizer.json file; {} does not exist",
                    file.display()
                ),
            ));
        }
    }
    // Every declared range (see `sections.rs`), section by section.
    let chunkers = raw
        .chunkers
        .iter()
        .map(|(name, c)| c.check(&format!("chunkers.{name}")));
    let found = [
        raw.scan.out_of_range(),
        raw.chunk.out_of_range(),
        raw.index.out_of_range(),
        raw.embed.as_ref().and_then(|e| e.out_of_range()),
        raw.retrieve.out_of_range(),
        raw.pack.out_of_range(),
        raw.extract.out_of_range(),
        raw.extract.llm.as_ref().and_then(|l| l.out_of_range()),
        raw.extract.reader.as_ref().and_then(|r| r.out_of_range()),
        raw.evaluate.out_of_range(),
    ]
    .into_iter()
    .chain(chunkers)
    .flatten()
    .next();
    match found {
        Some((key, why)) => Err(loc.key_error(&key, why)),
        None => Ok(()),
    }
}

/// The baseline variant (`[evaluate] baseline`, else the first), after the checks that tie
/// variants to sections: `unit_dense` needs `[embed]`, an `llm` selector `[extract.llm]`.
fn baseline_of(loc: &Locator, raw: &RawConfig, variants: &[Variant]) -> Result<String> {
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
    if let Some(v) = variants.iter().find(|v| v.packing.unit_dense > 0.0) {
        if raw.embed.is_none() {
            return Err(loc.key_error(
                "embed",
                format!(
                    "variant `{}` sets `unit_dense`, whose unit vectors come from the [embed] \
                     model, but [embed] is missing",
                    v.name
                ),
            ));
        }
    }
    if variants.iter().any(|v| v.selector == Selector::Llm) && raw.extract.llm.is_none() {
        return Err(loc.key_error(
            "extract.llm",
            "a variant uses selector `llm` but [extract.llm] is missing",
        ));
    }
    if variants.iter().any(|v| v.selector == Selector::Reader) && raw.extract.reader.is_none() {
        return Err(loc.key_error(
            "extract.reader",
            "a variant uses selector `reader` but [extract.reader] is missing",
        ));
    }
    Ok(baseline)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    pub(super) fn parse(text: &str) -> Result<Plan> {
        let dir = std::env::temp_dir();
        std::fs::create_dir_all(dir.join("some-repo")).unwrap();
        Plan::parse(&dir.join("p.toml"), text)
    }

    pub(super) const BASE: &str =
        "[pipeline]\nname = \"t\"\n\n[[repos]]\nname = \"a\"\ndir = \"some-repo\"\n";

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
    fn an_s3_output_dir_is_worked_on_in_its_mirror() {
        let text = BASE.replace(
            "name = \"t\"\n",
            "name = \"t\"\noutput_dir = \"s3://evals/nightly/t\"\nmirror_dir = \"m\"\n",
        );
        let p = parse(&format!("{text}\n[embed]\nmodel = \"models/x\"\n")).unwrap();
        assert_eq!(
            p.remote.as_ref().unwrap().to_string(),
            "s3://evals/nightly/t"
        );
        assert!(
            p.output_dir.ends_with("m/evals/nightly/t"),
            "{:?}",
            p.output_dir
        );
        let e = p.embed.as_ref().unwrap();
        let cache = e.cache_remote.as_ref().unwrap();
        assert_eq!(cache.to_string(), "s3://evals/nightly/.embedding-cache");
        assert!(e.cache_dir.ends_with("m/evals/nightly/.embedding-cache"));
        let bad = parse(&text.replace("s3://evals", "s3://E"))
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("pipeline.output_dir") && bad.contains("bucket"),
            "{bad}"
        );
    }

    #[test]
    fn embed_dtype_is_checked() {
        let e = parse(&format!("{BASE}\n[embed]\nmodel = \"m\"\ndtype = \"f8\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("embed.dtype") && e.contains("f32, f16, bf16 or int8"),
            "{e}"
        );
        let p = parse(&format!(
            "{BASE}\n[embed]\nmodel = \"m\"\ndtype = \"bf16\"\n"
        ))
        .unwrap();
        assert_eq!(
            p.embed.unwrap().config.dtype,
            Some(crate::models::Precision::Bf16)
        );
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
}
