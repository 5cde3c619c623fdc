//! evaluate: per variant × question, required-evidence recall of the retrieved pool and of the
//! packed context, tokens used, ranking metrics against gold documents and the extract outcome
//! (`evaluation`); per variant × split, means (`summary`) and paired bootstrap comparisons with the
//! baseline variant (`comparisons`).

use crate::artifact::outcomes::{NotRun, Outcome, Reason, VariantStatus};
use crate::artifact::readers::{chunks_by_id, pools, questions_by_scope, Parts};
use crate::artifact::schema::{
    ChunkRow, ComparisonRow, EvaluationRow, ExtractRow, FileRetrievalRow, PackRow, QuestionRow,
    RetrievalRow, SummaryRow,
};
use crate::artifact::schema::{Row, Scope};
use crate::artifact::StageId;
use crate::artifact::Store;
use crate::config::Plan;
use crate::error::Result;
use crate::evaluation::metrics::{
    accuracy_at, anchor_recall, holm, merged_spans, mrr_at, ndcg_at, paired_bootstrap,
    randomization_p, ranked_files, recall_at, Piece, QUESTION_METRICS,
};
use crate::stages::{scope_keys, Ctx, Stage};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

pub struct Evaluate;

impl Stage for Evaluate {
    fn id(&self) -> StageId {
        StageId::Evaluate
    }
    fn inputs(&self) -> &'static [StageId] {
        &[
            StageId::Chunk,
            StageId::Questions,
            StageId::Retrieve,
            StageId::Pack,
            StageId::Extract,
        ]
    }
    fn config(&self, plan: &Plan) -> Value {
        let vs: Vec<_> = plan.variants.iter().map(|v| json!(v)).collect();
        // Which splits the printed summary holds back changes no table.
        let mut evaluate = json!(plan.evaluate);
        if let Some(e) = evaluate.as_object_mut() {
            e.remove("held_out");
        }
        json!({ "evaluate": evaluate, "baseline": plan.baseline, "variants": vs })
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        if plan.shard.is_some() {
            return Err("a shard does not evaluate: the merge does, over every shard".into());
        }
        plan.answers_questions()
    }
    fn version(&self) -> u32 {
        // 2: `evaluation` has one partition per question scope, reused while its inputs are
        // unchanged; `summary` and `comparisons` are computed from all of them. 3: file-level
        // accuracy, files ranked by `file_retrievals`, evidence anchored to lines. 4:
        // comparisons gain randomization p-values with Holm's adjustment, and acc1 / acc10.
        4
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let store = ctx.store;
        let by_scope = questions_by_scope(store)?;
        let parts = [
            Parts::of(store, RetrievalRow::TABLE)?,
            Parts::of(store, PackRow::TABLE)?,
            Parts::of(store, ExtractRow::TABLE)?,
            Parts::of(store, ChunkRow::TABLE)?,
            Parts::of(store, FileRetrievalRow::TABLE)?,
        ];
        let not_run = crate::artifact::readers::not_run(store)?;
        let config = self.config(plan);
        let jobs = scope_keys(&by_scope, &(self.version(), &config, &not_run), |scope| {
            let mut sums: Vec<Vec<&str>> =
                parts[..3].iter().map(|p| p.own(scope.as_str())).collect();
            sums.push(parts[3].checksums_of(scope, &plan.chunker_names()));
            sums.push(parts[4].own(scope.as_str()));
            sums
        });
        let prepare = |scopes: &[Scope]| pooled_chunks(plan, store, &parts, scopes);
        crate::stages::per_scope(ctx, jobs, &by_scope, prepare, |pooled, scope| {
            evaluate_scope(
                plan,
                store,
                &parts,
                &not_run,
                pooled,
                scope,
                &by_scope[scope],
            )
        })?;
        drop(parts);

        // Summary and comparisons over every scope's rows, in variant then question order (the
        // order of the sums, so that means are the same to the last bit however scopes fall).
        let questions: Vec<QuestionRow> = store.read()?;
        let question_order: HashMap<&str, usize> = questions
            .iter()
            .enumerate()
            .map(|(i, q)| (q.question_id.as_str(), i))
            .collect();
        let variant_order: HashMap<&str, usize> = plan
            .variants
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), i))
            .collect();
        let mut rows: Vec<EvaluationRow> = Vec::new();
        for f in ctx.writer.files(EvaluationRow::TABLE) {
            rows.extend(store.read_rows::<EvaluationRow>(&f)?);
        }
        rows.sort_by_key(|r| {
            (
                variant_order.get(r.variant.as_str()).copied(),
                question_order.get(r.question_id.as_str()).copied(),
            )
        });
        let mut extracts: Vec<ExtractReason> = Vec::new();
        for f in store.files_of(ExtractRow::TABLE)? {
            extracts.extend(store.read_rows_of(&f, Some(&["variant", "question_id", "reason"]))?);
        }
        let splits: BTreeSet<&str> = questions.iter().map(|q| q.split.as_str()).collect();
        let summary = summarize(plan, &rows, &questions, &extracts, &not_run);
        let comparisons = compare_to_baseline(plan, &rows, &splits, &not_run);
        ctx.writer.write(SummaryRow::TABLE.name(), "", &summary)?;
        ctx.writer
            .write(ComparisonRow::TABLE.name(), "", &comparisons)?;
        Ok(())
    }
}

