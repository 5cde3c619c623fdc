//! One answer path, shared by the pack and extract stages and by `ask`/`serve`: a variant's packer
//! fills the budget from its pool, the packed pieces are labelled E1..En as evidence, the
//! variant's selector replies, the reply is held to the extractive contract and the accepted
//! source lines are rendered. What the evaluation measured is what a served answer gives.

pub mod selectors;

use crate::artifact::outcomes::Reason;
use crate::config::{ExtractConfig, Packer, Selector};
pub use crate::evaluation::metrics::Piece;
use crate::packing::intellirag::{self, rank::Corpus};
use crate::packing::{
    pack_compact, pack_marginal, pack_rank, Candidate, CompactParams, Packed, Scoring, UnitSim,
};
use crate::text::analyze::Analyzer;
use selectors::{Evidence, Verdict};

/// IntelliRAG's lean floor: units must score 20% of the best (`compactMinUnitShare`).
const LEAN_SHARE: f64 = 0.2;

/// What a variant's packer reads beside its pool.
pub struct PackInputs<'a> {
    pub question: &'a str,
    pub analyzer: &'a Analyzer,
    /// The idf of a term in the question's scope (1 where the scope has no index).
    pub idf: &'a dyn Fn(&str) -> f64,
    /// The budget's token counter.
    pub count: &'a dyn Fn(&str) -> usize,
    /// The compact packer's settings (the variant's over `[pack]`'s).
    pub params: &'a CompactParams,
    /// A weight and the units' similarity to the question, for `unit_dense` variants.
    pub dense: Option<(f64, UnitSim<'a>)>,
    /// The question's whole repository (its chunks and their IntelliRAG corpus), for the packers
    /// that rank it themselves; without it they rank the pool.
    pub repo: Option<(&'a [Candidate], &'a Corpus<'a>)>,
}

/// Packs one question's pool `cands` (in rank order) into `budget` with `packer`.
pub fn pack(packer: Packer, budget: usize, cands: &[Candidate], at: &PackInputs) -> Vec<Packed> {
    match packer {
        Packer::Rank => pack_rank(cands, budget),
        Packer::MarginalGain => pack_marginal(cands, budget, at.analyzer),
        Packer::Compact => {
            let scoring = Scoring {
                analyzer: at.analyzer,
                idf: at.idf,
                count: at.count,
                dense: at.dense,
            };
            pack_compact(cands, budget, at.question, &scoring, at.params)
        }
        Packer::IntelliragBm25 | Packer::Intellirag | Packer::IntelliragLean => {
            // The question's repository is the corpus; a `*` question's pool is.
            let own;
            let (docs, corpus) = match at.repo {
                Some(r) => r,
                None => {
                    own = intellirag::corpus_of(cands);
                    (cands, &own)
                }
            };
            match packer {
                Packer::IntelliragBm25 => {
                    intellirag::pack_baseline(docs, corpus, at.question, budget)
                }
                lean => {
                    let share = if lean == Packer::IntelliragLean {
                        LEAN_SHARE
                    } else {
                        0.0
                    };
                    intellirag::pack_compaction(docs, corpus, at.question, budget, share, at.count)
                }
            }
        }
    }
}

/// Runs of `pieces` (in pack order) that a reading model sees as one block: consecutive pieces
/// of one file whose lines continue the block's (start at or after its first line, at most one
/// line past its last). A block's text is its source lines; its label names all of it.
pub fn blocks(pieces: &[Piece]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut span = (0u32, 0u32);
    for (i, p) in pieces.iter().enumerate() {
        if let Some(last) = out.last_mut() {
            let head = &pieces[last.start];
            let joins = head.repo == p.repo
                && head.path == p.path
                && span.0 <= p.start_line
                && p.start_line <= span.1.saturating_add(1);
            if joins {
                last.end = i + 1;
                span.1 = span.1.max(p.end_line);
                continue;
            }
        }
        out.push(i..i + 1);
        span = (p.start_line, p.end_line);
    }
    out
}

/// Labels packed pieces E1..En in pack order (their `passage` is not read). `source_hash`
/// gives the SHA-256 of the scanned source lines a piece claims, which rendering checks the
/// current lines against.
pub fn label<'a>(
    pieces: impl IntoIterator<Item = Piece<'a>>,
    source_hash: impl Fn(&Piece) -> String,
) -> Vec<Evidence> {
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, p)| Evidence {
            label: format!("E{}", i + 1),
            repo: p.repo.to_string(),
            path: p.path.to_string(),
            start_line: p.start_line,
            end_line: p.end_line,
            text: p.text.to_string(),
            source_hash: source_hash(&p),
            commit: None,
        })
        .collect()
}

/// What a selector answers from, beside the evidence.
pub struct Ask<'a> {
    pub question: &'a str,
    /// The question's idf-weighted terms (see [`selectors::weighted_terms`]).
    pub terms: &'a [(String, f64)],
    /// The pack's support for the question (see [`selectors::support`]).
    pub support: f64,
    /// The question's gold quotes (repository, path, quote), which only `oracle` reads.
    pub quotes: &'a [(&'a str, &'a str, &'a str)],
}

/// The reply of `selector` to one question. An `llm` or `reader` selector's reply comes from the
/// model, asked by the caller (in batches); `llm` is it, `None` where the model was not asked.
pub fn reply(
    selector: Selector,
    ask: &Ask,
    evidence: &[Evidence],
    analyzer: &Analyzer,
    x: &ExtractConfig,
    llm: Option<Result<String, Reason>>,
) -> Result<String, Reason> {
    Ok(match selector {
        Selector::Lexical => selectors::lexical(
            ask.question,
            evidence,
            analyzer,
            x.lexical_threshold,
            x.max_ids,
        ),
        Selector::Oracle => selectors::oracle(ask.quotes, evidence),
        Selector::Calibrated => selectors::calibrated(
            ask.terms,
            evidence,
            analyzer,
            ask.support,
            x.refuse_below,
            x.max_ids,
        ),
        Selector::Llm | Selector::Reader if evidence.is_empty() => selectors::REFUSAL.to_string(),
        Selector::Llm | Selector::Reader => return llm.unwrap_or(Err(Reason::LlmNotAsked)),
    })
}

