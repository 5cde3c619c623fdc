//! SWE-bench instances as ri-batch questions: each instance is one question asked at its
//! repository's `base_commit` (the issue text; hints only when asked, since they can give the fix
//! away), its gold documents the files its `patch` modifies that exist at that commit (never
//! `test_patch`), its evidence each hunk's changed pre-image lines, anchored by line and checked
//! against the file at the commit. Instances come as JSONL, a JSON array or Parquet, the forms the
//! dataset is published in; repositories are git mirrors under one directory.

use crate::artifact::write_atomic;
use crate::error::{because, Error, IoContext, Result};
use crate::text::pathname;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The fields of an instance that the import reads (the rest are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct Instance {
    pub instance_id: String,
    /// `owner/name` on GitHub.
    pub repo: String,
    pub base_commit: String,
    #[serde(default)]
    pub problem_statement: String,
    #[serde(default)]
    pub hints_text: Option<String>,
    #[serde(default)]
    pub patch: String,
}

/// How the import runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The directory the repository mirrors are under (see [`find_mirror`]).
    pub repos: PathBuf,
    /// The split every question is put in.
    pub split: String,
    /// Append the instance's `hints_text` to the question.
    pub hints: bool,
}

/// What an import produced: the question file, the repository list, the instances it could not
/// use (id, why).
#[derive(Debug, Clone)]
pub struct Imported {
    pub questions: PathBuf,
    pub repos: PathBuf,
    pub written: usize,
    pub rejected: Vec<(String, String)>,
}

/// The file the rejected instances are listed in, beside the questions.
pub const REJECTED: &str = "rejected.tsv";

/// Reads instances from `path`: Parquet (`.parquet`), a JSON array (a file starting with `[`),
/// or JSONL. Errors name the file and line.
pub fn read_instances(path: &Path) -> Result<Vec<Instance>> {
    if path.extension().is_some_and(|e| e == "parquet") {
        return read_parquet(path);
    }
    let text = std::fs::read_to_string(path).at(path)?;
    if text.trim_start().starts_with('[') {
        return serde_json::from_str(&text).map_err(|e| Error::Dataset {
            file: path.to_path_buf(),
            line: e.line(),
            message: e.to_string(),
        });
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(line).map_err(|e| Error::Dataset {
            file: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?);
    }
    Ok(out)
}

fn read_parquet(path: &Path) -> Result<Vec<Instance>> {
    let bytes = bytes::Bytes::from(std::fs::read(path).at(path)?);
    let wanted = [
        "instance_id",
        "repo",
        "base_commit",
        "problem_statement",
        "hints_text",
        "patch",
    ];
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .map_err(|e| Error::artifact(path, e))?;
    let schema = builder.parquet_schema();
    let leaves: Vec<usize> = (0..schema.num_columns())
        .filter(|&i| wanted.contains(&schema.column(i).name()))
        .collect();
    let mask = parquet::arrow::ProjectionMask::leaves(schema, leaves);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| Error::artifact(path, e))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| Error::artifact(path, e))?;
        let rows: Vec<Instance> = serde_arrow::from_record_batch(&batch)
            .map_err(|e| Error::artifact(path, because("not SWE-bench instances", e)))?;
        out.extend(rows);
    }
    Ok(out)
}

/// The folder layouts a mirror of `owner/name` is looked for under, in order (called with
/// `"owner", "name"` they name themselves, as a rejection lists them). SWE-bench's own forks
/// (`swe-bench+owner__name`, `swe-bench/owner__name`) are where django, scikit-learn and matplotlib
/// are mirrored from.
fn mirror_layouts(owner: &str, name: &str) -> [String; 6] {
    [
        format!("{owner}+{name}"),
        format!("{owner}__{name}"),
        format!("{owner}/{name}"),
        format!("swe-bench+{owner}__{name}"),
        format!("swe-bench/{owner}__{name}"),
        name.to_string(),
    ]
}

/// The mirror of GitHub repository `owner/name` under `dir`, if there is one: the first of
/// [`mirror_layouts`], each as is and with `.git`; a directory that is not a repository itself but
/// holds one as `repo/` is taken too.
pub fn find_mirror(dir: &Path, repo: &str) -> Option<PathBuf> {
    let (owner, name) = repo.split_once('/')?;
    for b in &mirror_layouts(owner, name) {
        for cand in [dir.join(b), dir.join(format!("{b}.git"))] {
            if is_git(&cand) {
                return Some(cand);
            }
            if is_git(&cand.join("repo")) {
                return Some(cand.join("repo"));
            }
        }
    }
    None
}

