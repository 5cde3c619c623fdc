//! Standard retrieval datasets end to end: a BEIR-layout import with graded qrels gives
//! hand-computed ranking metrics; an import pipeline whose source is absent skips cleanly; and,
//! where the shared CoSQA data is present, BM25 reproduces its reference figures.

mod common;

use common::*;
use ri_batch::artifact::schema::{EvaluationRow, SummaryRow};
use ri_batch::artifact::Store;
use ri_batch::config::Plan;

#[test]
fn beir_import_gives_hand_computed_graded_metrics() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("beir");
    std::fs::create_dir_all(b.join("qrels")).unwrap();
    std::fs::write(
        b.join("corpus.jsonl"),
        [
            r#"{"_id": "d1", "title": "", "text": "alpha beta alpha beta gamma"}"#,
            r#"{"_id": "d2", "title": "", "text": "alpha delta epsilon zeta eta theta"}"#,
            r#"{"_id": "d3", "title": "", "text": "unrelated words only here"}"#,
            r#"{"_id": "d4", "title": "", "text": "more filler text without the terms"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    std::fs::write(
        b.join("queries.jsonl"),
        "{\"_id\": \"q1\", \"text\": \"alpha beta\"}\n{\"_id\": \"q2\", \"text\": \"filler words\"}\n",
    )
    .unwrap();
    std::fs::write(
        b.join("qrels/test.tsv"),
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t2\nq2\td1\t1\n",
    )
    .unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"beir\"\noutput_dir = \"out\"\n[import]\nformat = \"beir\"\nsource = \"beir\"\n\
         [index]\nwith_path = false\n[[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 100\n",
    );
    let plan = Plan::load(&p).unwrap();
    run_quiet(&plan);
    let store = Store::new(&plan.output_dir);
    let ev: Vec<EvaluationRow> = store.read().unwrap();
    let q1 = ev.iter().find(|e| e.question_id == "q1").unwrap();
    // q1 ranks d1 (grade 1) then d2 (grade 2): DCG = 1/log2(2) + 2/log2(3); IDCG = 2 + 1/log2(3).
    let want = (1.0 + 2.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2());
    assert!((q1.ndcg10.unwrap() - want).abs() < 1e-9, "{:?}", q1.ndcg10);
    assert_eq!(
        (q1.mrr10, q1.recall10, q1.recall100),
        (Some(1.0), Some(1.0), Some(1.0))
    );
    // q2 matches d3 ("words") and d4 ("filler") but its only relevant document is d1: all zero.
    let q2 = ev.iter().find(|e| e.question_id == "q2").unwrap();
    assert_eq!(
        (q2.mrr10, q2.ndcg10, q2.recall100),
        (Some(0.0), Some(0.0), Some(0.0))
    );
    let s: Vec<SummaryRow> = store.read().unwrap();
    assert_eq!(s[0].split, "test");
    assert!((s[0].ndcg10.unwrap() - want / 2.0).abs() < 1e-9);
    // The imported data lives in the run's outputs.
    assert!(plan.output_dir.join("import/corpus/docs/d1.txt").is_file());
}

#[test]
fn an_import_pipeline_without_its_source_skips_with_a_message() {
    let t = tempfile::tempdir().unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"gone\"\n[import]\nformat = \"cosqa\"\nsource = \"no/such/dir\"\n",
    );
    let out = ri_batch(&["run", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("skipped") && err.contains("no/such/dir"),
        "{err}"
    );
    assert!(!t.path().join("outputs").exists());
}

#[test]
#[cfg_attr(
    not(shared_data),
    ignore = "needs ../shared/data/cosqa-dev, absent from a user's clone"
)]
fn cosqa_bm25_reproduces_the_reference_figures_when_the_data_is_present() {
    let src = root().join("../shared/data/cosqa-dev");
    assert!(src.is_dir(), "{} is absent; touch build.rs", src.display());
    let t = tempfile::tempdir().unwrap();
    // The shipped pipeline without its [embed] section: BM25 only.
    let text = std::fs::read_to_string(root().join("pipelines/cosqa-dev.toml")).unwrap();
    let start = text.find("[embed]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    let mut text = format!("{}{}", &text[..start], &text[end..]);
    text = text.replace(
        "root = \"..\"",
        &format!(
            "root = \"{}\"\noutput_dir = \"{}\"",
            root().display(),
            t.path().join("out").display()
        ),
    );
    let mut plan = Plan::load(pipeline(t.path(), &text)).unwrap();
    run_quiet(&plan);
    // The pipeline's own regression figures for BM25 hold (the others need the model).
    plan.expect.retain(|e| e.variant == "bm25");
    assert_eq!(plan.expect.len(), 3);
    let unmet = ri_batch::report::summary::unmet(&plan, &Store::new(&plan.output_dir)).unwrap();
    assert!(unmet.is_empty(), "{unmet:?}");
    let s: Vec<SummaryRow> = Store::new(&plan.output_dir).read().unwrap();
    let bm25 = s
        .iter()
        .find(|r| r.variant == "bm25" && r.split == "dev")
        .unwrap();
    assert_eq!(bm25.questions, 500);
    for (name, got, reference) in [
        ("MRR@10", bm25.mrr10, 0.313),
        ("nDCG@10", bm25.ndcg10, 0.362),
        ("Recall@10", bm25.recall10, 0.518),
        ("Recall@100", bm25.recall100, 0.796),
    ] {
        let got = got.unwrap();
        assert!(
            (got - reference).abs() <= 0.005,
            "{name}: {got:.4} vs reference {reference}"
        );
    }
}
