//! Metrics and statistics as plain functions: required-evidence recall over packed or retrieved
//! pieces, ranking metrics (MRR, nDCG with graded gains, Recall@k), and the paired bootstrap.

use crate::text::normalize_ws;
use std::collections::HashMap;

/// A piece of text from a file, with its line span (1-based, inclusive).
#[derive(Debug, Clone)]
pub struct Piece<'a> {
    pub repo: &'a str,
    pub path: &'a str,
    pub start_line: u32,
    pub end_line: u32,
    pub text: &'a str,
    /// The passage the piece belongs to (its chunk id): under [`RecallRule::Passage`] only
    /// pieces of one passage are joined.
    pub passage: &'a str,
}

/// When an evidence quote counts as found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecallRule {
    /// ri-batch's: inside the text of its file, where pieces whose lines touch are joined.
    #[default]
    Merged,
    /// IntelliRAG's: inside one returned passage (a chunk, or the units packed from one chunk,
    /// joined only where their lines touch).
    Passage,
}

/// Joins pieces of the same file (and, under [`RecallRule::Passage`], the same passage) whose
/// line spans touch or overlap, in line order, so that a quote running across two adjacent
/// pieces still counts. Returns (repo, path, normalised text).
pub fn merged_texts<'a>(pieces: &[Piece<'a>], rule: RecallRule) -> Vec<(String, String, String)> {
    let passage = |p: &Piece<'a>| -> &'a str {
        match rule {
            RecallRule::Merged => "",
            RecallRule::Passage => p.passage,
        }
    };
    let mut ps: Vec<&Piece> = pieces.iter().collect();
    ps.sort_by(|a, b| {
        (a.repo, a.path, passage(a), a.start_line, a.end_line).cmp(&(
            b.repo,
            b.path,
            passage(b),
            b.start_line,
            b.end_line,
        ))
    });
    let mut out: Vec<(String, String, String, u32, &str)> = Vec::new();
    for p in ps {
        match out.last_mut() {
            Some((r, path, text, end, pass))
                if r == p.repo
                    && path == p.path
                    && *pass == passage(p)
                    && p.start_line <= *end + 1 =>
            {
                text.push('\n');
                text.push_str(p.text);
                *end = (*end).max(p.end_line);
            }
            _ => out.push((
                p.repo.to_string(),
                p.path.to_string(),
                p.text.to_string(),
                p.end_line,
                passage(p),
            )),
        }
    }
    out.into_iter()
        .map(|(r, p, t, _, _)| (r, p, normalize_ws(&t)))
        .collect()
}

/// Share of evidence quotes (repo, path, quote) found in `merged` (from [`merged_texts`]): a quote
/// counts when, after whitespace normalisation, it is a substring of the text of its file.
pub fn evidence_recall(
    evidence: &[(&str, &str, &str)],
    merged: &[(String, String, String)],
) -> f64 {
    if evidence.is_empty() {
        return 0.0;
    }
    let found = evidence
        .iter()
        .filter(|(repo, path, quote)| {
            let q = normalize_ws(quote);
            merged
                .iter()
                .any(|(r, p, t)| r == repo && p == path && t.contains(&q))
        })
        .count();
    found as f64 / evidence.len() as f64
}

/// Reciprocal rank of the first relevant document within the first `k` (0 if none).
pub fn mrr_at(ranked: &[&str], gold: &HashMap<&str, u32>, k: usize) -> f64 {
    ranked
        .iter()
        .take(k)
        .position(|d| gold.get(d).is_some_and(|&g| g > 0))
        .map_or(0.0, |i| 1.0 / (i as f64 + 1.0))
}

/// nDCG@k with linear gains (the grade) and log2(rank + 1) discounts, as trec_eval computes it.
pub fn ndcg_at(ranked: &[&str], gold: &HashMap<&str, u32>, k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, d)| *gold.get(d).unwrap_or(&0) as f64 / (i as f64 + 2.0).log2())
        .sum();
    let mut ideal: Vec<u32> = gold.values().copied().filter(|&g| g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &g)| g as f64 / (i as f64 + 2.0).log2())
        .sum();
    if idcg == 0.0 {
        0.0
    } else {
        dcg / idcg
    }
}

/// Share of relevant documents found within the first `k`.
pub fn recall_at(ranked: &[&str], gold: &HashMap<&str, u32>, k: usize) -> f64 {
    let relevant = gold.values().filter(|&&g| g > 0).count();
    if relevant == 0 {
        return 0.0;
    }
    let found = ranked
        .iter()
        .take(k)
        .filter(|d| gold.get(*d).is_some_and(|&g| g > 0))
        .count();
    found as f64 / relevant as f64
}

/// Collapses a ranked list of chunks to documents: each document at the rank of its best chunk.
pub fn first_occurrences<'a>(docs: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = std::collections::HashSet::new();
    docs.into_iter().filter(|d| seen.insert(*d)).collect()
}

/// SplitMix64: a small, fixed, reproducible generator for resampling.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize
    }
}

/// A paired comparison of two per-question score lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    pub n: usize,
    pub mean_a: f64,
    pub mean_b: f64,
    /// mean(a) − mean(b).
    pub diff: f64,
    /// 95% percentile interval of the bootstrap distribution of the mean difference.
    pub ci_low: f64,
    pub ci_high: f64,
    pub wins: usize,
    pub losses: usize,
    pub ties: usize,
}

