//! The field's formats: a run exported as a TREC run file and qrels gives, under trec_eval's own
//! implementation (pytrec_eval), the same nDCG@10, MRR@10 and Recall@10/100 as ri-batch's
//! `evaluation`, question by question to 1e-6: on a generated graded collection, and on CoSQA
//! dev where the shared data is present. Chunk-level exports list the pool and judge chunks by
//! the evidence spans; ranx's RRF over the exported BM25 and dense lists gives the hybrid
//! variant's scores.

mod common;

use common::*;
use ri_batch::artifact::schema::{EvaluationRow, RetrievalRow};
use ri_batch::artifact::Store;
use ri_batch::config::Plan;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// A BEIR-layout collection: `docs` short documents over a small vocabulary (so scores tie
/// often), `queries` questions with graded qrels (1 or 2) on 1–3 documents each.
fn collection(dir: &Path, docs: usize, queries: usize) {
    let mut seed: u64 = 0x1234_5678;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let vocab: Vec<String> = (0..60).map(|i| format!("w{i}")).collect();
    std::fs::create_dir_all(dir.join("qrels")).unwrap();
    let mut corpus = String::new();
    for d in 0..docs {
        let words: Vec<&str> = (0..8 + next(10))
            .map(|_| vocab[next(60) as usize].as_str())
            .collect();
        corpus.push_str(&format!(
            "{{\"_id\": \"d{d}\", \"title\": \"\", \"text\": \"{}\"}}\n",
            words.join(" ")
        ));
    }
    std::fs::write(dir.join("corpus.jsonl"), corpus).unwrap();
    let (mut qs, mut qrels) = (String::new(), String::from("query-id\tcorpus-id\tscore\n"));
    for q in 0..queries {
        let words: Vec<&str> = (0..2 + next(3))
            .map(|_| vocab[next(60) as usize].as_str())
            .collect();
        qs.push_str(&format!(
            "{{\"_id\": \"q {q}\", \"text\": \"{}\"}}\n",
            words.join(" ")
        ));
        for _ in 0..1 + next(3) {
            qrels.push_str(&format!("q {q}\td{}\t{}\n", next(docs as u64), 1 + next(2)));
        }
    }
    std::fs::write(dir.join("queries.jsonl"), qs).unwrap();
    std::fs::write(dir.join("qrels/test.tsv"), qrels).unwrap();
}

