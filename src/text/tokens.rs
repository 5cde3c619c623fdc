//! Token counting for chunk sizes and budgets: a fast built-in approximation, or a real Hugging
//! Face tokenizer when the pipeline names one.

use crate::error::{Error, Result};
use std::path::Path;

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

impl TokenCounter {
    /// `approx`, `chars4`, or the path of a tokenizer.json.
    pub fn from_setting(setting: &str, root: &Path) -> Result<TokenCounter> {
        match setting {
            "approx" => return Ok(TokenCounter::Approx),
            "chars4" => return Ok(TokenCounter::Chars4),
            _ => {}
        }
        let path = root.join(setting);
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
        assert_eq!(
            TokenCounter::from_setting("chars4", root)
                .unwrap()
                .count("hello world"),
            3
        );
    }
}
