//! questions: loads the pipeline's question set into the `questions` table and records every
//! evidence anchor that is not an exact substring of a scanned file in `errors`.

use crate::artifact::readers::Parts;
use crate::artifact::schema::{FileRow, QuestionRow, RevisionRow, Row, Scope, TreeRow};
use crate::artifact::sha256_hex;
use crate::artifact::StageId;
use crate::config::Plan;
use crate::error::{IoContext, Result};
use crate::evaluation::dataset::{load_questions, AnchorCheck};
use crate::repos::walk::{scan_each, Sink};
use crate::stages::{Ctx, Stage};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

pub struct Questions;

impl Stage for Questions {
    fn id(&self) -> StageId {
        StageId::Questions
    }
    fn inputs(&self) -> &'static [StageId] {
        &[StageId::Scan]
    }
    fn config(&self, plan: &Plan) -> Value {
        let shard = plan.shard.map(|s| s.dir_name());
        json!({ "questions": plan.questions, "shard": shard })
    }
    fn probe(&self, plan: &Plan) -> Result<Value> {
        match &plan.questions {
            Some(p) => Ok(json!(sha256_hex(&std::fs::read(p).at(p)?))),
            None => Ok(Value::Null),
        }
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        match plan.questions {
            Some(_) => Ok(()),
            None => Err("the pipeline names no question file ([pipeline] questions)".into()),
        }
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let path = ctx
            .plan
            .questions
            .clone()
            .expect("enabled implies a question file");
        let mut questions = load_questions(&path)?;
        // A shard answers the questions of its own repositories; the merge, all the others.
        if ctx.plan.shard.is_some() {
            let plan = ctx.plan;
            questions.retain(|q| plan.scope(&q.scope).is_some());
        }
        // Only the files that evidence or gold documents name are decoded, one repository at a
        // time, each checked at the revision its question is asked at; only what the anchors
        // need of them is kept.
        let mut check = AnchorCheck::new(&questions);
        let trees = Parts::of(ctx.store, TreeRow::TABLE)?;
        let files = Parts::of(ctx.store, FileRow::TABLE)?;
        let mut by_group: BTreeMap<String, Vec<Scope>> = BTreeMap::new();
        for scope in check.scopes() {
            by_group
                .entry(scope.group().to_string())
                .or_default()
                .push(scope.clone());
        }
        for (group, scopes) in &by_group {
            let Some(part) = files.get(group) else {
                continue;
            };
            // Per scope, the blob of each named path it holds.
            let mut blobs: HashMap<Scope, HashMap<String, String>> = HashMap::new();
            if let Some(tree) = trees.get(group) {
                let rows: Vec<TreeRow> =
                    ctx.store.read_where(&[tree], &TREE_COLUMNS, "scope", |s| {
                        scopes.iter().any(|x| x.as_str() == s)
                    })?;
                for t in rows {
                    if check.names(t.scope.as_str(), &t.path) {
                        blobs.entry(t.scope).or_default().insert(t.path, t.blob_id);
                    }
                }
            }
            let fields = FileRow::fields();
            let columns: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
            let rows: Vec<FileRow> = ctx.store.read_where(&[part], &columns, "path", |p| {
                scopes.iter().any(|s| check.names(s.as_str(), p))
            })?;
            for f in &rows {
                for scope in scopes {
                    let at = blobs.get(scope.as_str()).and_then(|b| b.get(&f.path));
                    if at == Some(&f.blob_id) {
                        check.add(scope.as_str(), f);
                    }
                }
            }
        }
        // Instances an import could not turn into questions are counted, not errors: the
        // dataset, not the run, is short of them, and a rerun would fail again for the same
        // reason. Their ids and reasons are in the import's `rejected.tsv`, and the import says
        // how many on every run.
        if ctx
            .plan
            .import
            .as_ref()
            .is_some_and(|i| i.swebench.is_some())
        {
            let rejected = crate::sources::swebench::rejected_beside(&path);
            ctx.stat("instances_rejected", rejected.len());
        }
        let scopes = ctx.plan.scopes();
        for (id, problem) in check.problems(&scopes) {
            let repo = questions
                .iter()
                .find(|q| q.question_id == id)
                .map(|q| q.scope.to_string());
            ctx.error(repo.as_deref(), format!("question {id}: {problem}"));
        }
        ctx.stat("questions", questions.len());
        ctx.writer
            .write(QuestionRow::TABLE.name(), "", &questions)?;
        Ok(())
    }
}