/// trec_eval's figures for an exported run: question id → metric → value.
fn trec_eval(run: &Path, qrels: &Path) -> HashMap<String, HashMap<String, f64>> {
    let out = Command::new(python())
        .arg(root().join("tests/trec_eval.py"))
        .arg(run)
        .arg(qrels)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "trec_eval.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `ri-batch export trec OUT TREC --variant V` with `extra` arguments; panics with its stderr on
/// failure.
fn export(out: &Path, trec: &Path, variant: &str, extra: &[&str]) {
    let mut args = vec![
        "export",
        "trec",
        out.to_str().unwrap(),
        trec.to_str().unwrap(),
        "--variant",
        variant,
    ];
    args.extend_from_slice(extra);
    let run = ri_batch(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Exports `variant` of `out` at file level and checks every evaluated question against
/// trec_eval; returns how many questions were compared.
fn parity(out: &Path, variant: &str, dir: &Path) -> usize {
    let trec = dir.join("trec");
    export(out, &trec, variant, &[]);
    let got = trec_eval(
        &trec.join(format!("{variant}.file.run")),
        &trec.join("file.qrels"),
    );
    let ev: Vec<EvaluationRow> = Store::new(out).read().unwrap();
    let mut compared = 0;
    for e in ev
        .iter()
        .filter(|e| e.variant == variant && e.mrr10.is_some())
    {
        let ours = [
            ("ndcg10", e.ndcg10),
            ("mrr10", e.mrr10),
            ("recall10", e.recall10),
            ("recall100", e.recall100),
        ];
        match got.get(&e.question_id) {
            Some(theirs) => {
                for (m, v) in ours {
                    let (a, b) = (v.unwrap(), theirs[m]);
                    if (a - b).abs() > 1e-6 {
                        let f = |p: &str| {
                            let text = std::fs::read_to_string(trec.join(p)).unwrap();
                            let id = ri_batch::report::trec::field(&e.question_id);
                            text.lines()
                                .filter(|l| l.split(' ').next() == Some(id.as_str()))
                                .take(12)
                                .collect::<Vec<_>>()
                                .join("\n")
                        };
                        panic!(
                            "{} {m}: ri-batch {a}, trec_eval {b}\nrun:\n{}\nqrels:\n{}",
                            e.question_id,
                            f(&format!("{variant}.file.run")),
                            f("file.qrels")
                        );
                    }
                }
                compared += 1;
            }
            // trec_eval leaves out a question with nothing retrieved; ri-batch scores it 0.
            None => assert!(ours.iter().all(|(_, v)| *v == Some(0.0)), "{e:?}"),
        }
    }
    compared
}

#[test]
fn exported_runs_score_the_same_under_trec_eval() {
    let t = tempfile::tempdir().unwrap();
    collection(&t.path().join("beir"), 400, 120);
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"gen\"\noutput_dir = \"out\"\n[import]\nformat = \"beir\"\nsource = \"beir\"\n\
         [index]\nwith_path = false\n[retrieve]\ntop_k = 100\n\
         [[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 100\n",
    );
    let plan = Plan::load(&p).unwrap();
    run_quiet(&plan);
    let n = parity(&plan.output_dir, "bm25", t.path());
    assert!(n >= 100, "only {n} questions compared");
    // Ties are common in this vocabulary: the export kept ri-batch's order all the same.
    let r: Vec<RetrievalRow> = Store::new(&plan.output_dir).read().unwrap();
    let tied = r
        .windows(2)
        .filter(|w| w[0].question_id == w[1].question_id && w[0].score == w[1].score)
        .count();
    assert!(tied > 0, "the collection has no tied scores to test");

    // The exported qrels, with the questions as topics, import back as the same gold documents.
    let qs: Vec<ri_batch::artifact::schema::QuestionRow> =
        Store::new(&plan.output_dir).read().unwrap();
    let topics: String = qs
        .iter()
        .map(|q| {
            format!(
                "{}\t{}\n",
                ri_batch::report::trec::field(&q.question_id),
                q.question
            )
        })
        .collect();
    std::fs::write(t.path().join("topics.tsv"), topics).unwrap();
    let back = t.path().join("back");
    let imp = ri_batch(&[
        "dataset",
        "import",
        "trec",
        t.path().join("topics.tsv").to_str().unwrap(),
        "--qrels",
        t.path().join("trec/file.qrels").to_str().unwrap(),
        "--repo",
        qs[0].scope.as_str(),
        "--out",
        back.to_str().unwrap(),
    ]);
    assert!(
        imp.status.success(),
        "{}",
        String::from_utf8_lossy(&imp.stderr)
    );
    let lines = std::fs::read_to_string(back.join("questions.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), qs.len());
    for (q, r) in qs.iter().zip(&rows) {
        assert_eq!(r["id"], q.question_id.as_str());
        let mut want: Vec<(String, u32)> = q
            .gold_paths
            .iter()
            .cloned()
            .zip(q.gold_grades.iter().copied())
            .filter(|(_, g)| *g > 0)
            .collect();
        let mut got: Vec<(String, u32)> = r["gold"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["path"].as_str().unwrap().to_string(),
                    g["grade"].as_u64().unwrap() as u32,
                )
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{}", q.question_id);
    }
}

#[test]
fn chunk_level_exports_list_the_pool_and_judge_chunks_by_evidence() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(
        t.path(),
        "[[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n",
    );
    run_quiet(&plan);
    let trec = t.path().join("trec");
    export(
        &plan.output_dir,
        &trec,
        "bm25",
        &["--level", "chunk", "--split", "dev"],
    );
    let store = Store::new(&plan.output_dir);
    let ev: Vec<EvaluationRow> = store.read().unwrap();
    let dev: Vec<&EvaluationRow> = ev.iter().filter(|e| e.split == "dev").collect();
    let pooled: usize = {
        let r: Vec<RetrievalRow> = store.read().unwrap();
        r.iter()
            .filter(|r| dev.iter().any(|e| e.question_id == r.question_id))
            .count()
    };
    let lines = std::fs::read_to_string(trec.join("bm25.chunk.run")).unwrap();
    assert_eq!(lines.lines().count(), pooled);
    let qrels = std::fs::read_to_string(trec.join("chunk.qrels")).unwrap();
    // Every answerable dev question's evidence lies in some chunk; unanswerable ones have none.
    for e in &dev {
        let judged = qrels
            .lines()
            .any(|l| l.split(' ').next() == Some(e.question_id.as_str()));
        assert_eq!(judged, e.answerable, "{}", e.question_id);
    }
    // A question whose evidence is all in the pool has a judged chunk in its pool.
    let got = trec_eval(&trec.join("bm25.chunk.run"), &trec.join("chunk.qrels"));
    for e in dev.iter().filter(|e| e.pool_recall == Some(1.0)) {
        assert!(got[&e.question_id]["recall100"] > 0.0, "{}", e.question_id);
    }
}

#[test]
#[cfg_attr(
    not(shared_data),
    ignore = "needs ../shared/data/cosqa-dev, absent from a user's clone"
)]
fn cosqa_dev_scores_the_same_under_trec_eval() {
    let t = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("pipelines/cosqa-dev.toml")).unwrap();
    let start = text.find("[embed]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    let text = format!("{}{}", &text[..start], &text[end..]).replace(
        "root = \"..\"",
        &format!(
            "root = \"{}\"\noutput_dir = \"{}\"",
            root().display(),
            t.path().join("out").display()
        ),
    );
    let plan = Plan::load(pipeline(t.path(), &text)).unwrap();
    run_quiet(&plan);
    assert_eq!(parity(&plan.output_dir, "bm25", t.path()), 500);
}

