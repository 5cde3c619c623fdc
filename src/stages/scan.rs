//! scan: reads each repository at each of its revisions (the walk of [`crate::repos::walk`]) and
//! writes, one partition per repository, `files` (each (path, blob) once, however many revisions
//! hold it), `skipped`, `revisions` and (git) `commits`, and one `trees` partition per revision
//! scope (what the revision holds, by blob).

use crate::artifact::schema::{
    to_batch, CommitRow, FileRow, RevisionRow, Row, SkippedRow, TreeRow,
};
use crate::artifact::StageId;
use crate::artifact::{hash_json, FileFormat};
use crate::config::{Plan, RepoSpec};
use crate::error::{Error, Result};
use crate::repos::head_state;
use crate::repos::walk::{commits_of, keeps_commits, scan_each, Sink, MAX_LINE_BYTES};
use crate::secrets::sensitive::RULES_VERSION;
use crate::stages::{Ctx, Stage};
use rayon::prelude::*;
use serde_json::{json, Value};

pub struct Scan;

impl Stage for Scan {
    fn id(&self) -> StageId {
        StageId::Scan
    }
    fn inputs(&self) -> &'static [StageId] {
        &[]
    }
    fn version(&self) -> u32 {
        // 2: repositories at many revisions; `trees` and `revisions`; paths decided before any
        // blob is looked up. 3: commit messages with a secret redacted like files, not dropped.
        3
    }
    fn config(&self, plan: &Plan) -> Value {
        json!({ "scan": plan.scan, "repos": plan.repos, "max_line_bytes": MAX_LINE_BYTES, "secret_rules": RULES_VERSION, "gitleaks": crate::secrets::gitleaks::version() })
    }
    fn probe(&self, plan: &Plan) -> Result<Value> {
        let heads: Vec<(String, Value)> = plan
            .repos
            .par_iter()
            .map(|r| {
                (
                    r.name.clone(),
                    json!(head_state(r, plan.scan.gitignore, plan.scan.max_file_bytes)),
                )
            })
            .collect();
        Ok(Value::Object(heads.into_iter().collect()))
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let bar = ctx.bar(plan.repos.len() as u64, "repos");
        let mut todo = Vec::new();
        for repo in &plan.repos {
            // The probe already resolved every revision; resolving again would repeat it.
            let states: Vec<(String, String)> = ctx
                .probe
                .get(&repo.name)
                .and_then(|s| serde_json::from_value(s.clone()).ok())
                .unwrap_or_else(|| head_state(repo, plan.scan.gitignore, plan.scan.max_file_bytes));
            let rules = (RULES_VERSION, crate::secrets::gitleaks::version());
            let key = hash_json(&(&plan.scan, repo, &states, MAX_LINE_BYTES, rules));
            // A revision that could not be read is tried again on every run.
            if states.iter().any(|(_, s)| s.starts_with("error:")) {
                todo.push((repo, key));
                continue;
            }
            let mut all = true;
            for table in [
                FileRow::TABLE,
                SkippedRow::TABLE,
                RevisionRow::TABLE,
                TreeRow::TABLE,
            ] {
                all &= ctx.writer.reuse(table, &repo.name, &key)?.is_some();
            }
            if keeps_commits(plan, repo) {
                all &= ctx
                    .writer
                    .reuse(CommitRow::TABLE, &repo.name, &key)?
                    .is_some();
            }
            if all {
                bar.inc(1);
            } else {
                todo.push((repo, key));
            }
        }
        // One repository at a time, its files read in parallel a slice at a time and streamed out
        // in batches: memory follows a slice and a Parquet row group, not the repository.
        let mut counts = Counts::default();
        for (repo, key) in todo {
            scan_into(ctx, repo, &key, &mut counts)?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        ctx.stat("files_scanned", counts.files);
        ctx.stat("files_skipped", counts.skipped);
        ctx.stat("revisions", counts.revisions);
        ctx.stat("tree_entries", counts.tree_entries);
        ctx.stat("blobs_reused", counts.reused);
        ctx.stat("commits", counts.commits);
        ctx.stat("commits_left_out_sensitive", counts.sensitive);
        ctx.stat("commits_redacted", counts.commits_redacted);
        ctx.stat("files_redacted", counts.redacted);
        ctx.stat("lines_redacted", counts.redacted_lines);
        Ok(())
    }
}

