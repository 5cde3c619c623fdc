//! The repositories of a pipeline: `[[repos]]` entries (one repository each, or a `glob` over
//! directories), or a list file (`repos = "repos.tsv"`), expanded into checked [`RepoSpec`]s with
//! unique, safe names. Errors name the file and line or key.

use super::locate::{clean, Locator};
use super::{RepoSource, RepoSpec};
use crate::error::{Error, IoContext, Result};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// One `[[repos]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRepo {
    #[serde(default)]
    name: Option<Spanned<String>>,
    /// A git repository (bare or not), read at `rev` without a checkout.
    #[serde(default)]
    git: Option<Spanned<String>>,
    /// A plain directory, walked honouring `.gitignore`.
    #[serde(default)]
    dir: Option<Spanned<String>>,
    /// Every directory matching this pattern (git repositories read as git, others as plain
    /// directories), named after its last path component.
    #[serde(default)]
    glob: Option<Spanned<String>>,
    /// A list file, as `repos = "…"` takes.
    #[serde(default)]
    list: Option<Spanned<String>>,
    #[serde(default)]
    rev: Option<String>,
}

/// `repos`: an array of `[[repos]]` tables, or the path of a list file.
#[derive(Debug, Default)]
pub(super) enum RawRepos {
    #[default]
    None,
    Entries(Vec<RawRepo>),
    File(String),
}

