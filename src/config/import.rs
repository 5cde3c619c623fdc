//! `[import]`: a pipeline whose repository and questions come from a dataset (BEIR, CoSQA or
//! SWE-bench), imported into `<output_dir>/import/` before the stages run.

use super::locate::{clean, parse_enum, Locator};
use super::RawConfig;
use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// `[import]`: the pipeline's repository and questions come from a standard dataset layout,
/// imported into `<output_dir>/import/` before the stages run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawImport {
    /// `beir`, `cosqa` or `swebench`.
    format: Spanned<String>,
    /// The dataset directory (beir, cosqa), or the instance file (swebench: JSONL, a JSON array
    /// or Parquet).
    source: Spanned<String>,
    /// swebench: the directory the repository mirrors are under.
    #[serde(default)]
    repos: Option<Spanned<String>>,
    /// swebench: the split its questions go in (default `test`).
    #[serde(default)]
    split: Option<String>,
    /// swebench: append each instance's hints to its question (default false: hints can give the
    /// fix away).
    #[serde(default)]
    hints: bool,
}

/// A dataset the pipeline imports into `<output_dir>/import/` before its stages run.
#[derive(Debug, Clone)]
pub struct Import {
    pub format: crate::sources::import::Format,
    pub source: PathBuf,
    /// For swebench: the mirrors, split and hints.
    pub swebench: Option<crate::sources::swebench::Options>,
}

/// Checks an `[import]` section: its format, source and (swebench) mirrors.
pub(super) fn import_of(
    loc: &Locator,
    root: &Path,
    path: &Path,
    imp: &RawImport,
    raw: &RawConfig,
) -> Result<Import> {
    let format = parse_enum::<crate::sources::import::Format>(loc, &imp.format)?;
    let source = clean(&root.join(imp.source.get_ref()));
    if !raw.repos.is_empty() || raw.pipeline.questions.is_some() {
        return Err(loc.error(
            imp.format.span(),
            "an [import] pipeline takes its repository and questions from the import: drop [[repos]] and `questions`",
        ));
    }
    let swebench = format == crate::sources::import::Format::Swebench;
    if (swebench && !source.is_file()) || (!swebench && !source.is_dir()) {
        return Err(Error::Skipped(format!(
            "{}: skipped, the dataset to import is not here: {} does not exist",
            path.display(),
            source.display()
        )));
    }
    let opts = if swebench {
        let Some(repos) = &imp.repos else {
            return Err(loc.error(
                imp.format.span(),
                "a swebench import needs `repos`: the directory of the repository mirrors",
            ));
        };
        let dir = clean(&root.join(repos.get_ref()));
        if !dir.is_dir() {
            return Err(Error::Skipped(format!(
                "{}: skipped, the repository mirrors are not here: {} does not exist",
                path.display(),
                dir.display()
            )));
        }
        let split = imp.split.clone().unwrap_or_else(|| "test".into());
        if split.is_empty()
            || !split
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
        {
            return Err(loc.key_error("import.split", "a plain word such as dev or test"));
        }
        Some(crate::sources::swebench::Options {
            repos: dir,
            split,
            hints: imp.hints,
        })
    } else {
        if let Some(r) = &imp.repos {
            return Err(loc.error(r.span(), "`repos` applies to swebench imports only"));
        }
        None
    };
    Ok(Import {
        format,
        source,
        swebench: opts,
    })
}
