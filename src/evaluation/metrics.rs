//! Metrics and statistics as plain functions: required-evidence recall over packed or retrieved
//! pieces, ranking metrics (MRR, nDCG with graded gains, Recall@k), and the paired bootstrap.

use crate::artifact::scope::Scope;
use crate::rng::Rng;
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

/// A packed row type as a piece of its chunk's passage: both row types carry the same fields.
macro_rules! piece_from {
    ($($row:ty),*) => {$(
        impl<'a> From<&'a $row> for Piece<'a> {
            fn from(p: &'a $row) -> Piece<'a> {
                Piece {
                    repo: &p.repo,
                    path: &p.path,
                    start_line: p.start_line,
                    end_line: p.end_line,
                    text: &p.text,
                    passage: &p.chunk_id,
                }
            }
        }
    )*};
}

piece_from!(crate::artifact::schema::PackRow, crate::packing::Packed);

/// Joins pieces of the same file (and, under [`RecallRule::Passage`], the same passage) whose
/// line spans touch or overlap, in line order, so that a quote running across two adjacent
/// pieces still counts. Returns (repo, path, normalised text).
pub fn merged_texts<'a>(pieces: &[Piece<'a>], rule: RecallRule) -> Vec<(String, String, String)> {
    merged_spans(pieces, rule)
        .into_iter()
        .map(|m| (m.repo, m.path, m.text))
        .collect()
}

/// One run of joined pieces (see [`merged_texts`]): its file, normalised text and line span.
#[derive(Debug, Clone)]
pub struct Merged {
    pub repo: String,
    pub path: String,
    pub text: String,
    pub start_line: u32,
    pub end_line: u32,
}

/// An evidence anchor of a question: a quote in a file, and the lines it is at when the question
/// says so.
#[derive(Debug, Clone, Copy)]
pub struct Anchor<'a> {
    pub repo: &'a str,
    pub path: &'a str,
    pub quote: &'a str,
    pub lines: Option<(u32, u32)>,
}

/// Share of `anchors` found in `merged` (from [`merged_spans`]): an anchor with lines counts when
/// one run of its file covers all of them; one without, when its quote (whitespace normalised) is
/// inside the text of one run of its file.
pub fn anchor_recall(anchors: &[Anchor], merged: &[Merged]) -> f64 {
    if anchors.is_empty() {
        return 0.0;
    }
    let found = anchors
        .iter()
        .filter(|a| {
            let mine = merged
                .iter()
                .filter(|m| m.repo == a.repo && m.path == a.path);
            match a.lines {
                Some((s, e)) => mine
                    .into_iter()
                    .any(|m| m.start_line <= s && e <= m.end_line),
                None => {
                    let q = normalize_ws(a.quote);
                    mine.into_iter().any(|m| m.text.contains(&q))
                }
            }
        })
        .count();
    found as f64 / anchors.len() as f64
}

