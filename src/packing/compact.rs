//! Sentence compaction: when the top chunks do not fit the budget whole, split them into units
//! (sentences; list items, table rows and code lines on their own), score each against the
//! question (idf-weighted term overlap, a bonus from strong neighbours, a bonus for text under a
//! heading that matches the question) and fill the budget with the best units, emitted in
//! document order; lines that overlapping chunks repeat are packed once. When the top chunks
//! fit, they are packed whole, exactly as `rank` would.

use super::{pack_rank, Candidate, Packed};
use crate::artifact::outcomes::PackedKind;
use crate::text::analyze::{weighted_terms, Analyzer};
use crate::text::units::split_units;
use std::collections::{HashMap, HashSet};

/// Settings of the compact packer (see `[pack]` in the config).
#[derive(Debug, Clone, Copy)]
pub struct CompactParams {
    pub top_chunks: usize,
    pub neighbour_bonus: f64,
    pub heading_bonus: f64,
    pub lean: f64,
    /// Weight w of the chunk's rank prior: unit scores × `(1 - w) + w × score / best score`.
    pub rank_prior: f64,
    /// Novelty discount c: a question term's weight in a unit's term score is multiplied by
    /// `(1 - c)^n`, n the units already chosen that hold it (0: units scored on their own).
    pub coverage: f64,
    /// Continuation bonus f: when a unit is chosen, the unit it introduces and the one that
    /// introduces it (a heading, a line ending in `:`, a code comment: [`Unit::introduces`]), in
    /// its chunk, gain f × its score.
    ///
    /// [`Unit::introduces`]: crate::text::units::Unit::introduces
    pub follow: f64,
}

/// The cosine between the question and unit `pos` of a candidate chunk (units as [`split_units`]
/// cuts them).
pub type UnitSim<'a> = &'a dyn Fn(&Candidate, usize) -> f64;

/// What units are scored with: the index's analyser and idf, the budget's token counter, and
/// optionally dense similarity.
pub struct Scoring<'a> {
    pub analyzer: &'a Analyzer,
    pub idf: &'a dyn Fn(&str) -> f64,
    pub count: &'a dyn Fn(&str) -> usize,
    /// A weight and the units' similarity to the question; the weighted cosine (negatives as 0)
    /// adds to the unit's term score.
    pub dense: Option<(f64, UnitSim<'a>)>,
}

/// The question's terms (indices into `q`) that `terms` holds, in the question's order.
fn holds(q: &[(String, f64)], terms: &HashSet<String>) -> Vec<usize> {
    (0..q.len()).filter(|&j| terms.contains(&q[j].0)).collect()
}

/// Weighted share of the question's terms that `held` covers, each term weighing `w`.
fn share(held: &[usize], w: &[f64], q_total: f64) -> f64 {
    if q_total <= 0.0 {
        return 0.0;
    }
    held.iter().map(|&j| w[j]).sum::<f64>() / q_total
}

struct Scored {
    chunk: usize,
    start_line: u32,
    end_line: u32,
    text: String,
    tokens: usize,
    /// The question's terms (indices into its weighted terms) the unit holds.
    holds: Vec<usize>,
    /// The score's parts besides the unit's own term overlap: its dense similarity, the
    /// neighbour and heading bonuses, and the chunk's rank prior.
    dense: f64,
    neighbour: f64,
    heading: f64,
    prior: f64,
    /// Whether the unit introduces the next one (see [`Unit::introduces`]).
    ///
    /// [`Unit::introduces`]: crate::text::units::Unit::introduces
    introduces: bool,
}

impl Scored {
    /// The unit's score when the question's terms weigh `w` (their idf, discounted by novelty).
    fn score(&self, w: &[f64], q_total: f64) -> f64 {
        (share(&self.holds, w, q_total) + self.dense + self.neighbour + self.heading) * self.prior
            - 1e-9 * self.chunk as f64
    }
}

/// A unit in the selection queue: by score, then the earlier unit (units are in chunk, then
/// position order).
struct Queued {
    score: f64,
    unit: usize,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.score.total_cmp(&o.score).then(o.unit.cmp(&self.unit))
    }
}

