//! IntelliRAG's lexical ranking of one corpus: its BM25 (title-prefixed documents, query terms
//! stemmed twice and not de-duplicated), the idf map with generic words weighted down, weighted
//! recall R, the phrase boost P, the calibrated rerank and the support gate.

use super::text::{content_tokens, is_generic, is_stop, stem};
use regex::Regex;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

const K1: f64 = 1.5;
const B: f64 = 0.75;
/// Weight of a term the corpus does not hold: ln 8.
const UNSEEN: f64 = std::f64::consts::LN_2 * 3.0;
const GENERIC_SHARE: f64 = 0.2;

fn idf_of(n: usize, df: usize) -> f64 {
    (1.0 + (n as f64 - df as f64 + 0.5) / (df as f64 + 0.5)).ln()
}

/// One corpus document: its title (`<repo> <file stem>`), heading label and chunk text.
#[derive(Debug, Clone)]
pub struct Doc<'a> {
    pub title: String,
    pub heading: &'a str,
    pub text: &'a str,
}

/// A text as R and P see it: its content-token set, those tokens joined, and its lower case.
pub struct Texts {
    set: HashSet<String>,
    joined: String,
    lower: String,
}

impl Texts {
    pub fn new(text: &str) -> Texts {
        let toks = content_tokens(text);
        Texts {
            joined: toks.join(" "),
            set: toks.into_iter().collect(),
            lower: text.to_lowercase(),
        }
    }
}

/// A corpus prepared once for all its questions: each document's content tokens (for BM25 and
/// the vocabulary), the texts R and P look at, and the idf map.
pub struct Corpus<'a> {
    pub docs: Vec<Doc<'a>>,
    toks: Vec<Vec<String>>,
    df: HashMap<String, usize>,
    indexed: usize,
    avg: f64,
    /// idf over the sets of content tokens of `title + "\n" + text`, generic words ×0.2.
    pub idf: HashMap<String, f64>,
    /// Every content token of the corpus (for typo repair).
    pub vocab: HashSet<String>,
    /// `title\nheading\ntext`, `title heading` and `title\ntext` of each document.
    full: Vec<Texts>,
    title_heading: Vec<Texts>,
    title_text: Vec<Texts>,
}

impl<'a> Corpus<'a> {
    pub fn new(docs: Vec<Doc<'a>>) -> Corpus<'a> {
        let toks: Vec<Vec<String>> = docs
            .iter()
            .map(|d| content_tokens(&format!("{}\n{}", d.title, d.text)))
            .collect();
        let mut df: HashMap<String, usize> = HashMap::new();
        for t in &toks {
            for u in t.iter().collect::<HashSet<_>>() {
                *df.entry(u.clone()).or_default() += 1;
            }
        }
        let indexed = toks.iter().filter(|t| !t.is_empty()).count();
        let avg = toks.iter().map(Vec::len).sum::<usize>() as f64 / indexed.max(1) as f64;
        let idf = df
            .iter()
            .map(|(t, &d)| {
                let w = idf_of(docs.len(), d);
                (t.clone(), if is_generic(t) { w * GENERIC_SHARE } else { w })
            })
            .collect();
        let vocab = df.keys().cloned().collect();
        let full = docs
            .iter()
            .map(|d| Texts::new(&format!("{}\n{}\n{}", d.title, d.heading, d.text)))
            .collect();
        let title_heading = docs
            .iter()
            .map(|d| Texts::new(&format!("{} {}", d.title, d.heading)))
            .collect();
        let title_text = docs
            .iter()
            .map(|d| Texts::new(&format!("{}\n{}", d.title, d.text)))
            .collect();
        Corpus {
            docs,
            toks,
            df,
            indexed,
            avg,
            idf,
            vocab,
            full,
            title_heading,
            title_text,
        }
    }

    /// BM25 over `title + "\n" + text` (k1 1.5, b 0.75; length in content tokens; documents
    /// without tokens are not indexed). Returns the hit list as IntelliRAG builds it: positive
    /// scores descending (stable), at most min(80, max(N, 32, 10)); in corpora of up to 80
    /// chunks every other chunk follows in corpus order with 0.
    /// `query` is a tokenised query string: repeats count.
    pub fn bm25_hits(&self, query: &[String]) -> Vec<(usize, f64)> {
        let qidf: Vec<Option<f64>> = query
            .iter()
            .map(|q| self.df.get(q).map(|&d| idf_of(self.indexed, d)))
            .collect();
        let mut scored: Vec<(usize, f64)> = Vec::new();
        for (i, toks) in self.toks.iter().enumerate() {
            if toks.is_empty() {
                continue;
            }
            let len = toks.len() as f64;
            let mut s = 0.0;
            for (q, idf) in query.iter().zip(&qidf) {
                let Some(idf) = idf else { continue };
                let f = toks.iter().filter(|t| *t == q).count() as f64;
                if f > 0.0 {
                    s += idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * len / self.avg));
                }
            }
            if s > 0.0 {
                scored.push((i, s));
            }
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        let n = self.docs.len();
        scored.truncate(80.min(n.max(32).max(10)));
        if n <= 80 {
            let hit: HashSet<usize> = scored.iter().map(|(i, _)| *i).collect();
            scored.extend((0..n).filter(|i| !hit.contains(i)).map(|i| (i, 0.0)));
        }
        scored
    }

