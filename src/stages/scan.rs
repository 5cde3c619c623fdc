//! scan: reads each repository's tree at its rev with gix (no checkout), or walks a plain
//! directory honouring `.gitignore`; writes `files`, `skipped` and (git) `commits`, one partition
//! per repository.
//! Sensitive files are skipped whole, before or right after reading, so their bytes go nowhere.

use crate::artifact::{hash_json, sha256_hex, FileFormat};
use crate::config::{Plan, RepoSource, RepoSpec};
use crate::error::{Error, Result};
use crate::pipeline::{Ctx, Stage};
use crate::schema::{to_batch, CommitRow, FileRow, Row, SkippedRow};
use crate::text::lang::language_of;
use crate::text::pathname;
use crate::text::sensitive::{sensitive_content, sensitive_path, RULES_VERSION};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::path::Path;

/// Lines longer than this mark a file as generated or minified (`long_lines`).
pub const MAX_LINE_BYTES: usize = 5000;
/// Commit column for plain directories.
pub const WORKTREE: &str = "(worktree)";
/// Files read and checked together (in parallel): at most this many...
const READ_FILES: usize = 64;
/// ...and at most this many bytes of them, unless one file alone is larger.
const READ_BYTES: u64 = 4 << 20;
/// Kept files are handed on in batches of about this many bytes of text.
const BATCH_BYTES: usize = 1 << 20;

pub struct Scan;

impl Stage for Scan {
    fn name(&self) -> &'static str {
        "scan"
    }
    fn inputs(&self) -> &'static [&'static str] {
        &[]
    }
    fn config(&self, plan: &Plan) -> Value {
        json!({ "scan": plan.scan, "repos": plan.repos, "max_line_bytes": MAX_LINE_BYTES, "secret_rules": RULES_VERSION })
    }
    fn probe(&self, plan: &Plan) -> Result<Value> {
        let heads: Vec<(String, Value)> = plan
            .repos
            .par_iter()
            .map(|r| (r.name.clone(), json!(head_state(r, plan.scan.gitignore))))
            .collect();
        Ok(Value::Object(heads.into_iter().collect()))
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let bar = ctx.bar(plan.repos.len() as u64, "repos");
        let mut todo = Vec::new();
        for repo in &plan.repos {
            // The probe already resolved every head; walking or resolving again would repeat it.
            let state = match ctx.probe.get(&repo.name).and_then(|s| s.as_str()) {
                Some(s) => s.to_string(),
                None => head_state(repo, plan.scan.gitignore),
            };
            let key = hash_json(&(&plan.scan, repo, &state, MAX_LINE_BYTES, RULES_VERSION));
            if state.starts_with("error:") {
                todo.push((repo, key));
                continue;
            }
            let files = ctx.writer.reuse("files", &repo.name, &key)?;
            let skipped = ctx.writer.reuse("skipped", &repo.name, &key)?;
            let commits = !keeps_commits(plan, repo)
                || ctx
                    .writer
                    .reuse(CommitRow::TABLE, &repo.name, &key)?
                    .is_some();
            if files.is_some() && skipped.is_some() && commits {
                bar.inc(1);
            } else {
                todo.push((repo, key));
            }
        }
        // One repository at a time, its files read in parallel a slice at a time and streamed out
        // in batches: memory follows a slice and a Parquet row group, not the repository.
        let (mut n_files, mut n_skipped) = (0usize, 0usize);
        let (mut n_commits, mut n_sensitive) = (0usize, 0usize);
        let schema = FileRow::schema();
        for (repo, key) in todo {
            let mut w = ctx.writer.part(
                FileRow::TABLE,
                &repo.name,
                &key,
                schema.clone(),
                FileFormat::Parquet,
            )?;
            let mut kept = 0usize;
            // A failure to write our own output stops the stage; only the repository's own
            // errors are recorded and passed over.
            let mut unwritten: Option<Error> = None;
            let scanned = scan_each(plan, repo, |files| {
                kept += files.len();
                to_batch(&files).and_then(|b| w.write(&b)).map_err(|e| {
                    let stop = Error::Invalid(e.to_string());
                    unwritten = Some(e);
                    stop
                })
            })
            .and_then(|skipped| Ok((skipped, commits_of(plan, repo)?)));
            if let Some(e) = unwritten {
                return Err(e);
            }
            bar.inc(1);
            match scanned {
                Ok((skipped, commits)) => {
                    n_files += kept;
                    n_skipped += skipped.len();
                    ctx.writer.finish(w)?;
                    ctx.writer
                        .write(SkippedRow::TABLE, &repo.name, &key, &skipped)?;
                    if let Some((commits, left_out)) = commits {
                        n_commits += commits.len();
                        n_sensitive += left_out;
                        ctx.writer
                            .write(CommitRow::TABLE, &repo.name, &key, &commits)?;
                    }
                }
                Err(e) => {
                    w.discard()?;
                    ctx.error(Some(&repo.name), e);
                }
            }
        }
        bar.finish_and_clear();
        ctx.stat("files_scanned", n_files);
        ctx.stat("files_skipped", n_skipped);
        ctx.stat("commits", n_commits);
        ctx.stat("commits_left_out_sensitive", n_sensitive);
        Ok(())
    }
}