/// The summary rows, per variant and split: means of `rows` (in variant then question order),
/// the status, and the extract outcome counts where a selector ran.
fn summarize(
    plan: &Plan,
    rows: &[EvaluationRow],
    questions: &[QuestionRow],
    extracts: &[ExtractReason],
    not_run: &BTreeMap<String, NotRun>,
) -> Vec<SummaryRow> {
    let splits: BTreeSet<&str> = questions.iter().map(|q| q.split.as_str()).collect();
    let split_of: HashMap<&str, &str> = questions
        .iter()
        .map(|q| (q.question_id.as_str(), q.split.as_str()))
        .collect();
    let mut summary = Vec::new();
    for v in &plan.variants {
        for split in &splits {
            let mine: Vec<&EvaluationRow> = rows
                .iter()
                .filter(|r| r.variant == v.name && r.split == *split)
                .collect();
            let in_split = questions.iter().filter(|q| q.split == *split);
            let mut s = SummaryRow {
                variant: v.name.clone(),
                split: split.to_string(),
                retriever: json!(v.retrieval.retriever)
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                packer: json!(v.packing.packer).as_str().unwrap_or("").to_string(),
                budget: v.packing.budget.tokens(),
                status: not_run
                    .get(&v.name)
                    .map_or(VariantStatus::Ok, |&n| VariantStatus::NotRun(n)),
                questions: in_split.clone().count() as u32,
                answerable: in_split.filter(|q| q.answerable).count() as u32,
                pool_recall: mean(mine.iter().filter_map(|r| r.pool_recall)),
                packed_recall: mean(mine.iter().filter_map(|r| r.packed_recall)),
                mean_tokens: mean(mine.iter().map(|r| r.tokens_used as f64)),
                mrr10: mean(mine.iter().filter_map(|r| r.mrr10)),
                ndcg10: mean(mine.iter().filter_map(|r| r.ndcg10)),
                recall10: mean(mine.iter().filter_map(|r| r.recall10)),
                recall100: mean(mine.iter().filter_map(|r| r.recall100)),
                full: None,
                partial: None,
                irrelevant: None,
                false_refusal: None,
                correct_refusal: None,
                false_selection: None,
                contract_refusals: None,
                acc1: mean(mine.iter().filter_map(|r| r.acc1)),
                acc5: mean(mine.iter().filter_map(|r| r.acc5)),
                acc10: mean(mine.iter().filter_map(|r| r.acc10)),
            };
            if mine.iter().any(|r| r.outcome.is_some()) {
                let count =
                    |o: Outcome| Some(mine.iter().filter(|r| r.outcome == Some(o)).count() as u32);
                s.full = count(Outcome::Full);
                s.partial = count(Outcome::Partial);
                s.irrelevant = count(Outcome::Irrelevant);
                s.false_refusal = count(Outcome::FalseRefusal);
                s.correct_refusal = count(Outcome::CorrectRefusal);
                s.false_selection = count(Outcome::FalseSelection);
                s.contract_refusals = Some(
                    extracts
                        .iter()
                        .filter(|e| e.variant == v.name && e.reason.is_contract_refusal())
                        .filter(|e| split_of.get(e.question_id.as_str()) == Some(split))
                        .count() as u32,
                );
            }
            summary.push(s);
        }
    }
    summary
}

