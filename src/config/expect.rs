//! `[[expect]]`: figures a pipeline pins, checked after every run (an Anserini-style regression):
//! a variant's metric on a split at least a minimum, at most a maximum, or a value within a
//! tolerance. A run whose figures miss one exits with status 4 and says which.

use super::locate::{parse_enum, Locator};
use super::Variant;
use crate::error::Result;
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// One `[[expect]]` row as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExpect {
    variant: Spanned<String>,
    #[serde(default)]
    split: Option<String>,
    metric: Spanned<String>,
    #[serde(default)]
    min: Option<f64>,
    #[serde(default)]
    max: Option<f64>,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    tolerance: Option<f64>,
}

/// A metric of `summary` an expectation can pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    PackedRecall,
    PoolRecall,
    MeanTokens,
    Mrr10,
    Ndcg10,
    Recall10,
    Recall100,
    Acc1,
    Acc5,
    Acc10,
}

impl Metric {
    /// The metric's value in a summary row (none when the split has no such figure).
    pub fn of(self, s: &crate::artifact::schema::SummaryRow) -> Option<f64> {
        match self {
            Metric::PackedRecall => s.packed_recall,
            Metric::PoolRecall => s.pool_recall,
            Metric::MeanTokens => s.mean_tokens,
            Metric::Mrr10 => s.mrr10,
            Metric::Ndcg10 => s.ndcg10,
            Metric::Recall10 => s.recall10,
            Metric::Recall100 => s.recall100,
            Metric::Acc1 => s.acc1,
            Metric::Acc5 => s.acc5,
            Metric::Acc10 => s.acc10,
        }
    }

    /// The column name.
    pub fn name(self) -> &'static str {
        match self {
            Metric::PackedRecall => "packed_recall",
            Metric::PoolRecall => "pool_recall",
            Metric::MeanTokens => "mean_tokens",
            Metric::Mrr10 => "mrr10",
            Metric::Ndcg10 => "ndcg10",
            Metric::Recall10 => "recall10",
            Metric::Recall100 => "recall100",
            Metric::Acc1 => "acc1",
            Metric::Acc5 => "acc5",
            Metric::Acc10 => "acc10",
        }
    }
}

/// What an expectation asks of its figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Bound {
    AtLeast(f64),
    AtMost(f64),
    Between(f64, f64),
    Equal { value: f64, tolerance: f64 },
}

/// One checked expectation.
#[derive(Debug, Clone, Serialize)]
pub struct Expect {
    pub variant: String,
    pub split: String,
    pub metric: Metric,
    pub bound: Bound,
}

impl Expect {
    /// Whether `x` meets the expectation.
    pub fn holds(&self, x: f64) -> bool {
        match self.bound {
            Bound::AtLeast(m) => x >= m,
            Bound::AtMost(m) => x <= m,
            Bound::Between(a, b) => a <= x && x <= b,
            Bound::Equal { value, tolerance } => (x - value).abs() <= tolerance,
        }
    }

    /// The bound as text (`>= 0.8`, `0.756 ± 0.005`).
    pub fn wanted(&self) -> String {
        match self.bound {
            Bound::AtLeast(m) => format!(">= {m}"),
            Bound::AtMost(m) => format!("<= {m}"),
            Bound::Between(a, b) => format!("within [{a}, {b}]"),
            Bound::Equal { value, tolerance } => format!("{value} ± {tolerance}"),
        }
    }
}

/// Checks the raw rows against the variants: every name known, one kind of bound, finite numbers.
pub(super) fn expand_expects(
    loc: &Locator,
    raw: &[RawExpect],
    variants: &[Variant],
) -> Result<Vec<Expect>> {
    let mut out = Vec::new();
    for e in raw {
        if !variants.iter().any(|v| &v.name == e.variant.get_ref()) {
            return Err(loc.error(
                e.variant.span(),
                format!("expect: `{}` is not a variant", e.variant.get_ref()),
            ));
        }
        let metric = parse_enum::<Metric>(loc, &e.metric)?;
        let finite = [e.min, e.max, e.value, e.tolerance]
            .iter()
            .flatten()
            .all(|x| x.is_finite());
        let bound = match (e.min, e.max, e.value) {
            _ if !finite => None,
            (Some(a), None, None) => Some(Bound::AtLeast(a)),
            (None, Some(b), None) => Some(Bound::AtMost(b)),
            (Some(a), Some(b), None) if a <= b => Some(Bound::Between(a, b)),
            (None, None, Some(v)) => Some(Bound::Equal {
                value: v,
                tolerance: e.tolerance.unwrap_or(1e-9).abs(),
            }),
            _ => None,
        };
        let Some(bound) = bound else {
            return Err(loc.error(
                e.metric.span(),
                "expect: give `min`, `max`, both (min <= max), or `value` with an optional `tolerance`, as finite numbers",
            ));
        };
        if e.tolerance.is_some() && e.value.is_none() {
            return Err(loc.error(e.metric.span(), "expect: `tolerance` goes with `value`"));
        }
        out.push(Expect {
            variant: e.variant.get_ref().clone(),
            split: e.split.clone().unwrap_or_else(|| "dev".into()),
            metric,
            bound,
        });
    }
    Ok(out)
}
