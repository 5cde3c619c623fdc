//! IntelliRAG's sentence compaction (`compactContext`), step by step as its method states: 8
//! candidates with a BM25 hit, whole return when they fit, units cut at lines and sentence
//! starts, base = R + 0.5·P, heading carry 0.5, neighbour 0.3, the rank prior, de-duplication,
//! skip-and-continue filling where zero-score units never use budget, and the lean floor.

use super::rank::{Query, Ranked, Texts};
use crate::artifact::outcomes::PackedKind;
use crate::packing::{Candidate, Packed};
use crate::text::normalize_ws;

/// Candidate chunks compaction looks at (MAX_CANDIDATES).
pub const MAX_CANDIDATES: usize = 8;
const SECTION_SHARE: f64 = 0.5;
const NEIGHBOR_SHARE: f64 = 0.3;

/// A unit of a chunk: its byte offset in the chunk text and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit<'a> {
    pub offset: usize,
    pub text: &'a str,
}

/// Cuts a chunk's text into units: lines (trimmed, empty ones dropped), and inside a line at a
/// white-space run that follows `.`, `!` or `?` and precedes `A`–`Z`, a backtick, `*`, `[`,
/// `(` or `_`.
pub fn split_units(text: &str) -> Vec<Unit<'_>> {
    let mut out = Vec::new();
    let mut line_at = 0;
    for line in text.split('\n') {
        let mut from = 0;
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if matches!(b[i], b'.' | b'!' | b'?') {
                let ws = line[i + 1..]
                    .char_indices()
                    .find(|(_, c)| !c.is_whitespace())
                    .map_or(line.len() - i - 1, |(k, _)| k);
                let next = i + 1 + ws;
                if ws > 0
                    && next < b.len()
                    && matches!(b[next], b'A'..=b'Z' | b'`' | b'*' | b'[' | b'(' | b'_')
                {
                    push_unit(&mut out, line, line_at, from, i + 1);
                    from = next;
                    i = next;
                    continue;
                }
            }
            i += 1;
        }
        push_unit(&mut out, line, line_at, from, line.len());
        line_at += line.len() + 1;
    }
    out
}

fn push_unit<'a>(out: &mut Vec<Unit<'a>>, line: &'a str, line_at: usize, from: usize, to: usize) {
    let piece = &line[from..to];
    let t = super::text::js_trim(piece);
    if !t.is_empty() {
        let lead = t.as_ptr() as usize - piece.as_ptr() as usize;
        out.push(Unit {
            offset: line_at + from + lead,
            text: t,
        });
    }
}

/// Whether a unit is a Markdown heading: 1–6 `#` and white space.
fn is_heading(u: &str) -> bool {
    let n = u.bytes().take_while(|&b| b == b'#').count();
    (1..=6).contains(&n) && u[n..].starts_with(|c: char| c.is_whitespace())
}

struct Scored<'a> {
    cand: usize,
    pos: usize,
    unit: Unit<'a>,
    score: f64,
    tokens: usize,
    keep: bool,
}

