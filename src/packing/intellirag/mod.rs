//! IntelliRAG's README pipeline, reproduced as its method describes it (see
//! docs/intellirag.md): the recursive character chunker, the plain-BM25 baseline packer,
//! and the compaction packer with its query processing, calibrated rerank and support gate.
//! Each question is answered from its own repository's chunks, as IntelliRAG answers a question
//! from its own README.

pub mod chunker;
pub mod compact;
pub mod rank;
pub mod text;

use crate::packing::{Candidate, Packed};
use rank::{Corpus, Doc, Query};
use text::{content_tokens, payload_query, query_terms};

/// Budget-filling baseline's depth (topK).
pub const TOP_K: usize = 8;

/// A document's title: `<repo> <file name without extension>` (IntelliRAG's `<source> README`
/// for a repository's README.md).
pub fn title_of(repo: &str, path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split_once('.').map_or(name, |(s, _)| s);
    format!("{repo} {stem}")
}

/// Prepares one repository's chunks (in corpus order) as IntelliRAG's corpus.
pub fn corpus_of(chunks: &[Candidate]) -> Corpus<'_> {
    Corpus::new(
        chunks
            .iter()
            .map(|c| Doc {
                title: title_of(&c.repo, &c.path),
                heading: &c.heading,
                text: &c.text,
            })
            .collect(),
    )
}

/// IntelliRAG's plain-BM25 baseline: the raw question, the top 8 chunks with a positive score,
/// taken whole in rank order, skipping any that would pass the budget.
pub fn pack_baseline(
    chunks: &[Candidate],
    corpus: &Corpus,
    question: &str,
    budget: usize,
) -> Vec<Packed> {
    let hits = corpus.bm25_hits(&content_tokens(question));
    let mut used = 0;
    let mut out = Vec::new();
    for (i, _) in hits.iter().filter(|h| h.1 > 0.0).take(TOP_K) {
        let c = &chunks[*i];
        if used + c.tokens as usize <= budget {
            used += c.tokens as usize;
            out.push(Packed::whole(c));
        }
    }
    out
}

/// IntelliRAG's compaction arm: query terms with typo repair, BM25 on the terms, the calibrated
/// rerank, the support gate (an empty pack when it fails), then compaction.
pub fn pack_compaction(
    chunks: &[Candidate],
    corpus: &Corpus,
    question: &str,
    budget: usize,
    min_unit_share: f64,
    count: &dyn Fn(&str) -> usize,
) -> Vec<Packed> {
    let terms = query_terms(question, &corpus.vocab);
    let q = Query::new(payload_query(question), terms, &corpus.idf);
    // The BM25 query string is the terms joined by spaces, tokenised (and stemmed) again.
    let hits = corpus.bm25_hits(&content_tokens(&q.terms.join(" ")));
    let ranked = corpus.rerank(&hits, &q);
    if !corpus.supported(&ranked, &q) {
        return Vec::new();
    }
    compact::compact(chunks, &ranked, &q, budget, min_unit_share, count)
}

#[cfg(test)]
mod tests {
    use super::text::estimate_tokens;
    use super::*;
    use crate::packing::tests::cand;
    use crate::packing::tokens_of;