fn is_git(p: &Path) -> bool {
    p.join(".git").exists() || (p.join("HEAD").is_file() && p.join("objects").is_dir())
}

/// The repository names of a set of instances: each `owner/name` by its `name` (made safe), or
/// `owner__name` where two owners share a name.
pub fn repo_names(instances: &[Instance]) -> BTreeMap<String, String> {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in instances {
        let name = i.repo.rsplit('/').next().unwrap_or(&i.repo).to_string();
        let owners = by_name.entry(name).or_default();
        if !owners.contains(&i.repo) {
            owners.push(i.repo.clone());
        }
    }
    let mut out = BTreeMap::new();
    for (name, full) in by_name {
        for f in &full {
            let n = if full.len() == 1 {
                name.clone()
            } else {
                f.replace('/', "__")
            };
            out.insert(f.clone(), crate::artifact::name_from_path(Path::new(&n)));
        }
    }
    out
}

/// The repositories and revisions a set of instances needs: (name, mirror, base commits in
/// instance order), for those whose mirror is found and holds the commit (an instance at a commit
/// the mirror lacks is rejected by the import, and its revision is not scanned).
pub fn repositories(instances: &[Instance], dir: &Path) -> Vec<(String, PathBuf, Vec<String>)> {
    let names = repo_names(instances);
    let mut out: Vec<(String, PathBuf, Vec<String>)> = Vec::new();
    let mut mirrors: HashMap<&str, Option<(PathBuf, gix::Repository)>> = HashMap::new();
    for i in instances {
        let Some((mirror, git)) = mirrors.entry(&i.repo).or_insert_with(|| {
            let m = find_mirror(dir, &i.repo)?;
            let git = gix::open(&m).ok()?;
            Some((m, git))
        }) else {
            continue;
        };
        if git.rev_parse_single(i.base_commit.trim()).is_err() {
            continue;
        }
        let mirror = mirror.clone();
        let name = &names[&i.repo];
        match out.iter_mut().find(|(n, _, _)| n == name) {
            Some((_, _, revs)) => {
                if !revs.contains(&i.base_commit) {
                    revs.push(i.base_commit.clone());
                }
            }
            None => out.push((name.clone(), mirror, vec![i.base_commit.clone()])),
        }
    }
    out
}

/// One hunk of a unified diff: where its pre-image starts and its lines (`' '`, `'-'`, `'+'`
/// and the text).
#[derive(Debug, Clone, PartialEq)]
pub struct Hunk {
    pub old_start: u32,
    pub lines: Vec<(char, String)>,
}

/// One file of a unified diff: its pre-image path (`None` for a new file) and hunks.
#[derive(Debug, Clone, PartialEq)]
pub struct FileDiff {
    pub old_path: Option<String>,
    pub hunks: Vec<Hunk>,
}

