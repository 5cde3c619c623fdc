//! The scan walk: each repository at each of its revisions, a git tree with gix (no checkout) or
//! a plain directory walked honouring `.gitignore`. A revision is listed from its tree alone; a
//! path the include/exclude/sensitive-path rules drop is never looked up, and a blob already seen
//! at an earlier revision is not read again. Sensitive files are skipped whole, before or right
//! after reading, so their bytes go nowhere. Kept files go to a [`Sink`]: the scan stage's writes
//! its tables, the questions stage's checks evidence anchors.

use crate::artifact::schema::{CommitRow, FileRow, RevisionRow, Scope, SkippedRow, TreeRow};
use crate::artifact::sha256_hex;
use crate::config::{Plan, RepoSource, RepoSpec, WORKTREE};
use crate::error::{because, Error, Result};
use crate::repos::{self, Listed, What};
use crate::secrets::redact::{Secrets, Verdict};
use crate::secrets::sensitive::sensitive_path;
use crate::text::lang::language_of;
use rayon::prelude::*;
use std::collections::HashMap;

/// Lines longer than this mark a file as generated or minified (`long_lines`).
pub const MAX_LINE_BYTES: usize = 5000;
/// Files read and checked together (in parallel): at most this many...
const READ_FILES: usize = 64;
/// ...and at most this many bytes of them, unless one file alone is larger.
const READ_BYTES: u64 = 4 << 20;
/// Kept files are handed on in batches of about this many bytes of text.
const BATCH_BYTES: usize = 1 << 20;

/// Where a repository's scan goes: its `files` in batches, each revision's tree as it is done.
pub trait Sink {
    /// Kept files (each (path, blob) once), in order of first sight.
    fn files(&mut self, batch: Vec<FileRow>) -> Result<()>;
    /// One revision, done: its row and its kept files in listing order.
    fn revision(&mut self, rev: RevisionRow, tree: Vec<TreeRow>) -> Result<()>;
}

/// Whether `commits` has a partition for `repo`: git repositories, when `max_commits` > 0.
pub fn keeps_commits(plan: &Plan, repo: &RepoSpec) -> bool {
    plan.scan.max_commits > 0 && matches!(repo.source, RepoSource::Git { .. })
}

/// What became of the commit messages that held a secret: judged like a file's text
/// ([`Secrets::judge`]), a message is kept with the lines that hold it redacted, or left out.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct MessageCounts {
    /// Commits kept with lines of their message redacted.
    pub redacted: usize,
    /// Commits left out because their message holds a secret not confined to lines.
    pub left_out: usize,
}

