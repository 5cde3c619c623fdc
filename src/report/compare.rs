//! `ri-batch compare A B`: what changed between two runs (two output directories, or two
//! entries of one directory's history): configuration keys, revisions, questions, per-metric
//! paired deltas with bootstrap intervals, and the questions that flipped or changed.

use crate::artifact::schema::{EvaluationRow, QuestionRow, Row};
use crate::artifact::{history, Store};
use crate::config::Plan;
use crate::error::{Error, Result};
use crate::evaluation::metrics::{paired_bootstrap, randomization_p, QUESTION_METRICS};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Bootstrap resamples (and randomization rounds) of a comparison.
const RESAMPLES: usize = 2000;
const SEED: u64 = 17;

/// One side of a comparison: per-question metrics and what produced them.
#[derive(Debug, Clone)]
pub struct Side {
    pub label: String,
    pub rows: Vec<EvaluationRow>,
    pub configs: BTreeMap<String, Value>,
    pub revisions: BTreeMap<String, String>,
    /// Question id → its evidence, `path:start-end` (from the directory's question table).
    pub evidence: HashMap<String, Vec<String>>,
}

impl Side {
    /// `DIR` (an output directory, or a pipeline file naming one): its current tables; `DIR@RUN`:
    /// the history entry RUN of DIR (a run id or its unique prefix, `last`, `last~N`).
    pub fn open(spec: &str) -> Result<Side> {
        let (dir, run) = match spec.rsplit_once('@') {
            Some((d, r)) if !Path::new(spec).exists() && !r.contains('/') => (d, Some(r)),
            _ => (spec, None),
        };
        let store = Store::new(output_dir(Path::new(dir))?);
        let evidence = evidence(&store)?;
        match run {
            None => {
                if store
                    .manifest(crate::artifact::StageId::Evaluate)?
                    .is_none()
                {
                    return Err(Error::artifact(
                        store.root(),
                        "no evaluated run here (the evaluate stage has not committed)",
                    ));
                }
                Ok(Side {
                    label: spec.to_string(),
                    rows: store.read()?,
                    configs: history::configs(&store)?,
                    revisions: history::revisions(&store)?,
                    evidence,
                })
            }
            Some(which) => Side::of_entry(&store, which, evidence),
        }
    }

    /// The history entry `which` of `store`.
    pub fn of_entry(
        store: &Store,
        which: &str,
        evidence: HashMap<String, Vec<String>>,
    ) -> Result<Side> {
        let e = history::entry(store, which)?;
        Ok(Side {
            label: format!("{}@{}", store.root().display(), e.run.run_id),
            configs: e.configs(),
            revisions: e.revisions(),
            rows: e.questions,
            evidence,
        })
    }
}

/// An output directory, or the output directory of a pipeline file.
fn output_dir(path: &Path) -> Result<PathBuf> {
    if path.is_file() {
        Ok(Plan::load(path)?.output_dir)
    } else {
        Ok(path.to_path_buf())
    }
}

/// Question id → evidence spans, where the directory has a question table.
pub fn evidence(store: &Store) -> Result<HashMap<String, Vec<String>>> {
    if store.files_of(QuestionRow::TABLE)?.is_empty() {
        return Ok(HashMap::new());
    }
    let questions: Vec<QuestionRow> = store.read()?;
    Ok(questions
        .into_iter()
        .map(|q| {
            let spans = q
                .evidence
                .iter()
                .map(|e| match e.lines() {
                    Some((s, t)) => format!("{}:{s}-{t}", e.path),
                    None => format!("{}: {:?}", e.path, e.quote),
                })
                .collect();
            (q.question_id, spans)
        })
        .collect())
}

/// A configuration key whose value differs (None: the key is absent on that side).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigChange {
    pub stage: String,
    pub key: String,
    pub a: Option<Value>,
    pub b: Option<Value>,
}

/// A scope read at another commit, or on one side only.
#[derive(Debug, Clone, Serialize)]
pub struct RevisionChange {
    pub scope: String,
    pub a: Option<String>,
    pub b: Option<String>,
}

/// One metric of one variant on one split, paired over the questions both runs evaluated.
#[derive(Debug, Clone, Serialize)]
pub struct MetricDelta {
    pub variant: String,
    pub split: String,
    pub metric: String,
    pub n: usize,
    pub a: f64,
    pub b: f64,
    /// mean(B) − mean(A) over the questions both runs evaluated.
    pub diff: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// Questions where B is higher, lower.
    pub up: usize,
    pub down: usize,
    pub p_value: f64,
}