/// Parses a unified diff (`git diff` output) into its files and hunks.
pub fn parse_patch(patch: &str) -> std::result::Result<Vec<FileDiff>, String> {
    let mut files: Vec<FileDiff> = Vec::new();
    let mut lines = patch.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(old) = line.strip_prefix("--- ") {
            let old = old.split('\t').next().unwrap_or(old).trim_end();
            let old_path = if old == "/dev/null" {
                None
            } else {
                Some(old.strip_prefix("a/").unwrap_or(old).to_string())
            };
            match lines.next() {
                Some(l) if l.starts_with("+++ ") => {}
                _ => return Err(format!("`--- {old}` is not followed by `+++`")),
            }
            files.push(FileDiff {
                old_path,
                hunks: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("@@ -") {
            let file = files
                .last_mut()
                .ok_or_else(|| "a hunk before any file header".to_string())?;
            let range = rest.split(' ').next().unwrap_or("");
            let (start, len) = match range.split_once(',') {
                Some((s, l)) => (s, l),
                None => (range, "1"),
            };
            let old_start: u32 = start.parse().map_err(|_| format!("bad hunk `{line}`"))?;
            let mut old_len: u32 = len.parse().map_err(|_| format!("bad hunk `{line}`"))?;
            let new_len: u32 = rest
                .split(' ')
                .nth(1)
                .and_then(|r| r.strip_prefix('+'))
                .map(|r| r.split_once(',').map_or("1", |(_, l)| l))
                .and_then(|l| l.parse().ok())
                .ok_or_else(|| format!("bad hunk `{line}`"))?;
            let mut new_left = new_len;
            let mut hunk = Hunk {
                old_start,
                lines: Vec::new(),
            };
            while old_len > 0 || new_left > 0 {
                let Some(l) = lines.next() else {
                    return Err(format!("hunk at -{old_start} ends early"));
                };
                if l.starts_with('\\') {
                    continue;
                }
                let (tag, text) = match l.chars().next() {
                    Some(c @ (' ' | '-' | '+')) => (c, &l[1..]),
                    None => (' ', ""),
                    Some(_) => return Err(format!("bad line in hunk at -{old_start}: {l:?}")),
                };
                match tag {
                    ' ' => {
                        old_len = old_len.saturating_sub(1);
                        new_left = new_left.saturating_sub(1);
                    }
                    '-' => old_len = old_len.saturating_sub(1),
                    _ => new_left = new_left.saturating_sub(1),
                }
                hunk.lines.push((tag, text.to_string()));
            }
            while lines.peek().is_some_and(|l| l.starts_with('\\')) {
                lines.next();
            }
            file.hunks.push(hunk);
        }
    }
    Ok(files)
}

/// One evidence anchor: lines `start..=end` of `path`, and their text.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub path: String,
    pub start: u32,
    pub end: u32,
    pub quote: String,
}

/// The most context lines dropped from each end of a hunk that matches nowhere whole (GNU
/// patch's default fuzz factor).
pub const MAX_FUZZ: usize = 2;

/// Where `hunk` applies to `file`, found as `git apply` and `patch` find it: its pre-image (its
/// context and removed lines) at the stated line, else at the nearest line before or after
/// where it matches whole (an offset); when it matches nowhere, the same with up to
/// [`MAX_FUZZ`] context lines dropped from each end. The hunk returned has those lines dropped
/// and its `old_start` moved to where it matched.
pub fn locate(hunk: &Hunk, file: &[&str]) -> Option<Hunk> {
    let same = |a: &str, b: &str| a.trim_end_matches('\r') == b.trim_end_matches('\r');
    for fuzz in 0..=MAX_FUZZ {
        let lead = hunk
            .lines
            .iter()
            .take_while(|(t, _)| *t == ' ')
            .count()
            .min(fuzz);
        let trail = hunk
            .lines
            .iter()
            .rev()
            .take_while(|(t, _)| *t == ' ')
            .count()
            .min(fuzz);
        if fuzz > 0 && lead + trail == 0 {
            break;
        }
        let lines = &hunk.lines[lead..hunk.lines.len().saturating_sub(trail).max(lead)];
        let pre: Vec<&str> = lines
            .iter()
            .filter(|(t, _)| *t != '+')
            .map(|(_, s)| s.as_str())
            .collect();
        let matches = |start: usize| {
            start + pre.len() <= file.len()
                && pre.iter().zip(&file[start..]).all(|(a, b)| same(a, b))
        };
        let want = (hunk.old_start.max(1) as usize - 1 + lead).min(file.len());
        let found = (0..=file.len()).find_map(|d| {
            [want.checked_sub(d), Some(want + d)]
                .into_iter()
                .flatten()
                .find(|&s| (d > 0 || s == want) && matches(s))
        });
        if let Some(start) = found {
            return Some(Hunk {
                old_start: start as u32 + 1,
                lines: lines.to_vec(),
            });
        }
    }
    None
}

/// Checks `hunk` against the file's lines (its context and removed lines must be there, at an
/// offset or with fuzz as [`locate`] finds them) and returns its evidence: the lines it
/// removes, first to last, or for a pure insertion the line it follows (the first line when it
/// follows none); lines of only whitespace are no evidence.
pub fn hunk_span(
    path: &str,
    hunk: &Hunk,
    file: &[&str],
) -> std::result::Result<Option<Span>, String> {
    let located = locate(hunk, file);
    let hunk = located.as_ref().unwrap_or(hunk);
    let mut at = hunk.old_start.max(1);
    let (mut first, mut last) = (None, None);
    let mut insert_after: Option<u32> = None;
    for (tag, text) in &hunk.lines {
        match tag {
            '+' => {
                if insert_after.is_none() && first.is_none() {
                    insert_after = Some(at.saturating_sub(1).max(1));
                }
            }
            _ => {
                let got = file.get(at as usize - 1).copied();
                if got.map(|g| g.trim_end_matches('\r')) != Some(text.trim_end_matches('\r')) {
                    return Err(format!(
                        "{path}:{at}: the patch expects {text:?}, the file has {:?}",
                        got.unwrap_or("(end of file)")
                    ));
                }
                if *tag == '-' {
                    first.get_or_insert(at);
                    last = Some(at);
                }
                at += 1;
            }
        }
    }
    let (start, end) = match (first, last, insert_after) {
        (Some(f), Some(l), _) => (f, l),
        // An insertion after a blank line anchors to the nearest line with words before it
        // (else after it).
        (None, None, Some(a)) => {
            let words = |n: u32| {
                file.get(n as usize - 1)
                    .is_some_and(|l| !l.trim().is_empty())
            };
            let n = (1..=a)
                .rev()
                .find(|&n| words(n))
                .or_else(|| (a..=file.len() as u32).find(|&n| words(n)))
                .unwrap_or(a);
            (n, n)
        }
        _ => return Ok(None),
    };
    let end = end.min(file.len() as u32);
    if start > end || file.is_empty() {
        return Ok(None);
    }
    let quote = file[start as usize - 1..end as usize].join("\n");
    if quote.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(Span {
        path: path.to_string(),
        start,
        end,
        quote,
    }))
}

