//! The plain-text summary `ri-batch run` ends with: per variant and split, pool and packed recall,
//! tokens, and the packed-recall difference from the baseline with its 95% interval.

use crate::artifact::outcomes::VariantStatus;
use crate::artifact::schema::{ComparisonRow, SummaryRow};
use crate::artifact::Store;
use crate::config::Plan;
use crate::error::Result;

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// Renders the summary of `store` (empty when the evaluate stage has not run). The held-out
/// splits (`[evaluate] held_out`, `holdout` by default) are only shown when `show_held_out` is
/// set: they are for the final check, not for choosing settings.
pub fn text(store: &Store, held_out: &[String], show_held_out: bool) -> Result<String> {
    if store
        .manifest(crate::artifact::StageId::Evaluate)?
        .is_none()
    {
        return Ok(String::new());
    }
    let summary: Vec<SummaryRow> = store.read()?;
    let comparisons: Vec<ComparisonRow> = store.read()?;
    let mut splits: Vec<&str> = summary.iter().map(|s| s.split.as_str()).collect();
    splits.sort_by_key(|s| (*s != "dev", *s));
    splits.dedup();
    let width = summary
        .iter()
        .map(|s| s.variant.len())
        .max()
        .unwrap_or(7)
        .max(7);
    let mut out = String::new();
    for split in splits {
        if held_out.iter().any(|h| h == split) && !show_held_out {
            let n = summary
                .iter()
                .find(|s| s.split == split)
                .map_or(0, |s| s.questions);
            out.push_str(&format!(
                "\nsplit {split}: {n} questions evaluated, not shown (held out for the final check; use --show-holdout or query `summary`)\n"
            ));
            continue;
        }
        let rows: Vec<&SummaryRow> = summary.iter().filter(|s| s.split == split).collect();
        let Some(first) = rows.first() else { continue };
        out.push_str(&format!(
            "\nsplit {split}: {} questions, {} answerable\n",
            first.questions, first.answerable
        ));
        out.push_str(&format!(
            "{:<width$}  {:>8}  {:>8}  {:>7}  {}\n",
            "variant", "pool", "packed", "tokens*", "packed − baseline [95% CI]  wins/losses/ties"
        ));
        for s in &rows {
            if s.status != VariantStatus::Ok {
                out.push_str(&format!("{:<width$}  {}\n", s.variant, s.status));
                continue;
            }
            let cmp = comparisons.iter().find(|c| {
                c.variant == s.variant && c.split == split && c.metric == "packed_recall"
            });
            let delta = match cmp {
                Some(c) => format!(
                    "{:+.1} pts [{:+.1}, {:+.1}]  {}/{}/{}",
                    c.diff * 100.0,
                    c.ci_low * 100.0,
                    c.ci_high * 100.0,
                    c.wins,
                    c.losses,
                    c.ties
                ),
                None if comparisons.iter().any(|c| c.baseline == s.variant) => "baseline".into(),
                None => String::new(),
            };
            out.push_str(&format!(
                "{:<width$}  {:>8}  {:>8}  {:>7}  {}\n",
                s.variant,
                pct(s.pool_recall),
                pct(s.packed_recall),
                s.mean_tokens.map_or("-".into(), |t| format!("{t:.0}")),
                delta
            ));
        }
        out.push_str(&format!(
            "* tokens: mean packed tokens over all {} questions; pool and packed: recall over the {} answerable\n",
            first.questions, first.answerable
        ));
        files_table(&mut out, &rows, width);
    }
    Ok(out)
}

/// File-level localization metrics of a split, for the variants that have them (questions with
/// gold documents): Acc@1/5/10 (every gold file within the first k), MRR@10 and R@100.
fn files_table(out: &mut String, rows: &[&SummaryRow], width: usize) {
    let ranked: Vec<&&SummaryRow> = rows
        .iter()
        .filter(|s| s.status == VariantStatus::Ok && s.acc10.is_some())
        .collect();
    if ranked.is_empty() {
        return;
    }
    out.push_str(&format!(
        "
files (localization){:<pad$}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}
",
        "",
        "Acc@1",
        "Acc@5",
        "Acc@10",
        "MRR@10",
        "R@100",
        pad = width.saturating_sub(20)
    ));
    let num = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3}"));
    for s in ranked {
        out.push_str(&format!(
            "{:<width$}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}
",
            s.variant,
            num(s.acc1),
            num(s.acc5),
            num(s.acc10),
            num(s.mrr10),
            num(s.recall100)
        ));
    }
}

/// The `[[expect]]` rows of `plan` the run's summary misses, as lines to print: a figure out of
/// its bound, or a variant and split with no such figure (it did not run, or the split has no
/// question it applies to).
pub fn unmet(plan: &Plan, store: &Store) -> Result<Vec<String>> {
    if plan.expect.is_empty()
        || store
            .manifest(crate::artifact::StageId::Evaluate)?
            .is_none()
    {
        return Ok(Vec::new());
    }
    let summary: Vec<SummaryRow> = store.read()?;
    let mut out = Vec::new();
    for e in &plan.expect {
        let row = summary
            .iter()
            .find(|s| s.variant == e.variant && s.split == e.split);
        let got = row
            .filter(|s| s.status == VariantStatus::Ok)
            .and_then(|s| e.metric.of(s));
        match got {
            Some(x) if e.holds(x) => {}
            Some(x) => out.push(format!(
                "{} {} {}: {x:.6}, expected {}",
                e.variant,
                e.split,
                e.metric.name(),
                e.wanted()
            )),
            None => out.push(format!(
                "{} {} {}: no figure ({}), expected {}",
                e.variant,
                e.split,
                e.metric.name(),
                row.map_or("no such variant and split in summary".to_string(), |s| s
                    .status
                    .to_string()),
                e.wanted()
            )),
        }
    }
    Ok(out)
}
