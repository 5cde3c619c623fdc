//! Nightly comparisons: every run appends to its directory's history; `ri-batch compare` of the
//! bundled run against a run with one changed packer setting names exactly that key and exactly
//! the questions whose results changed (found independently here from both `evaluation`
//! tables), the same from two directories as from two history entries; a no-change rerun
//! changes nothing.

mod common;

use common::*;
use ri_batch::artifact::schema::EvaluationRow;
use ri_batch::artifact::Store;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn variants(budget: u32) -> String {
    format!(
        "[[variants]]\nname = \"bm25-rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n\
         [[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = {budget}\n"
    )
}

fn copy_dir(from: &Path, to: &Path) {
    for f in walk(from) {
        let rel = f.strip_prefix(from).unwrap();
        let dest = to.join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&f, &dest).unwrap();
    }
}

fn compare_json(a: &str, b: &str) -> Value {
    let out = ri_batch(&["compare", a, b, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (variant, question) pairs named in a comparison's `questions`.
fn named(c: &Value) -> BTreeSet<(String, String)> {
    c["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["variant"].as_str().unwrap().to_string(),
                q["question_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn compare_names_the_changed_setting_and_exactly_the_changed_questions() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(t.path(), &variants(1400));
    run_quiet(&plan);
    let before = t.path().join("before");
    copy_dir(&plan.output_dir, &before);
    // The same pipeline with one packer setting changed, into the same directory.
    let plan = bundled_plan(t.path(), &variants(900));
    run_quiet(&plan);
    let out = plan.output_dir.to_str().unwrap().to_string();

    let c = compare_json(before.to_str().unwrap(), &out);
    let keys: Vec<String> = c["config"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            format!(
                "{}.{}",
                k["stage"].as_str().unwrap(),
                k["key"].as_str().unwrap()
            )
        })
        .collect();
    assert!(!keys.is_empty());
    assert!(
        keys.iter().all(|k| k.contains("bm25-compact")),
        "only the changed variant's keys: {keys:?}"
    );
    assert!(keys.iter().any(|k| k.starts_with("pack.")), "{keys:?}");
    assert!(c["revisions"].as_array().unwrap().is_empty());

    // What changed, found here from the two evaluation tables directly.
    let rows = |dir: &Path| -> BTreeMap<(String, String), EvaluationRow> {
        let ev: Vec<EvaluationRow> = Store::new(dir).read().unwrap();
        ev.into_iter()
            .map(|e| ((e.variant.clone(), e.question_id.clone()), e))
            .collect()
    };
    let (a, b) = (rows(&before), rows(&plan.output_dir));
    let strip = |e: &EvaluationRow| {
        let mut e = e.clone();
        e.variant.clear();
        e
    };
    let changed: BTreeSet<(String, String)> = b
        .iter()
        .filter(|(k, e)| strip(&a[*k]) != strip(e))
        .map(|(k, _)| k.clone())
        .collect();
    assert!(!changed.is_empty());
    assert!(changed.iter().all(|(v, _)| v == "bm25-compact"));
    assert_eq!(named(&c), changed);
    // Flips are the changed questions whose evidence went from all packed to not, or back.
    for q in c["questions"].as_array().unwrap() {
        if q["flip"].as_str().unwrap() == "found → lost" {
            let k = (
                q["variant"].as_str().unwrap().to_string(),
                q["question_id"].as_str().unwrap().to_string(),
            );
            assert_eq!(a[&k].packed_recall, Some(1.0));
            assert!(b[&k].packed_recall.unwrap() < 1.0);
            assert!(!q["evidence"].as_array().unwrap().is_empty());
        }
    }

    // The history holds both runs; comparing its entries says the same.
    let h = compare_json(&format!("{out}@last~1"), &format!("{out}@last"));
    assert_eq!(named(&h), changed);
    assert_eq!(h["config"], c["config"]);

    // A rerun with nothing changed: a third history entry, identical to the second.
    run_quiet(&plan);
    let same = compare_json(&format!("{out}@last~1"), &format!("{out}@last"));
    assert!(named(&same).is_empty());
    assert!(same["config"].as_array().unwrap().is_empty());
    let runs = ri_batch(&[
        "sql",
        &out,
        "SELECT count(*) AS n, count(DISTINCT pipeline_hash) AS h FROM history_runs",
        "--format",
        "csv",
    ]);
    let text = String::from_utf8_lossy(&runs.stdout);
    assert_eq!(text.lines().nth(1), Some("3,2"), "{text}");
    // The report says it too, with a trend line per variant over the three runs.
    let page = std::fs::read_to_string(ri_batch::report::write(&plan.output_dir).unwrap()).unwrap();
    assert!(page.contains("Since the last run"));
    assert!(page.contains("over the last 3 runs"));
    assert!(page.matches("<polyline").count() >= 2);
    // A bad history reference is an error naming it, not a panic.
    let bad = ri_batch(&["compare", &format!("{out}@last~7"), &out]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("last~7"));
}

#[test]
fn every_pair_is_tested_with_holm_over_the_family() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(
        t.path(),
        &format!(
            "{}[[variants]]\nname = \"bm25-small\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 350\n[evaluate]\npairs = true\nbootstrap = 500\n",
            variants(1400)
        ),
    );
    run_quiet(&plan);
    let rows: Vec<ri_batch::artifact::schema::ComparisonRow> =
        Store::new(&plan.output_dir).read().unwrap();
    let family: Vec<&ri_batch::artifact::schema::ComparisonRow> = rows
        .iter()
        .filter(|c| c.split == "dev" && c.metric == "packed_recall")
        .collect();
    let pairs: BTreeSet<(&str, &str)> = family
        .iter()
        .map(|c| (c.variant.as_str(), c.baseline.as_str()))
        .collect();
    let want: BTreeSet<(&str, &str)> = [
        ("bm25-compact", "bm25-rank"),
        ("bm25-small", "bm25-rank"),
        ("bm25-small", "bm25-compact"),
    ]
    .into();
    assert_eq!(pairs, want);
    // Holm's step-down, computed here: sort, multiply by (m − i), running maximum, cap at 1.
    let mut order: Vec<usize> = (0..family.len()).collect();
    order.sort_by(|&i, &j| family[i].p_value.total_cmp(&family[j].p_value));
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max((family[i].p_value * (family.len() - rank) as f64).min(1.0));
        assert!(
            (family[i].p_holm - running).abs() < 1e-12,
            "{:?}",
            family[i]
        );
    }
    // 350 tokens against 1,400 loses evidence on many questions: a difference no correction
    // removes; and the interval agrees in sign.
    let small = family
        .iter()
        .find(|c| c.variant == "bm25-small" && c.baseline == "bm25-rank")
        .unwrap();
    assert!(small.p_holm < 0.01 && small.ci_high < 0.0, "{small:?}");
}
