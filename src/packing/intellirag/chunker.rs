//! IntelliRAG's recursive character chunker (`chunkDocument`, kind "prose", 512 tokens, 25 of
//! overlap) with its heading-path label, made line-addressed: each chunk also carries the file
//! lines it spans and where its overlap prefix ends, so every byte of its text maps to a line.

use super::text::{estimate_tokens, js_len, js_trim};

/// Target piece size: 512 tokens × 4 characters (UTF-16 units).
const TARGET: usize = 2048;
/// Characters of the previous piece repeated at the start of the next (25 tokens × 4).
const OVERLAP: usize = 100;
const SEPARATORS: [&str; 7] = ["\n## ", "\n### ", "\n#### ", "\n\n", "\n", ". ", " "];

/// One chunk: IntelliRAG's text, and the file lines it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct CharChunk {
    pub text: String,
    /// 1-based, inclusive: from the first line of the overlap to the last line of the piece.
    pub start_line: u32,
    pub end_line: u32,
    /// Byte offset in `text` just after the `\n` that joins the overlap to the piece (0: none).
    pub join_at: u32,
    /// File line of the byte at `join_at`.
    pub join_line: u32,
    /// Heading path (` > `-joined), empty when the chunk has none.
    pub heading: String,
    pub tokens: u32,
}

/// Byte offset of the point `units` UTF-16 units into `s` (rounded down to a character).
fn at_units(s: &str, units: usize) -> usize {
    let mut n = 0;
    for (i, c) in s.char_indices() {
        if n + c.len_utf16() > units {
            return i;
        }
        n += c.len_utf16();
    }
    s.len()
}

/// Splits `text[r]` on `sep`, keeping the separator at the start of each following piece and
/// dropping empty pieces. Returns byte ranges of `text`.
fn split_keep(text: &str, r: (usize, usize), sep: &str) -> Vec<(usize, usize)> {
    let s = &text[r.0..r.1];
    let mut cuts: Vec<usize> = s.match_indices(sep).map(|(i, _)| i).collect();
    cuts.push(s.len());
    let mut out = Vec::new();
    let mut from = 0;
    for c in cuts {
        if c > from {
            out.push((r.0 + from, r.0 + c));
        }
        from = c;
    }
    out
}

/// The recursive split: greedy buffers of pieces up to the target, oversize pieces split again
/// with the remaining separators, fixed slices when none is left.
fn split_recursive(text: &str, r: (usize, usize), seps: &[&str], out: &mut Vec<(usize, usize)>) {
    if js_len(&text[r.0..r.1]) <= TARGET {
        out.push(r);
        return;
    }
    let Some((sep, rest)) = seps.split_first() else {
        let mut from = r.0;
        while from < r.1 {
            let to = from + at_units(&text[from..r.1], TARGET).max(1);
            out.push((from, to.min(r.1)));
            from = to;
        }
        return;
    };
    let mut buf: Option<(usize, usize)> = None;
    for p in split_keep(text, r, sep) {
        if let Some(b) = buf {
            if js_len(&text[b.0..p.1]) <= TARGET {
                buf = Some((b.0, p.1));
                continue;
            }
            out.push(b);
            buf = None;
        }
        if js_len(&text[p.0..p.1]) > TARGET {
            split_recursive(text, p, rest, out);
        } else {
            buf = Some(p);
        }
    }
    if let Some(b) = buf {
        out.push(b);
    }
}

/// A heading line: 1–4 `#`, white space, the rest of the line (fenced comments included).
fn heading_of(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    if !(1..=4).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    let title = rest.trim();
    (rest.starts_with(|c: char| c.is_whitespace()) && !title.is_empty()).then_some((level, title))
}

