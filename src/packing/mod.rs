//! Packers: what fits in the token budget. `rank` (whole chunks in rank order), `marginal-gain`
//! (relevance minus redundancy, weighted by budget pressure) and `compact` (the best sentences,
//! list items, table rows and code lines of the top chunks). None ever exceeds the budget.

pub mod intellirag;

mod compact;
mod marginal;

use crate::artifact::outcomes::PackedKind;
pub use compact::{pack_compact, CompactParams, Scoring, UnitSim};
pub use marginal::{budget_pressure, pack_marginal};

/// A retrieved chunk offered to a packer, in rank order.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub chunk_id: String,
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub heading: String,
    pub kind: String,
    pub text: String,
    /// Cost under the budget's token counter.
    pub tokens: u32,
    /// Retrieval score (higher is better).
    pub score: f64,
    /// Where an overlap prefix joins the chunk's own text: (byte offset in `text`, its file
    /// line); (0, 0) for line-addressed chunks. See [`crate::artifact::schema::ChunkRow::join_at`].
    pub join: (u32, u32),
}

impl Candidate {
    /// A chunk offered with its retrieval score and its cost under the budget's counter.
    pub fn of(c: &crate::artifact::schema::ChunkRow, tokens: u32, score: f64) -> Candidate {
        Candidate {
            chunk_id: c.chunk_id.clone(),
            repo: c.repo.clone(),
            path: c.path.clone(),
            start_line: c.start_line,
            end_line: c.end_line,
            heading: c.heading.clone(),
            kind: c.kind.clone(),
            text: c.text.clone(),
            tokens,
            score,
            join: (c.join_at, c.join_line),
        }
    }

    /// File line of byte `offset` of the text.
    pub fn line_at(&self, offset: usize) -> u32 {
        crate::text::line_of(
            &self.text,
            self.start_line,
            self.join.0,
            self.join.1,
            offset,
        )
    }
}

/// One packed piece, in the order the model would read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub chunk_id: String,
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub tokens: u32,
    /// `chunk` (whole) or `unit` (part of one).
    pub unit: PackedKind,
    pub text: String,
}

impl Packed {
    /// The whole candidate.
    pub fn whole(c: &Candidate) -> Packed {
        Packed {
            chunk_id: c.chunk_id.clone(),
            repo: c.repo.clone(),
            path: c.path.clone(),
            start_line: c.start_line,
            end_line: c.end_line,
            tokens: c.tokens,
            unit: PackedKind::Chunk,
            text: c.text.clone(),
        }
    }
}

/// Whole chunks in rank order, skipping any that does not fit what is left of the budget.
pub fn pack_rank(cands: &[Candidate], budget: usize) -> Vec<Packed> {
    let mut left = budget;
    let mut out = Vec::new();
    for c in cands {
        if (c.tokens as usize) <= left {
            left -= c.tokens as usize;
            out.push(Packed::whole(c));
        }
    }
    out
}

/// Total tokens of a pack.
pub fn tokens_of(p: &[Packed]) -> usize {
    p.iter().map(|x| x.tokens as usize).sum()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn cand(id: &str, text: &str, tokens: u32, score: f64) -> Candidate {
        Candidate {
            chunk_id: id.into(),
            repo: "r".into(),
            path: format!("{id}.md"),
            start_line: 1,
            end_line: text.lines().count() as u32,
            heading: String::new(),
            kind: "markdown".into(),
            text: text.into(),
            tokens,
            score,
            join: (0, 0),
        }
    }

    #[test]
    fn rank_skips_what_does_not_fit_and_keeps_going() {
        let c = vec![
            cand("a", "a", 50, 3.0),
            cand("b", "b", 80, 2.0),
            cand("c", "c", 40, 1.0),
        ];
        let ids: Vec<_> = pack_rank(&c, 100).into_iter().map(|p| p.chunk_id).collect();
        assert_eq!(ids, ["a", "c"]);
        assert!(pack_rank(&c, 10).is_empty());
    }
}
