//! Regression figures: the shipped pipeline over the bundled data meets its own `[[expect]]`
//! rows (an Anserini-style regression page, run by CI); a missed figure, or one that cannot be
//! had, exits with status 4 and names the variant, split, metric, value and bound; a bad row is
//! a configuration error naming its line.

mod common;

use common::{bundled_repos, pipeline, ri_batch, shipped};

#[test]
fn the_bundled_pipeline_meets_its_regression_figures_and_a_miss_exits_4() {
    bundled_repos();
    let t = tempfile::tempdir().unwrap();
    let text = shipped("multi-repo.toml", t.path());
    assert!(text.matches("[[expect]]").count() >= 6);
    let p = pipeline(t.path(), &text);
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    assert!(err.contains("expectations met"), "{err}");

    // The same outputs against a figure they miss, and one no variant has: both named.
    let missed = format!(
        "{text}\n[[expect]]\nvariant = \"bm25-rank\"\nmetric = \"packed_recall\"\nmin = 0.9\n\n[[expect]]\nvariant = \"bm25-rank\"\nmetric = \"acc1\"\nmin = 0.5\n"
    );
    let p = pipeline(t.path(), &missed);
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(4), "{err}");
    assert!(err.contains("2 expectations not met"), "{err}");
    assert!(
        err.contains("bm25-rank dev packed_recall: 0.755814, expected >= 0.9"),
        "{err}"
    );
    assert!(err.contains("bm25-rank dev acc1: no figure"), "{err}");
    assert!(err.contains("0 stages ran"), "a check, not a re-run: {err}");

    // A row that names no variant, or gives no bound, stops the run before any work.
    for (row, says) in [
        (
            "variant = \"nope\"\nmetric = \"mrr10\"\nmin = 0.1\n",
            "`nope` is not a variant",
        ),
        (
            "variant = \"bm25-rank\"\nmetric = \"mrr10\"\n",
            "give `min`, `max`",
        ),
        (
            "variant = \"bm25-rank\"\nmetric = \"speed\"\nmin = 1\n",
            "packed_recall, pool_recall",
        ),
    ] {
        let p = pipeline(t.path(), &format!("{text}\n[[expect]]\n{row}"));
        let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(
            err.contains(says) && err.contains("pipeline.toml:"),
            "{err}"
        );
    }
}