/// Turns one instance into its question (a JSON object for the question file), or says why it
/// cannot be one.
fn question(
    i: &Instance,
    name: &str,
    git: &gix::Repository,
    opts: &Options,
) -> std::result::Result<serde_json::Value, String> {
    let commit = gix::ObjectId::from_hex(i.base_commit.trim().as_bytes())
        .map_err(|e| format!("base_commit `{}`: {e}", i.base_commit))?;
    let tree = git
        .find_object(commit)
        .map_err(|e| format!("commit {} is not in the mirror: {e}", i.base_commit))?
        .peel_to_commit()
        .map_err(|e| format!("{} is not a commit: {e}", i.base_commit))?
        .tree()
        .map_err(|e| format!("the tree of {}: {e}", i.base_commit))?;
    let diffs = parse_patch(&i.patch).map_err(|e| format!("patch: {e}"))?;
    let (mut gold, mut evidence) = (Vec::new(), Vec::new());
    for d in &diffs {
        let Some(path) = &d.old_path else {
            continue; // a new file is not in the base tree: neither gold nor evidence
        };
        let entry = tree
            .lookup_entry_by_path(pathname::to_path(path))
            .map_err(|e| format!("{path}: {e}"))?
            .ok_or_else(|| format!("{path}: the patch modifies it, but it is not at the base"))?;
        let blob = git
            .find_blob(entry.object_id())
            .map_err(|e| format!("{path}: {e}"))?;
        let text =
            String::from_utf8(blob.data.clone()).map_err(|_| format!("{path}: not UTF-8"))?;
        let lines = crate::text::chunker::split_lines(&text);
        for h in &d.hunks {
            if let Some(s) = hunk_span(path, h, &lines)? {
                evidence.push(serde_json::json!({
                    "path": s.path, "quote": s.quote, "start_line": s.start, "end_line": s.end,
                }));
            }
        }
        if !gold.contains(path) {
            gold.push(path.clone());
        }
    }
    if gold.is_empty() {
        return Err("the patch modifies no file of the base tree".into());
    }
    let mut q = i.problem_statement.trim().to_string();
    if opts.hints {
        if let Some(h) = i.hints_text.as_deref().filter(|h| !h.trim().is_empty()) {
            q = format!("{q}\n\n{}", h.trim());
        }
    }
    if q.is_empty() {
        return Err("empty problem_statement".into());
    }
    let gold: Vec<serde_json::Value> = gold
        .iter()
        .map(|p| serde_json::json!({ "path": p, "grade": 1 }))
        .collect();
    Ok(serde_json::json!({
        "id": i.instance_id, "repo": name, "rev": i.base_commit.trim(), "split": opts.split,
        "answerable": true, "question": q, "evidence": evidence, "gold": gold,
    }))
}