/// [`merged_texts`] with each run's line span.
pub fn merged_spans<'a>(pieces: &[Piece<'a>], rule: RecallRule) -> Vec<Merged> {
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
    let mut out: Vec<(Merged, &str)> = Vec::new();
    for p in ps {
        match out.last_mut() {
            Some((m, pass))
                if m.repo == p.repo
                    && m.path == p.path
                    && *pass == passage(p)
                    && p.start_line <= m.end_line + 1 =>
            {
                m.text.push('\n');
                m.text.push_str(p.text);
                m.end_line = m.end_line.max(p.end_line);
            }
            _ => out.push((
                Merged {
                    repo: p.repo.to_string(),
                    path: p.path.to_string(),
                    text: p.text.to_string(),
                    start_line: p.start_line,
                    end_line: p.end_line,
                },
                passage(p),
            )),
        }
    }
    out.into_iter()
        .map(|(mut m, _)| {
            m.text = normalize_ws(&m.text);
            m
        })
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

/// 1 when every relevant document is among the first `k` ranked, else 0 (localization accuracy,
/// as SWE-bench studies report it); 0 when there is none.
pub fn accuracy_at(ranked: &[&str], gold: &HashMap<&str, u32>, k: usize) -> f64 {
    let relevant: Vec<&str> = gold
        .iter()
        .filter(|(_, &g)| g > 0)
        .map(|(d, _)| *d)
        .collect();
    let top = &ranked[..ranked.len().min(k)];
    let all = !relevant.is_empty() && relevant.iter().all(|d| top.contains(d));
    if all {
        1.0
    } else {
        0.0
    }
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

/// The document id of a file for a question of scope `question`: its path, or `repo/path` for a
/// question over every repository (`*`), as gold documents name them.
pub fn doc_id(question: &Scope, repo: &str, path: &str) -> String {
    if question.is_all() {
        format!("{repo}/{path}")
    } else {
        path.to_string()
    }
}

/// The files a variant ranks for a question of scope `question`, each once at its first (best)
/// place, with the score it came with: `files`, the variant's own file ranking in rank order,
/// when it has one, else the files of `pool`, its chunks in rank order as (repo, path, score).
/// Ids are [`doc_id`]s, as gold documents name them. `evaluate` scores this ranking and
/// `export trec` writes it.
pub fn ranked_files<'a>(
    question: &Scope,
    files: Option<impl Iterator<Item = (&'a str, &'a str, f64)>>,
    pool: impl Iterator<Item = (&'a str, &'a str, f64)>,
) -> Vec<(String, f64)> {
    let docs: Vec<(String, f64)> = match files {
        Some(files) => files
            .map(|(repo, path, s)| (doc_id(question, repo, path), s))
            .collect(),
        None => pool
            .map(|(repo, path, s)| (doc_id(question, repo, path), s))
            .collect(),
    };
    let mut seen = std::collections::HashSet::new();
    docs.into_iter()
        .filter(|(d, _)| seen.insert(d.clone()))
        .collect()
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
    // Every resample of all-zero differences has mean 0 (a rerun where nothing changed): the
    // interval is [0, 0] without drawing.
    let unchanged = d.iter().all(|&x| x == 0.0);
    if n > 0 && resamples > 0 && !unchanged {
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

/// A per-question metric of an `evaluation` row, by name.
pub type Metric = (
    &'static str,
    fn(&crate::artifact::schema::EvaluationRow) -> Option<f64>,
);

/// The per-question metrics that comparisons (within a run, and `compare` across runs) test.
pub const QUESTION_METRICS: [Metric; 9] = [
    ("packed_recall", |r| r.packed_recall),
    ("pool_recall", |r| r.pool_recall),
    ("tokens_used", |r| Some(r.tokens_used as f64)),
    ("mrr10", |r| r.mrr10),
    ("ndcg10", |r| r.ndcg10),
    ("recall10", |r| r.recall10),
    ("recall100", |r| r.recall100),
    ("acc1", |r| r.acc1),
    ("acc10", |r| r.acc10),
];

/// Two-sided paired randomization (sign-flip) test of mean(a − b) = 0 with `rounds` random
/// sign assignments: the share of them whose |mean| reaches the observed one, counting the
/// observed assignment itself (so never 0).
pub fn randomization_p(a: &[f64], b: &[f64], rounds: usize, seed: u64) -> f64 {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    // With all differences 0 every assignment reaches the observed 0: p is 1 without drawing.
    if d.is_empty() || rounds == 0 || d.iter().all(|&x| x == 0.0) {
        return 1.0;
    }
    let observed = d.iter().sum::<f64>().abs();
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut reach = 1usize;
    for _ in 0..rounds {
        let mut s = 0.0;
        for x in &d {
            if rng.next_u64() & 1 == 1 {
                s += x;
            } else {
                s -= x;
            }
        }
        if s.abs() >= observed - 1e-12 {
            reach += 1;
        }
    }
    reach as f64 / (rounds + 1) as f64
}

/// Holm–Bonferroni adjusted p-values of one family, in the order given: the i-th smallest p is
/// multiplied by (m − i), the running maximum taken, capped at 1.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut out = vec![1.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max((p[i] * (m - rank) as f64).min(1.0));
        out[i] = running;
    }
    out
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
        // Chunks collapse to files, each at its first (best) place, with that place's score.
        let pool = [
            ("r", "a", 5.0),
            ("r", "b", 4.0),
            ("r", "a", 3.0),
            ("r", "c", 2.0),
        ];
        let none: Option<std::iter::Empty<(&str, &str, f64)>> = None;
        assert_eq!(
            ranked_files(&Scope::repo("r"), none, pool.into_iter()),
            [
                ("a".to_string(), 5.0),
                ("b".to_string(), 4.0),
                ("c".to_string(), 2.0)
            ]
        );
        let own = [("r", "z", 1.0)];
        assert_eq!(
            ranked_files(&Scope::all(), Some(own.into_iter()), pool.into_iter()),
            [("r/z".to_string(), 1.0)]
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

    #[test]
    fn randomization_separates_a_real_difference_from_noise() {
        let a: Vec<f64> = (0..40).map(|i| (i % 2) as f64).collect();
        let same = randomization_p(&a, &a, 2000, 7);
        assert_eq!(same, 1.0);
        let better: Vec<f64> = a.iter().map(|x| x + 0.5).collect();
        let p = randomization_p(&better, &a, 2000, 7);
        assert!(p < 0.001, "{p}");
        let mixed: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.1 } else { -0.1 })
            .collect();
        let zero = vec![0.0; 40];
        assert!(randomization_p(&mixed, &zero, 2000, 7) > 0.5);
    }

    #[test]
    fn holm_adjusts_in_step_down_order() {
        // The textbook example: 0.01, 0.04, 0.03, 0.005 → 0.03, 0.06, 0.06, 0.02.
        let adj = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (x, y) in adj.iter().zip(want) {
            assert!((x - y).abs() < 1e-12, "{adj:?}");
        }
        assert_eq!(holm(&[0.6, 0.9]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }
}
