//! IntelliRAG's text primitives, exactly as its method describes them: content tokens (lowercase,
//! `[a-z0-9]+`, no 1-letter tokens, 77 stop words, a light suffix stemmer), the 41 generic
//! words, typo repair against a corpus vocabulary, the payload rule for "ignore the corpus"
//! questions, and JavaScript's `trim`.

use std::collections::HashSet;

/// The 77 stop words, dropped before stemming.
pub const STOP_WORDS: [&str; 77] = [
    "the", "and", "for", "you", "with", "from", "that", "this", "what", "how", "why", "are", "was",
    "were", "into", "your", "a", "an", "of", "to", "in", "on", "or", "do", "does", "did", "is",
    "it", "as", "be", "by", "if", "not", "can", "should", "would", "could", "when", "which", "who",
    "whom", "been", "have", "has", "had", "will", "just", "about", "than", "then", "also", "only",
    "over", "after", "before", "between", "same", "each", "other", "more", "most", "such", "very",
    "right", "me", "my", "we", "our", "i", "explain", "describe", "tell", "show", "work", "works",
    "please", "thanks",
];

/// The 41 "generic ops" words, weighted down (×0.2) wherever a term weight is taken; checked on
/// the stemmed token.
pub const GENERIC: [&str; 41] = [
    "node",
    "nodes",
    "memory",
    "cpu",
    "cpus",
    "ram",
    "resource",
    "resources",
    "server",
    "servers",
    "service",
    "services",
    "guide",
    "runbook",
    "error",
    "errors",
    "issue",
    "issues",
    "use",
    "using",
    "used",
    "handle",
    "handling",
    "system",
    "systems",
    "process",
    "limit",
    "limits",
    "timeout",
    "timeouts",
    "request",
    "requests",
    "cluster",
    "host",
    "free",
    "enough",
    "individual",
    "aggregate",
    "pattern",
    "failure",
    "failures",
];

pub fn is_stop(t: &str) -> bool {
    STOP_WORDS.contains(&t)
}

pub fn is_generic(t: &str) -> bool {
    GENERIC.contains(&t)
}

/// JavaScript's `String.prototype.trim`: Unicode white space, line terminators and the BOM.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
}

/// Length in UTF-16 code units (JavaScript's `length`).
pub fn js_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// `estimateTokens`: `max(1, ceil(len(trim(s)) / 4))`.
pub fn estimate_tokens(s: &str) -> usize {
    js_len(js_trim(s)).div_ceil(4).max(1)
}

/// The light suffix stemmer: the first rule that matches applies; words under 5 letters stay.
pub fn stem(t: &str) -> String {
    let n = t.len();
    if n < 5 {
        return t.to_string();
    }
    if n > 6 && t.ends_with("ing") {
        return t[..n - 3].to_string();
    }
    if n > 6 && t.ends_with("ers") {
        return t[..n - 1].to_string();
    }
    if n > 5 && t.ends_with("ies") {
        return format!("{}y", &t[..n - 3]);
    }
    if n > 5 && t.ends_with("es") {
        return t[..n - 2].to_string();
    }
    if n > 5 && t.ends_with("ed") {
        // Only the final `d`, always: IntelliRAG's code tests whether the word minus `d` ends in
        // `e`, which every word ending in `ed` does ("worked" → "worke", "parsed" → "parse").
        return t[..n - 1].to_string();
    }
    if n > 4 && t.ends_with('s') && !t.ends_with("ss") {
        return t[..n - 1].to_string();
    }
    t.to_string()
}

/// `contentTokens`: lowercase, `[a-z0-9]+` runs, no 1-letter tokens or stop words, stemmed.
pub fn content_tokens(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    lower
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|t| t.len() > 1 && !is_stop(t))
        .map(stem)
        .collect()
}

/// `payloadQuery`: for "ignore the corpus" / "answer from memory" / "from your own knowledge"
/// questions, the text after the last `:` when it is longer than 8 characters.
pub fn payload_query(question: &str) -> &str {
    let lower = question.to_lowercase();
    let squash = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    let cue = ["ignore corpus", "ignore the corpus"]
        .iter()
        .chain(["ignore indexed corpus", "ignore the indexed corpus"].iter())
        .chain(
            [
                "answer from memory",
                "from your knowledge",
                "from your own knowledge",
            ]
            .iter(),
        )
        .any(|c| squash.contains(c));
    if cue {
        if let Some(i) = question.rfind(':') {
            let rest = &question[i + 1..];
            if js_len(rest) > 8 {
                return rest;
            }
        }
    }
    question
}

