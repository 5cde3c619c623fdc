//! Units scored with dense similarity (`unit_dense`), end to end on the bundled READMEs with
//! MiniLM: the embed stage writes the model's vector for every unit of every chunk, the packer
//! keeps real units within budget, and at a lean budget it recalls more required evidence on dev
//! than the same packer scoring terms only; a new weight re-packs without embedding again.

mod common;
use ri_batch::artifact::outcomes::{NotRun, StageStatus, VariantStatus};
use ri_batch::artifact::StageId;

use common::{bundled_plan_with, minilm_dir, ri_batch, run_quiet};
use ri_batch::artifact::schema::{ChunkRow, EmbeddingRow, PackRow, SummaryRow};
use ri_batch::artifact::Store;
use ri_batch::models::TextKind;
use ri_batch::stages::embed::unit_items;
use ri_batch::text::units::split_units;
use std::collections::HashMap;

#[test]
fn dense_unit_scoring_embeds_every_unit_and_lifts_lean_recall_on_readmes() {
    let t = tempfile::tempdir().unwrap();
    let extra = format!(
        "[scan]\ninclude = [\"README.md\", \"readme.md\"]\n[chunk]\nmethod = \"intellirag\"\n\
         [embed]\nmodel = \"{}\"\n[retrieve]\ntop_k = 20\n\
         [pack]\ntokenizer = \"chars4\"\ncompact_top_chunks = 20\n\
         [evaluate]\nbaseline = \"terms\"\nrecall = \"passage\"\n\
         [[variants]]\nname = \"terms\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 450\n\
         [[variants]]\nname = \"dense\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 450\n\
         unit_dense = 0.25\n",
        minilm_dir().display()
    );
    let plan = bundled_plan_with(t.path(), "datasets/readme-questions.jsonl", &extra);
    run_quiet(&plan);
    let store = Store::new(&plan.output_dir);

    // `ask` packs by terms only, so it refuses the dense variant and says why.
    let out = plan.output_dir.to_str().unwrap();
    let question = "How do I parse 2 days?";
    let r = ri_batch(&["ask", out, question, "--repo", "ms", "--variant", "dense"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("unit_dense"));

    // One vector per unit of every chunk, under the unit's id, and it is the model's vector of
    // the unit's text.
    let chunks: Vec<ChunkRow> = store.read().unwrap();
    let units: HashMap<String, String> = unit_items(&chunks).into_iter().collect();
    let cut: usize = chunks
        .iter()
        .map(|c| split_units(&c.text, c.start_line, &c.kind, &c.heading).len())
        .sum();
    assert_eq!(units.len(), cut);
    let rows: Vec<EmbeddingRow> = store.read_as(EmbeddingRow::UNITS).unwrap();
    assert_eq!(rows.len(), units.len());
    assert!(rows.iter().all(|r| units.contains_key(&r.id)));
    let model = plan.load_model().unwrap();
    let sample: Vec<&EmbeddingRow> = rows.iter().step_by(rows.len() / 20).collect();
    let texts: Vec<String> = sample.iter().map(|r| units[&r.id].clone()).collect();
    let fresh = model
        .embed(&texts, TextKind::Document, 4096, |_, _| {})
        .unwrap();
    for (r, v) in sample.iter().zip(&fresh) {
        let cos: f32 = r.vector.iter().zip(v).map(|(a, b)| a * b).sum();
        assert!(cos > 0.9999, "{}: cosine {cos} to a fresh embedding", r.id);
    }

    // The dense packer packs only units of its pooled chunks, or whole chunks, within budget.
    let packs: Vec<PackRow> = store.read().unwrap();
    let mut used: HashMap<&str, u32> = HashMap::new();
    let unit_texts: Vec<&String> = units.values().collect();
    for p in packs.iter().filter(|p| p.variant == "dense") {
        *used.entry(&p.question_id).or_default() += p.tokens;
        if p.unit == ri_batch::artifact::outcomes::PackedKind::Unit {
            assert!(unit_texts.contains(&&p.text), "not a unit: {:?}", p.text);
        }
    }
    assert!(used.values().all(|&t| t <= 450), "a pack is over budget");

    // Real vectors, not terms alone, decide some packs: the two variants differ, and on dev the
    // dense one recalls more of the required evidence in the same budget.
    let packed = |v: &str| -> Vec<(&str, &str)> {
        packs
            .iter()
            .filter(|p| p.variant == v)
            .map(|p| (p.question_id.as_str(), p.text.as_str()))
            .collect()
    };
    assert_ne!(packed("terms"), packed("dense"));
    let summary: Vec<SummaryRow> = store.read().unwrap();
    let dev = |v: &str| {
        summary
            .iter()
            .find(|s| s.variant == v && s.split == "dev")
            .and_then(|s| s.packed_recall)
            .unwrap()
    };
    assert!(
        dev("dense") > dev("terms"),
        "dense {} vs terms {}",
        dev("dense"),
        dev("terms")
    );

    // A re-run with nothing changed does nothing; a new weight re-packs without embedding.
    let status = |r: &ri_batch::pipeline::RunReport, stage: StageId| {
        let s = r.stages.iter().find(|s| s.stage == stage).unwrap();
        s.status.clone()
    };
    let again = run_quiet(&plan);
    for s in &again.stages {
        assert_eq!(s.status, StageStatus::Skipped, "{}", s.stage);
    }
    let reweighted = extra.replace("unit_dense = 0.25", "unit_dense = 1.0");
    let plan = bundled_plan_with(t.path(), "datasets/readme-questions.jsonl", &reweighted);
    let third = run_quiet(&plan);
    assert_eq!(status(&third, StageId::Embed), StageStatus::Skipped);
    assert_eq!(status(&third, StageId::Pack), StageStatus::Ran);

    // Without vectors (a model that cannot be loaded) the dense variant is reported as not run,
    // not packed by terms under its name.
    let broken = tempfile::tempdir().unwrap();
    let no_model = extra.replace(
        &minilm_dir().display().to_string(),
        &broken.path().join("no-model").display().to_string(),
    );
    let plan = bundled_plan_with(broken.path(), "datasets/readme-questions.jsonl", &no_model);
    run_quiet(&plan);
    let summary: Vec<SummaryRow> = Store::new(&plan.output_dir).read().unwrap();
    let status = |v: &str| &summary.iter().find(|s| s.variant == v).unwrap().status;
    assert_eq!(
        *status("dense"),
        VariantStatus::NotRun(NotRun::NoEmbeddings),
        "{}",
        status("dense")
    );
    assert!(status("dense").to_string().starts_with("not run"));
    assert_eq!(*status("terms"), VariantStatus::Ok);
}