/// A reply held to the contract, and what it rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    /// The reply as given (empty when the selector failed).
    pub raw_reply: String,
    /// The accepted labels, in reply order (empty unless rendered).
    pub accepted: Vec<String>,
    /// `ok` when rendered; else why not.
    pub reason: Reason,
    /// The accepted evidence as `path:start-end` lines followed by the source lines.
    pub rendered: String,
    /// Per accepted label, its evidence and current source lines; `None` unless rendered.
    pub parts: Option<Vec<(Evidence, String)>>,
}

/// Holds `reply` to the contract against `evidence` and renders what it accepts, reading the
/// current source lines with `read_lines` (a hash mismatch refuses the answer).
pub fn settle(
    reply: Result<String, Reason>,
    evidence: &[Evidence],
    max_ids: usize,
    read_lines: &dyn Fn(&Evidence) -> Option<String>,
) -> Settled {
    let refused = |raw_reply: String, reason: Reason| Settled {
        raw_reply,
        accepted: Vec::new(),
        reason,
        rendered: String::new(),
        parts: None,
    };
    let raw = match reply {
        Ok(raw) => raw,
        Err(why) => return refused(String::new(), why),
    };
    let labels: Vec<String> = evidence.iter().map(|e| e.label.clone()).collect();
    match selectors::validate(&raw, &labels, max_ids) {
        Verdict::Accepted(ids) => match selectors::render(&ids, evidence, read_lines) {
            Ok((rendered, parts)) => Settled {
                raw_reply: raw,
                accepted: ids,
                reason: Reason::Ok,
                rendered,
                parts: Some(parts),
            },
            Err(why) => refused(raw, why),
        },
        Verdict::Refused => refused(raw, Reason::Refused),
        Verdict::Rejected(why) => refused(raw, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::sha256_hex;

    fn evidence() -> Vec<Evidence> {
        let pieces = [("a.md", 3, "set the timeout option"), ("b.md", 1, "colors")];
        label(
            pieces.iter().map(|(path, line, text)| Piece {
                repo: "r",
                path,
                start_line: *line,
                end_line: *line,
                text,
                passage: "",
            }),
            |p| sha256_hex(p.text.as_bytes()),
        )
    }

    #[test]
    fn a_reply_is_accepted_refused_or_rejected_with_its_reason() {
        let ev = evidence();
        assert_eq!(ev[1].label, "E2");
        let read = |e: &Evidence| Some(e.text.clone());
        let ok = settle(Ok("E1".into()), &ev, 8, &read);
        assert_eq!(ok.reason, Reason::Ok);
        assert_eq!(ok.rendered, "a.md:3-3\nset the timeout option\n");
        assert_eq!(ok.accepted, vec!["E1".to_string()]);
        let none = settle(Ok("NONE".into()), &ev, 8, &read);
        assert_eq!((none.reason, none.parts), (Reason::Refused, None));
        let prose = settle(Ok("E1 please".into()), &ev, 8, &read);
        assert_eq!(prose.reason, Reason::Prose);
        assert_eq!(prose.raw_reply, "E1 please");
        let failed = settle(Err(Reason::LlmHttp(503)), &ev, 8, &read);
        assert_eq!(
            (failed.reason, failed.raw_reply),
            (Reason::LlmHttp(503), "".into())
        );
        let stale = |_: &Evidence| Some("edited".to_string());
        let changed = settle(Ok("E2".into()), &ev, 8, &stale);
        assert_eq!(changed.reason, Reason::SourceChanged);
        assert!(changed.rendered.is_empty() && changed.accepted.is_empty());
    }

    #[test]
    fn an_llm_selector_without_evidence_refuses_and_unasked_is_recorded() {
        let an = Analyzer::new(true, true);
        let ask = Ask {
            question: "timeout",
            terms: &[],
            support: 0.0,
            quotes: &[],
        };
        let x = ExtractConfig::default();
        let r = reply(Selector::Llm, &ask, &[], &an, &x, None);
        assert_eq!(r, Ok(selectors::REFUSAL.to_string()));
        let r = reply(Selector::Llm, &ask, &evidence(), &an, &x, None);
        assert_eq!(r, Err(Reason::LlmNotAsked));
        let r = reply(Selector::Lexical, &ask, &evidence(), &an, &x, None);
        assert_eq!(r, Ok("E1".to_string()));
    }

    #[test]
    fn blocks_join_consecutive_pieces_of_one_file_whose_lines_continue() {
        let piece = |path: &'static str, s: u32, e: u32| Piece {
            repo: "r",
            path,
            start_line: s,
            end_line: e,
            text: "",
            passage: "",
        };
        let pieces = [
            piece("a.md", 3, 5),
            piece("a.md", 6, 6),   // continues line 5
            piece("a.md", 6, 9),   // shares line 6
            piece("b.md", 10, 12), // another file
            piece("a.md", 10, 11), // a.md again, but not consecutive in the pack
            piece("a.md", 13, 14), // a gap of one line: a new block
            piece("a.md", 2, 2),   // before the block's first line
        ];
        assert_eq!(blocks(&pieces), vec![0..3, 3..4, 4..5, 5..6, 6..7]);
        assert!(blocks(&[]).is_empty());
    }
}
