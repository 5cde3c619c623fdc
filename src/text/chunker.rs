//! Line-addressed chunking. Markdown splits at headings (the heading path is kept), code prefers
//! top-level and blank-line boundaries; anything too large is split by blocks, then by lines.
//! A chunk's text is exactly lines `start_line..=end_line` of the file joined by `\n`.

use crate::text::tokens::approx_tokens;
use std::ops::Range;

/// One chunk of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// 1-based, inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub heading: String,
    pub kind: &'static str,
    pub text: String,
    pub tokens: u32,
}

/// Splits `text` into lines exactly as the chunk text is rebuilt: on `\n`, keeping any `\r`,
/// without the empty piece after a final newline.
pub fn split_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    lines
}

/// A chunk's kind by its file's language: `markdown`, `code` or `text`.
pub fn kind_of(language: &str) -> &'static str {
    if language == "markdown" {
        "markdown"
    } else if crate::text::lang::is_code(language) {
        "code"
    } else {
        "text"
    }
}

struct Section {
    lines: Range<usize>,
    heading: String,
}

/// Chunks one file.
pub fn chunk_text(
    text: &str,
    language: &str,
    max_tokens: usize,
    overlap_lines: usize,
) -> Vec<Piece> {
    let lines = split_lines(text);
    let line_tokens: Vec<usize> = lines.iter().map(|l| approx_tokens(l)).collect();
    let markdown = language == "markdown";
    let kind = kind_of(language);
    let sections = if markdown {
        markdown_sections(&lines)
    } else {
        vec![Section {
            lines: 0..lines.len(),
            heading: String::new(),
        }]
    };
    let fenced = fence_mask(&lines);
    let mut out = Vec::new();
    for s in sections {
        let ctx = Ctx {
            lines: &lines,
            tokens: &line_tokens,
            fenced: &fenced,
            code: kind == "code",
        };
        let mut ranges = Vec::new();
        ctx.pack(ctx.units(s.lines.clone()), 0, max_tokens, &mut ranges);
        let mut prev_end: Option<usize> = None;
        for r in ranges {
            let mut start = r.start;
            if let Some(pe) = prev_end {
                if overlap_lines > 0 && pe == r.start {
                    start = r.start.saturating_sub(overlap_lines).max(s.lines.start);
                }
            }
            prev_end = Some(r.end);
            out.extend(piece(&lines, start..r.end, s.heading.clone(), kind));
        }
    }
    out
}

fn is_blank(l: &str) -> bool {
    l.trim().is_empty()
}

/// The chunk of lines `r` (0-based, end exclusive) without its leading and trailing blank
/// lines; none when nothing is left.
pub(crate) fn piece(
    lines: &[&str],
    r: Range<usize>,
    heading: String,
    kind: &'static str,
) -> Option<Piece> {
    let range = trim_blank(lines, r)?;
    let text = lines[range.clone()].join("\n");
    Some(Piece {
        start_line: range.start as u32 + 1,
        end_line: range.end as u32,
        heading,
        kind,
        tokens: approx_tokens(&text) as u32,
        text,
    })
}

/// The size of lines `r` in the chunkers' count: their tokens, plus one per eight line breaks.
pub(crate) fn span_cost(line_tokens: &[usize], r: &Range<usize>) -> usize {
    line_tokens[r.clone()].iter().sum::<usize>() + r.len().saturating_sub(1) / 8
}

fn trim_blank(lines: &[&str], mut r: Range<usize>) -> Option<Range<usize>> {
    while r.start < r.end && is_blank(lines[r.start]) {
        r.start += 1;
    }
    while r.end > r.start && is_blank(lines[r.end - 1]) {
        r.end -= 1;
    }
    (r.start < r.end).then_some(r)
}

fn is_fence(l: &str) -> bool {
    let t = l.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// True for lines inside (or delimiting) a fenced code block.
fn fence_mask(lines: &[&str]) -> Vec<bool> {
    let mut inside = false;
    lines
        .iter()
        .map(|l| {
            if is_fence(l) {
                inside = !inside;
                true
            } else {
                inside
            }
        })
        .collect()
}

/// A Markdown ATX heading's level and title.
pub fn heading_of(line: &str) -> Option<(usize, &str)> {
    let t = line.trim_end();
    let level = t.chars().take_while(|&c| c == '#').count();
    if (1..=6).contains(&level) && (t.len() == level || t[level..].starts_with(' ')) {
        Some((level, t[level..].trim().trim_end_matches('#').trim()))
    } else {
        None
    }
}

fn markdown_sections(lines: &[&str]) -> Vec<Section> {
    let fenced = fence_mask(lines);
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    let mut start = 0;
    let mut heading = String::new();
    for (i, l) in lines.iter().enumerate() {
        if fenced[i] {
            continue;
        }
        if let Some((level, title)) = heading_of(l) {
            if i > start {
                out.push(Section {
                    lines: start..i,
                    heading: heading.clone(),
                });
            }
            stack.retain(|(lv, _)| *lv < level);
            stack.push((level, title.to_string()));
            heading = stack
                .iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(" > ");
            start = i;
        }
    }
    if start < lines.len() {
        out.push(Section {
            lines: start..lines.len(),
            heading,
        });
    }
    out
}

struct Ctx<'a> {
    lines: &'a [&'a str],
    tokens: &'a [usize],
    fenced: &'a [bool],
    code: bool,
}

