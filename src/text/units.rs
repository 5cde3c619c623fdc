//! Splits a chunk into the units sentence compaction packs: sentences of prose, list items,
//! table rows, headings, single code lines and, in chunks cut by syntax, whole statements (a
//! unit never ends inside brackets or a multi-line string); each with its exact line range and
//! text.

use crate::text::chunker::{heading_of, split_lines};

/// What a unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitKind {
    Heading,
    Sentence,
    ListItem,
    TableRow,
    CodeLine,
    /// A statement of a chunk cut by syntax: its lines up to where its brackets close.
    Statement,
}

/// A statement unit holds at most this many lines (an unbalanced bracket does not swallow the
/// rest of the chunk).
const MAX_STATEMENT_LINES: usize = 40;

/// Bracket depth and open multi-line string or comment after one line of code, from the state
/// before it. `(` and `[` nest (a statement continues while they are open); `{` opens a block,
/// whose lines are units of their own. Quotes on one line and `//` or `#` comments are skipped.
fn scan_line(
    line: &str,
    mut depth: i32,
    mut open: Option<&'static str>,
) -> (i32, Option<&'static str>) {
    // Byte-wise: every delimiter is ASCII, and no slice is taken inside a character.
    let b = line.as_bytes();
    let find = |from: usize, pat: &[u8]| b[from..].windows(pat.len()).position(|w| w == pat);
    let mut i = 0;
    while i < b.len() {
        if let Some(close) = open {
            match find(i, close.as_bytes()) {
                Some(k) => {
                    i += k + close.len();
                    open = None;
                    continue;
                }
                None => return (depth, open),
            }
        }
        let rest = &b[i..];
        if rest.starts_with(b"\"\"\"") || rest.starts_with(b"'''") {
            open = Some(if rest[0] == b'"' { "\"\"\"" } else { "'''" });
            i += 3;
            continue;
        }
        if rest.starts_with(b"/*") {
            open = Some("*/");
            i += 2;
            continue;
        }
        let hash = rest[0] == b'#' && !rest.starts_with(b"#[") && !rest.starts_with(b"#!");
        if rest.starts_with(b"//") || hash {
            break;
        }
        match b[i] {
            b'"' | b'\'' | b'`' => {
                // A quoted run closed on this line is skipped (escapes honoured); an unclosed one,
                // or a lone `'` (a Rust lifetime), is an ordinary character.
                let q = b[i];
                let mut k = i + 1;
                while k < b.len() && b[k] != q {
                    k += if b[k] == b'\\' { 2 } else { 1 };
                }
                if k < b.len() {
                    i = k;
                }
            }
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = (depth - 1).max(0),
            _ => {}
        }
        i += 1;
    }
    (depth, open)
}

/// One unit of a chunk. `text` is an exact substring of the chunk text.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    /// 1-based, inclusive, in file lines.
    pub start_line: u32,
    pub end_line: u32,
    pub kind: UnitKind,
    /// Heading path in force at this unit (the chunk's, extended by headings inside it).
    pub heading: String,
    pub text: String,
}

impl Unit {
    /// Whether the unit introduces the one after it: a heading, a line ending in `:` ("You need
    /// to escape special characters:") or a comment line of code ("// Get previous date").
    pub fn introduces(&self) -> bool {
        let t = self.text.trim();
        let comment = matches!(self.kind, UnitKind::CodeLine | UnitKind::Statement)
            && (t.starts_with("//") || t.starts_with('#') || t.starts_with("/*"));
        self.kind == UnitKind::Heading || t.ends_with(':') || comment
    }
}

fn is_list_item(line: &str) -> bool {
    let t = line.trim_start();
    if t.starts_with("- ") || t.starts_with("* ") || t.starts_with("+ ") {
        return true;
    }
    let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && (t[digits..].starts_with(". ") || t[digits..].starts_with(") "))
}

fn is_table_separator(line: &str) -> bool {
    let t = line.trim();
    t.starts_with('|') && t.chars().all(|c| "|-: ".contains(c))
}

/// A unit of lines `s..=e` (0-based within the chunk whose first line is `first_line`).
fn unit_at(
    first_line: u32,
    (s, e): (usize, usize),
    kind: UnitKind,
    heading: &str,
    text: &str,
) -> Unit {
    Unit {
        start_line: first_line + s as u32,
        end_line: first_line + e as u32,
        kind,
        heading: heading.to_string(),
        text: text.to_string(),
    }
}

