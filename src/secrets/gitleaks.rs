//! Gitleaks' maintained rule set as data (`secrets/gitleaks.toml`, its default configuration, MIT
//! licence: see `secrets/NOTICE`), applied as Gitleaks applies it: a rule runs only on text that
//! holds one of its keywords; its secret is the rule's `secretGroup` (else the first group that
//! matched, else the whole match); a rule with `entropy` needs that many bits per character of
//! the secret; a rule's allowlists (regexes on the secret, the match or the line; stopwords) and
//! the global allowlist's regexes and stopwords pass a finding over. Path allowlists are not
//! applied: a file is scanned wherever it is, since nothing of it may reach an output. Patterns
//! are compiled as Go compiles them: `\w`, `\d`, `\s` and `\b` are ASCII (byte regexes without
//! Unicode classes).

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use std::sync::OnceLock;

/// Go's syntax where Rust's differs: a `{` that opens no repetition (`{{ var }}`) is a literal in
/// Go and an error in Rust, so it is escaped.
fn go_syntax(pattern: &str) -> String {
    let b = pattern.as_bytes();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut escaped = false;
    for (i, c) in pattern.char_indices() {
        if c == '{' && !escaped {
            let rest = &b[i + 1..];
            let digits = rest.iter().take_while(|x| x.is_ascii_digit()).count();
            let after = &rest[digits..];
            let more = after.first() == Some(&b',')
                && after[1..].iter().take_while(|x| x.is_ascii_digit()).count() + 1 < after.len()
                && after[1 + after[1..].iter().take_while(|x| x.is_ascii_digit()).count()] == b'}';
            let repetition = digits > 0 && (after.first() == Some(&b'}') || more);
            if !repetition {
                out.push_str("\\{");
                continue;
            }
        }
        escaped = c == '\\' && !escaped;
        out.push(c);
    }
    out
}

/// Compiles a pattern of the rule set with Go's (ASCII) classes.
fn compile(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(&go_syntax(pattern))
        .unicode(false)
        .size_limit(64 << 20)
        .build()
        .ok()
}

/// Rules of the set that ri-batch's own rules replace with a stricter form: Gitleaks'
/// `private-key` takes any 64 characters between the markers, so documentation that shows the
/// markers around `...` would be a key; ri-batch's own rule needs a key body.
const SUPERSEDED: &[&str] = &["private-key"];

/// A hash of the rule set as shipped: part of the scan's key, so a new rule set rescans.
pub fn version() -> String {
    crate::artifact::sha256_hex(RULES_TOML.as_bytes())[..16].to_string()
}

/// The rule set, as shipped.
const RULES_TOML: &str = include_str!("rules/gitleaks.toml");

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    allowlist: Option<RawAllowlist>,
    rules: Vec<RawRule>,
}

#[derive(Deserialize, Default)]
struct RawAllowlist {
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default, rename = "regexTarget")]
    regex_target: Option<String>,
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
}

#[derive(Deserialize)]
struct RawRule {
    id: String,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default, rename = "secretGroup")]
    secret_group: Option<usize>,
    #[serde(default)]
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    allowlists: Vec<RawAllowlist>,
}

/// What an allowlist regex is matched against.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    Secret,
    Match,
    Line,
}

/// One allowlist: a finding it covers is not a secret.
struct Allowlist {
    regexes: Vec<Regex>,
    stopwords: Vec<String>,
    target: Target,
    /// Every given criterion must hold (`condition = "AND"`), else any one.
    all: bool,
    /// Criteria this engine does not apply (paths): an AND list with one never holds.
    has_paths: bool,
}

impl Allowlist {
    fn of(raw: RawAllowlist) -> Option<Allowlist> {
        let regexes = raw
            .regexes
            .iter()
            .map(|r| compile(r))
            .collect::<Option<Vec<_>>>()?;
        Some(Allowlist {
            regexes,
            stopwords: raw.stopwords.iter().map(|s| s.to_lowercase()).collect(),
            target: match raw.regex_target.as_deref() {
                Some("match") => Target::Match,
                Some("line") => Target::Line,
                _ => Target::Secret,
            },
            all: raw.condition.as_deref() == Some("AND"),
            has_paths: !raw.paths.is_empty(),
        })
    }

