//! IntelliRAG's setting end to end on the bundled repositories: its chunker's chunks map to
//! their file lines, its packers' passages cite the lines they came from and keep the budget,
//! extract renders them from the source, and compaction beats its own BM25 baseline on dev.

mod common;

use common::{bundled_plan, run_quiet};
use ri_batch::artifact::schema::{ChunkRow, ExtractRow, FileRow, PackRow, SummaryRow};
use ri_batch::artifact::Store;
use ri_batch::text::chunker::split_lines;
use std::collections::HashMap;

const SETTING: &str = "[chunk]\nmethod = \"intellirag\"\n[pack]\ntokenizer = \"chars4\"\n\
    [evaluate]\nbaseline = \"ir-bm25\"\nrecall = \"passage\"\n";

fn variant(name: &str, packer: &str, selector: &str) -> String {
    format!(
        "[[variants]]\nname = \"{name}\"\nretriever = \"bm25\"\npacker = \"{packer}\"\nbudget = 1400\nselector = \"{selector}\"\n"
    )
}

/// `text`'s lines, each trimmed and non-empty, occur in order in file lines `start..=end`,
/// the first in `start` and the last in `end`.
fn lines_come_from(file: &[&str], start: u32, end: u32, text: &str, what: &str) {
    let mut at = start as usize;
    let lines: Vec<&str> = text
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "…")
        .collect();
    for (i, l) in lines.iter().enumerate() {
        while at <= end as usize && !file[at - 1].contains(l) {
            at += 1;
        }
        assert!(
            at <= end as usize,
            "{what}: {l:?} is not in lines {start}-{end}"
        );
        if i == 0 {
            assert_eq!(
                at, start as usize,
                "{what}: the first line is not at start_line"
            );
        }
    }
    assert!(
        lines.is_empty() || file[end as usize - 1].contains(lines[lines.len() - 1]),
        "{what}: the last line is not at end_line"
    );
}

#[test]
fn intellirag_chunks_and_passages_are_line_addressed_and_beat_its_baseline() {
    let t = tempfile::tempdir().unwrap();
    let extra = format!(
        "{SETTING}{}{}{}",
        variant("ir-bm25", "intellirag-bm25", "lexical"),
        variant("ir-compact", "intellirag", "oracle"),
        variant("ir-lean", "intellirag-lean", "lexical"),
    );
    let plan = bundled_plan(t.path(), &extra);
    run_quiet(&plan);
    let store = Store::new(&plan.output_dir);
    let files: Vec<FileRow> = store.read().unwrap();
    let text: HashMap<(&str, &str), Vec<&str>> = files
        .iter()
        .map(|f| ((f.repo.as_str(), f.path.as_str()), split_lines(&f.text)))
        .collect();

    let chunks: Vec<ChunkRow> = store.read().unwrap();
    assert!(
        chunks.iter().any(|c| c.join_at > 0),
        "no chunk has an overlap"
    );
    for c in &chunks {
        let file = &text[&(c.repo.as_str(), c.path.as_str())];
        // The overlap part and the chunk's own part each map to their own lines.
        let (head, body) = if c.join_at > 0 {
            let j = c.join_at as usize;
            (&c.text[..j - 1], Some(&c.text[j..]))
        } else {
            (c.text.as_str(), None)
        };
        let head_end = c.start_line + head.matches('\n').count() as u32;
        lines_come_from(
            file,
            c.start_line,
            head_end.min(c.end_line),
            head,
            &c.chunk_id,
        );
        if let Some(body) = body {
            // The chunk's own part may start with the line breaks of its separator.
            let skipped = body.len() - body.trim_start().len();
            let first = c.join_line + body[..skipped].matches('\n').count() as u32;
            lines_come_from(file, first, c.end_line, body.trim_start(), &c.chunk_id);
        }
    }

    let packs: Vec<PackRow> = store.read().unwrap();
    let mut used: HashMap<(&str, &str), u32> = HashMap::new();
    let mut units = 0;
    for p in packs.iter().filter(|p| p.variant.starts_with("ir-")) {
        let file = &text[&(p.repo.as_str(), p.path.as_str())];
        lines_come_from(file, p.start_line, p.end_line, &p.text, &p.chunk_id);
        *used.entry((&p.variant, &p.question_id)).or_default() += p.tokens;
        units += usize::from(p.unit == ri_batch::artifact::outcomes::PackedKind::Unit);
    }
    assert!(units > 100, "compaction cut few chunks: {units}");
    assert!(used.values().all(|&t| t <= 1400), "a pack is over budget");

    // Accepted evidence renders from the source at the scanned commit: no span mismatch.
    let extracts: Vec<ExtractRow> = store.read().unwrap();
    for e in extracts.iter().filter(|e| e.variant.starts_with("ir-")) {
        assert!(
            !e.reason.is_contract_refusal(),
            "{} {}: {}",
            e.variant,
            e.question_id,
            e.reason
        );
    }

    let summary: Vec<SummaryRow> = store.read().unwrap();
    let dev = |v: &str| {
        let s = summary
            .iter()
            .find(|s| s.variant == v && s.split == "dev")
            .unwrap();
        (s.packed_recall.unwrap(), s.mean_tokens.unwrap())
    };
    let (base, base_tokens) = dev("ir-bm25");
    let (compact, compact_tokens) = dev("ir-compact");
    let (lean, lean_tokens) = dev("ir-lean");
    // The method's claims, on this set: compaction finds more evidence than the baseline in no
    // more tokens, and lean mode spends far fewer tokens.
    assert!(
        compact > base + 0.05,
        "compact {compact} vs baseline {base}"
    );
    assert!(
        compact_tokens <= base_tokens,
        "{compact_tokens} vs {base_tokens}"
    );
    assert!(
        lean_tokens < 0.6 * compact_tokens,
        "{lean_tokens} vs {compact_tokens}"
    );
    assert!(lean > base, "lean {lean} vs baseline {base}");
}