/// A syntax chunk's statements: a line and those its open brackets or strings carry on to (at
/// most [`MAX_STATEMENT_LINES`]).
fn statement_units(lines: &[&str], first_line: u32, heading: &str) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim().is_empty() {
            i += 1;
            continue;
        }
        let (mut depth, mut open) = scan_line(lines[i], 0, None);
        let mut j = i;
        while (depth > 0 || open.is_some())
            && j + 1 < lines.len()
            && j + 1 - i < MAX_STATEMENT_LINES
        {
            j += 1;
            (depth, open) = scan_line(lines[j], depth, open);
        }
        let text = lines[i..=j].join("\n");
        out.push(unit_at(
            first_line,
            (i, j),
            UnitKind::Statement,
            heading,
            text.trim_end(),
        ));
        i = j + 1;
    }
    out
}

/// A code chunk's non-blank lines, one unit each.
fn line_units(lines: &[&str], first_line: u32, heading: &str) -> Vec<Unit> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            unit_at(
                first_line,
                (i, i),
                UnitKind::CodeLine,
                heading,
                l.trim_end(),
            )
        })
        .collect()
}

/// Splits a chunk (`text`, first line `first_line`, chunk kind `kind`) into units.
pub fn split_units(text: &str, first_line: u32, kind: &str, heading: &str) -> Vec<Unit> {
    let lines = split_lines(text);
    let mut out = Vec::new();
    let mut heading = heading.to_string();
    let unit = |s: usize, e: usize, kind: UnitKind, heading: &str, text: &str| {
        unit_at(first_line, (s, e), kind, heading, text)
    };
    if kind == "syntax" {
        return statement_units(&lines, first_line, &heading);
    }
    if kind == "code" {
        return line_units(&lines, first_line, &heading);
    }
    let mut i = 0;
    let mut in_fence = false;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            i += 1;
            continue;
        }
        if in_fence {
            if !l.trim().is_empty() {
                out.push(unit(i, i, UnitKind::CodeLine, &heading, l.trim_end()));
            }
            i += 1;
            continue;
        }
        if l.trim().is_empty() || is_table_separator(l) {
            i += 1;
            continue;
        }
        if let Some((_, title)) = heading_of(l) {
            // The chunk's heading path already ends with its first heading; deeper ones extend it.
            if !heading.ends_with(title) {
                heading = if heading.is_empty() {
                    title.to_string()
                } else {
                    format!("{heading} > {title}")
                };
            }
            out.push(unit(i, i, UnitKind::Heading, &heading, l.trim_end()));
            i += 1;
            continue;
        }
        if t.starts_with('|') {
            out.push(unit(i, i, UnitKind::TableRow, &heading, l.trim_end()));
            i += 1;
            continue;
        }
        if is_list_item(l) {
            let indent = l.len() - t.len();
            let mut j = i + 1;
            while j < lines.len() {
                let n = lines[j];
                let nt = n.trim_start();
                let continues = !n.trim().is_empty()
                    && (n.len() - nt.len()) > indent
                    && !is_list_item(n)
                    && !nt.starts_with("```");
                if !continues {
                    break;
                }
                j += 1;
            }
            let joined = lines[i..j].join("\n");
            out.push(unit(i, j - 1, UnitKind::ListItem, &heading, joined.trim()));
            i = j;
            continue;
        }
        // A paragraph: consecutive plain lines, split into sentences.
        let mut j = i + 1;
        while j < lines.len() {
            let n = lines[j];
            let nt = n.trim_start();
            if n.trim().is_empty()
                || heading_of(n).is_some()
                || is_list_item(n)
                || nt.starts_with('|')
                || nt.starts_with("```")
                || nt.starts_with("~~~")
            {
                break;
            }
            j += 1;
        }
        let para = lines[i..j].join("\n");
        for (s, e) in sentence_spans(&para) {
            let sentence = para[s..e].trim();
            if sentence.is_empty() {
                continue;
            }
            let first = i + para[..s].matches('\n').count();
            let last = i + para[..e].trim_end().matches('\n').count();
            out.push(unit(first, last, UnitKind::Sentence, &heading, sentence));
        }
        i = j;
    }
    out
}

const ABBREVIATIONS: &[&str] = &[
    "e.g", "i.e", "etc", "vs", "cf", "mr", "dr", "approx", "no", "fig", "eg", "ie",
];