/// One metric of one question, before and after (both None: an outcome change, named).
#[derive(Debug, Clone, Serialize)]
pub struct MetricChange {
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
}

/// A (variant, question) whose results differ between the runs.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionChange {
    pub variant: String,
    pub split: String,
    pub question_id: String,
    /// `found → lost`, `lost → found`, or empty when the question changed without flipping.
    pub flip: String,
    pub changes: Vec<MetricChange>,
    pub evidence: Vec<String>,
}

/// Everything that differs between two runs.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub config: Vec<ConfigChange>,
    pub revisions: Vec<RevisionChange>,
    pub questions_added: Vec<String>,
    pub questions_removed: Vec<String>,
    pub variants_added: Vec<String>,
    pub variants_removed: Vec<String>,
    pub metrics: Vec<MetricDelta>,
    /// Every (variant, question) whose metrics or outcome differ, flips first.
    pub questions: Vec<QuestionChange>,
}

impl QuestionChange {
    /// Its changes in words: `packed_recall 1.0000 → 0.5000, …`.
    pub fn described(&self) -> String {
        let what: Vec<String> = self
            .changes
            .iter()
            .map(|m| match (m.a, m.b) {
                (None, None) => m.metric.clone(),
                (x, y) => format!("{} {} → {}", m.metric, num(x), num(y)),
            })
            .collect();
        what.join(", ")
    }
}

/// A configuration value, or `(none)`.
fn shown(v: &Option<Value>) -> String {
    v.as_ref().map_or("(none)".into(), |v| v.to_string())
}

/// A commit, or `(none)`.
fn commit(x: &Option<String>) -> String {
    x.clone().unwrap_or_else(|| "(none)".into())
}

impl Comparison {
    pub fn flips(&self) -> impl Iterator<Item = &QuestionChange> {
        self.questions.iter().filter(|q| !q.flip.is_empty())
    }
}

/// Whether a question counts as found: all its evidence packed when it has evidence, else all
/// its gold documents within the first 10 files; None when neither applies.
pub fn found(r: &EvaluationRow) -> Option<bool> {
    r.packed_recall
        .map(|x| x >= 1.0 - 1e-9)
        .or(r.recall10.map(|x| x >= 1.0 - 1e-9))
}

/// Compares `a` (before) with `b` (after).
pub fn compare(a: &Side, b: &Side) -> Comparison {
    let config = config_changes(&a.configs, &b.configs);
    let revisions = keyed_changes(&a.revisions, &b.revisions)
        .into_iter()
        .map(|(scope, a, b)| RevisionChange { scope, a, b })
        .collect();
    let ids =
        |s: &Side| -> BTreeSet<String> { s.rows.iter().map(|r| r.question_id.clone()).collect() };
    let vars =
        |s: &Side| -> BTreeSet<String> { s.rows.iter().map(|r| r.variant.clone()).collect() };
    let (qa, qb, va, vb) = (ids(a), ids(b), vars(a), vars(b));
    let ia: HashMap<(&str, &str), &EvaluationRow> = a
        .rows
        .iter()
        .map(|r| ((r.variant.as_str(), r.question_id.as_str()), r))
        .collect();
    // Shared (variant, question) pairs in B's order, and by (variant, split).
    let shared: Vec<(&EvaluationRow, &EvaluationRow)> = b
        .rows
        .iter()
        .filter_map(|rb| {
            Some((
                *ia.get(&(rb.variant.as_str(), rb.question_id.as_str()))?,
                rb,
            ))
        })
        .collect();
    let mut groups: BTreeMap<(&str, &str), Vec<(&EvaluationRow, &EvaluationRow)>> = BTreeMap::new();
    for &(ra, rb) in &shared {
        groups
            .entry((rb.variant.as_str(), rb.split.as_str()))
            .or_default()
            .push((ra, rb));
    }
    let mut metrics = Vec::new();
    for ((variant, split), pairs) in &groups {
        for (metric, get) in QUESTION_METRICS {
            let (xs, ys): (Vec<f64>, Vec<f64>) = pairs
                .iter()
                .filter_map(|(ra, rb)| Some((get(rb)?, get(ra)?)))
                .unzip();
            if xs.is_empty() {
                continue;
            }
            let p = paired_bootstrap(&xs, &ys, RESAMPLES, SEED);
            metrics.push(MetricDelta {
                variant: variant.to_string(),
                split: split.to_string(),
                metric: metric.into(),
                n: p.n,
                a: p.mean_b,
                b: p.mean_a,
                diff: p.diff,
                ci_low: p.ci_low,
                ci_high: p.ci_high,
                up: p.wins,
                down: p.losses,
                p_value: randomization_p(&xs, &ys, RESAMPLES, SEED),
            });
        }
    }
    let mut questions: Vec<QuestionChange> = shared
        .iter()
        .filter_map(|(ra, rb)| question_change(ra, rb, &b.evidence))
        .collect();
    questions.sort_by_key(|q| q.flip.is_empty());
    Comparison {
        a: a.label.clone(),
        b: b.label.clone(),
        config,
        revisions,
        questions_added: qb.difference(&qa).cloned().collect(),
        questions_removed: qa.difference(&qb).cloned().collect(),
        variants_added: vb.difference(&va).cloned().collect(),
        variants_removed: va.difference(&vb).cloned().collect(),
        metrics,
        questions,
    }
}