    fn chunks(texts: &[&str]) -> Vec<Candidate> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut c = cand(&format!("c{i}"), t, estimate_tokens(t) as u32, 0.0);
                c.path = "README.md".into();
                c
            })
            .collect()
    }

    fn pack(texts: &[&str], question: &str, budget: usize, share: f64) -> Vec<Packed> {
        let cs = chunks(texts);
        let corpus = corpus_of(&cs);
        pack_compaction(&cs, &corpus, question, budget, share, &estimate_tokens)
    }

    const FILLER: &str = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.";

    #[test]
    fn chunks_that_fit_come_back_whole_in_rerank_order() {
        let texts = [
            "Install the queue package with npm.",
            "The queue concurrency option sets how many tasks run at once.",
        ];
        let p = pack(&texts, "How do I set queue concurrency?", 1400, 0.0);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].chunk_id, "c1", "the better chunk first");
        assert!(p
            .iter()
            .all(|x| x.unit == crate::artifact::outcomes::PackedKind::Chunk));
        assert_eq!(p[0].text, texts[1]);
    }

    #[test]
    fn an_answering_sentence_in_a_lower_chunk_beats_filler_in_120_tokens() {
        let top = format!(
            "# Queue\n{}\n{FILLER} Queue basics.\n{FILLER}\n{FILLER}",
            FILLER
        );
        let low =
            format!("{FILLER}\nSet the concurrency option to limit parallel queue work.\n{FILLER}");
        let texts = [top.as_str(), low.as_str()];
        let p = pack(&texts, "How do I limit queue concurrency?", 120, 0.0);
        assert!(tokens_of(&p) <= 120, "{}", tokens_of(&p));
        assert!(
            p.iter()
                .any(|x| x.text.contains("Set the concurrency option")),
            "{p:#?}"
        );
        // Units with no query term and no neighbour score nothing and take no budget.
        assert!(p
            .iter()
            .all(|x| !x.text.starts_with("Lorem") || x.text.contains('\n')));
    }

    #[test]
    fn a_sentence_under_a_matching_heading_is_kept_without_shared_words() {
        let section = format!(
            "### Retry policy\n\nIntro line here.\n\nAttempts back off exponentially.\n\n{FILLER}"
        );
        let other = format!("{FILLER}\n{FILLER}\nThe retry count is unrelated trivia.\n{FILLER}");
        let texts = [section.as_str(), other.as_str()];
        let p = pack(&texts, "What is the retry policy?", 60, 0.0);
        let all: String = p
            .iter()
            .map(|x| x.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(all.contains("Attempts back off exponentially."), "{all}");
        assert!(tokens_of(&p) <= 60);
    }

    #[test]
    fn lean_keeps_only_near_top_units_and_passages_keep_their_lines() {
        let big = format!(
            "# Options\n\nThe concurrency option limits parallel tasks.\nconcurrency defaults to Infinity.\n{FILLER}\nqueue misc words.\n{FILLER}\n{FILLER}"
        );
        let texts = [big.as_str(), big.as_str()];
        let full = pack(&texts, "What does the concurrency option limit?", 60, 0.0);
        let lean = pack(&texts, "What does the concurrency option limit?", 60, 0.2);
        assert!(tokens_of(&lean) <= tokens_of(&full));
        assert!(
            lean.iter().all(|x| !x.text.contains("queue misc")),
            "{lean:#?}"
        );
        // The second chunk is a duplicate: every unit was seen, so it contributes nothing.
        assert!(full.iter().all(|x| x.chunk_id == "c0"));
        // A run of consecutive units is one piece whose lines are those units' lines.
        let run = full
            .iter()
            .find(|x| x.text.contains("The concurrency option"))
            .expect("the answer is packed");
        let lines: Vec<&str> = big.lines().collect();
        let units: Vec<&str> = run.text.lines().collect();
        assert_eq!(lines[run.start_line as usize - 1], units[0], "{run:#?}");
        assert_eq!(lines[run.end_line as usize - 1], units[units.len() - 1]);
    }

    #[test]
    fn unsupported_questions_get_no_context() {
        let texts = [
            "Install the package with npm.",
            "The queue concurrency option.",
        ];
        assert!(pack(
            &texts,
            "Which kubernetes autoscaler is recommended?",
            1400,
            0.0
        )
        .is_empty());
    }

    #[test]
    fn the_baseline_takes_the_top_chunks_whole_and_skips_what_does_not_fit() {
        let long = format!("queue {}", FILLER.repeat(4));
        let texts = [
            "queue concurrency queue",
            long.as_str(),
            "no match here",
            "queue tip",
        ];
        let cs = chunks(&texts);
        let corpus = corpus_of(&cs);
        let p = pack_baseline(&cs, &corpus, "queue concurrency", 100);
        let ids: Vec<&str> = p.iter().map(|x| x.chunk_id.as_str()).collect();
        // The long chunk (over 100 tokens) is skipped; the walk goes on; no zero-score chunk.
        assert_eq!(ids, vec!["c0", "c3"]);
        assert_eq!(title_of("p-queue", "docs/README.md"), "p-queue README");
    }
}