/// Byte spans of the sentences of a paragraph. Splits after `.`, `!` or `?` followed by
/// whitespace and a capital, digit, quote, backtick or bracket; not inside backticks, nor after a
/// known abbreviation.
pub fn sentence_spans(p: &str) -> Vec<(usize, usize)> {
    let bytes = p.as_bytes();
    let mut spans = Vec::new();
    let mut start = 0;
    let mut ticks = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'`' {
            ticks += 1;
        } else if ticks.is_multiple_of(2) && matches!(c, b'.' | b'!' | b'?') {
            let mut k = i + 1;
            while k < bytes.len() && matches!(bytes[k], b')' | b'"' | b'\'' | b'*' | b'_') {
                k += 1;
            }
            let ws_end = p[k..]
                .find(|ch: char| !ch.is_whitespace())
                .map(|o| k + o)
                .unwrap_or(p.len());
            let next = p[ws_end..].chars().next();
            let boundary = ws_end > k
                && next.is_some_and(|n| {
                    n.is_uppercase() || n.is_ascii_digit() || "`\"'[(*_".contains(n)
                });
            let word = p[start..i]
                .rsplit(|ch: char| ch.is_whitespace() || ch == '(')
                .next()
                .unwrap_or("");
            let abbrev = c == b'.'
                && (ABBREVIATIONS.contains(&word.to_lowercase().as_str())
                    || (word.len() == 1 && word.chars().all(|ch| ch.is_ascii_uppercase())));
            if boundary && !abbrev {
                spans.push((start, k));
                start = ws_end;
                i = ws_end;
                continue;
            }
        }
        i += 1;
    }
    if start < p.len() {
        spans.push((start, p.len()));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_respect_abbreviations_and_code() {
        let p = "Parse a string, e.g. `a.b. C`. It returns 5. Then stop! ok";
        let s: Vec<_> = sentence_spans(p)
            .into_iter()
            .map(|(a, b)| &p[a..b])
            .collect();
        assert_eq!(
            s,
            [
                "Parse a string, e.g. `a.b. C`.",
                "It returns 5.",
                "Then stop! ok"
            ]
        );
    }

    #[test]
    fn markdown_units_carry_lines_kinds_and_headings() {
        let chunk = "## Options\n\nFirst sentence here. Second one\nspans lines.\n\n- item one\n  continued\n- item two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```js\nconst x = 1;\n```";
        let u = split_units(chunk, 10, "markdown", "Doc > Options");
        let kinds: Vec<_> = u.iter().map(|x| x.kind).collect();
        use UnitKind::*;
        assert_eq!(
            kinds,
            [Heading, Sentence, Sentence, ListItem, ListItem, TableRow, TableRow, CodeLine]
        );
        assert_eq!((u[2].start_line, u[2].end_line), (12, 13));
        assert_eq!(u[2].text, "Second one\nspans lines.");
        assert_eq!((u[3].start_line, u[3].end_line), (15, 16));
        assert_eq!(u[0].heading, "Doc > Options");
        for x in &u {
            assert!(chunk.contains(&x.text), "{:?}", x.text);
        }
    }

    #[test]
    fn syntax_chunks_are_split_by_statement_never_inside_brackets_or_strings() {
        let chunk = "def f(a,\n      b):\n    \"\"\"Doc\n    (still doc\n    \"\"\"\n    x = g(a, \"(\",\n          b)\n\n    return x";
        let u = split_units(chunk, 7, "syntax", "f");
        let spans: Vec<_> = u.iter().map(|x| (x.start_line, x.end_line)).collect();
        assert_eq!(spans, [(7, 8), (9, 11), (12, 13), (15, 15)]);
        assert!(u
            .iter()
            .all(|x| x.kind == UnitKind::Statement && x.heading == "f"));
        for x in &u {
            assert!(chunk.contains(&x.text), "{:?}", x.text);
        }
        // Blocks are not statements: `{` does not hold a body together; lifetimes are not quotes.
        let rust = "fn f<'a>(x: &'a str) -> u32 {\n    let y = h(x, \"[Wm⁻²]\",\n        1); // ⁻²\n    y\n}";
        let u = split_units(rust, 1, "syntax", "");
        let spans: Vec<_> = u.iter().map(|x| (x.start_line, x.end_line)).collect();
        assert_eq!(spans, [(1, 1), (2, 3), (4, 4), (5, 5)]);
    }

    #[test]
    fn code_chunks_are_split_by_line() {
        let u = split_units("fn a() {\n\n    1\n}", 3, "code", "");
        assert_eq!(u.len(), 3);
        assert_eq!((u[1].start_line, u[1].text.as_str()), (5, "    1"));
    }

    #[test]
    fn headings_colon_lines_and_code_comments_introduce_the_next_unit() {
        let chunk = "## deep\n\nSpecifies the depth. Refers to Bash:\n\n```js\n// Get previous date\ninterval.prev();\n```";
        let u = split_units(chunk, 1, "markdown", "");
        let introduces: Vec<(&str, bool)> = u
            .iter()
            .map(|x| (x.text.as_str(), x.introduces()))
            .collect();
        assert_eq!(
            introduces,
            [
                ("## deep", true),
                ("Specifies the depth.", false),
                ("Refers to Bash:", true),
                ("// Get previous date", true),
                ("interval.prev();", false)
            ]
        );
        let py = split_units("x = 1  # one\n# two\ny = 2", 1, "code", "");
        assert_eq!(
            py.iter().map(Unit::introduces).collect::<Vec<_>>(),
            [false, true, false]
        );
    }
}