    fn covers(&self, secret: &[u8], whole: &[u8], line: &[u8]) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => whole,
            Target::Line => line,
        };
        let lower = String::from_utf8_lossy(secret).to_lowercase();
        let by_regex =
            (!self.regexes.is_empty()).then(|| self.regexes.iter().any(|r| r.is_match(target)));
        let by_word = (!self.stopwords.is_empty())
            .then(|| self.stopwords.iter().any(|w| lower.contains(w.as_str())));
        let given: Vec<bool> = [by_regex, by_word].into_iter().flatten().collect();
        if self.all {
            !self.has_paths && !given.is_empty() && given.iter().all(|&b| b)
        } else {
            given.iter().any(|&b| b)
        }
    }
}

/// One compiled rule.
pub struct Rule {
    pub id: String,
    /// The pattern as compiled (Go syntax made Rust's).
    pub pattern: String,
    /// Whether the rule applies to files of some names only.
    pub path_only: bool,
    regex: Regex,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    keywords: Vec<String>,
    path: Option<Regex>,
    allowlists: Vec<Allowlist>,
}

/// The compiled rule set: its rules, the global allowlist, and the rules that did not compile
/// under Rust's regex syntax (their ids; a test keeps this empty).
pub struct RuleSet {
    pub rules: Vec<Rule>,
    global: Option<Allowlist>,
    pub skipped: Vec<String>,
    /// Every rule's keywords, found in one pass over a text (ASCII case ignored).
    keywords: aho_corasick::AhoCorasick,
    /// Per keyword of `keywords`, the rules it wakes.
    wakes: Vec<Vec<usize>>,
}

/// Shannon entropy of `s`, in bits per byte.
pub fn entropy(s: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &b in s {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// The rule set, compiled once.
pub fn rule_set() -> &'static RuleSet {
    static SET: OnceLock<RuleSet> = OnceLock::new();
    SET.get_or_init(|| {
        let raw: RawConfig = toml::from_str(RULES_TOML).expect("the bundled rule set parses");
        let mut rules = Vec::new();
        let mut skipped = Vec::new();
        for r in raw.rules {
            // A rule of paths alone (a key file's name) is the path filter's work.
            let Some(pattern) = &r.regex else {
                continue;
            };
            if SUPERSEDED.contains(&r.id.as_str()) {
                continue;
            }
            let compiled = compile(pattern).and_then(|regex| {
                let path = match &r.path {
                    Some(p) => Some(compile(p)?),
                    None => None,
                };
                let allowlists = r
                    .allowlists
                    .into_iter()
                    .map(Allowlist::of)
                    .collect::<Option<Vec<_>>>()?;
                Some((regex, path, allowlists))
            });
            match compiled {
                Some((regex, path, allowlists)) => rules.push(Rule {
                    id: r.id,
                    pattern: go_syntax(pattern),
                    path_only: path.is_some(),
                    regex,
                    secret_group: r.secret_group,
                    entropy: r.entropy,
                    keywords: r.keywords.iter().map(|k| k.to_lowercase()).collect(),
                    path,
                    allowlists,
                }),
                None => skipped.push(r.id),
            }
        }
        // A provider's own rule names a finding better than the generic ones: they go last.
        rules.sort_by_key(|r: &Rule| r.id.starts_with("generic"));
        let global = raw.allowlist.and_then(|mut a| {
            a.paths.clear();
            Allowlist::of(a)
        });
        let mut words: Vec<String> = Vec::new();
        let mut wakes: Vec<Vec<usize>> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            for k in &r.keywords {
                match words.iter().position(|w| w == k) {
                    Some(at) => wakes[at].push(i),
                    None => {
                        words.push(k.clone());
                        wakes.push(vec![i]);
                    }
                }
            }
        }
        let keywords = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(&words)
            .expect("keywords build");
        RuleSet {
            rules,
            global,
            skipped,
            keywords,
            wakes,
        }
    })
}

/// The line of `text` around byte range `start..end`.
fn line_of(text: &[u8], start: usize, end: usize) -> &[u8] {
    let s = text[..start]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let e = text[end..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |i| end + i);
    &text[s..e]
}

/// Whether `path` is a program's source, by its extension: there a generic rule's value is a
/// secret only as a string literal (`KEY_MAX: key_attributes` is a type, not a key).
pub(crate) fn is_code(path: Option<&str>) -> bool {
    let Some(p) = path else { return false };
    let ext = p
        .rsplit_once('.')
        .map_or("", |(_, e)| e)
        .to_ascii_lowercase();
    matches!(
        ext.as_str(),
        "rs" | "py"
            | "pyi"
            | "js"
            | "jsx"
            | "mjs"
            | "ts"
            | "tsx"
            | "go"
            | "java"
            | "kt"
            | "scala"
            | "c"
            | "h"
            | "cc"
            | "cpp"
            | "hpp"
            | "cs"
            | "rb"
            | "php"
            | "swift"
            | "m"
            | "lua"
            | "pl"
            | "sh"
            | "bash"
            | "zig"
            | "dart"
            | "ex"
            | "exs"
            | "erl"
            | "hs"
            | "ml"
            | "r"
    )
}