    /// `rerankCalibrated` without dense scores: s = min(1, 0.34·bm25/max +
    /// 0.32·R(title\nheading\ntext) + 0.20·R(title heading) + 0.14·P(title\ntext)), sorted
    /// descending (stable, so ties keep BM25 order).
    pub fn rerank(&self, hits: &[(usize, f64)], q: &Query) -> Vec<Ranked> {
        let max = hits.iter().map(|h| h.1).fold(0.0, f64::max);
        let mut out: Vec<Ranked> = hits
            .iter()
            .map(|&(i, bm25)| {
                let share = if max <= 1e-9 { 0.0 } else { bm25 / max };
                let recall = q.recall(&self.full[i]);
                let title_recall = q.recall(&self.title_heading[i]);
                let phrase = q.phrase(&self.title_text[i]);
                let score =
                    (0.34 * share + 0.32 * recall + 0.20 * title_recall + 0.14 * phrase).min(1.0);
                Ranked {
                    doc: i,
                    bm25,
                    score,
                    recall,
                    title_recall,
                    phrase,
                }
            })
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score));
        out
    }

    /// The support gate (`selectContext` + `classifyEvidence` with one document per corpus):
    /// whether any context may be given at all.
    pub fn supported(&self, ranked: &[Ranked], q: &Query) -> bool {
        if q.specific {
            ranked.iter().any(|r| {
                r.score >= 0.24 && (r.recall >= 0.18 || r.title_recall >= 0.22 || r.phrase >= 0.20)
            })
        } else {
            ranked
                .iter()
                .any(|r| r.score >= 0.10 && q.shares_term(&self.title_text[r.doc]))
        }
    }
}

/// A reranked chunk: its index in the corpus, BM25 and calibrated scores, and the gate's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub doc: usize,
    pub bm25: f64,
    pub score: f64,
    recall: f64,
    title_recall: f64,
    phrase: f64,
}

static NODE_CUE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)node \S").expect("valid"));

/// The query side of the rerank and of compaction: terms, their weights, the question's
/// bigrams.
pub struct Query {
    pub terms: Vec<String>,
    weights: Vec<f64>,
    total: f64,
    bigrams: Vec<String>,
    node_cues: Vec<String>,
    /// At least one content token of 4+ letters that is neither generic nor a stop word.
    pub specific: bool,
}

impl Query {
    /// `question` is the payload question; `idf` the corpus idf map.
    pub fn new(question: &str, terms: Vec<String>, idf: &HashMap<String, f64>) -> Query {
        let weights: Vec<f64> = terms
            .iter()
            .map(|t| {
                if is_stop(t) {
                    return 0.0;
                }
                let w = idf.get(t).copied().unwrap_or(UNSEEN);
                if is_generic(t) {
                    w * GENERIC_SHARE
                } else {
                    w
                }
            })
            .collect();
        let total = weights.iter().filter(|&&w| w > 0.0).sum();
        let toks = content_tokens(question);
        let bigrams = toks
            .windows(2)
            .filter(|w| !is_generic(&w[0]) && !is_generic(&w[1]))
            .map(|w| format!("{} {}", w[0], w[1]))
            .collect();
        let node_cues = NODE_CUE
            .find_iter(question)
            .map(|m| m.as_str().to_lowercase())
            .collect();
        let specific = toks
            .iter()
            .any(|t| t.len() >= 4 && !is_generic(t) && !is_stop(t));
        Query {
            terms,
            weights,
            total,
            bigrams,
            node_cues,
            specific,
        }
    }

    /// R (`weightedRecall`): the weighted share of terms that match the text's content tokens.
    pub fn recall(&self, text: &Texts) -> f64 {
        if self.terms.is_empty() || self.total <= 0.0 {
            return 0.0;
        }
        let hit: f64 = self
            .terms
            .iter()
            .zip(&self.weights)
            .filter(|(t, _)| matches(t, &text.set))
            .map(|(_, w)| *w)
            .sum();
        hit / self.total
    }

    /// P (`phraseBoost`): the share of the question's bigrams (and `node X` cues) in the text.
    pub fn phrase(&self, text: &Texts) -> f64 {
        let den = self.bigrams.len() + self.node_cues.len();
        if den == 0 {
            return 0.0;
        }
        let hits = self
            .bigrams
            .iter()
            .filter(|b| text.joined.contains(b.as_str()))
            .count()
            + self
                .node_cues
                .iter()
                .filter(|c| text.lower.contains(c.as_str()))
                .count();
        hits as f64 / den as f64
    }

