//! Per-scope partitions: the stages after `index` write one partition per question scope, reuse
//! the partitions whose inputs are unchanged, and read what the revisions of one repository share
//! (its chunks, its files) once for a batch of them, so that their cost follows the questions, not
//! the number of scopes.

use super::Ctx;
use crate::artifact::hash_json;
use crate::artifact::schema::{QuestionRow, Scope, Table};
use crate::error::Result;
use arrow::array::RecordBatch;
use rayon::prelude::*;
use std::collections::BTreeMap;

/// Questions in one batch of scopes that share their reads (the revisions of one repository):
/// what a batch holds in memory follows these questions' pools, not the repository.
pub const BATCH_QUESTIONS: usize = 128;

/// The partitions of a per-scope stage: each question scope with the key of what its partition
/// is computed from: `base` (the stage's version, configuration and run-wide inputs), the
/// scope's questions, and what `inputs` names for the scope (the checksums of its input files).
pub fn scope_keys<B: serde::Serialize, T: serde::Serialize>(
    by_scope: &BTreeMap<Scope, Vec<QuestionRow>>,
    base: &B,
    inputs: impl Fn(&Scope) -> T,
) -> Vec<(Scope, String)> {
    by_scope
        .iter()
        .map(|(scope, qs)| (scope.clone(), hash_json(&(base, qs, inputs(scope)))))
        .collect()
}

/// Runs a stage that writes one partition of `table` per question scope. For each `(scope, key)`
/// of `jobs` it reuses the partition computed from the same key (an unchanged repository in a
/// nightly rerun, or a shard's output at the merge), or computes the scope's rows with `work` and
/// writes them at once. A few scopes are in flight at a time (one per core), so memory follows the
/// largest scopes, not the number of questions; the bar counts scopes.
///
/// What the revisions of one repository share is read once for a batch of them: consecutive
/// scopes of one group, up to [`BATCH_QUESTIONS`] of `questions`, get what `prepare` read for
/// their batch beside their scope. A batch's shared part is read before the first round of
/// scopes that needs it and dropped once its last scope is written; a scope's rows depend only
/// on its own inputs, whatever batch it falls in.
pub fn per_scope<P: Sync, R: crate::artifact::schema::Row + Send>(
    ctx: &mut Ctx,
    jobs: Vec<(Scope, String)>,
    questions: &BTreeMap<Scope, Vec<QuestionRow>>,
    prepare: impl Fn(&[Scope]) -> Result<P>,
    work: impl Fn(&P, &Scope) -> Result<Vec<R>> + Sync,
) -> Result<()> {
    per_scope_tables(ctx, &[R::TABLE], jobs, questions, prepare, |p, scope| {
        Ok(vec![crate::artifact::schema::to_batch(&work(p, scope)?)?])
    })
}

/// [`per_scope`] for a stage that writes a partition of each of several `tables` per scope:
/// `work` returns one record batch per table, in order; a scope is reused only when every table's
/// partition is.
pub fn per_scope_tables<P: Sync>(
    ctx: &mut Ctx,
    tables: &[Table],
    jobs: Vec<(Scope, String)>,
    questions: &BTreeMap<Scope, Vec<QuestionRow>>,
    prepare: impl Fn(&[Scope]) -> Result<P>,
    work: impl Fn(&P, &Scope) -> Result<Vec<RecordBatch>> + Sync,
) -> Result<()> {
    let bar = ctx.bar(jobs.len() as u64, "scopes");
    let mut todo = Vec::new();
    for (scope, key) in jobs {
        let mut all = true;
        for t in tables {
            all &= ctx.writer.reuse(*t, scope.as_str(), &key)?.is_some();
        }
        if all {
            bar.inc(1);
        } else {
            todo.push((scope, key));
        }
    }
    let batch_of = batches(&todo, &|s: &Scope| questions.get(s).map_or(0, Vec::len));
    let members: Vec<Vec<Scope>> = group_members(&todo, &batch_of);
    // Each batch's shared part, read before the first round that needs it (outside the parallel
    // section: a prepare may itself run in parallel) and dropped once its last scope is written.
    let mut prepared: Vec<Option<P>> = members.iter().map(|_| None).collect();
    let width = rayon::current_num_threads().max(1);
    let mut start = 0;
    while start < todo.len() {
        let end = (start + width).min(todo.len());
        for &b in &batch_of[start..end] {
            if prepared[b].is_none() {
                prepared[b] = Some(prepare(&members[b])?);
            }
        }
        let group = &todo[start..end];
        let ps: Vec<&P> = batch_of[start..end]
            .iter()
            .filter_map(|&b| prepared[b].as_ref())
            .collect();
        let done: Vec<Result<Vec<RecordBatch>>> = group
            .par_iter()
            .zip(ps)
            .map(|((s, _), p)| work(p, s))
            .collect();
        for ((scope, key), batches) in group.iter().zip(done) {
            for (t, b) in tables.iter().zip(batches?) {
                ctx.writer
                    .write_batches(*t, scope.as_str(), key, b.schema(), &[b])?;
            }
            bar.inc(1);
        }
        let next = batch_of.get(end).copied().unwrap_or(members.len());
        for slot in &mut prepared[..next] {
            slot.take();
        }
        start = end;
    }
    bar.finish_and_clear();
    Ok(())
}

/// The batch of each scope of `todo` (in order): consecutive scopes of one group up to
/// [`BATCH_QUESTIONS`] questions (a batch holds at least one scope).
fn batches(todo: &[(Scope, String)], weight: &impl Fn(&Scope) -> usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(todo.len());
    let (mut batch, mut load) = (0, 0);
    for (i, (scope, _)) in todo.iter().enumerate() {
        let w = weight(scope);
        if i > 0 && (todo[i - 1].0.group() != scope.group() || load + w > BATCH_QUESTIONS) {
            batch += 1;
            load = 0;
        }
        load += w;
        out.push(batch);
    }
    out
}

/// The scopes of each batch, by batch number.
fn group_members(todo: &[(Scope, String)], batch_of: &[usize]) -> Vec<Vec<Scope>> {
    let mut out: Vec<Vec<Scope>> = Vec::new();
    for ((scope, _), &b) in todo.iter().zip(batch_of) {
        if out.len() <= b {
            out.push(Vec::new());
        }
        out[b].push(scope.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn todo(names: &[&str]) -> Vec<(Scope, String)> {
        names
            .iter()
            .map(|n| (n.parse().unwrap(), String::new()))
            .collect()
    }

    #[test]
    fn batches_hold_one_group_up_to_the_question_bound() {
        let t = todo(&["a@1", "a@2", "a@3", "b", "c@1", "c@2"]);
        assert_eq!(batches(&t, &|_| 1), vec![0, 0, 0, 1, 2, 2]);
        // A scope heavier than the bound is a batch of its own; the bound splits a group.
        let (light, over) = (BATCH_QUESTIONS / 3, BATCH_QUESTIONS + 1);
        let heavy = |s: &Scope| if s.as_str() == "a@2" { over } else { light };
        assert_eq!(batches(&t, &heavy), vec![0, 1, 2, 3, 4, 4]);
        let members = group_members(&t, &batches(&t, &heavy));
        assert_eq!(members.len(), 5);
        assert_eq!(members[4].len(), 2);
    }
}
