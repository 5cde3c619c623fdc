//! The lexical analyser shared by BM25, compaction and the lexical selector: lowercase, split on
//! non-alphanumerics and on camelCase / snake_case boundaries while keeping the whole identifier,
//! with optional English stemming and stop words.

use rust_stemmers::{Algorithm, Stemmer};

/// Common English stop words (used when `stopwords = true`, and always by question-term coverage).
pub const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from",
    "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or",
    "so", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "we", "what", "when", "where", "which", "who", "why", "will", "with", "you", "your", "should",
    "would", "could", "there", "than", "have", "has", "get", "use", "using",
];

/// Whether `w` (lowercase) is a stop word.
pub fn is_stopword(w: &str) -> bool {
    STOPWORDS.contains(&w)
}

/// Turns text into index terms.
pub struct Analyzer {
    stemmer: Option<Stemmer>,
    stopwords: bool,
    whole: bool,
    digits: bool,
}

impl Analyzer {
    pub fn new(stem: bool, stopwords: bool) -> Analyzer {
        Analyzer {
            stemmer: stem.then(|| Stemmer::create(Algorithm::English)),
            stopwords,
            whole: true,
            digits: true,
        }
    }

    /// Whether a split identifier is also kept whole (default true).
    pub fn whole_identifiers(mut self, on: bool) -> Analyzer {
        self.whole = on;
        self
    }

    /// Whether identifiers split between letters and digits (default true).
    pub fn split_digits(mut self, on: bool) -> Analyzer {
        self.digits = on;
        self
    }

    /// The terms of `text`, in order, with repeats.
    pub fn terms(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_term(text, |t| out.push(t));
        out
    }

    /// Calls `f` with each term of `text`.
    pub fn for_each_term(&self, text: &str, mut f: impl FnMut(String)) {
        let mut emit = |t: String| {
            if self.stopwords && is_stopword(&t) {
                return;
            }
            match &self.stemmer {
                Some(s) => f(stem_cached(s, t)),
                None => f(t),
            }
        };
        for word in words(text) {
            let parts = split_identifier(word, self.digits);
            if parts.len() > 1 {
                if self.whole {
                    emit(word.to_lowercase());
                }
                for p in parts {
                    emit(p.to_lowercase());
                }
            } else {
                emit(word.trim_matches('_').to_lowercase());
            }
        }
    }
}

/// Distinct words whose stems a thread keeps: a bound on memory, not on correctness.
const STEM_CACHE_WORDS: usize = 1 << 16;

thread_local! {
    /// Each thread's English stems by word: the packers and selectors analyze the same chunks'
    /// text for every variant, and a lookup costs a fraction of Snowball's suffix search.
    static STEMS: std::cell::RefCell<foldhash::HashMap<String, String>> =
        std::cell::RefCell::new(foldhash::HashMap::default());
}

/// `word`'s stem under `stemmer` (the analyzer's one algorithm, English), from the thread's cache.
fn stem_cached(stemmer: &Stemmer, word: String) -> String {
    STEMS.with_borrow_mut(|stems| {
        if let Some(s) = stems.get(&word) {
            return s.clone();
        }
        let stem = stemmer.stem(&word).into_owned();
        if stems.len() >= STEM_CACHE_WORDS {
            stems.clear();
        }
        stems.insert(word, stem.clone());
        stem
    })
}

/// Maximal runs of letters, digits and `_`, with at least one letter or digit.
pub fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.chars().any(|c| c.is_alphanumeric()))
}

/// Splits an identifier at `_` and at camelCase boundaries (`parseHTTPResponse` → parse, HTTP, Response).
pub fn split_identifier(word: &str, digits: bool) -> Vec<&str> {
    let mut parts = Vec::new();
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (pos, c) = chars[i];
            let prev = chars[i - 1].1;
            let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
            // Without digit splitting, digits belong to the run before them (`int32Value` →
            // int32, Value), as in the common `[A-Z]?[a-z0-9]+` identifier split.
            let lower_like = prev.is_lowercase() || (!digits && prev.is_ascii_digit());
            let boundary = (lower_like && c.is_uppercase())
                || (prev.is_uppercase() && c.is_uppercase() && next_lower)
                || (digits && prev.is_alphabetic() && c.is_ascii_digit())
                || (digits && prev.is_ascii_digit() && c.is_alphabetic());
            if boundary {
                parts.push(&piece[start..pos]);
                start = pos;
            }
        }
        parts.push(&piece[start..]);
    }
    parts
}

/// The question's content terms (distinct, stop words dropped) with their idf in its scope: what
/// the compact packer scores units by and the selectors weigh support by.
pub fn weighted_terms(
    question: &str,
    analyzer: &Analyzer,
    idf: &dyn Fn(&str) -> f64,
) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for t in analyzer.terms(question) {
        if !is_stopword(&t) && !out.iter().any(|(x, _)| *x == t) {
            let w = idf(&t);
            out.push((t, w));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_keep_whole_and_parts() {
        let a = Analyzer::new(false, false);
        assert_eq!(a.terms("maxAge"), ["maxage", "max", "age"]);
        assert_eq!(a.terms("parse_args()"), ["parse_args", "parse", "args"]);
        assert_eq!(
            a.terms("parseHTTPResponse x"),
            ["parsehttpresponse", "parse", "http", "response", "x"]
        );
        assert_eq!(a.terms("Hello, World!"), ["hello", "world"]);
        assert_eq!(a.terms("utf8 v2"), ["utf8", "utf", "8", "v2", "v", "2"]);
    }

    #[test]
    fn parts_only_and_digits_kept() {
        let a = Analyzer::new(false, false)
            .whole_identifiers(false)
            .split_digits(false);
        assert_eq!(
            a.terms("maxAge utf8 is_iterable"),
            ["max", "age", "utf8", "is", "iterable"]
        );
        assert_eq!(a.terms("int32Value"), ["int32", "value"]);
    }

    #[test]
    fn stemming_and_stopwords() {
        let a = Analyzer::new(true, true);
        assert_eq!(a.terms("How are the options parsed"), ["option", "pars"]);
    }
}
