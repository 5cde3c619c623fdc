//! Token counting for chunk sizes and budgets: a fast built-in approximation, or a real Hugging
//! Face tokenizer when the pipeline names one.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Counts tokens of a text.
pub enum TokenCounter {
    /// Each run of letters and digits costs ceil(len / 4) tokens (at least 1); every other
    /// non-space character costs 1. Close to BPE counts on English and code, and fast.
    Approx,
    /// IntelliRAG's estimate, for comparisons at its token counts: `max(1, ceil(n / 4))` where
    /// `n` is the length of the trimmed text in UTF-16 code units.
    Chars4,
    /// A Hugging Face `tokenizer.json`, special tokens excluded.
    Hf(Box<tokenizers::Tokenizer>),
}

/// `[pack] tokenizer`, parsed at load: which [`TokenCounter`] budgets count with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", from = "String")]
pub enum Tokenizer {
    /// [`TokenCounter::Approx`].
    Approx,
    /// [`TokenCounter::Chars4`].
    Chars4,
    /// A tokenizer.json, relative to the pipeline file's directory.
    File(PathBuf),
}

impl From<String> for Tokenizer {
    fn from(s: String) -> Tokenizer {
        match s.as_str() {
            "approx" => Tokenizer::Approx,
            "chars4" => Tokenizer::Chars4,
            _ => Tokenizer::File(PathBuf::from(s)),
        }
    }
}

impl From<Tokenizer> for String {
    fn from(t: Tokenizer) -> String {
        match t {
            Tokenizer::Approx => "approx".into(),
            Tokenizer::Chars4 => "chars4".into(),
            Tokenizer::File(p) => p.to_string_lossy().into_owned(),
        }
    }
}

impl TokenCounter {
    /// The counter a setting names; a tokenizer.json is read from `root`.
    pub fn from_setting(setting: &Tokenizer, root: &Path) -> Result<TokenCounter> {
        let file = match setting {
            Tokenizer::Approx => return Ok(TokenCounter::Approx),
            Tokenizer::Chars4 => return Ok(TokenCounter::Chars4),
            Tokenizer::File(file) => file,
        };
        let path = root.join(file);
        let mut t = tokenizers::Tokenizer::from_file(&path).map_err(|e| Error::model(&path, e))?;
        t.with_padding(None);
        t.with_truncation(None)
            .map_err(|e| Error::model(&path, e))?;
        Ok(TokenCounter::Hf(Box::new(t)))
    }

    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        match self {
            TokenCounter::Approx => approx_tokens(text),
            TokenCounter::Chars4 => chars4_tokens(text),
            TokenCounter::Hf(t) => t
                .encode_fast(text, false)
                .map(|e| e.len())
                .unwrap_or_else(|_| approx_tokens(text)),
        }
    }
}

/// IntelliRAG's `estimateTokens` (see [`TokenCounter::Chars4`]).
pub fn chars4_tokens(text: &str) -> usize {
    text.trim().encode_utf16().count().div_ceil(4).max(1)
}

/// The built-in approximate count (see [`TokenCounter::Approx`]).
pub fn approx_tokens(text: &str) -> usize {
    let mut n = 0;
    let mut run = 0usize;
    for c in text.chars() {
        if c.is_alphanumeric() {
            run += 1;
        } else {
            if run > 0 {
                n += run.div_ceil(4);
                run = 0;
            }
            if !c.is_whitespace() {
                n += 1;
            }
        }
    }
    if run > 0 {
        n += run.div_ceil(4);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approx_counts_words_and_punctuation() {
        assert_eq!(approx_tokens(""), 0);
        assert_eq!(approx_tokens("a bb ccccc"), 1 + 1 + 2);
        assert_eq!(approx_tokens("f(x);"), 1 + 1 + 1 + 1 + 1);
        assert_eq!(TokenCounter::Approx.count("hello world"), 4);
    }

    #[test]
    fn chars4_is_intellirags_estimate() {
        assert_eq!(chars4_tokens("  abcd  "), 1); // trimmed: 4 units
        assert_eq!(chars4_tokens("abcde"), 2);
        assert_eq!(chars4_tokens(""), 1); // max(1, 0), as the estimate is defined
                                          // UTF-16 code units: "é" is one, "𝄞" (outside the BMP) two.
        assert_eq!(chars4_tokens("éééé"), 1);
        assert_eq!(chars4_tokens("𝄞𝄞𝄞"), 2);
        let root = Path::new(".");
        let chars4 = Tokenizer::from("chars4".to_string());
        assert_eq!(
            TokenCounter::from_setting(&chars4, root)
                .unwrap()
                .count("hello world"),
            3
        );
    }

    #[test]
    fn the_setting_reads_and_writes_as_the_pipeline_spells_it() {
        for (text, want) in [
            ("approx", Tokenizer::Approx),
            ("chars4", Tokenizer::Chars4),
            (
                "models/x/tokenizer.json",
                Tokenizer::File("models/x/tokenizer.json".into()),
            ),
        ] {
            let t = Tokenizer::from(text.to_string());
            assert_eq!(t, want);
            assert_eq!(String::from(t), text);
        }
        let missing = Tokenizer::File("no/such/tokenizer.json".into());
        let err = TokenCounter::from_setting(&missing, Path::new("/nonexistent"))
            .err()
            .expect("a missing tokenizer.json is an error")
            .to_string();
        assert!(err.contains("no/such/tokenizer.json"), "{err}");
    }
}