/// Imports the instances of `src` into `out`: `questions.jsonl` (one question per usable
/// instance), `repos.tsv` (each repository's name and mirror) and [`REJECTED`] (each instance
/// that could not be used, with why: an unknown repository, a commit the mirror lacks, a patch
/// that does not apply to its base). Files are written whole or not at all.
pub fn import(src: &Path, out: &Path, opts: &Options) -> Result<Imported> {
    let instances = read_instances(src)?;
    let names = repo_names(&instances);
    let mut seen = std::collections::HashSet::new();
    let mut gits: HashMap<String, Option<gix::Repository>> = HashMap::new();
    let (mut lines, mut rejected) = (String::new(), Vec::new());
    let mut repos: BTreeMap<String, PathBuf> = BTreeMap::new();
    for i in &instances {
        if !seen.insert(i.instance_id.clone()) {
            rejected.push((i.instance_id.clone(), "duplicate instance_id".into()));
            continue;
        }
        let name = &names[&i.repo];
        let git = gits.entry(i.repo.clone()).or_insert_with(|| {
            let m = find_mirror(&opts.repos, &i.repo)?;
            let git = gix::open(&m).ok()?;
            repos.insert(name.clone(), m);
            Some(git)
        });
        let Some(git) = git else {
            rejected.push((
                i.instance_id.clone(),
                format!(
                    "unknown repository `{}`: no readable mirror under {} (tried {}; each with or without .git, or holding repo/)",
                    i.repo,
                    opts.repos.display(),
                    mirror_layouts("owner", "name").join(", ")
                ),
            ));
            continue;
        };
        match question(i, name, git, opts) {
            Ok(q) => {
                lines.push_str(&q.to_string());
                lines.push('\n');
            }
            Err(why) => rejected.push((i.instance_id.clone(), why)),
        }
    }
    std::fs::create_dir_all(out).at(out)?;
    let questions = out.join("questions.jsonl");
    let written = lines.lines().count();
    write_atomic(&questions, lines.as_bytes())?;
    let mut tsv = String::from("name\tgit\n");
    for (name, path) in &repos {
        let abs = std::fs::canonicalize(path).unwrap_or(path.clone());
        tsv.push_str(&format!("{name}\t{}\n", abs.display()));
    }
    let repos_file = out.join("repos.tsv");
    write_atomic(&repos_file, tsv.as_bytes())?;
    let mut rej = String::from("instance_id\treason\n");
    for (id, why) in &rejected {
        rej.push_str(&format!("{id}\t{}\n", why.replace(['\t', '\n'], " ")));
    }
    write_atomic(&out.join(REJECTED), rej.as_bytes())?;
    Ok(Imported {
        questions,
        repos: repos_file,
        written,
        rejected,
    })
}