impl<'de> Deserialize<'de> for RawRepos {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<RawRepos, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawRepos;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("[[repos]] tables, or the path of a repository list file")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<RawRepos, E> {
                Ok(RawRepos::File(v.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<RawRepos, A::Error> {
                let mut out = Vec::new();
                while let Some(r) = seq.next_element::<RawRepo>()? {
                    out.push(r);
                }
                Ok(RawRepos::Entries(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl RawRepos {
    pub(super) fn is_empty(&self) -> bool {
        match self {
            RawRepos::None => true,
            RawRepos::Entries(e) => e.is_empty(),
            RawRepos::File(_) => false,
        }
    }
}

/// Whether `name` is a valid repository name: letters, digits, `-`, `_`, `.`, not `.` or `..`.
pub fn valid_name(name: &str) -> bool {
    crate::artifact::plain_name(name)
}

/// A repository name derived from a path: its last component without `.git`, with every other
/// character than letters, digits, `-`, `_`, `.` replaced by `_`.
pub fn name_from_path(p: &Path) -> String {
    let last = p
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let last = last.strip_suffix(".git").unwrap_or(&last);
    let mut name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !valid_name(&name) {
        name = format!("repo{}", name.replace('.', "_"));
    }
    name
}

/// Whether `p` looks like a git repository (a work tree with `.git`, or a bare one).
fn is_git(p: &Path) -> bool {
    p.join(".git").exists() || (p.join("HEAD").is_file() && p.join("objects").is_dir())
}

/// Collects repositories, keeping names unique.
struct Names {
    seen: HashSet<String>,
    out: Vec<RepoSpec>,
}

impl Names {
    /// Adds an explicitly named repository; a clash is the caller's error.
    fn add(&mut self, name: String, source: RepoSource) -> std::result::Result<(), String> {
        if !valid_name(&name) {
            return Err(format!(
                "repository name `{name}`: use only letters, digits, '-', '_' and '.'"
            ));
        }
        if !self.seen.insert(name.clone()) {
            return Err(format!("repository `{name}` is listed twice"));
        }
        self.out.push(RepoSpec { name, source });
        Ok(())
    }

    /// Adds a repository with a derived name, suffixed `-2`, `-3`, … until unique.
    fn add_derived(&mut self, base: String, source: RepoSource) {
        let mut name = base.clone();
        let mut n = 1;
        while self.seen.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        self.seen.insert(name.clone());
        self.out.push(RepoSpec { name, source });
    }
}

fn source(kind: &str, path: PathBuf, rev: Option<String>) -> RepoSource {
    if kind == "git" {
        RepoSource::Git {
            path,
            rev: rev.unwrap_or_else(|| "HEAD".into()),
        }
    } else {
        RepoSource::Dir { path }
    }
}

/// Expands the raw repositories, resolving paths against `root`.
pub(super) fn expand(
    loc: &Locator,
    root: &Path,
    raw: &RawRepos,
    first: Vec<RepoSpec>,
) -> Result<Vec<RepoSpec>> {
    let mut names = Names {
        seen: first.iter().map(|r| r.name.clone()).collect(),
        out: first,
    };
    match raw {
        RawRepos::None => {}
        RawRepos::File(f) => read_list(&clean(&root.join(f)), &mut names)?,
        RawRepos::Entries(entries) => {
            for r in entries {
                entry(loc, root, r, &mut names)?;
            }
        }
    }
    Ok(names.out)
}

fn entry(loc: &Locator, root: &Path, r: &RawRepo, names: &mut Names) -> Result<()> {
    let given = [
        r.git.as_ref().map(|s| ("git", s)),
        r.dir.as_ref().map(|s| ("dir", s)),
        r.glob.as_ref().map(|s| ("glob", s)),
        r.list.as_ref().map(|s| ("list", s)),
    ];
    let given: Vec<(&str, &Spanned<String>)> = given.into_iter().flatten().collect();
    let span = r
        .name
        .as_ref()
        .map(|n| n.span())
        .or_else(|| given.first().map(|(_, s)| s.span()))
        .unwrap_or(0..0);
    let [(kind, value)] = given[..] else {
        return Err(loc.error(
            span,
            "a [[repos]] entry needs exactly one of `git`, `dir`, `glob` or `list`",
        ));
    };
    if r.rev.is_some() && (kind == "dir" || kind == "list") {
        return Err(loc.error(
            value.span(),
            "`rev` applies to `git` and `glob` repositories only",
        ));
    }
    match kind {
        "git" | "dir" => {
            let Some(name) = &r.name else {
                return Err(loc.error(span, format!("a `{kind}` repository needs a `name`")));
            };
            let src = source(kind, root.join(value.get_ref()), r.rev.clone());
            names
                .add(name.get_ref().clone(), src)
                .map_err(|m| loc.error(name.span(), m))
        }
        _ => {
            if let Some(name) = &r.name {
                return Err(loc.error(
                    name.span(),
                    format!("`{kind}` entries name their repositories themselves: drop `name`"),
                ));
            }
            if kind == "list" {
                return read_list(&clean(&root.join(value.get_ref())), names);
            }
            let pattern = root.join(value.get_ref()).to_string_lossy().to_string();
            let paths = glob::glob(&pattern)
                .map_err(|e| loc.error(value.span(), format!("bad glob: {e}")))?;
            let mut found: Vec<PathBuf> = paths
                .filter_map(|p| p.ok())
                .filter(|p| p.is_dir())
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(loc.error(value.span(), format!("`{pattern}` matches no directory")));
            }
            for p in found {
                let kind = if is_git(&p) { "git" } else { "dir" };
                let base = name_from_path(&p);
                names.add_derived(base, source(kind, p, r.rev.clone()));
            }
            Ok(())
        }
    }
}

/// Reads a repository list: tab-separated, a header line naming the columns (`name`, `git`,
/// `dir`, `rev`; `name` optional), then one repository a line with exactly one of `git` or
/// `dir`; blank lines and lines starting with `#` are skipped. Relative paths resolve against
/// the list file's directory; an empty or missing name is derived from the path.
fn read_list(file: &Path, names: &mut Names) -> Result<()> {
    let text = std::fs::read_to_string(file).at(file)?;
    let err = |line: usize, message: String| Error::Dataset {
        file: file.to_path_buf(),
        line,
        message,
    };
    let base = file.parent().unwrap_or(Path::new("."));
    let mut header: Option<Vec<String>> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let cells: Vec<&str> = line.split('\t').map(str::trim).collect();
        let Some(cols) = &header else {
            let cols: Vec<String> = cells.iter().map(|c| c.to_ascii_lowercase()).collect();
            for c in &cols {
                if !["name", "git", "dir", "rev"].contains(&c.as_str()) {
                    return Err(err(
                        n,
                        format!("unknown column `{c}` in the header; columns are name, git, dir, rev (tab-separated)"),
                    ));
                }
            }
            if !cols.iter().any(|c| c == "git" || c == "dir") {
                return Err(err(
                    n,
                    "the header needs a `git` or `dir` column (tab-separated)".into(),
                ));
            }
            header = Some(cols);
            continue;
        };
        if cells.len() > cols.len() {
            return Err(err(
                n,
                format!("{} cells but {} columns", cells.len(), cols.len()),
            ));
        }
        let cell = |c: &str| {
            cols.iter()
                .position(|x| x == c)
                .and_then(|i| cells.get(i))
                .filter(|v| !v.is_empty())
                .map(|v| v.to_string())
        };
        let (kind, path) = match (cell("git"), cell("dir")) {
            (Some(g), None) => ("git", g),
            (None, Some(d)) => ("dir", d),
            _ => {
                return Err(err(
                    n,
                    "a repository needs exactly one of `git` or `dir`".into(),
                ))
            }
        };
        let rev = cell("rev");
        if rev.is_some() && kind == "dir" {
            return Err(err(n, "`rev` applies to `git` repositories only".into()));
        }
        let path = clean(&base.join(&path));
        let src = source(kind, path.clone(), rev);
        match cell("name") {
            Some(name) => names.add(name, src).map_err(|m| err(n, m))?,
            None => names.add_derived(name_from_path(&path), src),
        }
    }
    if header.is_none() {
        return Err(err(1, "no header line (name, git or dir, rev)".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_are_safe() {
        assert_eq!(name_from_path(Path::new("/m/serde.git")), "serde");
        assert_eq!(name_from_path(Path::new("/m/a b+c")), "a_b_c");
        assert_eq!(name_from_path(Path::new("/m/..git")), "repo_");
        assert!(valid_name(&name_from_path(Path::new("/"))));
        assert!(!valid_name("..") && !valid_name("a/b") && valid_name("x-1.2_y"));
    }
}
