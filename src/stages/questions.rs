//! questions: loads the pipeline's question set into the `questions` table and records every
//! evidence anchor that is not an exact substring of a scanned file in `errors`.

use crate::artifact::sha256_hex;
use crate::config::Plan;
use crate::dataset::{load_questions, locate, AnchorCheck};
use crate::error::{IoContext, Result};
use crate::pipeline::{Ctx, Stage};
use crate::schema::{FileRow, Row};
use serde_json::{json, Value};
use std::collections::HashSet;

pub struct Questions;

impl Stage for Questions {
    fn name(&self) -> &'static str {
        "questions"
    }
    fn inputs(&self) -> &'static [&'static str] {
        &["scan"]
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
            questions.retain(|q| plan.repo(&q.repo).is_some());
        }
        // Only the files that evidence or gold documents name are decoded, one repository at a
        // time, and only what the anchors need of them is kept.
        let mut check = AnchorCheck::new(&questions);
        let repos_wanted: HashSet<&str> = questions
            .iter()
            .flat_map(|q| {
                q.evidence
                    .iter()
                    .map(|e| &e.path)
                    .chain(&q.gold_paths)
                    .map(|p| locate(&q.repo, p).0)
            })
            .collect();
        for part in ctx.store.files_of(FileRow::TABLE)? {
            if repos_wanted.contains(part.part.as_str()) {
                let fields = FileRow::fields();
                let columns: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
                let rows: Vec<FileRow> = ctx
                    .store
                    .read_where(&[&part], &columns, "path", |p| check.names(&part.part, p))?;
                rows.iter().for_each(|f| check.add(f));
            }
        }
        let repos: Vec<String> = ctx.plan.repos.iter().map(|r| r.name.clone()).collect();
        for (id, problem) in check.problems(&repos) {
            let repo = questions
                .iter()
                .find(|q| q.question_id == id)
                .map(|q| q.repo.clone());
            ctx.error(repo.as_deref(), format!("question {id}: {problem}"));
        }
        ctx.stat("questions", questions.len());
        ctx.writer.write("questions", "questions", "", &questions)?;
        Ok(())
    }
}

/// `ri-batch dataset check`: scans the plan's repositories in memory, checks every anchor of its
/// question set and reports counts. Returns whether every anchor holds.
pub fn check_report(plan: &Plan) -> Result<(bool, String)> {
    use std::fmt::Write;
    crate::pipeline::prepare(plan, true)?;
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
        let scanned = crate::stages::scan::scan_each(plan, repo, |batch| {
            batch.iter().for_each(|f| check.add(f));
            Ok(())
        });
        if let Err(e) = scanned {
            ok = false;
            let _ = writeln!(out, "error: {e}");
        }
    }
    let repos: Vec<String> = plan.repos.iter().map(|r| r.name.clone()).collect();
    let problems = check.problems(&repos);
    let (by_split, by_repo) = crate::dataset::counts(&questions);
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