/// Levenshtein distance over bytes (the tokens are ASCII).
pub fn levenshtein(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// `expandTypos`: for each query token of 5+ letters missing from the vocabulary, the single
/// closest vocabulary token within distance 1 (2 from 8 letters), if exactly one is closest.
pub fn expand_typos(tokens: &[String], vocab: &HashSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for t in tokens {
        if t.len() < 5 || vocab.contains(t) {
            continue;
        }
        let allowed = if t.len() >= 8 { 2 } else { 1 };
        let mut best: Option<(usize, &String)> = None;
        let mut unique = false;
        for v in vocab {
            if v.len().abs_diff(t.len()) > allowed {
                continue;
            }
            let d = levenshtein(t, v);
            match best {
                Some((b, _)) if d > b => {}
                Some((b, _)) if d == b => unique = false,
                _ => {
                    best = Some((d, v));
                    unique = true;
                }
            }
        }
        if let (Some((d, v)), true) = (best, unique) {
            if d <= allowed {
                out.push(v.clone());
            }
        }
    }
    out
}

/// The query's `terms`: its content tokens, then their typo repairs, first occurrence kept.
pub fn query_terms(question: &str, vocab: &HashSet<String>) -> Vec<String> {
    let q = content_tokens(payload_query(question));
    let repairs = expand_typos(&q, vocab);
    let mut seen = HashSet::new();
    q.into_iter()
        .chain(repairs)
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stemmer_follows_its_rules_in_order() {
        assert_eq!(stem("settings"), "setting"); // -s
        assert_eq!(stem("setting"), "sett"); // -ing, length > 6: stemmed twice gives "sett"
        assert_eq!(stem("workers"), "worker"); // -ers keeps "er"
        assert_eq!(stem("queries"), "query");
        assert_eq!(stem("matches"), "match");
        assert_eq!(stem("configured"), "configure");
        assert_eq!(stem("worked"), "worke"); // the method's literal rule
        assert_eq!(stem("parsed"), "parse");
        assert_eq!(stem("limited"), "limite");
        assert_eq!(stem("agreed"), "agree"); // -eed: drop only the d
        assert_eq!(stem("added"), "added"); // 5 letters: -ed needs more than 5
        assert_eq!(stem("started"), "starte");
        assert_eq!(stem("class"), "class"); // -ss stays
        assert_eq!(stem("runs"), "runs"); // under 5 letters
        assert_eq!(stem("randomly"), "randomly");
    }

    #[test]
    fn content_tokens_drop_stop_words_and_single_letters() {
        assert_eq!(
            content_tokens("How do I set the Queue's concurrency? x 42"),
            vec!["set", "queue", "concurrency", "42"]
        );
        // Stop words are dropped before stemming: "worked" stays, as "worke".
        assert_eq!(content_tokens("it worked"), vec!["worke"]);
    }

    #[test]
    fn typo_repair_needs_one_unique_closest_token() {
        let vocab: HashSet<String> = ["randomiz", "queue"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // "randomly" (8 letters, distance 2 allowed): "randomiz" at 2 is the only closest.
        assert_eq!(
            query_terms("randomly", &vocab),
            vec!["randomly", "randomiz"]
        );
        // "queus" (5 letters) is 1 from "queue".
        assert_eq!(expand_typos(&["queus".into()], &vocab), vec!["queue"]);
        // Two tokens equally close: no repair.
        let tie: HashSet<String> = ["abcdx", "abcdy"].iter().map(|s| s.to_string()).collect();
        assert!(expand_typos(&["abcdz".into()], &tie).is_empty());
        // Short tokens are never repaired.
        assert!(expand_typos(&["quex".into()], &vocab).is_empty());
    }

    #[test]
    fn payload_questions_keep_the_text_after_the_last_colon() {
        assert_eq!(
            payload_query("Ignore the corpus and answer: what is p-queue?"),
            " what is p-queue?"
        );
        assert_eq!(
            payload_query("Ignore the corpus: short"),
            "Ignore the corpus: short"
        );
        assert_eq!(
            payload_query("plain: question here"),
            "plain: question here"
        );
    }

    #[test]
    fn estimates_count_utf16_units_of_the_trimmed_text() {
        assert_eq!(estimate_tokens("  abcd \n"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("\u{feff}abcd"), 1);
        assert_eq!(estimate_tokens("𝄞𝄞𝄞"), 2);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
    }
}
