//! The plain-text summary `ri-batch run` ends with: per variant and split, pool and packed recall,
//! tokens, and the packed-recall difference from the baseline with its 95% interval.

use crate::artifact::Store;
use crate::error::Result;
use crate::schema::{ComparisonRow, SummaryRow};

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// Renders the summary of `store` (empty when the evaluate stage has not run). The holdout split
/// is only shown when `holdout` is set: it is for the final check, not for choosing settings.
pub fn text(store: &Store, holdout: bool) -> Result<String> {
    if store.manifest("evaluate")?.is_none() {
        return Ok(String::new());
    }
    let summary: Vec<SummaryRow> = store.read("summary")?;
    let comparisons: Vec<ComparisonRow> = store.read("comparisons")?;
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
        if split == "holdout" && !holdout {
            let n = summary
                .iter()
                .find(|s| s.split == "holdout")
                .map_or(0, |s| s.questions);
            out.push_str(&format!(
                "\nsplit holdout: {n} questions evaluated, not shown (it is for the final check; use --show-holdout or query `summary`)\n"
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
            "variant", "pool", "packed", "tokens", "packed − baseline [95% CI]  wins/losses/ties"
        ));
        for s in rows {
            if s.status != "ok" {
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
    }
    Ok(out)
}
