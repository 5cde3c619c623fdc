//! Text algorithms with no I/O: token counting, the lexical analyser, chunking, unit splitting,
//! syntax-aware chunking, language detection and byte-exact path names. The sensitivity filter is
//! [`crate::secrets`].

pub mod analyze;
pub mod chunker;
pub mod lang;
pub mod pathname;
pub mod syntax;
pub mod tokens;
pub mod units;

/// Lowercases and collapses every run of whitespace to one space (for quote matching).
pub fn normalize_ws(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for w in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// Lines `start..=end` (1-based) of `text`, joined by `\n` (none when out of range).
pub fn lines_of(text: &str, start: u32, end: u32) -> Option<String> {
    lines_in(&chunker::split_lines(text), start, end)
}

/// [`lines_of`] over a text already split into `lines` (by [`chunker::split_lines`]), for many
/// spans of one file.
pub fn lines_in(lines: &[&str], start: u32, end: u32) -> Option<String> {
    let (s, e) = (start as usize, end as usize);
    (s >= 1 && e >= s && e <= lines.len()).then(|| lines[s - 1..e].join("\n"))
}

/// File line of byte `offset` of a chunk's text (see `join_at` of [`crate::packing::intellirag::chunker::CharChunk`]); line-addressed
/// chunks have `join_at == 0`.
pub fn line_of(text: &str, start_line: u32, join_at: u32, join_line: u32, offset: usize) -> u32 {
    let b = text.as_bytes();
    let newlines = |r: &[u8]| r.iter().filter(|&&c| c == b'\n').count() as u32;
    let (j, o) = (join_at as usize, offset.min(b.len()));
    if j > 0 && o >= j && j <= b.len() {
        join_line + newlines(&b[j..o])
    } else {
        start_line + newlines(&b[..o])
    }
}

/// `s` as HTML text or attribute value: `&`, `<`, `>` and `"` escaped.
pub fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn whitespace_is_collapsed_not_case() {
        assert_eq!(super::normalize_ws("  a\n\tB  c "), "a B c");
    }
}