/// The rejected instances an import listed beside `questions` (none when there is no list).
pub fn rejected_beside(questions: &Path) -> Vec<(String, String)> {
    let Some(dir) = questions.parent() else {
        return Vec::new();
    };
    std::fs::read_to_string(dir.join(REJECTED))
        .map(|t| {
            t.lines()
                .skip(1)
                .filter_map(|l| l.split_once('\t'))
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n@@ -2,4 +2,4 @@ def f():\n     a = 1\n-    b = 2\n+    b = 3\n     c = 4\n     return a\n@@ -9,2 +9,3 @@\n x = 1\n+y = 2\n z = 3\ndiff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+print(1)\n";

    #[test]
    fn patches_parse_into_files_and_hunks() {
        let d = parse_patch(PATCH).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].old_path.as_deref(), Some("src/x.py"));
        assert_eq!(d[0].hunks.len(), 2);
        assert_eq!(d[0].hunks[0].old_start, 2);
        assert_eq!(d[0].hunks[0].lines[1], ('-', "    b = 2".to_string()));
        assert_eq!(d[1].old_path, None);
        assert!(parse_patch("--- a/x\n@@ -1 +1 @@\n-a\n").is_err());
    }

    #[test]
    fn hunks_anchor_to_removed_lines_or_the_line_an_insertion_follows() {
        let file = [
            "def f():",
            "    a = 1",
            "    b = 2",
            "    c = 4",
            "    return a",
            "",
            "",
            "",
            "x = 1",
            "z = 3",
        ];
        let d = parse_patch(PATCH).unwrap();
        let s = hunk_span("src/x.py", &d[0].hunks[0], &file)
            .unwrap()
            .unwrap();
        assert_eq!((s.start, s.end, s.quote.as_str()), (3, 3, "    b = 2"));
        let s = hunk_span("src/x.py", &d[0].hunks[1], &file)
            .unwrap()
            .unwrap();
        assert_eq!((s.start, s.end, s.quote.as_str()), (9, 9, "x = 1"));
        // A base whose removed line differs from the patch's is an error naming the line.
        let mut other = file;
        other[2] = "    b = 7";
        let e = hunk_span("src/x.py", &d[0].hunks[0], &other).unwrap_err();
        assert!(e.starts_with("src/x.py:3:"), "{e}");
    }

    #[test]
    fn hunks_apply_at_an_offset_and_with_fuzz_as_patch_applies_them() {
        let d = parse_patch(PATCH).unwrap();
        let hunk = &d[0].hunks[0];
        // The same function 7 lines further down (lines were added above it since).
        let mut moved: Vec<&str> = vec!["import os"; 7];
        moved.extend([
            "def f():",
            "    a = 1",
            "    b = 2",
            "    c = 4",
            "    return a",
        ]);
        let s = hunk_span("src/x.py", hunk, &moved).unwrap().unwrap();
        assert_eq!((s.start, s.end), (10, 10));
        // And 1 line further up, the nearest match winning over a later one.
        let mut up = vec!["    a = 1", "    b = 2", "    c = 4", "    return a"];
        up.extend(["", "    a = 1", "    b = 2", "    c = 4", "    return a"]);
        assert_eq!(locate(hunk, &up).unwrap().old_start, 1);
        // A changed trailing context line: found with one line of fuzz (a context line dropped
        // from each end, as GNU patch drops them).
        let fuzzed = [
            "def f():",
            "    a = 1",
            "    b = 2",
            "    c = 4",
            "    return b",
        ];
        let h = locate(hunk, &fuzzed).unwrap();
        assert_eq!((h.old_start, h.lines.len()), (3, 3));
        let s = hunk_span("src/x.py", hunk, &fuzzed).unwrap().unwrap();
        assert_eq!((s.start, s.end, s.quote.as_str()), (3, 3, "    b = 2"));
    }

    #[test]
    fn names_are_the_repository_name_unless_two_owners_share_it() {
        let inst = |repo: &str| Instance {
            instance_id: repo.into(),
            repo: repo.into(),
            base_commit: String::new(),
            problem_statement: String::new(),
            hints_text: None,
            patch: String::new(),
        };
        let n = repo_names(&[inst("django/django"), inst("a/x"), inst("b/x")]);
        assert_eq!(n["django/django"], "django");
        assert_eq!(n["a/x"], "a__x");
        assert_eq!(n["b/x"], "b__x");
    }

    #[test]
    fn mirrors_are_found_under_swe_benchs_fork_names_and_a_missing_one_is_none() {
        let root = tempfile::tempdir().unwrap();
        // A bare mirror's shape: HEAD and objects/, as `git clone --mirror` lays it out.
        let bare = |rel: &str| {
            let d = root.path().join(rel);
            std::fs::create_dir_all(d.join("objects")).unwrap();
            std::fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap();
            d
        };
        let django = bare("swe-bench+django__django/repo");
        let sk = bare("swe-bench/scikit-learn__scikit-learn.git");
        let own = bare("pytest-dev+pytest/repo");
        assert_eq!(find_mirror(root.path(), "django/django"), Some(django));
        assert_eq!(
            find_mirror(root.path(), "scikit-learn/scikit-learn"),
            Some(sk)
        );
        assert_eq!(find_mirror(root.path(), "pytest-dev/pytest"), Some(own));
        // The owner's own name wins over a fork when both exist.
        let first = bare("django+django/repo");
        assert_eq!(find_mirror(root.path(), "django/django"), Some(first));
        // A directory without objects/ is not a mirror.
        std::fs::create_dir_all(root.path().join("swe-bench+sympy__sympy/repo")).unwrap();
        assert_eq!(find_mirror(root.path(), "sympy/sympy"), None);
    }
}