impl Ctx<'_> {
    fn cost(&self, r: &Range<usize>) -> usize {
        span_cost(self.tokens, r)
    }

    /// Blank-line separated blocks of `r` (blank lines inside fences do not separate).
    fn blocks(&self, r: Range<usize>) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut start = r.start;
        for i in r.clone() {
            if is_blank(self.lines[i]) && !self.fenced[i] {
                if i > start {
                    out.push(start..i + 1);
                }
                start = i + 1;
            }
        }
        if start < r.end {
            out.push(start..r.end);
        }
        if out.is_empty() {
            out.push(r);
        }
        out
    }

    /// Level-0 units: for code, runs of blocks starting at a top-level line; else the blocks.
    fn units(&self, r: Range<usize>) -> Vec<Range<usize>> {
        let blocks = self.blocks(r);
        if !self.code {
            return blocks;
        }
        let mut out: Vec<Range<usize>> = Vec::new();
        for b in blocks {
            let first = self.lines[b.clone()]
                .iter()
                .find(|l| !is_blank(l))
                .copied()
                .unwrap_or("");
            let top = !first.starts_with([' ', '\t', '}', ')', ']']);
            match out.last_mut() {
                Some(last) if !top => last.end = b.end,
                _ => out.push(b),
            }
        }
        out
    }

    /// Greedily merges `ranges` into chunks of at most `max` tokens, splitting any range that is
    /// too large one level down (units → blocks → lines).
    fn pack(
        &self,
        ranges: Vec<Range<usize>>,
        level: usize,
        max: usize,
        out: &mut Vec<Range<usize>>,
    ) {
        let mut cur: Option<Range<usize>> = None;
        for r in ranges {
            if self.cost(&r) > max && r.len() > 1 {
                if let Some(c) = cur.take() {
                    out.push(c);
                }
                // Go down until the range really splits: units → blocks → lines.
                let mut next = level;
                let children = loop {
                    let c = match next {
                        0 if self.code => self.blocks(r.clone()),
                        0 | 1 => r.clone().map(|i| i..i + 1).collect(),
                        _ => vec![r.clone()],
                    };
                    next = if next == 0 && self.code {
                        1
                    } else {
                        next.max(1) + 1
                    };
                    if c.len() > 1 || next > 2 {
                        break c;
                    }
                };
                if children.len() > 1 {
                    self.pack(children, next, max, out);
                } else {
                    out.push(r);
                }
                continue;
            }
            cur = match cur {
                Some(c) if self.cost(&(c.start..r.end)) <= max => Some(c.start..r.end),
                Some(c) => {
                    out.push(c);
                    Some(r)
                }
                None => Some(r),
            };
        }
        if let Some(c) = cur {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_exact(text: &str, pieces: &[Piece]) {
        let lines = split_lines(text);
        for p in pieces {
            let rebuilt = lines[p.start_line as usize - 1..p.end_line as usize].join("\n");
            assert_eq!(rebuilt, p.text);
        }
    }

    #[test]
    fn markdown_splits_at_headings_with_paths() {
        let md = "# Title\n\nintro\n\n## Install\n\n```sh\n# not a heading\n\nnpm i x\n```\n\n## Usage\n\nuse it\n\n### Deep\n\ndeeper\n";
        let p = chunk_text(md, "markdown", 500, 0);
        let heads: Vec<_> = p.iter().map(|c| c.heading.as_str()).collect();
        assert_eq!(
            heads,
            [
                "Title",
                "Title > Install",
                "Title > Usage",
                "Title > Usage > Deep"
            ]
        );
        assert_eq!((p[1].start_line, p[1].end_line), (5, 11));
        assert!(p[1].text.contains("# not a heading"));
        check_exact(md, &p);
    }

    #[test]
    fn large_code_prefers_top_level_boundaries_and_respects_max() {
        let mut src = String::new();
        for f in 0..12 {
            src.push_str(&format!(
                "function f{f}(a, b) {{\n  const x = a + b;\n\n  return x * {f};\n}}\n\n"
            ));
        }
        let p = chunk_text(&src, "javascript", 60, 0);
        assert!(p.len() > 1);
        for c in &p {
            assert!(c.tokens as usize <= 60, "{}", c.tokens);
            assert!(
                c.text.starts_with("function"),
                "chunk starts mid-function: {:?}",
                c.text
            );
            assert!(c.text.trim_end().ends_with('}'));
        }
        check_exact(&src, &p);
        let covered: u32 = p.iter().map(|c| c.end_line - c.start_line + 1).sum();
        assert!(covered >= 12 * 5);
    }

    #[test]
    fn overlap_repeats_lines_and_crlf_is_exact() {
        let text: String = (0..40)
            .map(|i| format!("line number {i} with words\r\n"))
            .collect();
        let p = chunk_text(&text, "text", 50, 2);
        assert!(p.len() > 2);
        assert_eq!(p[1].start_line, p[0].end_line - 1);
        check_exact(&text, &p);
        assert!(p[0].text.contains('\r'));
    }
}
