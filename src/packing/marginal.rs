//! Marginal-gain packing: greedily take the fitting candidate with the largest normalised
//! relevance minus λ × (its largest lexical overlap with what is already packed), where λ is the
//! budget pressure 1 − budget / (total cost of the pool), and 0 when everything fits. With λ = 0
//! it is exactly `rank`.

use super::{Candidate, Packed};
use crate::text::analyze::Analyzer;
use std::collections::HashMap;

/// λ: 1 − budget / total cost of the pool, floored at 0.
pub fn budget_pressure(cands: &[Candidate], budget: usize) -> f64 {
    let total: usize = cands.iter().map(|c| c.tokens as usize).sum();
    if total == 0 || total <= budget {
        0.0
    } else {
        1.0 - budget as f64 / total as f64
    }
}

/// Each candidate's distinct terms, as ascending numbers of one numbering for the pool: sets
/// compared by merging, not by hashing strings.
fn term_sets(cands: &[Candidate], analyzer: &Analyzer) -> Vec<Vec<u32>> {
    let mut number: HashMap<String, u32, foldhash::fast::FixedState> = HashMap::default();
    cands
        .iter()
        .map(|c| {
            let mut set: Vec<u32> = analyzer
                .terms(&c.text)
                .into_iter()
                .map(|t| {
                    let next = number.len() as u32;
                    *number.entry(t).or_insert(next)
                })
                .collect();
            set.sort_unstable();
            set.dedup();
            set
        })
        .collect()
}

/// Share of `a`'s distinct terms that also occur in `b` (both ascending, distinct).
fn containment(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut both) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                both += 1;
                i += 1;
                j += 1;
            }
        }
    }
    both as f64 / a.len() as f64
}

/// Packs by marginal gain (see the module docs).
pub fn pack_marginal(cands: &[Candidate], budget: usize, analyzer: &Analyzer) -> Vec<Packed> {
    let lambda = budget_pressure(cands, budget);
    let (lo, hi) = cands
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), c| {
            (lo.min(c.score), hi.max(c.score))
        });
    let rel = |s: f64| if hi > lo { (s - lo) / (hi - lo) } else { 1.0 };
    let terms: Vec<Vec<u32>> = if lambda > 0.0 {
        term_sets(cands, analyzer)
    } else {
        vec![Vec::new(); cands.len()]
    };
    let mut left = budget;
    let mut taken = vec![false; cands.len()];
    let mut redundancy = vec![0.0f64; cands.len()];
    let mut out = Vec::new();
    loop {
        let mut best: Option<(usize, f64)> = None;
        for (i, c) in cands.iter().enumerate() {
            if taken[i] || c.tokens as usize > left {
                continue;
            }
            let gain = rel(c.score) - lambda * redundancy[i];
            // Strictly greater: ties go to the better-ranked candidate.
            if best.is_none_or(|(_, g)| gain > g) {
                best = Some((i, gain));
            }
        }
        let Some((i, _)) = best else { break };
        taken[i] = true;
        left -= cands[i].tokens as usize;
        out.push(Packed::whole(&cands[i]));
        if lambda > 0.0 {
            for j in 0..cands.len() {
                if !taken[j] {
                    redundancy[j] = redundancy[j].max(containment(&terms[j], &terms[i]));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::cand;
    use super::super::{pack_rank, tokens_of};
    use super::*;

    #[test]
    fn equals_rank_when_everything_fits() {
        let c = vec![
            cand("a", "alpha beta", 30, 9.0),
            cand("b", "alpha beta", 30, 5.0),
            cand("c", "gamma", 30, 4.0),
        ];
        let a = Analyzer::new(false, false);
        assert_eq!(budget_pressure(&c, 90), 0.0);
        assert_eq!(pack_marginal(&c, 90, &a), pack_rank(&c, 90));
        assert_eq!(pack_marginal(&c, 1000, &a), pack_rank(&c, 1000));
    }

    #[test]
    fn under_pressure_a_duplicate_loses_to_new_content() {
        // Pool costs 90, budget 60: λ = 1/3. Relevance: a 1, b 1/3, c 0.2. After "a", "b" repeats
        // it entirely (gain 1/3 − 1/3 = 0) while "c" is new (gain 0.2).
        let c = vec![
            cand("a", "alpha beta", 30, 6.0),
            cand("b", "alpha beta", 30, 5.0),
            cand("c", "gamma delta", 30, 4.8),
        ];
        let a = Analyzer::new(false, false);
        let ids: Vec<_> = pack_marginal(&c, 60, &a)
            .into_iter()
            .map(|p| p.chunk_id)
            .collect();
        assert_eq!(ids, ["a", "c"]);
        let rank: Vec<_> = pack_rank(&c, 60).into_iter().map(|p| p.chunk_id).collect();
        assert_eq!(rank, ["a", "b"]);
        assert!(tokens_of(&pack_marginal(&c, 60, &a)) <= 60);
    }

    #[test]
    fn containment_is_the_share_of_distinct_terms_shared() {
        let c = vec![
            cand("a", "alpha beta gamma delta alpha", 30, 6.0),
            cand("b", "delta epsilon beta", 30, 5.0),
            cand("c", "", 30, 4.0),
        ];
        let sets = term_sets(&c, &Analyzer::new(false, false));
        assert_eq!(sets[0].len(), 4, "alpha counts once");
        assert_eq!(containment(&sets[0], &sets[1]), 0.5);
        assert_eq!(containment(&sets[1], &sets[0]), 2.0 / 3.0);
        assert_eq!(containment(&sets[2], &sets[0]), 0.0);
        assert_eq!(containment(&sets[0], &sets[2]), 0.0);
    }
}
