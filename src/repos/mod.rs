//! Reading repositories: a git repository's revisions (resolved, listed from the tree alone,
//! blobs read only when asked for) and plain directories (walked honouring `.gitignore`), and
//! one file's text at a revision. The scan stage decides what to read; `extract` and `serve`
//! re-read source lines through [`read_source`].

pub mod walk;

use crate::artifact::scope::Scope;
use crate::config::{Plan, RepoSource, RepoSpec};
use crate::error::{Error, Result};
use crate::text::pathname;
use std::path::{Path, PathBuf};

/// One entry of a revision's listing, before anything of it is read.
pub struct Listed {
    pub path: String,
    pub what: What,
}

/// What a listed entry is.
pub enum What {
    /// A git blob: its size is asked of the object database only when the path passes the rules.
    Blob(gix::ObjectId),
    /// A plain directory's file, with the size its metadata gives.
    File { full: PathBuf, size: u64 },
    /// Not a file to read, for this reason (`symlink`, `submodule`).
    Not(&'static str),
}

/// Opens the git repository of `name` at `path`.
pub fn open_git(name: &str, path: &Path) -> Result<gix::Repository> {
    if !path.exists() {
        return Err(Error::repo(
            name,
            format!("{} does not exist", path.display()),
        ));
    }
    gix::open(path).map_err(|e| {
        Error::repo(
            name,
            format!("{}: not a readable git repository: {e}", path.display()),
        )
    })
}

/// Resolves `rev` of the opened repository to the id of a commit; errors name `scope`.
pub fn resolve(git: &gix::Repository, scope: &Scope, rev: &str) -> Result<gix::ObjectId> {
    let scope = scope.as_str();
    let id = git.rev_parse_single(rev).map_err(|e| {
        // An empty repository has no commit for any rev; say that, not gix's parse error.
        let unborn = git.head().map(|h| h.is_unborn()).unwrap_or(false);
        if unborn {
            Error::repo(
                scope,
                format!(
                    "{}: the repository has no commits yet (HEAD is unborn), so rev `{rev}` names nothing",
                    git.path().display()
                ),
            )
        } else {
            Error::repo(scope, format!("cannot resolve rev `{rev}`: {e}"))
        }
    })?;
    let commit = id
        .object()
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| Error::repo(scope, format!("rev `{rev}` is not a commit: {e}")))?;
    Ok(commit.id)
}

/// Lists the tree of `commit` (what `rev` resolved to) from its tree objects alone: no blob is
/// read or even looked up.
pub fn list_tree(
    git: &gix::Repository,
    scope: &Scope,
    rev: &str,
    commit: gix::ObjectId,
) -> Result<Vec<Listed>> {
    let scope = scope.as_str();
    let hex = commit.to_string();
    let tree = git
        .find_object(commit)
        .map_err(|e| e.to_string())
        .and_then(|o| o.peel_to_commit().map_err(|e| e.to_string()))
        .and_then(|c| c.tree().map_err(|e| e.to_string()))
        .map_err(|cause| {
            Error::repo(
                scope,
                format!("cannot read the tree of `{rev}` ({hex}): {cause}"),
            )
        })?;
    let entries = tree
        .traverse()
        .breadthfirst
        .files()
        .map_err(|e| Error::repo(scope, format!("corrupt tree at {hex}: {e}")))?;
    let mut listed = Vec::with_capacity(entries.len());
    for entry in entries {
        if entry.mode.is_tree() {
            continue;
        }
        let path = pathname::encode(&entry.filepath);
        let what = if entry.mode.is_link() {
            What::Not("symlink")
        } else if entry.mode.is_commit() {
            What::Not("submodule")
        } else {
            What::Blob(entry.oid)
        };
        listed.push(Listed { path, what });
    }
    Ok(listed)
}

/// The walker of a plain directory: sorted, `.git` left out, ignore files honoured with
/// `gitignore`.
pub fn walker(path: &Path, gitignore: bool) -> ignore::Walk {
    ignore::WalkBuilder::new(path)
        .hidden(false)
        .git_ignore(gitignore)
        .git_exclude(gitignore)
        .git_global(false)
        .ignore(gitignore)
        .require_git(false)
        .parents(false)
        .sort_by_file_path(|a, b| a.cmp(b))
        .filter_entry(|e| e.file_name() != ".git")
        .build()
}

/// The stored form of `p` relative to `root`: `/`-separated and byte-exact (see
/// [`crate::text::pathname`]).
pub fn rel_path(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .components()
        .map(|c| pathname::of_os(c.as_os_str()))
        .collect::<Vec<_>>()
        .join("/")
}