/// Whether `commits` has a partition for `repo`: git repositories, when `max_commits` > 0.
fn keeps_commits(plan: &Plan, repo: &RepoSpec) -> bool {
    plan.scan.max_commits > 0 && matches!(repo.source, RepoSource::Git { .. })
}

/// The newest `max_commits` commits reachable from the repository's rev, by commit time, and
/// how many were left out because their message looks sensitive (a secret in a commit message
/// goes nowhere, like a secret in a file). `None` when the repository keeps no commits.
pub fn commits_of(plan: &Plan, repo: &RepoSpec) -> Result<Option<(Vec<CommitRow>, usize)>> {
    let RepoSource::Git { path, rev } = &repo.source else {
        return Ok(None);
    };
    if !keeps_commits(plan, repo) {
        return Ok(None);
    }
    let (git, tip) = resolve(&repo.name, path, rev)?;
    let bad = |e: String| {
        Error::repo(
            &repo.name,
            format!("cannot walk the commits of `{rev}`: {e}"),
        )
    };
    let walk = git
        .rev_walk([tip])
        .sorting(gix::revision::walk::Sorting::ByCommitTime(
            gix::traverse::commit::simple::CommitTimeOrder::NewestFirst,
        ))
        .all()
        .map_err(|e| bad(e.to_string()))?;
    let (mut rows, mut left_out) = (Vec::new(), 0);
    for info in walk.take(plan.scan.max_commits as usize) {
        let info = info.map_err(|e| bad(e.to_string()))?;
        let commit = info.object().map_err(|e| bad(e.to_string()))?;
        let message = commit.message().map_err(|e| bad(e.to_string()))?;
        let subject = message.summary().to_string();
        let body = message.body().map(|b| b.to_string()).unwrap_or_default();
        if sensitive_content(&format!("{subject}\n{body}")).is_some() {
            left_out += 1;
            continue;
        }
        let author = commit.author().map_err(|e| bad(e.to_string()))?;
        rows.push(CommitRow {
            repo: repo.name.clone(),
            commit: info.id.to_string(),
            time: commit.time().map_err(|e| bad(e.to_string()))?.seconds,
            subject,
            body,
            author_email: plan.scan.commit_emails.then(|| author.email.to_string()),
        });
    }
    Ok(Some((rows, left_out)))
}

/// What identifies a repository's content now: the commit its rev resolves to, or for a plain
/// directory a hash of its walked listing (path, size, mtime). Errors are part of the state.
/// `gitignore` is the scan's setting: a plain directory's listing is probed with the same rules
/// the scan walks it with, so an ignored file's change is seen exactly when the scan would read it.
pub fn head_state(repo: &RepoSpec, gitignore: bool) -> String {
    let r = match &repo.source {
        RepoSource::Git { path, rev } => {
            resolve(&repo.name, path, rev).map(|(_, commit)| commit.to_string())
        }
        RepoSource::Dir { path } => dir_listing_hash(&repo.name, path, gitignore),
    };
    r.unwrap_or_else(|e| format!("error:{e}"))
}

