//! Token counting for chunk sizes and budgets: a fast built-in approximation, or a real Hugging
//! Face tokenizer when the pipeline names one.

use crate::error::{Error, Result};
use std::path::Path;

/// Counts tokens of a text.
pub enum TokenCounter {
    /// Each run of letters and digits costs ceil(len / 4) tokens (at least 1); every other
    /// non-space character costs 1. Close to BPE counts on English and code, and fast.
    Approx,
    /// A Hugging Face `tokenizer.json`, special tokens excluded.
    Hf(Box<tokenizers::Tokenizer>),
}

impl TokenCounter {
    /// `approx`, or the path of a tokenizer.json.
    pub fn from_setting(setting: &str, root: &Path) -> Result<TokenCounter> {
        if setting == "approx" {
            return Ok(TokenCounter::Approx);
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
            TokenCounter::Hf(t) => t
                .encode_fast(text, false)
                .map(|e| e.len())
                .unwrap_or_else(|_| approx_tokens(text)),
        }
    }
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
}