/// The change of one (variant, question) between the runs, if anything differs.
fn question_change(
    ra: &EvaluationRow,
    rb: &EvaluationRow,
    evidence: &HashMap<String, Vec<String>>,
) -> Option<QuestionChange> {
    let differs = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => (x - y).abs() > 1e-12,
        (x, y) => x.is_some() != y.is_some(),
    };
    let mut changes: Vec<MetricChange> = QUESTION_METRICS
        .iter()
        .filter(|(_, get)| differs(get(ra), get(rb)))
        .map(|(m, get)| MetricChange {
            metric: m.to_string(),
            a: get(ra),
            b: get(rb),
        })
        .collect();
    if ra.outcome != rb.outcome {
        changes.push(MetricChange {
            metric: format!(
                "outcome {} → {}",
                ra.outcome.map_or("none", |o| o.name()),
                rb.outcome.map_or("none", |o| o.name())
            ),
            a: None,
            b: None,
        });
    }
    if changes.is_empty() {
        return None;
    }
    let flip = match (found(ra), found(rb)) {
        (Some(true), Some(false)) => "found → lost",
        (Some(false), Some(true)) => "lost → found",
        _ => "",
    };
    Some(QuestionChange {
        variant: rb.variant.clone(),
        split: rb.split.clone(),
        question_id: rb.question_id.clone(),
        flip: flip.into(),
        changes,
        evidence: evidence.get(&rb.question_id).cloned().unwrap_or_default(),
    })
}

/// Keys (`stage` then a dotted path) whose configuration values differ.
fn config_changes(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Vec<ConfigChange> {
    // A stage whose configuration one side did not record (a run before records were kept)
    // is not compared key by key.
    let mut out = Vec::new();
    for (stage, va) in a {
        let Some(vb) = b.get(stage) else { continue };
        let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
        flatten("", va, &mut fa);
        flatten("", vb, &mut fb);
        for (key, x, y) in keyed_changes(&fa, &fb) {
            out.push(ConfigChange {
                stage: stage.clone(),
                key,
                a: x,
                b: y,
            });
        }
    }
    out
}

fn keyed_changes<V: Clone + PartialEq>(
    a: &BTreeMap<String, V>,
    b: &BTreeMap<String, V>,
) -> Vec<(String, Option<V>, Option<V>)> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| (k.clone(), a.get(k).cloned(), b.get(k).cloned()))
        .collect()
}