/// Each variant that ran against the baseline (and with `[evaluate] pairs`, every pair of
/// variants that ran, in plan order), per split and metric: the paired bootstrap interval, a
/// paired randomization test, and the Holm–Bonferroni adjustment of its p-value over the family
/// of comparisons made on that split and metric.
fn compare_to_baseline(
    plan: &Plan,
    rows: &[EvaluationRow],
    splits: &BTreeSet<&str>,
    not_run: &BTreeMap<String, NotRun>,
) -> Vec<ComparisonRow> {
    let ran: Vec<&str> = plan
        .variants
        .iter()
        .map(|v| v.name.as_str())
        .filter(|v| !not_run.contains_key(*v))
        .collect();
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    if ran.contains(&plan.baseline.as_str()) {
        pairs.extend(
            ran.iter()
                .filter(|v| **v != plan.baseline)
                .map(|v| (*v, plan.baseline.as_str())),
        );
    }
    if plan.evaluate.pairs {
        for (i, a) in ran.iter().enumerate() {
            for b in &ran[i + 1..] {
                if *a != plan.baseline && *b != plan.baseline {
                    pairs.push((b, a));
                }
            }
        }
    }
    let mut out: Vec<ComparisonRow> = Vec::new();
    let (resamples, seed) = (plan.evaluate.bootstrap, plan.evaluate.seed);
    for split in splits {
        let by: HashMap<(&str, &str), &EvaluationRow> = rows
            .iter()
            .filter(|r| r.split == *split)
            .map(|r| ((r.variant.as_str(), r.question_id.as_str()), r))
            .collect();
        for (metric, get) in QUESTION_METRICS {
            let family = out.len();
            for &(variant, against) in &pairs {
                let (a, b): (Vec<f64>, Vec<f64>) = rows
                    .iter()
                    .filter(|r| r.variant == variant && r.split == *split)
                    .filter_map(|r| {
                        Some((get(r)?, get(by.get(&(against, r.question_id.as_str()))?)?))
                    })
                    .unzip();
                if a.is_empty() {
                    continue;
                }
                let p = paired_bootstrap(&a, &b, resamples, seed);
                out.push(ComparisonRow {
                    variant: variant.into(),
                    baseline: against.into(),
                    split: split.to_string(),
                    metric: metric.into(),
                    n: p.n as u32,
                    mean: p.mean_a,
                    baseline_mean: p.mean_b,
                    diff: p.diff,
                    ci_low: p.ci_low,
                    ci_high: p.ci_high,
                    wins: p.wins as u32,
                    losses: p.losses as u32,
                    ties: p.ties as u32,
                    p_value: randomization_p(&a, &b, resamples, seed),
                    p_holm: 1.0,
                });
            }
            let ps: Vec<f64> = out[family..].iter().map(|c| c.p_value).collect();
            for (c, adj) in out[family..].iter_mut().zip(holm(&ps)) {
                c.p_holm = adj;
            }
        }
    }
    out
}

/// The column of an extract that the summary counts.
#[derive(serde::Deserialize)]
struct ExtractReason {
    variant: String,
    question_id: String,
    reason: Reason,
}

/// What the scopes of one batch (revisions of one repository) share, read once for all of them:
/// each scope's retrievals and the chunks pooled for any of them, by id.
struct Pooled {
    retrievals: HashMap<Scope, Vec<RetrievalRow>>,
    chunks: HashMap<String, ChunkRow>,
}

/// The retrievals of `scopes` and their pooled chunks, read in one pass over the scopes'
/// chunk partitions.
fn pooled_chunks(
    plan: &Plan,
    store: &Store,
    parts: &[Parts; 5],
    scopes: &[Scope],
) -> Result<Pooled> {
    let retrievals: HashMap<Scope, Vec<RetrievalRow>> = parts[0].read_each(store, scopes)?;
    let wanted: HashSet<&str> = retrievals
        .values()
        .flatten()
        .map(|r: &RetrievalRow| r.chunk_id.as_str())
        .collect();
    let files = parts[3].of_batch(scopes, &plan.chunker_names());
    let chunks = chunks_by_id(store, &files, &wanted)?;
    Ok(Pooled { retrievals, chunks })
}