/// Whether `u` is lines of `w` again: their lines overlap and `w`'s text holds `u`'s.
fn repeats(w: &Scored, u: &Scored) -> bool {
    w.start_line <= u.end_line && u.start_line <= w.end_line && w.text.contains(u.text.trim())
}

/// The units to pack and the budget they leave: highest score first, skipping units that do not
/// fit and lines already packed; with `lean`, none scoring 0 or under `lean` × the best. Scores
/// change as units are chosen: the novelty discount lowers those whose terms are covered, the
/// continuation bonus raises the lead-in before a chosen unit and the unit after a chosen lead-in.
/// So the queue is lazy: an entry whose unit's score fell since it was queued goes back with the
/// new score, and a rise queues the unit again, so the top entry, once checked, is the best unit
/// now.
fn choose(
    units: &[Scored],
    q_weights: &[f64],
    q_total: f64,
    budget: usize,
    p: &CompactParams,
    top: &[Candidate],
) -> (Vec<bool>, usize) {
    let mut w = q_weights.to_vec();
    let mut bonus = vec![0.0f64; units.len()];
    let score = |i: usize, w: &[f64], bonus: &[f64]| units[i].score(w, q_total) + bonus[i];
    let mut queue: std::collections::BinaryHeap<Queued> = (0..units.len())
        .map(|unit| Queued {
            score: score(unit, &w, &bonus),
            unit,
        })
        .collect();
    let best = queue.peek().map_or(0.0, |u| u.score).max(0.0);
    let floor = p.lean * best;
    let mut left = budget;
    let mut chosen = vec![false; units.len()];
    // A unit is looked at once: chosen, or passed over for its size or as lines already packed.
    let mut done = vec![false; units.len()];
    // Overlapping chunks repeat lines: a unit already packed from the same lines is not paid twice.
    let mut kept: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    while let Some(Queued {
        score: queued,
        unit: i,
    }) = queue.pop()
    {
        if done[i] {
            continue;
        }
        let now = score(i, &w, &bonus);
        if now < queued {
            queue.push(Queued {
                score: now,
                unit: i,
            });
            continue;
        }
        if p.lean > 0.0 && (now <= 0.0 || now < floor) {
            break;
        }
        done[i] = true;
        let u = &units[i];
        if u.tokens > left {
            continue;
        }
        let c = &top[u.chunk];
        let file = kept.entry((c.repo.as_str(), c.path.as_str())).or_default();
        if file.iter().any(|&k| repeats(&units[k], u)) {
            continue;
        }
        file.push(i);
        left -= u.tokens;
        chosen[i] = true;
        for &j in &u.holds {
            w[j] *= 1.0 - p.coverage;
        }
        if p.follow > 0.0 && now > 0.0 {
            // The lead-in that introduces a chosen unit, and the unit a chosen lead-in introduces.
            let before = i.checked_sub(1).filter(|&n| units[n].introduces);
            let after = Some(i + 1).filter(|_| u.introduces);
            let lifted = p.follow * now;
            for n in [before, after].into_iter().flatten() {
                if units.get(n).is_some_and(|v| v.chunk == u.chunk) && !done[n] && lifted > bonus[n]
                {
                    bonus[n] = lifted;
                    queue.push(Queued {
                        score: score(n, &w, &bonus),
                        unit: n,
                    });
                }
            }
        }
    }
    (chosen, left)
}