    /// Whether some term matches the text's content tokens.
    pub fn shares_term(&self, text: &Texts) -> bool {
        self.terms.iter().any(|t| matches(t, &text.set))
    }
}

/// `match(t, D)`: exact, stemmed, or a 4+-letter prefix either way.
pub fn matches(t: &str, set: &HashSet<String>) -> bool {
    if set.contains(t) || set.contains(&stem(t)) {
        return true;
    }
    t.len() >= 4
        && set
            .iter()
            .any(|d| d.len() >= 4 && (t.starts_with(d.as_str()) || d.starts_with(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus<'a>(texts: &'a [&'a str]) -> Corpus<'a> {
        Corpus::new(
            texts
                .iter()
                .map(|t| Doc {
                    title: "p-queue README".into(),
                    heading: "",
                    text: t,
                })
                .collect(),
        )
    }

    #[test]
    fn bm25_matches_the_formula_and_lists_every_chunk_of_a_small_corpus() {
        let c = corpus(&[
            "queue concurrency limit",
            "install with npm",
            "other words here",
        ]);
        let hits = c.bm25_hits(&content_tokens("concurrency"));
        assert_eq!(hits.len(), 3);
        assert_eq!(hits[0].0, 0);
        // doc 0: queue, readme, queue, concurrency, limit ("p" is one letter) → 5 tokens;
        // doc 1: queue, readme, install, npm; doc 2: queue, readme, word, here ("other" is a
        // stop word).
        let (n, df, len, avg) = (3.0f64, 1.0f64, 5.0, 13.0 / 3.0);
        let idf = (1.0f64 + (n - df + 0.5) / (df + 0.5)).ln();
        let want = idf * 2.5 / (1.0 + 1.5 * (0.25 + 0.75 * len / avg));
        assert!((hits[0].1 - want).abs() < 1e-12, "{} vs {want}", hits[0].1);
        assert_eq!(&hits[1..], &[(1, 0.0), (2, 0.0)]);
        // Query terms are not de-duplicated: a repeat scores twice.
        let twice = c.bm25_hits(&content_tokens("concurrency concurrency"));
        assert!((twice[0].1 - 2.0 * want).abs() < 1e-12);
    }

    #[test]
    fn weights_recall_and_phrases() {
        let c = corpus(&["queue concurrency", "queue timeout", "queue size"]);
        // "queue" is in every document: its idf is ln(1 + 0.5/3.5).
        assert!((c.idf["queue"] - (1.0f64 + 0.5 / 3.5).ln()).abs() < 1e-12);
        // "timeout" is generic: ×0.2 in the map.
        let raw = (1.0f64 + 2.5 / 1.5).ln();
        assert!((c.idf["timeout"] - 0.2 * raw).abs() < 1e-12);
        let terms = vec!["queue".into(), "timeout".into(), "concurrency".into()];
        let q = Query::new("queue timeout concurrency", terms, &c.idf);
        // Generic corpus terms weigh 0.04 × raw idf in R.
        let total = c.idf["queue"] + 0.04 * raw + c.idf["concurrency"];
        let r = q.recall(&Texts::new("the queue"));
        assert!((r - c.idf["queue"] / total).abs() < 1e-12);
        // A term missing from the corpus weighs ln 8.
        let q8 = Query::new("zebra", vec!["zebra".into(), "queue".into()], &c.idf);
        let r8 = q8.recall(&Texts::new("zebra"));
        assert!((r8 - 8f64.ln() / (8f64.ln() + c.idf["queue"])).abs() < 1e-12);
        // Prefix matching needs one token to be a prefix of the other.
        assert!(matches("concurr", &["concurrency".to_string()].into()));
        assert!(!matches("concurrent", &["concurrency".to_string()].into()));
        // Bigrams holding a generic word are dropped: both of these hold "timeout".
        assert_eq!(q.phrase(&Texts::new("queue timeout concurrency")), 0.0);
        let q2 = Query::new("queue concurrency", vec![], &c.idf);
        assert_eq!(q2.phrase(&Texts::new("set the queue concurrency")), 1.0);
        assert_eq!(q2.phrase(&Texts::new("queue con")), 0.0);
        let q3 = Query::new("queue con", vec![], &c.idf);
        assert_eq!(
            q3.phrase(&Texts::new("queue concurrency")),
            1.0,
            "a substring test"
        );
    }

    #[test]
    fn the_gate_refuses_unsupported_questions() {
        let c = corpus(&[
            "queue concurrency controls parallel work",
            "install with npm",
        ]);
        let ask = |question: &str| {
            let terms = content_tokens(question);
            let q = Query::new(question, terms.clone(), &c.idf);
            let ranked = c.rerank(&c.bm25_hits(&content_tokens(&terms.join(" "))), &q);
            c.supported(&ranked, &q)
        };
        assert!(ask("How do I set the queue concurrency?"));
        assert!(!ask("What is the kubernetes pod autoscaler called?"));
    }
}