/// The columns of `trees` the anchor check reads.
const TREE_COLUMNS: [&str; 5] = ["repo", "scope", "commit", "path", "blob_id"];

/// `dataset check`'s sink: keeps, of a repository's scanned files, the texts of those a question
/// names, and feeds each revision's to the check as that revision is done.
struct Checking<'c, 'q> {
    check: &'c mut AnchorCheck<'q>,
    texts: HashMap<(String, String), FileRow>,
}

impl Sink for Checking<'_, '_> {
    fn files(&mut self, batch: Vec<FileRow>) -> Result<()> {
        for f in batch {
            let named = self
                .check
                .scopes()
                .any(|s| s.group() == f.repo && self.check.names(s.as_str(), &f.path));
            if named {
                self.texts.insert((f.path.clone(), f.blob_id.clone()), f);
            }
        }
        Ok(())
    }
    fn revision(&mut self, rev: RevisionRow, tree: Vec<TreeRow>) -> Result<()> {
        for t in tree {
            if let Some(f) = self.texts.get(&(t.path, t.blob_id)) {
                self.check.add(rev.scope.as_str(), f);
            }
        }
        Ok(())
    }
}

/// `ri-batch dataset check`: scans the plan's repositories in memory, checks every anchor of its
/// question set and reports counts. Returns whether every anchor holds. An `[import]` plan's
/// import must be in place first ([`crate::pipeline::prepare`]).
pub fn check_report(plan: &Plan) -> Result<(bool, String)> {
    use std::fmt::Write;
    let path = plan.questions.clone().ok_or_else(|| {
        crate::Error::Invalid(format!(
            "{}: no question file ([pipeline] questions)",
            plan.config_path.display()
        ))
    })?;
    let questions = load_questions(&path)?;
    // Only what the anchors need of each file is kept, so memory follows the questions.
    let mut check = AnchorCheck::new(&questions);
    let mut out = String::new();
    let mut ok = true;
    for repo in &plan.repos {
        let mut sink = Checking {
            check: &mut check,
            texts: HashMap::new(),
        };
        match scan_each(plan, repo, &mut sink) {
            Ok(s) => {
                for (_, e) in s.failed {
                    ok = false;
                    let _ = writeln!(out, "error: {e}");
                }
            }
            Err(e) => {
                ok = false;
                let _ = writeln!(out, "error: {e}");
            }
        }
    }
    let problems = check.problems(&plan.scopes());
    let (by_split, by_repo) = crate::evaluation::dataset::counts(&questions);
    let anchors: usize = questions.iter().map(|q| q.evidence.len()).sum();
    let _ = writeln!(
        out,
        "{}: {} questions, {} evidence anchors",
        path.display(),
        questions.len(),
        anchors
    );
    for (split, (a, u)) in &by_split {
        let _ = writeln!(out, "  {split:<8} {a:>4} answerable  {u:>4} unanswerable");
    }
    for (repo, n) in &by_repo {
        let _ = writeln!(out, "  repo {repo:<14} {n:>4}");
    }
    for (id, p) in &problems {
        let _ = writeln!(out, "FAIL {id}: {p}");
    }
    if problems.is_empty() {
        let _ = writeln!(out, "all anchors found");
    }
    Ok((ok && problems.is_empty(), out))
}