/// Packs by sentence compaction (see the module docs).
pub fn pack_compact(
    cands: &[Candidate],
    budget: usize,
    question: &str,
    s: &Scoring,
    p: &CompactParams,
) -> Vec<Packed> {
    let (analyzer, idf, count) = (s.analyzer, s.idf, s.count);
    let top = &cands[..p.top_chunks.min(cands.len())];
    let top_cost: usize = top.iter().map(|c| c.tokens as usize).sum();
    if top_cost <= budget {
        return pack_rank(cands, budget);
    }
    let q = weighted_terms(question, analyzer, idf);
    let q_total: f64 = q.iter().map(|(_, w)| w).sum();
    let q_weights: Vec<f64> = q.iter().map(|(_, w)| *w).collect();

    let mut units: Vec<Scored> = Vec::new();
    let mut per_chunk: Vec<usize> = Vec::new();
    let peak = top.iter().map(|c| c.score).fold(0.0f64, f64::max);
    for (ci, c) in top.iter().enumerate() {
        let prior = if p.rank_prior > 0.0 && peak > 0.0 {
            1.0 - p.rank_prior + p.rank_prior * (c.score / peak).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let us = split_units(&c.text, c.start_line, &c.kind, &c.heading);
        let held: Vec<Vec<usize>> = us
            .iter()
            .map(|u| holds(&q, &analyzer.terms(&u.text).into_iter().collect()))
            .collect();
        let dense: Vec<f64> = (0..us.len())
            .map(|i| s.dense.map_or(0.0, |(w, sim)| w * sim(c, i).max(0.0)))
            .collect();
        let base: Vec<f64> = held
            .iter()
            .zip(&dense)
            .map(|(h, d)| share(h, &q_weights, q_total) + d)
            .collect();
        for (i, (u, holds_i)) in us.iter().zip(held).enumerate() {
            let prev = if i > 0 { base[i - 1] } else { 0.0 };
            let next = base.get(i + 1).copied().unwrap_or(0.0);
            let heading_terms: HashSet<String> = analyzer.terms(&u.heading).into_iter().collect();
            units.push(Scored {
                chunk: ci,
                start_line: u.start_line,
                end_line: u.end_line,
                text: u.text.clone(),
                tokens: count(&u.text),
                holds: holds_i,
                dense: dense[i],
                neighbour: p.neighbour_bonus * prev.max(next),
                heading: p.heading_bonus * share(&holds(&q, &heading_terms), &q_weights, q_total),
                prior,
                introduces: u.introduces(),
            });
        }
        per_chunk.push(us.len());
    }
    let (chosen, mut left) = choose(&units, &q_weights, q_total, budget, p, top);
    let mut out = Vec::new();
    for (ci, c) in top.iter().enumerate() {
        let idx: Vec<usize> = (0..units.len())
            .filter(|&i| units[i].chunk == ci && chosen[i])
            .collect();
        if idx.is_empty() {
            continue;
        }
        let used: usize = idx.iter().map(|&i| units[i].tokens).sum();
        if idx.len() == per_chunk[ci] && c.tokens as usize <= left + used {
            left = left + used - c.tokens as usize;
            out.push(Packed::whole(c));
            continue;
        }
        for i in idx {
            let u = &units[i];
            out.push(Packed {
                chunk_id: c.chunk_id.clone(),
                repo: c.repo.clone(),
                path: c.path.clone(),
                start_line: u.start_line,
                end_line: u.end_line,
                tokens: u.tokens as u32,
                unit: PackedKind::Unit,
                text: u.text.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::cand;
    use super::super::tokens_of;
    use super::*;
    use crate::text::tokens::approx_tokens;

    const P: CompactParams = CompactParams {
        top_chunks: 10,
        neighbour_bonus: 0.3,
        heading_bonus: 0.5,
        lean: 0.0,
        rank_prior: 0.0,
        coverage: 0.0,
        follow: 0.0,
    };

    fn terms_only(a: &Analyzer) -> Scoring<'_> {
        Scoring {
            analyzer: a,
            idf: &|_| 1.0,
            count: &approx_tokens,
            dense: None,
        }
    }

    fn pool() -> Vec<Candidate> {
        let a = "The cache is cleared on restart. Colors are configurable with the theme option. Logs rotate daily.";
        let b =
            "Set the timeout option to change how long requests wait. Retries happen three times.";
        vec![
            cand("a", a, approx_tokens(a) as u32, 2.0),
            cand("b", b, approx_tokens(b) as u32, 1.0),
        ]
    }

    #[test]
    fn chunks_that_fit_stay_whole() {
        let c = pool();
        let a = Analyzer::new(false, false);
        let out = pack_compact(&c, 1000, "timeout option", &terms_only(&a), &P);
        assert_eq!(out, pack_rank(&c, 1000));
        assert!(out.iter().all(|p| p.unit == PackedKind::Chunk));
    }

    #[test]
    fn under_pressure_the_best_sentences_win_and_budget_holds() {
        let c = pool();
        let a = Analyzer::new(false, false);
        let budget = 16;
        let out = pack_compact(
            &c,
            budget,
            "How do I change the request timeout?",
            &terms_only(&a),
            &P,
        );
        assert!(tokens_of(&out) <= budget, "{}", tokens_of(&out));
        assert_eq!(
            out[0].text,
            "Set the timeout option to change how long requests wait."
        );
        assert_eq!(out[0].unit, PackedKind::Unit);
        // Rank order would have spent the budget on chunk "a" and missed the answer.
        assert!(pack_rank(&c, budget).is_empty() || pack_rank(&c, budget)[0].chunk_id == "a");
    }

    #[test]
    fn lean_drops_weak_units() {
        let c = pool();
        let a = Analyzer::new(false, false);
        let lean = CompactParams { lean: 0.9, ..P };
        let out = pack_compact(&c, 25, "timeout", &terms_only(&a), &lean);
        assert_eq!(out.len(), 1);
        assert!(out[0].text.contains("timeout"));
    }

    #[test]
    fn a_coverage_discount_packs_the_other_term_before_repeating_one() {
        // Three units name the cache; one, shorter, names the restart. At a budget for two of
        // them, units scored on their own take two cache lines; with the discount the second
        // cache line's score halves and the restart line comes in.
        let a = "The cache holds parsed files in memory cache.\nThe cache size is set by cache_size here.\nA restart clears it.\nThe cache lives in the data directory cache.";
        let c = [cand("a", a, approx_tokens(a) as u32, 1.0)];
        let an = Analyzer::new(false, false);
        let lines: Vec<&str> = a.lines().collect();
        let budget = approx_tokens(lines[0]) + approx_tokens(lines[1]);
        let question = "what does a restart do to the cache";
        let texts = |p: &CompactParams| -> Vec<String> {
            let out = pack_compact(&c, budget, question, &terms_only(&an), p);
            assert!(tokens_of(&out) <= budget);
            out.into_iter().map(|p| p.text).collect()
        };
        let alone = texts(&P);
        assert!(!alone.iter().any(|t| t.contains("restart")), "{alone:?}");
        let covered = texts(&CompactParams { coverage: 0.5, ..P });
        assert!(covered.iter().any(|t| t.contains("restart")), "{covered:?}");
        assert!(covered.iter().any(|t| t.contains("cache")), "{covered:?}");
        // A discount of 0 is the packer without it.
        assert_eq!(texts(&CompactParams { coverage: 0.0, ..P }), alone);
    }

    #[test]
    fn a_continuation_bonus_packs_the_line_a_chosen_lead_in_introduces() {
        // The lead-in names the question's terms; the call it introduces names none. A shorter
        // unit with some of the terms wins the budget's rest unless the lead-in's choice lifts
        // the line after it; a sentence that does not end in `:` introduces nothing and lifts
        // nothing.
        let text = |lead: &str| {
            format!("{lead}\n\nCall interval.prev() on it.\n\nThe next date and the previous date are both kept in the local time zone.\n\nThe date is UTC.")
        };
        let an = Analyzer::new(false, false);
        let (lead, call, long, short) = (
            "To get the previous date:",
            "Call interval.prev() on it.",
            "The next date and the previous date are both kept in the local time zone.",
            "The date is UTC.",
        );
        assert!(
            approx_tokens(short) <= approx_tokens(call)
                && approx_tokens(long) > approx_tokens(call)
        );
        let budget = approx_tokens(lead) + approx_tokens(call);
        let flat = CompactParams {
            neighbour_bonus: 0.0,
            heading_bonus: 0.0,
            ..P
        };
        // What a chunk of `text(lead)` packs under `p`.
        let texts = |lead: &str, p: &CompactParams| -> Vec<String> {
            let a = text(lead);
            let c = [cand("a", &a, approx_tokens(&a) as u32, 1.0)];
            let out = pack_compact(
                &c,
                budget,
                "how do I get the previous date",
                &terms_only(&an),
                p,
            );
            assert!(tokens_of(&out) <= budget);
            out.into_iter().map(|p| p.text).collect()
        };
        assert_eq!(texts(lead, &flat), [lead, short]);
        let follow = CompactParams {
            follow: 0.6,
            ..flat
        };
        assert_eq!(texts(lead, &follow), [lead, call]);
        let plain = "To get the previous date.";
        assert_eq!(texts(plain, &follow), [plain, short]);
    }

    #[test]
    fn lines_two_overlapping_chunks_share_are_packed_once() {
        // Chunks a (lines 1-3) and b (lines 3-5) of one file share line 3, the answer.
        let a = "Intro text here.\nMore intro.\nThe timeout option sets the wait.";
        let b = "The timeout option sets the wait.\nRetries are three.\nThe timeout can be zero, to wait forever on the slowest links.";
        let mut ca = cand("a", a, approx_tokens(a) as u32, 2.0);
        let mut cb = cand("b", b, approx_tokens(b) as u32, 1.0);
        (ca.path, cb.path) = ("f.md".into(), "f.md".into());
        (ca.start_line, ca.end_line, cb.start_line, cb.end_line) = (1, 3, 3, 5);
        let an = Analyzer::new(false, false);
        let (shared, last) = (
            "The timeout option sets the wait.",
            "The timeout can be zero, to wait forever on the slowest links.",
        );
        // Without the rule the repeat of line 3 (scoring as high) would take line 5's place.
        assert!(approx_tokens(last) > approx_tokens(shared));
        let budget = approx_tokens(shared) + approx_tokens(last);
        let out = pack_compact(&[ca, cb], budget, "timeout option", &terms_only(&an), &P);
        let texts: Vec<&str> = out.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(texts, [shared, last], "{out:?}");
        assert!(tokens_of(&out) <= budget);
    }

    #[test]
    fn the_rank_prior_favours_units_of_higher_ranked_chunks() {
        let a = "The timeout is in seconds. Nothing else here.";
        let b = "The timeout option is per request. Other text.";
        let c = vec![
            cand("a", a, approx_tokens(a) as u32, 2.0),
            cand("b", b, approx_tokens(b) as u32, 0.5),
        ];
        let an = Analyzer::new(false, false);
        // Only units with a term compete (lean > 0), and each scores by its own terms alone.
        let flat = CompactParams {
            neighbour_bonus: 0.0,
            heading_bonus: 0.0,
            lean: 0.01,
            ..P
        };
        let budget = approx_tokens("The timeout option is per request.");
        let best = |p: &CompactParams| {
            let out = pack_compact(&c, budget, "timeout option", &terms_only(&an), p);
            assert_eq!(out.len(), 1, "{out:?}");
            out[0].chunk_id.clone()
        };
        // Without a prior b's unit covers more of the question; with a full prior, a's chunk
        // outranks it fourfold.
        assert_eq!(best(&flat), "b");
        assert_eq!(
            best(&CompactParams {
                rank_prior: 1.0,
                ..flat
            }),
            "a"
        );
        // IntelliRAG's 0.2 scales b's unit to 0.85 of its score: still ahead.
        assert_eq!(
            best(&CompactParams {
                rank_prior: 0.2,
                ..flat
            }),
            "b"
        );
    }

    #[test]
    fn dense_similarity_brings_in_a_unit_that_shares_no_term() {
        let c = pool();
        let a = Analyzer::new(false, false);
        // No unit shares a term with the question; the similarity favours b's first sentence.
        let question = "How do I make the client give up sooner?";
        let sim = |cand: &Candidate, pos: usize| {
            if cand.chunk_id == "b" && pos == 0 {
                0.6
            } else {
                -0.1
            }
        };
        let budget = 16;
        let lexical = pack_compact(&c, budget, question, &terms_only(&a), &P);
        assert_ne!(
            lexical[0].text,
            "Set the timeout option to change how long requests wait."
        );
        let dense = Scoring {
            dense: Some((0.5, &sim)),
            ..terms_only(&a)
        };
        let out = pack_compact(&c, budget, question, &dense, &P);
        assert!(tokens_of(&out) <= budget);
        assert_eq!(
            out[0].text,
            "Set the timeout option to change how long requests wait."
        );
        // A weight of 0 is the terms-only packer.
        let zero = Scoring {
            dense: Some((0.0, &sim)),
            ..terms_only(&a)
        };
        assert_eq!(pack_compact(&c, budget, question, &zero, &P), lexical);
    }
}