/// Lists a plain directory (files and symlinks, sorted by path).
pub fn list_dir(name: &str, path: &Path, gitignore: bool) -> Result<Vec<Listed>> {
    if !path.is_dir() {
        return Err(Error::repo(
            name,
            format!("{} is not a directory", path.display()),
        ));
    }
    let mut listed = Vec::new();
    for entry in walker(path, gitignore) {
        let entry = entry.map_err(|e| Error::repo(name, e))?;
        let ft = entry.file_type();
        let rel = rel_path(path, entry.path());
        if ft.is_some_and(|t| t.is_symlink()) {
            listed.push(Listed {
                path: rel,
                what: What::Not("symlink"),
            });
            continue;
        }
        if !ft.is_some_and(|t| t.is_file()) {
            // A FIFO, socket or device is not a file to read; it is recorded, not lost.
            if ft.is_some_and(|t| !t.is_dir()) {
                listed.push(Listed {
                    path: rel,
                    what: What::Not("special_file"),
                });
            }
            continue;
        }
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        listed.push(Listed {
            path: rel,
            what: What::File {
                full: entry.into_path(),
                size,
            },
        });
    }
    Ok(listed)
}

/// What identifies each revision's content now, by scope: the commit its rev resolves to, or for
/// a plain directory a hash of its walked listing (path, size, content hash). Errors are part of the
/// state (`error:…`). `gitignore` is the scan's setting: a plain directory's listing is probed
/// with the same rules the scan walks it with.
pub fn head_state(repo: &RepoSpec, gitignore: bool, max_hashed: u64) -> Vec<(String, String)> {
    let state = |r: Result<String>| r.unwrap_or_else(|e| format!("error:{e}"));
    match &repo.source {
        RepoSource::Git { path } => match open_git(&repo.name, path) {
            Ok(git) => repo
                .revisions
                .iter()
                .map(|r| {
                    let id = resolve(&git, &r.scope, &r.rev).map(|c| c.to_string());
                    (r.scope.to_string(), state(id))
                })
                .collect(),
            Err(e) => repo
                .revisions
                .iter()
                .map(|r| (r.scope.to_string(), format!("error:{e}")))
                .collect(),
        },
        RepoSource::Dir { path } => {
            let s = state(dir_listing_hash(&repo.name, path, gitignore, max_hashed));
            repo.revisions
                .iter()
                .map(|r| (r.scope.to_string(), s.clone()))
                .collect()
        }
    }
}

/// A plain directory's state: its walked listing with each file's size and content hash (a file
/// edited without changing its size or modification time is seen), or, for a file over
/// `max_hashed` bytes (which the scan skips as too large anyway), its modification time.
fn dir_listing_hash(name: &str, path: &Path, gitignore: bool, max_hashed: u64) -> Result<String> {
    use rayon::prelude::*;
    let listed = list_dir(name, path, gitignore)?;
    let states: Vec<(String, u64, String)> = listed
        .par_iter()
        .filter_map(|l| match &l.what {
            What::File { full, size } => {
                let state = if *size <= max_hashed {
                    std::fs::read(full)
                        .map(|b| crate::artifact::sha256_hex(&b))
                        .unwrap_or_else(|e| format!("unreadable:{}", e.kind()))
                } else {
                    std::fs::metadata(full)
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| format!("mtime:{}", d.as_nanos()))
                        .unwrap_or_default()
                };
                Some((l.path.clone(), *size, state))
            }
            _ => None,
        })
        .collect();
    Ok(crate::artifact::hash_json(&states))
}

/// Reads file `path` of repository `repo` as it is at `commit` (git) or now (plain directory),
/// as the scan keeps it (see [`as_scanned`]).
pub fn read_source(plan: &Plan, repo: &str, commit: &str, path: &str) -> Result<String> {
    let spec = plan
        .repo(repo)
        .ok_or_else(|| Error::repo(repo, "not in the pipeline"))?;
    match &spec.source {
        RepoSource::Git { path: dir } => {
            let git = gix::open(dir).map_err(|e| Error::repo(repo, e))?;
            let id =
                gix::ObjectId::from_hex(commit.as_bytes()).map_err(|e| Error::repo(repo, e))?;
            let tree = git
                .find_object(id)
                .and_then(|o| o.peel_to_commit())
                .map_err(|e| Error::repo(repo, e))?
                .tree()
                .map_err(|e| Error::repo(repo, e))?;
            let entry = tree
                .lookup_entry_by_path(pathname::to_path(path))
                .map_err(|e| Error::repo(repo, e))?
                .ok_or_else(|| Error::repo(repo, format!("{path} is not in commit {commit}")))?;
            let blob = git
                .find_blob(entry.object_id())
                .map_err(|e| Error::repo(repo, e))?;
            let text = String::from_utf8(blob.data.clone())
                .map_err(|e| Error::repo(repo, format!("{path}: {e}")))?;
            as_scanned(plan, repo, path, text)
        }
        RepoSource::Dir { path: dir } => {
            let p = dir.join(pathname::to_path(path));
            let text = std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?;
            as_scanned(plan, repo, path, text)
        }
    }
}

/// A file's text as the scan keeps it: with the lines that hold a secret redacted, or an error
/// when the scan leaves such a file out, so rendering never shows what the scan did not keep.
fn as_scanned(plan: &Plan, repo: &str, path: &str, text: String) -> Result<String> {
    use crate::secrets::redact::Verdict;
    match plan.scan.secrets.judge(&text, Some(path)) {
        Verdict::Clean => Ok(text),
        Verdict::Redacted { text, .. } => Ok(text),
        Verdict::Whole(kind) => Err(Error::repo(
            repo,
            format!("{path}: holds a secret ({kind})"),
        )),
    }
}