/// Chunks one file's text.
pub fn chunk_chars(original: &str) -> Vec<CharChunk> {
    // Normalise as IntelliRAG does (CRLF → LF, trim), keeping how many lines the trim removed.
    let crlf = original.replace("\r\n", "\n");
    let text = js_trim(&crlf);
    let lead = text.as_ptr() as usize - crlf.as_ptr() as usize;
    let first_line = 1 + crlf[..lead].matches('\n').count() as u32;
    if text.is_empty() {
        return Vec::new();
    }
    // Line of each byte offset of `text`.
    let mut line_starts = vec![0usize];
    line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
    let line_at =
        |o: usize| first_line + (line_starts.partition_point(|&s| s <= o) as u32).saturating_sub(1);

    let mut pieces = Vec::new();
    split_recursive(text, (0, text.len()), &SEPARATORS, &mut pieces);
    // Merge a small piece's successor into it while the pair stays under 1.15 × 512 tokens.
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for p in pieces {
        match merged.last_mut() {
            Some(m)
                if (estimate_tokens(&text[m.0..m.1]) as f64) < 0.4 * 512.0
                    && (estimate_tokens(&text[m.0..p.1]) as f64) <= 1.15 * 512.0 =>
            {
                m.1 = p.1;
            }
            _ => merged.push(p),
        }
    }

    // Heading path of each merged piece, as it stood after the piece's first heading.
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut labels = Vec::with_capacity(merged.len());
    for m in &merged {
        let mut label = None;
        for line in text[m.0..m.1].split('\n') {
            if let Some((level, title)) = heading_of(line) {
                stack.retain(|(l, _)| *l < level);
                stack.push((level, title.to_string()));
                if label.is_none() {
                    label = Some(stack.clone());
                }
            }
        }
        let path = label.unwrap_or_else(|| stack.clone());
        labels.push(
            path.iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(" > "),
        );
    }

    let mut out = Vec::new();
    for (i, m) in merged.iter().enumerate() {
        let body = &text[m.0..m.1];
        let body_trimmed = js_trim(body);
        let body_start = body_trimmed.as_ptr() as usize - text.as_ptr() as usize;
        let tail = if i == 0 {
            ""
        } else {
            let p = merged[i - 1];
            let prev = &text[p.0..p.1];
            let from = p.0 + at_units(prev, js_len(prev).saturating_sub(OVERLAP));
            js_trim(&text[from..p.1])
        };
        let (chunk_text, start_line, join_at, join_line) = if tail.is_empty() {
            (body_trimmed.to_string(), line_at(body_start), 0, 0)
        } else if body_trimmed.is_empty() {
            let tail_at = tail.as_ptr() as usize - text.as_ptr() as usize;
            (tail.to_string(), line_at(tail_at), 0, 0)
        } else {
            let tail_at = tail.as_ptr() as usize - text.as_ptr() as usize;
            let joined = format!("{tail}\n{body}");
            let t = js_trim(&joined).to_string();
            let join_at = tail.len() + 1;
            (t, line_at(tail_at), join_at as u32, line_at(m.0))
        };
        if chunk_text.is_empty() {
            continue;
        }
        let end_line = if body_trimmed.is_empty() {
            start_line + chunk_text.matches('\n').count() as u32
        } else {
            line_at(body_start + body_trimmed.len() - 1)
        };
        out.push(CharChunk {
            tokens: estimate_tokens(&chunk_text) as u32,
            text: chunk_text,
            start_line,
            end_line,
            join_at,
            join_line,
            heading: labels[i].clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::chunker::split_lines;
    use crate::text::line_of;

    /// Every line of every chunk's text is (a trimmed part of) the file line it maps to.
    fn check_lines(file: &str, chunks: &[CharChunk]) {
        let lines = split_lines(file);
        for c in chunks {
            let mut at = 0;
            for l in c.text.split('\n') {
                let n = line_of(&c.text, c.start_line, c.join_at, c.join_line, at);
                let src = lines[n as usize - 1];
                assert!(
                    src.replace('\r', "").contains(l.trim()),
                    "chunk line {l:?} is not in file line {n}: {src:?}"
                );
                assert!(n >= c.start_line && n <= c.end_line, "{n} outside the span");
                at += l.len() + 1;
            }
        }
    }

    fn readme(sections: usize, para: usize) -> String {
        let mut s = String::from("\r\n# Title\r\n\r\nIntro line.\r\n");
        for i in 0..sections {
            s.push_str(&format!("\n## Section {i}\n\n"));
            for j in 0..para {
                s.push_str(&format!(
                    "Paragraph {j} of section {i} says something about option_{i}_{j}. It goes on for a while to fill the chunk.\n\n"
                ));
            }
            s.push_str("### Sub\n\n```sh\n#### a comment counts\nnpm install x\n```\n");
        }
        s
    }

    #[test]
    fn small_files_are_one_chunk_with_the_first_heading_path() {
        let c = chunk_chars("\n\n# A\n\n## B\ntext\n");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].text, "# A\n\n## B\ntext");
        assert_eq!((c[0].start_line, c[0].end_line), (3, 6));
        // The label is the stack right after the piece's first heading.
        assert_eq!(c[0].heading, "A");
        assert_eq!(c[0].tokens, 4);
    }

    #[test]
    fn large_files_split_at_headings_with_100_characters_of_overlap() {
        let file = readme(6, 12);
        let chunks = chunk_chars(&file);
        assert!(chunks.len() > 3, "{}", chunks.len());
        for w in chunks.windows(2) {
            // The next chunk starts with the (trimmed) last 100 characters of the previous
            // piece, then a line break.
            let j = w[1].join_at as usize;
            assert!(j > 0 && j <= 101, "{j}");
            assert_eq!(&w[1].text[j - 1..j], "\n");
            assert!(w[0].text.ends_with(&w[1].text[..j - 1]));
            // Pieces of a heading split start at their heading.
            assert!(w[1].tokens as usize <= 589 + 26, "{}", w[1].tokens);
        }
        assert!(chunks
            .iter()
            .any(|c| c.heading.starts_with("Title > Section")));

        check_lines(&file, &chunks);
    }

    #[test]
    fn oversize_lines_fall_back_to_sentences_words_and_slices() {
        let long = "Sentence one is here. ".repeat(200); // 4,400 characters on one line
        let word = "x".repeat(5000); // no separator at all
        let file = format!("{long}\n{word}\n");
        let chunks = chunk_chars(&file);
        assert!(chunks.iter().all(|c| js_len(&c.text) <= 2048 + 101));
        assert!(chunks.iter().any(|c| c.text.contains("Sentence one")));
        let xs: usize = chunks
            .iter()
            .map(|c| c.text[c.join_at as usize..].matches('x').count())
            .sum();
        assert_eq!(xs, 5000, "the slices cover the word once, overlap aside");
        check_lines(&file, &chunks);
    }

    #[test]
    fn any_byte_offset_maps_to_a_line() {
        // Offsets inside a multi-byte character (the last byte of "¯" here) are fine.
        let text = "a ¯\nb\nc ペ";
        assert_eq!(line_of(text, 10, 0, 0, 3), 10);
        assert_eq!(line_of(text, 10, 0, 0, text.len() - 1), 12);
        // After the join, lines count from the join's line.
        assert_eq!(line_of(text, 10, 6, 40, 7), 41);
        assert_eq!(line_of(text, 10, 6, 40, 2), 10);
    }

    #[test]
    fn heading_paths_pop_deeper_levels() {
        let mut file = String::new();
        // A shell comment in a fence counts as a heading, as in IntelliRAG.
        for (h, n) in [
            ("# A", 1),
            ("## B", 1),
            ("### C", 1),
            ("## D", 1),
            ("```\n# E\n```", 1),
        ] {
            file.push_str(h);
            file.push('\n');
            for _ in 0..n {
                file.push_str(&"word ".repeat(500));
                file.push('\n');
            }
        }
        let chunks = chunk_chars(&file);
        let labels: Vec<&str> = chunks.iter().map(|c| c.heading.as_str()).collect();
        assert!(labels.contains(&"A > B > C"), "{labels:?}");
        assert!(labels.contains(&"A > D"), "{labels:?}");
        assert!(labels.contains(&"E"), "{labels:?}");
        check_lines(&file, &chunks);
    }
}
