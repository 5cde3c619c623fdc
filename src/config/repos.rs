//! The repositories of a pipeline: `[[repos]]` entries (one repository each, or a `glob` over
//! directories), or a list file (`repos = "repos.tsv"`), expanded into checked [`RepoSpec`]s with
//! unique, safe names. Errors name the file and line or key.

use super::locate::{clean, Locator};
use super::{RepoSource, RepoSpec, Revision, WORKTREE};
use crate::artifact::scope::Scope;
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
    /// Several revisions of a git repository, each its own scope `<name>@<label>`; their files,
    /// chunks, vectors and index are kept once, by blob.
    #[serde(default)]
    revs: Option<Spanned<Vec<String>>>,
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

pub use crate::artifact::name_from_path;

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
    fn add(&mut self, name: String, source: Source) -> std::result::Result<(), String> {
        if !valid_name(&name) {
            return Err(format!(
                "repository name `{name}`: use only letters, digits, '-', '_' and '.'"
            ));
        }
        if !self.seen.insert(name.clone()) {
            return Err(format!("repository `{name}` is listed twice"));
        }
        self.out.push(source.spec(name)?);
        Ok(())
    }

    /// Adds a repository with a derived name, suffixed `-2`, `-3`, … until unique.
    fn add_derived(&mut self, base: String, source: Source) -> std::result::Result<(), String> {
        let mut name = base.clone();
        let mut n = 1;
        while self.seen.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        self.seen.insert(name.clone());
        self.out.push(source.spec(name)?);
        Ok(())
    }
}

/// A repository's source and revisions as written, before it has its name.
struct Source {
    source: RepoSource,
    rev: Option<String>,
    revs: Option<Vec<String>>,
}

impl Source {
    fn spec(self, name: String) -> std::result::Result<RepoSpec, String> {
        let revisions = match (&self.source, self.revs) {
            (RepoSource::Dir { .. }, _) => vec![Revision {
                scope: Scope::repo(&name),
                rev: WORKTREE.into(),
            }],
            (RepoSource::Git { .. }, Some(revs)) => {
                let mut out: Vec<Revision> = Vec::new();
                for rev in revs {
                    push_revision(&mut out, &name, rev)?;
                }
                out
            }
            (RepoSource::Git { .. }, None) => vec![Revision {
                scope: Scope::repo(&name),
                rev: self.rev.unwrap_or_else(|| "HEAD".into()),
            }],
        };
        Ok(RepoSpec {
            name,
            source: self.source,
            revisions,
        })
    }
}

/// Adds revision `rev` of repository `name` as scope `name@label`; the same rev twice is one
/// revision, two revs with the same label are an error.
fn push_revision(
    out: &mut Vec<Revision>,
    name: &str,
    rev: String,
) -> std::result::Result<(), String> {
    if rev.trim().is_empty() {
        return Err(format!("repository `{name}`: an empty revision"));
    }
    let scope = Scope::at(name, &rev);
    match out.iter().find(|r| r.scope == scope) {
        Some(r) if r.rev == rev => {}
        Some(r) => {
            return Err(format!(
                "repository `{name}`: revisions `{}` and `{rev}` would both be scope `{scope}`",
                r.rev
            ))
        }
        None => out.push(Revision { scope, rev }),
    }
    Ok(())
}

/// Adds the revisions the questions name, (repository, rev) pairs from
/// [`crate::evaluation::dataset::question_revisions`], to their repositories. A repository whose every question
/// names a revision, and which sets neither `rev` nor `revs` itself, is not read at `HEAD` too.
pub(super) fn add_asked(
    repos: &mut [RepoSpec],
    asked: &[(String, Option<String>)],
) -> std::result::Result<(), String> {
    for repo in repos.iter_mut() {
        let mine: Vec<&Option<String>> = asked
            .iter()
            .filter(|(r, _)| *r == repo.name)
            .map(|(_, rev)| rev)
            .collect();
        if mine.iter().all(|r| r.is_none()) {
            continue;
        }
        if !matches!(repo.source, RepoSource::Git { .. }) {
            return Err(format!(
                "a question names a revision of `{}`, which is a plain directory",
                repo.name
            ));
        }
        let implicit = repo.revisions.len() == 1
            && repo.revisions[0].scope == repo.name
            && repo.revisions[0].rev == "HEAD";
        if implicit && mine.iter().all(|r| r.is_some()) {
            repo.revisions.clear();
        }
        for rev in mine.into_iter().flatten() {
            push_revision(&mut repo.revisions, &repo.name, rev.clone())?;
        }
    }
    Ok(())
}

fn source(kind: &str, path: PathBuf, rev: Option<String>, revs: Option<Vec<String>>) -> Source {
    let source = if kind == "git" {
        RepoSource::Git { path }
    } else {
        RepoSource::Dir { path }
    };
    Source { source, rev, revs }
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
    let revs = r.revs.as_ref().map(|v| v.get_ref().clone());
    if let Some(v) = &r.revs {
        if kind == "dir" || kind == "list" {
            return Err(loc.error(
                v.span(),
                "`revs` applies to `git` and `glob` repositories only",
            ));
        }
        if r.rev.is_some() {
            return Err(loc.error(v.span(), "give `rev` or `revs`, not both"));
        }
        if v.get_ref().is_empty() {
            return Err(loc.error(v.span(), "`revs` is empty: give at least one revision"));
        }
    }
    let revs_span = r.revs.as_ref().map_or(span.clone(), |v| v.span());
    match kind {
        "git" | "dir" => {
            let Some(name) = &r.name else {
                return Err(loc.error(span, format!("a `{kind}` repository needs a `name`")));
            };
            let src = source(kind, root.join(value.get_ref()), r.rev.clone(), revs);
            names.add(name.get_ref().clone(), src).map_err(|m| {
                let at = if m.contains("revision") {
                    revs_span.clone()
                } else {
                    name.span()
                };
                loc.error(at, m)
            })
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
                let revs = if kind == "git" { revs.clone() } else { None };
                names
                    .add_derived(base, source(kind, p, r.rev.clone(), revs))
                    .map_err(|m| loc.error(revs_span.clone(), m))?;
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
        let src = source(kind, path.clone(), rev, None);
        match cell("name") {
            Some(name) => names.add(name, src).map_err(|m| err(n, m))?,
            None => names
                .add_derived(name_from_path(&path), src)
                .map_err(|m| err(n, m))?,
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