/// Compacts the reranked list of one corpus. `cands[i]` is corpus document `i`; `ranked` the
/// rerank (already through the support gate); `count` the budget's token counter (IntelliRAG's
/// `estimateTokens` under `tokenizer = "chars4"`).
pub fn compact(
    cands: &[Candidate],
    ranked: &[Ranked],
    q: &Query,
    budget: usize,
    min_unit_share: f64,
    count: &dyn Fn(&str) -> usize,
) -> Vec<Packed> {
    // 1. Candidates: lexical only, so chunks without a BM25 hit are dropped; the first 8 stay.
    let top: Vec<&Ranked> = ranked
        .iter()
        .filter(|r| r.bm25 > 0.0)
        .take(MAX_CANDIDATES)
        .collect();
    if top.is_empty() {
        return Vec::new();
    }
    // 2. Whole return when they fit.
    let whole: usize = top.iter().map(|r| cands[r.doc].tokens as usize).sum();
    if whole <= budget {
        return top.iter().map(|r| Packed::whole(&cands[r.doc])).collect();
    }
    let peak = top[0].score.max(1e-9);
    // 3–8. Units, base scores, heading carry, neighbours, rank prior, de-duplication.
    let mut units: Vec<Scored> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (ci, r) in top.iter().enumerate() {
        let us = split_units(&cands[r.doc].text);
        let base: Vec<f64> = us
            .iter()
            .map(|u| {
                let t = Texts::new(u.text);
                q.recall(&t) + 0.5 * q.phrase(&t)
            })
            .collect();
        let prior = 0.8 + 0.2 * r.score / peak;
        let mut section = 0.0;
        for (i, u) in us.into_iter().enumerate() {
            if is_heading(u.text) {
                section = base[i];
            }
            let prev = if i > 0 { base[i - 1] } else { 0.0 };
            let near = prev.max(base.get(i + 1).copied().unwrap_or(0.0));
            let score = (base[i].max(SECTION_SHARE * section) + NEIGHBOR_SHARE * near) * prior;
            let keep = seen.insert(normalize_ws(u.text));
            units.push(Scored {
                cand: ci,
                pos: i,
                tokens: count(u.text),
                unit: u,
                score,
                keep,
            });
        }
    }
    units.retain(|u| u.keep);
    if units.is_empty() {
        return Vec::new();
    }
    // 9. Highest score first; ties keep candidate order, then position.
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| units[b].score.total_cmp(&units[a].score));
    // 10. Skip-and-continue filling above the floor; zero-score units never use budget.
    let floor = units[order[0]].score * min_unit_share;
    let mut picked = vec![false; units.len()];
    let mut used = 0;
    for i in order {
        let u = &units[i];
        if u.score <= 0.0 || u.score < floor {
            break;
        }
        if used + u.tokens > budget {
            continue;
        }
        used += u.tokens;
        picked[i] = true;
    }
    // 11. One passage per candidate, in rerank order; runs of consecutive units are one packed
    // piece each (IntelliRAG joins them with "\n", and runs with "\n…\n").
    let mut out = Vec::new();
    for ci in 0..top.len() {
        let c = &cands[top[ci].doc];
        let mut run: Vec<&Scored> = Vec::new();
        let mut idx: Vec<&Scored> = (0..units.len())
            .filter(|&i| picked[i] && units[i].cand == ci)
            .map(|i| &units[i])
            .collect();
        idx.sort_by_key(|u| u.pos);
        for u in idx {
            if run.last().is_some_and(|l| l.pos + 1 != u.pos) {
                out.push(piece(c, &run));
                run.clear();
            }
            run.push(u);
        }
        if !run.is_empty() {
            out.push(piece(c, &run));
        }
    }
    out
}

/// A packed piece from consecutive units of one chunk, with the file lines they come from.
fn piece(c: &Candidate, run: &[&Scored]) -> Packed {
    let line = |o: usize| c.line_at(o);
    let first = run[0];
    let last = run[run.len() - 1];
    Packed {
        chunk_id: c.chunk_id.clone(),
        repo: c.repo.clone(),
        path: c.path.clone(),
        start_line: line(first.unit.offset),
        end_line: line(last.unit.offset + last.unit.text.len().saturating_sub(1)),
        tokens: run.iter().map(|u| u.tokens as u32).sum(),
        unit: PackedKind::Unit,
        text: run
            .iter()
            .map(|u| u.unit.text)
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_lines_and_sentences_before_capitals_and_markdown_openers() {
        let text = "# Title\n\n  First one. Second one! third stays.  Fourth? `code` here. 1. no\n- item\n";
        let us: Vec<&str> = split_units(text).iter().map(|u| u.text).collect();
        assert_eq!(
            us,
            vec![
                "# Title",
                "First one.",
                "Second one! third stays.",
                "Fourth?",
                "`code` here. 1. no",
                "- item"
            ]
        );
        let u = &split_units(text)[2];
        assert_eq!(&text[u.offset..u.offset + u.text.len()], u.text);
        assert!(is_heading("### Options") && !is_heading("#hashtag") && !is_heading("####### x"));
    }
}