impl Rule {
    /// Whether the rule finds a secret in `text` (of the file at `path`, when known); its
    /// keywords were found already.
    fn finds(&self, text: &str, path: Option<&str>, global: Option<&Allowlist>) -> bool {
        let quoted_only = self.id.starts_with("generic") && is_code(path);
        if let (Some(p), Some(path)) = (&self.path, path) {
            if !p.is_match(path.as_bytes()) {
                return false;
            }
        } else if self.path.is_some() {
            return false;
        }
        let text = text.as_bytes();
        for c in self.regex.captures_iter(text) {
            let whole = c.get(0).expect("a match has group 0");
            let found = match self.secret_group {
                Some(g) => c.get(g),
                None => (1..c.len()).find_map(|g| c.get(g)),
            }
            .unwrap_or(whole);
            if quoted_only
                && !matches!(
                    text.get(found.start().wrapping_sub(1)),
                    Some(b'"' | b'\'' | b'`')
                )
            {
                continue;
            }
            let secret = found.as_bytes();
            if let Some(min) = self.entropy {
                if entropy(secret) < min {
                    continue;
                }
            }
            let line = line_of(text, whole.start(), whole.end());
            let allowed = self
                .allowlists
                .iter()
                .chain(global)
                .any(|a| a.covers(secret, whole.as_bytes(), line));
            if !allowed {
                return true;
            }
        }
        false
    }
}

/// The id of the first rule that finds a secret in `text`, if one does. `path` scopes the rules
/// that apply to some files only (`.tf`, `.yaml`, …); without it those rules are not run. The
/// keywords of every rule are found in one pass; a rule none of whose keywords is in the text is
/// not run.
pub fn find(text: &str, path: Option<&str>) -> Option<&'static str> {
    let set = rule_set();
    let mut awake = vec![false; set.rules.len()];
    for m in set.keywords.find_overlapping_iter(text) {
        for &r in &set.wakes[m.pattern().as_usize()] {
            awake[r] = true;
        }
    }
    set.rules
        .iter()
        .enumerate()
        .filter(|(i, r)| awake[*i] || r.keywords.is_empty())
        .find(|(_, r)| r.finds(text, path, set.global.as_ref()))
        .map(|(_, r)| r.id.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_of_the_set_compiles() {
        let set = rule_set();
        assert!(set.rules.len() >= 200, "{}", set.rules.len());
        assert!(
            set.skipped.is_empty(),
            "rules that did not compile: {:?}",
            set.skipped
        );
    }

    #[test]
    fn a_brace_that_opens_no_repetition_is_a_literal_as_in_go() {
        assert_eq!(go_syntax("a{2}b{1,3}c{2,}"), "a{2}b{1,3}c{2,}");
        assert_eq!(go_syntax("x{{[^}]+}}"), "x\\{\\{[^}]+}}");
        assert_eq!(go_syntax("\\{y"), "\\{y");
        assert!(compile(r"import[ \t]+{[ \t\w,]+}").is_some());
    }

    #[test]
    fn vendor_tokens_are_found_and_placeholders_are_not() {
        // Written for this test in each vendor's published format (none is a live credential).
        let found = [
            (
                "xoxb-2408276152-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
                "slack",
            ),
            ("glpat-Zx9Kq2Lm8Np4Rs7Tv1Wy", "gitlab"),
            (
                "dop_v1_4c8f2a1e9b7d3c6f5a2e8b1d4c7f0a3e6b9d2c5f8a1e4b7d0c3f6a9e2b5d8c1f",
                "digitalocean",
            ),
        ];
        for (text, vendor) in found {
            let id = find(&format!("token = \"{text}\"\n"), None);
            assert!(id.is_some_and(|i| i.contains(vendor)), "{text}: {id:?}");
        }
        for text in [
            "api_key = \"${API_KEY}\"",
            "password = \"abcdefghijklmnopqrstuvwxyz\"",
            "token = tokenizer.encode(text)",
            "let access = accessor.get_api_version();",
        ] {
            assert_eq!(find(text, None), None, "{text}");
        }
    }
}