/// Every pack row of `variant`, as (question, order, lines, tokens, text), sorted.
fn packs_of(store: &Store, variant: &str) -> Vec<(String, u32, u32, u32, u32, String)> {
    let packs: Vec<PackRow> = store.read().unwrap();
    let mut out: Vec<_> = packs
        .into_iter()
        .filter(|p| p.variant == variant)
        .map(|p| {
            (
                p.question_id,
                p.order,
                p.start_line,
                p.end_line,
                p.tokens,
                p.text,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_variants_own_compaction_settings_pack_as_packs_would_and_lean_stops_short() {
    // One run: the variant sets lean, top chunks, the rank prior, the novelty discount and the
    // continuation bonus itself, beside one that takes [pack]'s defaults. Another run: the same
    // settings in [pack] for every variant.
    let compact = |name: &str, own: &str| {
        format!(
            "[[variants]]\nname = \"{name}\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 450\n{own}"
        )
    };
    let own =
        "lean = 0.2\ncompact_top_chunks = 15\nrank_prior = 0.2\ncoverage = 0.5\nfollow = 0.5\n";
    let setting = SETTING.replace("\"ir-bm25\"", "\"plain\"");
    let t = tempfile::tempdir().unwrap();
    let extra = format!("{setting}{}{}", compact("own", own), compact("plain", ""));
    let plan = bundled_plan(t.path(), &extra);
    run_quiet(&plan);
    let a = Store::new(&plan.output_dir);

    let u = tempfile::tempdir().unwrap();
    let in_pack = setting.replace("[pack]\n", &format!("[pack]\n{own}"));
    let extra = format!("{in_pack}{}{}", compact("own", ""), compact("plain", ""));
    let plan_b = bundled_plan(u.path(), &extra);
    run_quiet(&plan_b);
    let b = Store::new(&plan_b.output_dir);

    let (own_a, own_b) = (packs_of(&a, "own"), packs_of(&b, "own"));
    assert!(!own_a.is_empty());
    assert_eq!(own_a, own_b, "a variant's settings pack as [pack]'s do");
    // The variant without settings of its own is the default packer, not the lean one.
    let plain = packs_of(&a, "plain");
    assert_ne!(plain, own_a);
    // Lean packs stop short of the budget where units score 0; the default fills it.
    fn used(rows: &[(String, u32, u32, u32, u32, String)]) -> HashMap<&str, u32> {
        let mut by: HashMap<&str, u32> = HashMap::new();
        for r in rows {
            *by.entry(r.0.as_str()).or_default() += r.4;
        }
        by
    }
    let (lean, full) = (used(&own_a), used(&plain));
    assert!(lean.values().chain(full.values()).all(|&n| n <= 450));
    let shorter = lean
        .iter()
        .filter(|(q, &n)| full.get(*q).is_some_and(|&f| n < f))
        .count();
    assert!(
        shorter * 4 >= lean.len(),
        "{shorter} of {} packs are shorter",
        lean.len()
    );
    let summary: Vec<SummaryRow> = a.read().unwrap();
    assert!(summary.iter().any(|s| s.variant == "own"));
}
