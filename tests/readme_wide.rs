//! The shipped `pipelines/readme-wide.toml` and `pipelines/readme-holdout.toml` end to end:
//! registry READMEs built at their pinned commits (seven whose dev split took part in choosing the
//! shipped setting, and eight whose questions were written after it was chosen); every question's
//! quote anchors in its README, and the shipped compaction (chosen leave-one-repository-out,
//! `docs/intellirag.md`) recalls at least as much evidence as IntelliRAG's compaction at every
//! budget, on each split, within each budget.

mod common;

use common::{bundled_repos, pipeline, ri_batch, root, shipped};
use ri_batch::artifact::schema::{ErrorRow, EvaluationRow, RevisionRow};
use ri_batch::artifact::Store;
use std::collections::HashMap;

#[test]
fn shipped_compaction_beats_intellirag_on_the_seven_readmes_of_readme_wide() {
    shipped_beats_intellirag(
        "readme-wide.toml",
        "readme-sources.tsv",
        &["dev", "holdout"],
    );
}

#[test]
fn shipped_compaction_beats_intellirag_on_readmes_written_after_it_was_chosen() {
    shipped_beats_intellirag(
        "readme-holdout.toml",
        "readme-holdout-sources.tsv",
        &["holdout"],
    );
}

/// Runs the shipped pipeline `file` (its repositories pinned by `datasets/<sources>`) and checks,
/// per split and budget, that `fused-compact-dense` packs at least IntelliRAG's recall.
fn shipped_beats_intellirag(file: &str, sources: &str, splits: &[&str]) {
    bundled_repos();
    let t = tempfile::tempdir().unwrap();
    let text = shipped(file, t.path());
    let p = pipeline(t.path(), &text);
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let store = Store::new(t.path().join("out"));
    let errors: Vec<ErrorRow> = store.read().unwrap();
    assert!(errors.is_empty(), "every quote anchors: {errors:?}");

    // Each README is scanned at the commit its table pins.
    let pins: HashMap<String, String> =
        std::fs::read_to_string(root().join("datasets").join(sources))
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[0].to_string(), f[7].to_string())
            })
            .collect();
    let revisions: Vec<RevisionRow> = store.read().unwrap();
    assert_eq!(revisions.len(), pins.len());
    for r in &revisions {
        assert_eq!(Some(&r.commit), pins.get(&r.repo), "{}", r.repo);
    }

    // Mean packed recall and tokens per (variant, split), answerable questions.
    let rows: Vec<EvaluationRow> = store.read().unwrap();
    let mut by: HashMap<(&str, &str), (f64, u32, usize)> = HashMap::new();
    for r in rows.iter().filter(|r| r.answerable) {
        let e = by
            .entry((r.variant.as_str(), r.split.as_str()))
            .or_default();
        e.0 += r.packed_recall.unwrap();
        e.1 = e.1.max(r.tokens_used);
        e.2 += 1;
    }
    for budget in [450, 700, 900, 1400] {
        let at = |v: &str| {
            if budget == 1400 {
                v.to_string()
            } else {
                format!("{v}@{budget}")
            }
        };
        for &split in splits {
            let (ours, ours_max, n) = by[&(at("fused-compact-dense").as_str(), split)];
            let (seed, seed_max, m) = by[&(at("ir-compact").as_str(), split)];
            assert_eq!(n, m);
            assert!(n >= 25, "{split}: {n} answerable questions");
            assert!(ours_max as usize <= budget && seed_max as usize <= budget);
            eprintln!(
                "@{budget} {split}: shipped {:.1}%, IntelliRAG {:.1}% (n = {n})",
                100.0 * ours / n as f64,
                100.0 * seed / n as f64
            );
            assert!(
                ours >= seed,
                "@{budget} {split}: {ours} against {seed} of {n}"
            );
        }
    }
}