/// The newest `max_commits` commits reachable from any of `tips` (the repository's scanned
/// revisions), by commit time, and what the sensitivity filter made of their messages (a secret
/// in a commit message goes nowhere, like a secret in a file). `None` when the repository keeps
/// no commits.
pub fn commits_of(
    plan: &Plan,
    repo: &RepoSpec,
    tips: &[&str],
) -> Result<Option<(Vec<CommitRow>, MessageCounts)>> {
    let RepoSource::Git { path } = &repo.source else {
        return Ok(None);
    };
    if !keeps_commits(plan, repo) || tips.is_empty() {
        return Ok(None);
    }
    let git = repos::open_git(&repo.name, path)?;
    let bad = |e: String| Error::repo(&repo.name, because("cannot walk the commits", e));
    let mut ids = Vec::new();
    for t in tips {
        ids.push(gix::ObjectId::from_hex(t.as_bytes()).map_err(|e| bad(e.to_string()))?);
    }
    ids.sort();
    ids.dedup();
    let walk = git
        .rev_walk(ids)
        .sorting(gix::revision::walk::Sorting::ByCommitTime(
            gix::traverse::commit::simple::CommitTimeOrder::NewestFirst,
        ))
        .all()
        .map_err(|e| bad(e.to_string()))?;
    let (mut rows, mut counts) = (Vec::new(), MessageCounts::default());
    for info in walk.take(plan.scan.max_commits as usize) {
        let info = info.map_err(|e| bad(e.to_string()))?;
        let commit = info.object().map_err(|e| bad(e.to_string()))?;
        let message = commit.message().map_err(|e| bad(e.to_string()))?;
        let subject = message.summary().to_string();
        let body = message.body().map(|b| b.to_string()).unwrap_or_default();
        let Some((subject, body)) = judged_message(plan.scan.secrets, subject, body, &mut counts)
        else {
            continue;
        };
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
    Ok(Some((rows, counts)))
}

/// A commit's subject and body as the sensitivity filter leaves them, judged as one text
/// (subject on the first line): unchanged, redacted line by line (the line count is kept, so
/// the subject stays the first line), or `None` when the message is left out; `counts` records
/// which.
fn judged_message(
    secrets: Secrets,
    subject: String,
    body: String,
    counts: &mut MessageCounts,
) -> Option<(String, String)> {
    match secrets.judge(&format!("{subject}\n{body}"), None) {
        Verdict::Clean => Some((subject, body)),
        Verdict::Whole(_) => {
            counts.left_out += 1;
            None
        }
        Verdict::Redacted { text, .. } => {
            counts.redacted += 1;
            let (subject, body) = text.split_once('\n').unwrap_or((&text, ""));
            Some((subject.to_string(), body.to_string()))
        }
    }
}

/// Outcome of looking at one file.
enum Look {
    /// Kept; with its `skipped` row and line count when lines of it were redacted.
    Keep(FileRow, Option<(SkippedRow, usize)>),
    Skip(SkippedRow),
}

/// Why a path is left out before anything of its blob is looked at (include/exclude globs, a
/// sensitive name), if it is.
fn path_rule(plan: &Plan, path: &str) -> Option<String> {
    let included = plan.include.as_ref().is_none_or(|g| g.is_match(path));
    if !included || plan.exclude.is_match(path) {
        return Some("excluded".into());
    }
    sensitive_path(path).map(|why| format!("sensitive_path: {why}"))
}

/// Applies the content rules to one file whose path and size passed; `blob_id` is the git blob
/// (a plain directory's file gets its content hash). A file that holds a secret is redacted or
/// left out as `secrets` says ([`Secrets::judge`]).
fn look_content(
    repo: &str,
    commit: &str,
    (path, size): (&str, u64),
    blob_id: Option<String>,
    data: Vec<u8>,
    secrets: Secrets,
) -> Look {
    let skip = |reason: String| Look::Skip(skipped(repo, path, reason, size));
    if data.iter().take(8000).any(|&b| b == 0) {
        return skip("binary".into());
    }
    let Ok(text) = String::from_utf8(data) else {
        return skip("invalid_utf8".into());
    };
    let blob_id = blob_id.unwrap_or_else(|| sha256_hex(text.as_bytes()));
    let (text, note) = match secrets.judge(&text, Some(path)) {
        Verdict::Clean => (text, None),
        Verdict::Whole(why) => return skip(format!("sensitive_content: {why}")),
        Verdict::Redacted { text, lines, kind } => {
            let s = if lines == 1 { "" } else { "s" };
            let reason = format!("redacted: {kind} ({lines} line{s})");
            (text, Some((skipped(repo, path, reason, size), lines)))
        }
    };
    if text.split('\n').any(|l| l.len() > MAX_LINE_BYTES) {
        return skip("long_lines".into());
    }
    let file = FileRow {
        repo: repo.to_string(),
        commit: commit.to_string(),
        path: path.to_string(),
        blob_id,
        bytes: size,
        language: language_of(path).to_string(),
        text,
    };
    Look::Keep(file, note)
}

/// Scans one repository whole into its `files` and `skipped` rows (see [`scan_each`]); for
/// benches and tests.
pub fn scan_repo(plan: &Plan, repo: &RepoSpec) -> Result<(Vec<FileRow>, Vec<SkippedRow>)> {
    struct Collect(Vec<FileRow>);
    impl Sink for Collect {
        fn files(&mut self, batch: Vec<FileRow>) -> Result<()> {
            self.0.extend(batch);
            Ok(())
        }
        fn revision(&mut self, _: RevisionRow, _: Vec<TreeRow>) -> Result<()> {
            Ok(())
        }
    }
    let mut c = Collect(Vec::new());
    let s = scan_each(plan, repo, &mut c)?;
    if let Some((_, e)) = s.failed.into_iter().next() {
        return Err(e);
    }
    Ok((c.0, s.skipped))
}

/// What a repository's scan leaves besides its files: the skipped rows, the revisions that could
/// not be read (scope, why), and how many tree entries found their blob already read.
pub struct Scanned {
    /// Files left out, and files kept with lines redacted (`redacted` of them, with
    /// `redacted_lines` lines).
    pub skipped: Vec<SkippedRow>,
    pub redacted: usize,
    pub redacted_lines: usize,
    pub failed: Vec<(Scope, Error)>,
    pub reused: usize,
}

/// The verdict on one (path, blob) of a repository, kept so no later revision reads it again.
#[derive(Clone, Copy)]
enum Seen {
    Kept,
    Skipped,
}

/// Scans one repository at each of its revisions, in order. Each revision is listed from its
/// tree, the path rules applied, and only the (path, blob)s not seen at an earlier revision are
/// looked up and read, in parallel a slice at a time. Kept files go to `sink` in order of first
/// sight, in batches of about [`BATCH_BYTES`] of text; each revision's tree follows its files.
/// Memory follows a slice and one revision's listing, not the repository's history.
pub fn scan_each(plan: &Plan, repo: &RepoSpec, sink: &mut dyn Sink) -> Result<Scanned> {
    let mut out = Scanned {
        skipped: Vec::new(),
        redacted: 0,
        redacted_lines: 0,
        failed: Vec::new(),
        reused: 0,
    };
    let mut seen: HashMap<(String, String), Seen> = HashMap::new();
    let git = match &repo.source {
        RepoSource::Git { path } => Some(repos::open_git(&repo.name, path)?),
        RepoSource::Dir { .. } => None,
    };
    for revision in &repo.revisions {
        let scope = &revision.scope;
        let listed = match &git {
            Some(g) => repos::resolve(g, scope, &revision.rev).and_then(|c| {
                let listed = repos::list_tree(g, scope, &revision.rev, c)?;
                Ok((c.to_string(), listed))
            }),
            None => match &repo.source {
                RepoSource::Dir { path } => repos::list_dir(&repo.name, path, plan.scan.gitignore)
                    .map(|l| (WORKTREE.to_string(), l)),
                RepoSource::Git { .. } => unreachable!("a git source opened its repository"),
            },
        };
        let (commit, listed) = match listed {
            Ok(l) => l,
            Err(e) => {
                out.failed.push((scope.clone(), e));
                continue;
            }
        };
        let at = Revision {
            scope,
            commit: &commit,
        };
        match scan_revision(
            plan,
            repo,
            at,
            listed,
            git.as_ref(),
            &mut seen,
            sink,
            &mut out,
        ) {
            Ok(tree) => {
                let row = RevisionRow {
                    repo: repo.name.clone(),
                    scope: scope.clone(),
                    rev: revision.rev.clone(),
                    commit,
                    files: tree.len() as u32,
                    bytes: tree.iter().map(|t| t.1).sum(),
                };
                sink.revision(row, tree.into_iter().map(|t| t.0).collect())?;
            }
            Err(e @ Error::Repo { .. }) => out.failed.push((scope.clone(), e)),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The revision being scanned: its scope and commit.
#[derive(Clone, Copy)]
struct Revision<'a> {
    scope: &'a Scope,
    commit: &'a str,
}

/// One entry of a revision to be read: its path, size and what to read.
struct ToRead<'l> {
    path: &'l str,
    size: u64,
    what: &'l What,
}

/// The skipped row of `path` in repository `repo`.
fn skipped(repo: &str, path: &str, reason: String, bytes: u64) -> SkippedRow {
    SkippedRow {
        repo: repo.to_string(),
        path: path.to_string(),
        reason,
        bytes,
    }
}

/// A blob's size, asked of the object database's header alone; an object that is absent (a
/// partial clone, an LFS-less mirror) or present but unreadable is the skip reason instead.
fn blob_size(git: &gix::Repository, oid: gix::ObjectId) -> std::result::Result<u64, String> {
    git.find_header(oid).map(|h| h.size()).map_err(|e| {
        let kind = if git.has_object(oid) {
            "corrupt_object"
        } else {
            "missing_object"
        };
        format!("{kind}: {oid}: {e}")
    })
}

/// Records an entry left out by its path or kind the first time its (path, reason) is seen.
fn skip_once(
    seen: &mut HashMap<(String, String), Seen>,
    out: &mut Scanned,
    key: (String, String),
    row: impl FnOnce() -> SkippedRow,
) {
    if let std::collections::hash_map::Entry::Vacant(e) = seen.entry(key) {
        e.insert(Seen::Skipped);
        out.skipped.push(row());
    }
}

/// Scans one revision's listing: returns its tree rows (with each file's bytes) in listing order.
#[allow(clippy::too_many_arguments)]
fn scan_revision(
    plan: &Plan,
    repo: &RepoSpec,
    at: Revision,
    listed: Vec<Listed>,
    git: Option<&gix::Repository>,
    seen: &mut HashMap<(String, String), Seen>,
    sink: &mut dyn Sink,
    out: &mut Scanned,
) -> Result<Vec<(TreeRow, u64)>> {
    let name = &repo.name;
    let skip = |path: &str, reason: String, bytes: u64| skipped(name, path, reason, bytes);
    // Each listed entry's blob key (path, blob id) once known, and its size.
    let mut keys: Vec<Option<((String, String), u64)>> = Vec::with_capacity(listed.len());
    let mut to_read: Vec<(usize, ToRead)> = Vec::new();
    for (i, l) in listed.iter().enumerate() {
        keys.push(None);
        let blob = match &l.what {
            What::Not(reason) => {
                let k = (l.path.clone(), (*reason).to_string());
                skip_once(seen, out, k, || skip(&l.path, (*reason).into(), 0));
                continue;
            }
            What::Blob(oid) => Some(*oid),
            What::File { .. } => None,
        };
        if let Some(reason) = path_rule(plan, &l.path) {
            let k = (l.path.clone(), reason.clone());
            skip_once(seen, out, k, || skip(&l.path, reason, 0));
            continue;
        }
        if let Some(oid) = blob {
            let k = (l.path.clone(), oid.to_string());
            if let Some(verdict) = seen.get(&k) {
                out.reused += 1;
                if let Seen::Kept = verdict {
                    keys[i] = Some((k, 0));
                }
                continue;
            }
        }
        // Only now is the object database asked, for the size alone.
        let size = match (&l.what, blob) {
            (What::File { size, .. }, _) => *size,
            (_, Some(oid)) => {
                match blob_size(git.expect("a blob comes with its repository"), oid) {
                    Ok(size) => size,
                    Err(why) => {
                        seen.insert((l.path.clone(), oid.to_string()), Seen::Skipped);
                        out.skipped.push(skip(&l.path, why, 0));
                        continue;
                    }
                }
            }
            _ => 0,
        };
        if size > plan.scan.max_file_bytes {
            if let Some(oid) = blob {
                seen.insert((l.path.clone(), oid.to_string()), Seen::Skipped);
            }
            out.skipped.push(skip(&l.path, "too_large".into(), size));
            continue;
        }
        to_read.push((
            i,
            ToRead {
                path: &l.path,
                size,
                what: &l.what,
            },
        ));
    }
    read_slices(
        plan,
        repo,
        at.commit,
        git,
        &to_read,
        |i, look| match look {
            Look::Keep(f, note) => {
                let k = (f.path.clone(), f.blob_id.clone());
                seen.insert(k.clone(), Seen::Kept);
                keys[i] = Some((k, f.bytes));
                if let Some((row, lines)) = note {
                    out.skipped.push(row);
                    out.redacted += 1;
                    out.redacted_lines += lines;
                }
                Some(f)
            }
            Look::Skip(s) => {
                if let What::Blob(oid) = &listed[i].what {
                    seen.insert((s.path.clone(), oid.to_string()), Seen::Skipped);
                }
                out.skipped.push(s);
                None
            }
        },
        sink,
    )?;
    Ok(keys
        .into_iter()
        .flatten()
        .map(|((path, blob_id), bytes)| {
            (
                TreeRow {
                    repo: name.clone(),
                    scope: at.scope.clone(),
                    commit: at.commit.to_string(),
                    path,
                    blob_id,
                },
                bytes,
            )
        })
        .collect())
}

/// Reads and checks `to_read` in parallel slices of at most [`READ_FILES`] entries and
/// [`READ_BYTES`]; each verdict goes to `verdict` in listing order, and the files it keeps to
/// `sink` in batches.
fn read_slices(
    plan: &Plan,
    repo: &RepoSpec,
    commit: &str,
    git: Option<&gix::Repository>,
    to_read: &[(usize, ToRead)],
    mut verdict: impl FnMut(usize, Look) -> Option<FileRow>,
    sink: &mut dyn Sink,
) -> Result<()> {
    let git = git.map(|g| g.clone().into_sync());
    let (mut pending, mut pending_bytes) = (Vec::new(), 0usize);
    let mut rest = to_read;
    while !rest.is_empty() {
        let (mut n, mut bytes) = (0, 0u64);
        while n < rest.len() && n < READ_FILES {
            if n > 0 && bytes + rest[n].1.size > READ_BYTES {
                break;
            }
            bytes += rest[n].1.size;
            n += 1;
        }
        let (slice, tail) = rest.split_at(n);
        rest = tail;
        let looked: Vec<Look> = slice
            .par_iter()
            .map_init(
                || git.as_ref().map(|g| g.to_thread_local()),
                |git, (_, e)| read_one(repo, commit, git.as_ref(), e, plan.scan.secrets),
            )
            .collect::<Result<_>>()?;
        for ((i, _), l) in slice.iter().zip(looked) {
            if let Some(f) = verdict(*i, l) {
                pending_bytes += f.text.len();
                pending.push(f);
                if pending_bytes >= BATCH_BYTES {
                    sink.files(std::mem::take(&mut pending))?;
                    pending_bytes = 0;
                }
            }
        }
    }
    if !pending.is_empty() {
        sink.files(pending)?;
    }
    Ok(())
}

/// Reads one file and applies the content rules. A blob that cannot be read is skipped
/// (`corrupt_object`), not the revision's failure.
fn read_one(
    repo: &RepoSpec,
    commit: &str,
    git: Option<&gix::Repository>,
    e: &ToRead,
    secrets: Secrets,
) -> Result<Look> {
    let name = &repo.name;
    match e.what {
        What::Blob(oid) => {
            let git = git.expect("a git listing comes with its repository");
            match git.find_blob(*oid) {
                Ok(mut b) => Ok(look_content(
                    name,
                    commit,
                    (e.path, e.size),
                    Some(oid.to_string()),
                    b.take_data(),
                    secrets,
                )),
                Err(err) => Ok(Look::Skip(SkippedRow {
                    repo: name.clone(),
                    path: e.path.to_string(),
                    reason: format!("corrupt_object: {oid}: {err}"),
                    bytes: e.size,
                })),
            }
        }
        What::File { full, .. } => match std::fs::read(full) {
            Ok(data) => Ok(look_content(
                name,
                commit,
                (e.path, e.size),
                None,
                data,
                secrets,
            )),
            // One file that cannot be read is that file's problem, not the repository's.
            Err(err) => Ok(Look::Skip(SkippedRow {
                repo: name.clone(),
                path: e.path.to_string(),
                reason: format!("unreadable: {}", err.kind()),
                bytes: e.size,
            })),
        },
        What::Not(_) => unreachable!("only files are read"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repos::head_state;
    use std::path::Path;

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
        assert!(head_state(&plan.repos[0], true, 1000)[0]
            .1
            .starts_with("error:"));
    }
}