/// Leaves of a JSON value by dotted path (`variants[2].budget`); arrays of variants are keyed
/// by their `name` where they have one, so that inserting a variant changes only its keys.
fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&join(k), x, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, x) in items.iter().enumerate() {
                // Named entries (a variant, or a [name, ...] tuple) keep their key however
                // entries are inserted before them.
                let key = x
                    .get("name")
                    .and_then(Value::as_str)
                    .or_else(|| x.get(0).and_then(Value::as_str))
                    .map_or_else(|| i.to_string(), str::to_string);
                flatten(&format!("{prefix}[{key}]"), x, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

fn num(x: Option<f64>) -> String {
    x.map_or("–".into(), |v| format!("{v:.4}"))
}

/// The comparison as text: what changed, then metric deltas that are not zero, then the
/// questions (flips first).
pub fn text(c: &Comparison) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "compare  A = {}\n         B = {}", c.a, c.b);
    let _ = writeln!(
        t,
        "\nchanged: {} configuration keys, {} revisions, questions +{} −{}, variants +{} −{}",
        c.config.len(),
        c.revisions.len(),
        c.questions_added.len(),
        c.questions_removed.len(),
        c.variants_added.len(),
        c.variants_removed.len()
    );
    for k in &c.config {
        let (a, b) = (shown(&k.a), shown(&k.b));
        let _ = writeln!(t, "  {}.{}: {a} → {b}", k.stage, k.key);
    }
    for r in &c.revisions {
        let (a, b) = (commit(&r.a), commit(&r.b));
        let _ = writeln!(t, "  revision {}: {a} → {b}", r.scope);
    }
    for (what, list) in [
        ("questions added", &c.questions_added),
        ("questions removed", &c.questions_removed),
        ("variants added", &c.variants_added),
        ("variants removed", &c.variants_removed),
    ] {
        if !list.is_empty() {
            let _ = writeln!(t, "  {what}: {}", list.join(", "));
        }
    }
    let moved: Vec<&MetricDelta> = c
        .metrics
        .iter()
        .filter(|m| m.up + m.down > 0 || m.diff.abs() > 1e-12)
        .collect();
    let _ = writeln!(
        t,
        "\nmetrics, B − A over shared questions (95% paired bootstrap; {} of {} unchanged):",
        c.metrics.len() - moved.len(),
        c.metrics.len()
    );
    for m in moved {
        let _ = writeln!(
            t,
            "  {:<22} {:<8} {:<14} {:.4} → {:.4}  {:+.4} [{:+.4}, {:+.4}]  up {} down {}  p={:.4}",
            m.variant,
            m.split,
            m.metric,
            m.a,
            m.b,
            m.diff,
            m.ci_low,
            m.ci_high,
            m.up,
            m.down,
            m.p_value
        );
    }
    let flips = c.flips().count();
    let _ = writeln!(
        t,
        "\nquestions changed: {} ({} flipped)",
        c.questions.len(),
        flips
    );
    for q in &c.questions {
        let flip = if q.flip.is_empty() {
            String::new()
        } else {
            format!("{}: ", q.flip)
        };
        let _ = writeln!(
            t,
            "  {} {} {}: {flip}{}",
            q.variant,
            q.split,
            q.question_id,
            q.described()
        );
        if !q.flip.is_empty() && !q.evidence.is_empty() {
            let _ = writeln!(t, "      evidence: {}", q.evidence.join("; "));
        }
    }
    t
}