#[test]
fn ranx_fuses_the_exported_lists_as_the_hybrid_variant_does() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(
        t.path(),
        &format!(
            "[scan]\ninclude = [\"**/*.md\"]\n[embed]\nmodel = \"{}\"\ncache_dir = \"cache\"\n\
             [retrieve]\ntop_k = 100\nrrf_k = 60\n\
             [[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n\
             [[variants]]\nname = \"dense\"\nretriever = \"dense\"\npacker = \"rank\"\nbudget = 1400\n\
             [[variants]]\nname = \"hybrid\"\nretriever = \"hybrid\"\npacker = \"rank\"\nbudget = 1400\n",
            minilm_dir().display()
        ),
    );
    run_quiet(&plan);
    let trec = t.path().join("trec");
    for v in ["bm25", "dense"] {
        export(&plan.output_dir, &trec, v, &["--level", "chunk"]);
    }
    let out = Command::new(python())
        .arg(root().join("tests/ranx_fuse.py"))
        .arg(trec.join("bm25.chunk.run"))
        .arg(trec.join("dense.chunk.run"))
        .arg("60")
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "ranx_fuse.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fused: HashMap<String, HashMap<String, f64>> = serde_json::from_slice(&out.stdout).unwrap();
    let r: Vec<RetrievalRow> = Store::new(&plan.output_dir).read().unwrap();
    let mut compared = 0;
    for h in r.iter().filter(|r| r.variant == "hybrid") {
        let theirs = fused[&h.question_id][&h.chunk_id];
        assert!(
            (theirs - h.score).abs() < 1e-9,
            "{} {}: ri-batch {}, ranx {theirs}",
            h.question_id,
            h.chunk_id,
            h.score
        );
        compared += 1;
    }
    // The hybrid pool is ranx's top 100, question by question (as a set: ties may order apart).
    for (q, docs) in &fused {
        let mut ranked: Vec<(&String, &f64)> = docs.iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(a.1));
        let ours: Vec<&RetrievalRow> = r
            .iter()
            .filter(|r| r.variant == "hybrid" && &r.question_id == q)
            .collect();
        let cut = ranked
            .get(ours.len().saturating_sub(1))
            .map(|x| *x.1)
            .unwrap_or(0.0);
        for (doc, s) in ranked.iter().take(ours.len()) {
            if **s > cut + 1e-12 {
                assert!(
                    ours.iter().any(|o| &o.chunk_id == *doc),
                    "{q}: {doc} missing"
                );
            }
        }
    }
    assert!(compared >= 1000, "only {compared} fused scores compared");
}