/// The evaluation rows of one scope's questions, for every variant that ran, in variant then
/// question order. `parts` are the partitions of retrievals, packs, extracts and chunks.
fn evaluate_scope(
    plan: &Plan,
    store: &Store,
    parts: &[Parts; 5],
    not_run: &BTreeMap<String, NotRun>,
    pooled: &Pooled,
    scope: &Scope,
    questions: &[QuestionRow],
) -> Result<Vec<EvaluationRow>> {
    let rule = plan.evaluate.recall;
    let no_rows = Vec::new();
    let retrievals = pooled.retrievals.get(scope).unwrap_or(&no_rows);
    let packs: Vec<PackRow> = parts[1].read(store, scope.as_str())?;
    let extracts: Vec<ExtractRow> = parts[2].read(store, scope.as_str())?;
    let file_rows: Vec<FileRetrievalRow> = parts[4].read(store, scope.as_str())?;
    let mut file_rank: HashMap<(&str, &str), Vec<&FileRetrievalRow>> = HashMap::new();
    for r in &file_rows {
        file_rank
            .entry((&r.variant, &r.question_id))
            .or_default()
            .push(r);
    }
    for l in file_rank.values_mut() {
        l.sort_by_key(|r| r.rank);
    }
    // Only the pooled chunks were read, from the scope's partitions.
    let chunks = &pooled.chunks;
    let pool = pools(retrievals);
    let mut packed: HashMap<(&str, &str), Vec<&PackRow>> = HashMap::new();
    for p in &packs {
        packed
            .entry((&p.variant, &p.question_id))
            .or_default()
            .push(p);
    }
    let outcome: HashMap<(&str, &str), Outcome> = extracts
        .iter()
        .map(|e| ((e.variant.as_str(), e.question_id.as_str()), e.outcome))
        .collect();
    let ran: Vec<_> = plan
        .variants
        .iter()
        .filter(|v| !not_run.contains_key(&v.name))
        .collect();
    let jobs: Vec<_> = ran
        .iter()
        .flat_map(|v| questions.iter().map(move |q| (*v, q)))
        .collect();
    Ok(jobs
        .par_iter()
        .map(|(v, q)| {
            let key = (v.name.as_str(), q.question_id.as_str());
            let pool_rows = pool.get(&key).map(|p| p.as_slice()).unwrap_or(&[]);
            let pool_pieces: Vec<Piece> = pool_rows
                .iter()
                .filter_map(|r| chunks.get(r.chunk_id.as_str()))
                .map(|c| Piece {
                    repo: &c.repo,
                    path: &c.path,
                    start_line: c.start_line,
                    end_line: c.end_line,
                    text: &c.text,
                    passage: &c.chunk_id,
                })
                .collect();
            let pack_rows = packed.get(&key).map(|p| p.as_slice()).unwrap_or(&[]);
            let pack_pieces: Vec<Piece> = pack_rows.iter().map(|p| Piece::from(*p)).collect();
            let evidence = crate::evaluation::dataset::anchors(q);
            let has_evidence = q.answerable && !evidence.is_empty();
            let (pool_recall, packed_recall) = if has_evidence {
                (
                    Some(anchor_recall(&evidence, &merged_spans(&pool_pieces, rule))),
                    Some(anchor_recall(&evidence, &merged_spans(&pack_pieces, rule))),
                )
            } else {
                (None, None)
            };
            let files = file_rank.get(&key).map(|files| {
                files
                    .iter()
                    .map(|f| (f.repo.as_str(), f.path.as_str(), f.score))
            });
            let pooled = pool_rows.iter().filter_map(|r| {
                let c = chunks.get(r.chunk_id.as_str())?;
                Some((c.repo.as_str(), c.path.as_str(), r.score))
            });
            let [mrr10, ndcg10, recall10, recall100, acc1, acc5, acc10] = ranking(q, files, pooled);
            EvaluationRow {
                variant: v.name.clone(),
                question_id: q.question_id.clone(),
                repo: q.scope.clone(),
                split: q.split.clone(),
                answerable: q.answerable,
                pool_recall,
                packed_recall,
                tokens_used: pack_rows.iter().map(|p| p.tokens).sum(),
                mrr10,
                ndcg10,
                recall10,
                recall100,
                outcome: outcome.get(&key).copied(),
                acc1,
                acc5,
                acc10,
            }
        })
        .collect())
}

/// MRR@10, nDCG@10, R@10, R@100 and file Acc@1/5/10 of the question's file ranking (the
/// variant's, else each file at its best pooled chunk) against its gold documents; all `None`
/// when it has none.
fn ranking<'a>(
    q: &QuestionRow,
    files: Option<impl Iterator<Item = (&'a str, &'a str, f64)>>,
    pooled: impl Iterator<Item = (&'a str, &'a str, f64)>,
) -> [Option<f64>; 7] {
    if q.gold_paths.is_empty() {
        return [None; 7];
    }
    let gold: HashMap<&str, u32> = q
        .gold_paths
        .iter()
        .map(|s| s.as_str())
        .zip(q.gold_grades.iter().copied())
        .collect();
    let docs = ranked_files(&q.scope, files, pooled);
    let ranked: Vec<&str> = docs.iter().map(|(d, _)| d.as_str()).collect();
    [
        Some(mrr_at(&ranked, &gold, 10)),
        Some(ndcg_at(&ranked, &gold, 10)),
        Some(recall_at(&ranked, &gold, 10)),
        Some(recall_at(&ranked, &gold, 100)),
        Some(accuracy_at(&ranked, &gold, 1)),
        Some(accuracy_at(&ranked, &gold, 5)),
        Some(accuracy_at(&ranked, &gold, 10)),
    ]
}

fn mean(it: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, n) = it.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}