/// The comparison as a self-contained HTML page.
pub fn html(c: &Comparison) -> String {
    let e = crate::text::escape_html;
    let mut h = String::from(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ri-batch compare</title>\
         <style>body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px}table{border-collapse:collapse;font-size:13px}\
         th,td{border:1px solid #ccc;padding:3px 7px;text-align:left}.pos{color:#1a7f37}.neg{color:#c62828}</style></head><body>\n",
    );
    let _ = writeln!(
        h,
        "<h1>ri-batch compare</h1><p>A = <code>{}</code><br>B = <code>{}</code></p>",
        e(&c.a),
        e(&c.b)
    );
    h.push_str("<h2>What changed</h2><table><tr><th>what</th><th>A</th><th>B</th></tr>\n");
    for k in &c.config {
        let _ = writeln!(
            h,
            "<tr><td>{}.{}</td><td>{}</td><td>{}</td></tr>",
            e(&k.stage),
            e(&k.key),
            e(&shown(&k.a)),
            e(&shown(&k.b))
        );
    }
    for r in &c.revisions {
        let _ = writeln!(
            h,
            "<tr><td>revision {}</td><td>{}</td><td>{}</td></tr>",
            e(&r.scope),
            e(&commit(&r.a)),
            e(&commit(&r.b))
        );
    }
    h.push_str("</table>\n<h2>Metrics (B − A)</h2><table><tr><th>variant</th><th>split</th><th>metric</th><th>n</th><th>A</th><th>B</th><th>diff</th><th>95% CI</th><th>up</th><th>down</th><th>p</th></tr>\n");
    for m in &c.metrics {
        let class = if m.ci_low > 0.0 {
            "pos"
        } else if m.ci_high < 0.0 {
            "neg"
        } else {
            ""
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td>{:.4}</td><td class=\"{class}\">{:+.4}</td><td>[{:+.4}, {:+.4}]</td><td>{}</td><td>{}</td><td>{:.4}</td></tr>",
            e(&m.variant), e(&m.split), e(&m.metric), m.n, m.a, m.b, m.diff, m.ci_low, m.ci_high, m.up, m.down, m.p_value
        );
    }
    h.push_str("</table>\n<h2>Questions that changed</h2><table><tr><th>variant</th><th>split</th><th>question</th><th>flip</th><th>changes</th><th>evidence</th></tr>\n");
    for q in &c.questions {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            e(&q.variant),
            e(&q.split),
            e(&q.question_id),
            e(&q.flip),
            e(&q.described()),
            e(&q.evidence.join("; "))
        );
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

/// One line per kind of change between the last two recorded runs of `store`, for the end of a
/// run; None with fewer than two runs.
pub fn since_last_run(store: &Store) -> Result<Option<String>> {
    if history::run_ids(store)?.len() < 2 {
        return Ok(None);
    }
    let ev = evidence(store)?;
    let before = Side::of_entry(store, "last~1", ev.clone())?;
    let now = Side::of_entry(store, "last", ev)?;
    let c = compare(&before, &now);
    let lost = c.flips().filter(|q| q.flip.starts_with("found")).count();
    let gained = c.flips().count() - lost;
    let mut t = format!(
        "since the last run ({}): {} configuration keys and {} revisions changed, questions +{} −{}; {} question results changed ({lost} found → lost, {gained} lost → found)\n",
        before.label.rsplit('@').next().unwrap_or(""),
        c.config.len(),
        c.revisions.len(),
        c.questions_added.len(),
        c.questions_removed.len(),
        c.questions.len(),
    );
    for m in c
        .metrics
        .iter()
        .filter(|m| m.metric == "packed_recall" && m.diff.abs() > 1e-12)
    {
        let _ = writeln!(
            t,
            "  {} {} packed recall {:.4} → {:.4} ({:+.4} [{:+.4}, {:+.4}])",
            m.variant, m.split, m.a, m.b, m.diff, m.ci_low, m.ci_high
        );
    }
    Ok(Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_keys_are_dotted_and_variants_keyed_by_name() {
        let a = BTreeMap::from([(
            "pack".to_string(),
            json!({"variants": [{"name": "a", "budget": 2000}, {"name": "b", "budget": 8000}], "x": 1}),
        )]);
        let b = BTreeMap::from([(
            "pack".to_string(),
            json!({"variants": [{"name": "new", "budget": 1}, {"name": "a", "budget": 1000}, {"name": "b", "budget": 8000}], "x": 1}),
        )]);
        let c = config_changes(&a, &b);
        let keys: Vec<&str> = c.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(
            keys,
            vec![
                "variants[a].budget",
                "variants[new].budget",
                "variants[new].name"
            ]
        );
        assert_eq!(c[0].a, Some(json!(2000)));
        assert_eq!(c[0].b, Some(json!(1000)));
        assert_eq!(c[1].a, None);
        let tuples = |budget: u32| {
            BTreeMap::from([(
                "pack".to_string(),
                json!({"variants": [["a", "rank", budget], ["b", "rank", 9]]}),
            )])
        };
        let c = config_changes(&tuples(1400), &tuples(1200));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].key, "variants[a][2]");
        assert!(config_changes(&tuples(1), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn found_prefers_packed_evidence_then_top_ten_files() {
        let mut r = EvaluationRow {
            variant: "v".into(),
            question_id: "q".into(),
            repo: crate::artifact::scope::Scope::repo("r"),
            split: "dev".into(),
            answerable: true,
            pool_recall: Some(1.0),
            packed_recall: Some(0.5),
            tokens_used: 1,
            mrr10: None,
            ndcg10: None,
            recall10: Some(1.0),
            recall100: None,
            outcome: None,
            acc1: None,
            acc5: None,
            acc10: None,
        };
        assert_eq!(found(&r), Some(false));
        r.packed_recall = None;
        assert_eq!(found(&r), Some(true));
        r.recall10 = None;
        assert_eq!(found(&r), None);
    }
}