fn open_git(name: &str, path: &Path) -> Result<gix::Repository> {
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

/// Opens the repository and resolves `rev` to the id of a commit.
fn resolve(name: &str, path: &Path, rev: &str) -> Result<(gix::Repository, gix::ObjectId)> {
    let repo = open_git(name, path)?;
    let id = {
        let id = repo.rev_parse_single(rev).map_err(|e| {
            // An empty repository has no commit for any rev; say that, not gix's parse error.
            let unborn = repo.head().map(|h| h.is_unborn()).unwrap_or(false);
            if unborn {
                Error::repo(
                    name,
                    format!(
                        "{}: the repository has no commits yet (HEAD is unborn), so rev `{rev}` names nothing",
                        path.display()
                    ),
                )
            } else {
                Error::repo(name, format!("cannot resolve rev `{rev}`: {e}"))
            }
        })?;
        let commit = id
            .object()
            .and_then(|o| o.peel_to_commit())
            .map_err(|e| Error::repo(name, format!("rev `{rev}` is not a commit: {e}")))?;
        commit.id
    };
    Ok((repo, id))
}

fn walker(path: &Path, gitignore: bool) -> ignore::Walk {
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
fn rel_path(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .components()
        .map(|c| pathname::of_os(c.as_os_str()))
        .collect::<Vec<_>>()
        .join("/")
}

fn dir_listing_hash(name: &str, path: &Path, gitignore: bool) -> Result<String> {
    if !path.is_dir() {
        return Err(Error::repo(
            name,
            format!("{} is not a directory", path.display()),
        ));
    }
    let mut listing = Vec::new();
    for entry in walker(path, gitignore) {
        let entry = entry.map_err(|e| Error::repo(name, e))?;
        if entry.file_type().is_some_and(|t| t.is_file()) {
            let md = entry.metadata().map_err(|e| Error::repo(name, e))?;
            let mtime = md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            listing.push((rel_path(path, entry.path()), md.len(), mtime));
        }
    }
    Ok(hash_json(&listing))
}

/// Outcome of looking at one file.
enum Look {
    Keep(FileRow),
    Skip(SkippedRow),
}

/// Applies the scan rules to one file; `load` is only called when the path and size pass.
fn look(
    plan: &Plan,
    repo: &str,
    commit: &str,
    path: &str,
    size: u64,
    blob_id: Option<String>,
    load: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Option<Look>> {
    let skip = |reason: String| {
        Ok(Some(Look::Skip(SkippedRow {
            repo: repo.to_string(),
            path: path.to_string(),
            reason,
            bytes: size,
        })))
    };
    let included = plan.include.as_ref().is_none_or(|g| g.is_match(path));
    if !included || plan.exclude.is_match(path) {
        return skip("excluded".into());
    }
    if let Some(why) = sensitive_path(path) {
        return skip(format!("sensitive_path: {why}"));
    }
    if size > plan.scan.max_file_bytes {
        return skip("too_large".into());
    }
    let data = load()?;
    if data.iter().take(8000).any(|&b| b == 0) {
        return skip("binary".into());
    }
    let Ok(text) = String::from_utf8(data) else {
        return skip("invalid_utf8".into());
    };
    if let Some(why) = sensitive_content(&text) {
        return skip(format!("sensitive_content: {why}"));
    }
    if text.split('\n').any(|l| l.len() > MAX_LINE_BYTES) {
        return skip("long_lines".into());
    }
    let blob_id = blob_id.unwrap_or_else(|| sha256_hex(text.as_bytes()));
    Ok(Some(Look::Keep(FileRow {
        repo: repo.to_string(),
        commit: commit.to_string(),
        path: path.to_string(),
        blob_id,
        bytes: size,
        language: language_of(path).to_string(),
        text,
    })))
}

/// Scans one repository into its `files` and `skipped` rows, whole (see [`scan_each`]).
pub fn scan_repo(plan: &Plan, repo: &RepoSpec) -> Result<(Vec<FileRow>, Vec<SkippedRow>)> {
    let mut files = Vec::new();
    let skipped = scan_each(plan, repo, |batch| {
        files.extend(batch);
        Ok(())
    })?;
    Ok((files, skipped))
}

/// One entry of a repository's listing, before it is read.
struct Listed {
    path: String,
    size: u64,
    what: What,
}

enum What {
    Blob(gix::ObjectId),
    File(std::path::PathBuf),
    /// Skipped without reading, for this reason (`symlink`, `submodule`).
    Not(&'static str),
}

/// Scans one repository: its listing first (paths and sizes), then its files read and checked in
/// parallel a slice at a time. Kept files go to `each` in listing order, in batches of about
/// [`BATCH_BYTES`] of text; the skipped rows are returned. Memory follows a slice, not the
/// repository.
pub fn scan_each(
    plan: &Plan,
    repo: &RepoSpec,
    mut each: impl FnMut(Vec<FileRow>) -> Result<()>,
) -> Result<Vec<SkippedRow>> {
    let (listed, commit, git) = list(plan, repo)?;
    let git = git.map(|g| g.into_sync());
    let mut skipped = Vec::new();
    let (mut pending, mut pending_bytes) = (Vec::new(), 0usize);
    let mut rest = &listed[..];
    while !rest.is_empty() {
        // The next slice: up to READ_FILES entries and READ_BYTES of what would be read.
        let (mut n, mut bytes) = (0, 0u64);
        while n < rest.len() && n < READ_FILES {
            let cost = if rest[n].size > plan.scan.max_file_bytes {
                0
            } else {
                rest[n].size
            };
            if n > 0 && bytes + cost > READ_BYTES {
                break;
            }
            bytes += cost;
            n += 1;
        }
        let (slice, tail) = rest.split_at(n);
        rest = tail;
        let looked: Vec<Option<Look>> = slice
            .par_iter()
            .map_init(
                || git.as_ref().map(|g| g.to_thread_local()),
                |git, e| look_at(plan, repo, &commit, git.as_ref(), e),
            )
            .collect::<Result<_>>()?;
        for l in looked {
            match l {
                Some(Look::Keep(f)) => {
                    pending_bytes += f.text.len();
                    pending.push(f);
                    if pending_bytes >= BATCH_BYTES {
                        each(std::mem::take(&mut pending))?;
                        pending_bytes = 0;
                    }
                }
                Some(Look::Skip(s)) => skipped.push(s),
                None => {}
            }
        }
    }
    if !pending.is_empty() {
        each(pending)?;
    }
    Ok(skipped)
}

/// The listing of a repository (git: its tree at the rev, with object sizes; a directory: its
/// walk), the commit column, and the opened git repository.
fn list(plan: &Plan, repo: &RepoSpec) -> Result<(Vec<Listed>, String, Option<gix::Repository>)> {
    let mut listed = Vec::new();
    match &repo.source {
        RepoSource::Git { path, rev } => {
            let (git, commit) = resolve(&repo.name, path, rev)?;
            let commit_hex = commit.to_string();
            let tree = git
                .find_object(commit)
                .map_err(|e| e.to_string())
                .and_then(|o| o.peel_to_commit().map_err(|e| e.to_string()))
                .and_then(|c| c.tree().map_err(|e| e.to_string()))
                .map_err(|cause| {
                    Error::repo(
                        &repo.name,
                        format!("cannot read the tree of `{rev}` ({commit_hex}): {cause}"),
                    )
                })?;
            let entries = tree.traverse().breadthfirst.files().map_err(|e| {
                Error::repo(&repo.name, format!("corrupt tree at {commit_hex}: {e}"))
            })?;
            drop(tree);
            for entry in entries {
                let path = pathname::encode(&entry.filepath);
                if entry.mode.is_tree() {
                    continue;
                }
                if entry.mode.is_link() || entry.mode.is_commit() {
                    let reason = if entry.mode.is_link() {
                        "symlink"
                    } else {
                        "submodule"
                    };
                    listed.push(Listed {
                        path,
                        size: 0,
                        what: What::Not(reason),
                    });
                    continue;
                }
                let header = git.find_header(entry.oid).map_err(|e| {
                    Error::repo(
                        &repo.name,
                        format!("{path}: corrupt or missing object {}: {e}", entry.oid),
                    )
                })?;
                listed.push(Listed {
                    path,
                    size: header.size(),
                    what: What::Blob(entry.oid),
                });
            }
            Ok((listed, commit_hex, Some(git)))
        }
        RepoSource::Dir { path } => {
            if !path.is_dir() {
                return Err(Error::repo(
                    &repo.name,
                    format!("{} is not a directory", path.display()),
                ));
            }
            for entry in walker(path, plan.scan.gitignore) {
                let entry = entry.map_err(|e| Error::repo(&repo.name, e))?;
                let ft = entry.file_type();
                if !ft.is_some_and(|t| t.is_file() || t.is_symlink()) {
                    continue;
                }
                let rel = rel_path(path, entry.path());
                if ft.is_some_and(|t| t.is_symlink()) {
                    listed.push(Listed {
                        path: rel,
                        size: 0,
                        what: What::Not("symlink"),
                    });
                    continue;
                }
                let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                listed.push(Listed {
                    path: rel,
                    size,
                    what: What::File(entry.into_path()),
                });
            }
            Ok((listed, WORKTREE.to_string(), None))
        }
    }
}

/// Looks at one listed entry; git blobs are read through this thread's handle on the repository.
fn look_at(
    plan: &Plan,
    repo: &RepoSpec,
    commit: &str,
    git: Option<&gix::Repository>,
    e: &Listed,
) -> Result<Option<Look>> {
    let name = &repo.name;
    match &e.what {
        What::Not(reason) => Ok(Some(Look::Skip(SkippedRow {
            repo: name.clone(),
            path: e.path.clone(),
            reason: (*reason).into(),
            bytes: 0,
        }))),
        What::Blob(oid) => look(
            plan,
            name,
            commit,
            &e.path,
            e.size,
            Some(oid.to_string()),
            || {
                let git = git.expect("a git listing comes with its repository");
                git.find_blob(*oid)
                    .map(|mut b| b.take_data())
                    .map_err(|err| {
                        Error::repo(
                            name,
                            format!("{}: corrupt or missing object {oid}: {err}", e.path),
                        )
                    })
            },
        ),
        What::File(full) => look(plan, name, commit, &e.path, e.size, None, || {
            std::fs::read(full).map_err(|err| Error::io(full, err))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_for(dir: &Path) -> Plan {
        let toml = "[pipeline]\nname = \"t\"\n[[repos]]\nname = \"d\"\ndir = \"d\"\n[scan]\nexclude = [\"skip/**\"]\nmax_file_bytes = 1000\n";
        std::fs::create_dir_all(dir.join("d")).unwrap();
        Plan::parse(&dir.join("p.toml"), toml).unwrap()
    }

    #[test]
    fn directory_rules_and_reasons() {
        let t = tempfile::tempdir().unwrap();
        let plan = plan_for(t.path());
        let d = t.path().join("d");
        std::fs::create_dir_all(d.join("skip")).unwrap();
        std::fs::write(d.join("a.md"), "# hi\n").unwrap();
        std::fs::write(d.join(".env"), "TOKEN=abc\n").unwrap();
        std::fs::write(d.join("big.txt"), "x".repeat(2000)).unwrap();
        std::fs::write(d.join("bin.dat"), [0u8, 1, 2]).unwrap();
        std::fs::write(d.join("latin1.txt"), [0xe9u8, 0x41]).unwrap();
        std::fs::write(d.join("skip/x.md"), "x").unwrap();
        std::fs::write(d.join("ignored.log"), "x").unwrap();
        std::fs::write(d.join(".gitignore"), "*.log\n").unwrap();
        let (files, skipped) = scan_repo(&plan, &plan.repos[0]).unwrap();
        let kept: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(kept, [".gitignore", "a.md"]);
        let reasons: Vec<_> = skipped
            .iter()
            .map(|s| (s.path.as_str(), s.reason.as_str()))
            .collect();
        assert!(reasons.contains(&(".env", "sensitive_path: dotenv file")));
        assert!(reasons.contains(&("big.txt", "too_large")));
        assert!(reasons.contains(&("bin.dat", "binary")));
        assert!(reasons.contains(&("latin1.txt", "invalid_utf8")));
        assert!(reasons.contains(&("skip/x.md", "excluded")));
        assert!(!reasons.iter().any(|(p, _)| *p == "ignored.log"));
    }

    #[test]
    fn missing_directory_is_a_repo_error() {
        let t = tempfile::tempdir().unwrap();
        let plan = plan_for(t.path());
        std::fs::remove_dir_all(t.path().join("d")).unwrap();
        let e = scan_repo(&plan, &plan.repos[0]).unwrap_err().to_string();
        assert!(e.starts_with("repository `d`"), "{e}");
        assert!(head_state(&plan.repos[0], true).starts_with("error:"));
    }
}