/// Paired bootstrap of mean(a − b) with `resamples` draws, plus per-question wins (a > b),
/// losses and ties (|a − b| ≤ 1e-12).
pub fn paired_bootstrap(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Paired {
    assert_eq!(a.len(), b.len(), "paired lists differ in length");
    let n = a.len();
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let diff = mean(&d);
    let (mut lo, mut hi) = (diff, diff);
    if n > 0 && resamples > 0 {
        let mut rng = Rng::new(seed);
        let mut means: Vec<f64> = (0..resamples)
            .map(|_| (0..n).map(|_| d[rng.below(n)]).sum::<f64>() / n as f64)
            .collect();
        means.sort_by(f64::total_cmp);
        let q = |p: f64| means[((p * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
        lo = q(0.025);
        hi = q(0.975);
    }
    Paired {
        n,
        mean_a: mean(a),
        mean_b: mean(b),
        diff,
        ci_low: lo,
        ci_high: hi,
        wins: d.iter().filter(|&&x| x > 1e-12).count(),
        losses: d.iter().filter(|&&x| x < -1e-12).count(),
        ties: d.iter().filter(|&&x| x.abs() <= 1e-12).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gold(pairs: &[(&'static str, u32)]) -> HashMap<&'static str, u32> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn ranking_metrics_match_hand_computation() {
        let ranked = ["d3", "d1", "d7", "d2"];
        let g = gold(&[("d1", 2), ("d2", 1), ("d9", 1)]);
        assert!((mrr_at(&ranked, &g, 10) - 0.5).abs() < 1e-9);
        assert_eq!(mrr_at(&ranked, &g, 1), 0.0);
        // DCG = 2/log2(3) + 1/log2(5); IDCG = 2/log2(2) + 1/log2(3) + 1/log2(4).
        let dcg = 2.0 / 3f64.log2() + 1.0 / 5f64.log2();
        let idcg = 2.0 + 1.0 / 3f64.log2() + 0.5;
        assert!((ndcg_at(&ranked, &g, 10) - dcg / idcg).abs() < 1e-9);
        assert!(
            (ndcg_at(&ranked, &g, 2) - (2.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2())).abs()
                < 1e-9
        );
        assert!((recall_at(&ranked, &g, 10) - 2.0 / 3.0).abs() < 1e-9);
        assert!((recall_at(&ranked, &g, 2) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            first_occurrences(["a", "b", "a", "c", "b"]),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn evidence_counts_across_adjacent_pieces_only_in_its_file() {
        let pieces = [
            Piece {
                repo: "r",
                path: "a.md",
                start_line: 3,
                end_line: 3,
                text: "second  half.",
                passage: "c1",
            },
            Piece {
                repo: "r",
                path: "a.md",
                start_line: 1,
                end_line: 2,
                text: "The first\nhalf and the",
                passage: "c1",
            },
            Piece {
                repo: "r",
                path: "b.md",
                start_line: 1,
                end_line: 1,
                text: "elsewhere",
                passage: "c1",
            },
        ];
        let m = merged_texts(&pieces, RecallRule::Merged);
        assert_eq!(
            evidence_recall(&[("r", "a.md", "half and the second half.")], &m),
            1.0
        );
        assert_eq!(
            evidence_recall(
                &[("r", "b.md", "first half"), ("r", "a.md", "The first")],
                &m
            ),
            0.5
        );
        let gap = [
            Piece {
                repo: "r",
                path: "a.md",
                start_line: 1,
                end_line: 1,
                text: "one",
                passage: "c1",
            },
            Piece {
                repo: "r",
                path: "a.md",
                start_line: 5,
                end_line: 5,
                text: "two",
                passage: "c1",
            },
        ];
        assert_eq!(
            evidence_recall(
                &[("r", "a.md", "one two")],
                &merged_texts(&gap, RecallRule::Merged)
            ),
            0.0
        );
    }

    #[test]
    fn the_passage_rule_joins_pieces_of_one_passage_only() {
        let piece = |start: u32, text: &'static str, passage: &'static str| Piece {
            repo: "r",
            path: "a.md",
            start_line: start,
            end_line: start,
            text,
            passage,
        };
        let quote = [("r", "a.md", "first half second half")];
        // Adjacent lines from two chunks: one file's text, but two passages.
        let two = [piece(1, "first half", "c1"), piece(2, "second half", "c2")];
        assert_eq!(
            evidence_recall(&quote, &merged_texts(&two, RecallRule::Merged)),
            1.0
        );
        assert_eq!(
            evidence_recall(&quote, &merged_texts(&two, RecallRule::Passage)),
            0.0
        );
        // Adjacent units of one chunk: one passage.
        let one = [piece(2, "second half", "c1"), piece(1, "first half", "c1")];
        assert_eq!(
            evidence_recall(&quote, &merged_texts(&one, RecallRule::Passage)),
            1.0
        );
    }

    #[test]
    fn bootstrap_interval_brackets_the_difference() {
        let a: Vec<f64> = (0..50)
            .map(|i| if i % 3 == 0 { 1.0 } else { 0.5 })
            .collect();
        let b: Vec<f64> = (0..50)
            .map(|i| if i % 5 == 0 { 1.0 } else { 0.5 })
            .collect();
        let p = paired_bootstrap(&a, &b, 2000, 1);
        assert!(p.ci_low <= p.diff && p.diff <= p.ci_high);
        assert!(p.ci_low < p.ci_high);
        assert_eq!(p.wins + p.losses + p.ties, 50);
        assert_eq!(
            p,
            paired_bootstrap(&a, &b, 2000, 1),
            "same seed, same interval"
        );
        let same = paired_bootstrap(&a, &a, 100, 1);
        assert_eq!(
            (same.diff, same.ci_low, same.ci_high, same.ties),
            (0.0, 0.0, 0.0, 50)
        );
    }
}