/// What the scan stage counts, over every repository it scanned this run.
#[derive(Default)]
struct Counts {
    files: usize,
    skipped: usize,
    revisions: usize,
    tree_entries: usize,
    reused: usize,
    commits: usize,
    sensitive: usize,
    commits_redacted: usize,
    redacted: usize,
    redacted_lines: usize,
}

/// The stage's sink: the repository's `files` and `trees` partitions, written as they come.
struct Writing<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    files: Option<crate::artifact::PartWriter>,
    trees: Option<crate::artifact::PartWriter>,
    revisions: Vec<RevisionRow>,
    counts: &'c mut Counts,
}

impl Sink for Writing<'_, '_> {
    fn files(&mut self, batch: Vec<FileRow>) -> Result<()> {
        self.counts.files += batch.len();
        let w = self.files.as_mut().expect("open until the scan ends");
        w.write(&to_batch(&batch)?)
    }
    fn revision(&mut self, rev: RevisionRow, tree: Vec<TreeRow>) -> Result<()> {
        self.counts.revisions += 1;
        self.counts.tree_entries += tree.len();
        let w = self.trees.as_mut().expect("open until the scan ends");
        w.write(&to_batch(&tree)?)?;
        self.revisions.push(rev);
        Ok(())
    }
}

/// Scans one repository into its partitions; a repository or revision that cannot be read is
/// recorded in `errors` and the rest goes on. A failure to write the stage's own output stops it.
fn scan_into(ctx: &mut Ctx, repo: &RepoSpec, key: &str, counts: &mut Counts) -> Result<()> {
    let plan = ctx.plan;
    let files = ctx.writer.part(
        FileRow::TABLE,
        &repo.name,
        key,
        FileRow::schema(),
        FileFormat::Parquet,
    )?;
    let trees = ctx.writer.part(
        TreeRow::TABLE,
        &repo.name,
        key,
        TreeRow::schema(),
        FileFormat::Parquet,
    )?;
    let mut sink = Writing {
        ctx,
        files: Some(files),
        trees: Some(trees),
        revisions: Vec::new(),
        counts,
    };
    let scanned = scan_each(plan, repo, &mut sink);
    let Writing {
        ctx,
        files,
        trees,
        revisions,
        counts,
    } = sink;
    let (files, trees) = (files.expect("still open"), trees.expect("still open"));
    let scanned = match scanned {
        Ok(s) if !revisions.is_empty() => s,
        Ok(s) => {
            // No revision could be read: the repository failed as a whole.
            files.discard()?;
            trees.discard()?;
            for (scope, e) in s.failed {
                ctx.error(Some(scope.as_str()), e);
            }
            return Ok(());
        }
        Err(e @ Error::Repo { .. }) => {
            files.discard()?;
            trees.discard()?;
            ctx.error(Some(&repo.name), e);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    ctx.writer.finish(files)?;
    ctx.writer.finish(trees)?;
    counts.skipped += scanned.skipped.len() - scanned.redacted;
    counts.reused += scanned.reused;
    counts.redacted += scanned.redacted;
    counts.redacted_lines += scanned.redacted_lines;
    for (scope, e) in scanned.failed {
        ctx.error(Some(scope.as_str()), e);
    }
    ctx.writer.write(&repo.name, key, &scanned.skipped)?;
    ctx.writer.write(&repo.name, key, &revisions)?;
    let commits: Vec<&str> = revisions.iter().map(|r| r.commit.as_str()).collect();
    match commits_of(plan, repo, &commits) {
        Ok(Some((rows, messages))) => {
            counts.commits += rows.len();
            counts.sensitive += messages.left_out;
            counts.commits_redacted += messages.redacted;
            ctx.writer.write(&repo.name, key, &rows)?;
        }
        Ok(None) => {}
        Err(e) => ctx.error(Some(&repo.name), e),
    }
    Ok(())
}
