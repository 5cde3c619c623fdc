//! Redaction: a file in which the sensitivity filter finds a secret keeps every line but those
//! that hold it, when the secret is confined to lines the filter can point at; otherwise the
//! file is left out whole, as before.
//!
//! The lines are found by halving: a flagged stretch of lines is split in two and each half
//! judged again, down to single lines, so a file of n lines with k flagged lines costs about
//! k·log n judgements. A secret that only a stretch of several lines shows (a key block, a table's
//! password column, a netrc entry spread over lines) flags no single line; the redacted text is
//! judged once more as a whole, and if anything is still found the file is left out. Lines next
//! to a redacted one that carry a long random-looking run (a key's body, a wrapped token) go too.
//! A redacted line keeps its indentation and line ending, so every line number still addresses
//! the same line of the source.

use crate::secrets::sensitive::{entropy, sensitive_content_at};

/// What stands in a redacted line's place, after its indentation.
pub const MARK: &str = "[redacted]";

named! {
    /// What the scan does with a file in which the sensitivity filter finds a secret
    /// (`[scan] secrets`).
    #[derive(Default)]
    pub enum Secrets {
        /// Keep the file, its secret lines replaced by `[redacted]` (docs/sensitivity.md).
        #[default]
        Redact = "redact",
        /// Leave the file out whole.
        Skip = "skip",
    }
}

impl Secrets {
    /// What the scan makes of `text` (the file at `path`) under this setting: [`judge`]'s
    /// verdict, or under `skip` any secret leaves the file out whole.
    pub fn judge(self, text: &str, path: Option<&str>) -> Verdict {
        match self {
            Secrets::Redact => judge(text, path),
            Secrets::Skip => {
                sensitive_content_at(text, path).map_or(Verdict::Clean, Verdict::Whole)
            }
        }
    }
}

/// What the sensitivity filter makes of one file's text.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Nothing found.
    Clean,
    /// Secrets found on some lines alone: the text with those lines redacted, how many, and
    /// the kind of the first secret found in the file.
    Redacted {
        text: String,
        lines: usize,
        kind: &'static str,
    },
    /// A secret the filter cannot confine to lines: the file is left out.
    Whole(&'static str),
}

/// Judges `text` (the file at `path`, when known): clean, redactable line by line, or to be left
/// out whole.
pub fn judge(text: &str, path: Option<&str>) -> Verdict {
    let Some(kind) = sensitive_content_at(text, path) else {
        return Verdict::Clean;
    };
    let lines: Vec<&str> = text.split('\n').collect();
    let mut marked = vec![false; lines.len()];
    flag(&lines, 0, path, &mut marked);
    if !marked.contains(&true) {
        return Verdict::Whole(kind);
    }
    spread(&lines, &mut marked);
    let redacted = lines
        .iter()
        .zip(&marked)
        .map(|(l, &m)| if m { mask(l) } else { (*l).to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    if sensitive_content_at(&redacted, path).is_some() {
        return Verdict::Whole(kind);
    }
    Verdict::Redacted {
        text: redacted,
        lines: marked.iter().filter(|&&m| m).count(),
        kind,
    }
}

/// Marks the lines of `lines` (which start at line `at` of the file, and are flagged as a whole)
/// that are flagged on their own.
fn flag(lines: &[&str], at: usize, path: Option<&str>, marked: &mut [bool]) {
    if lines.len() == 1 {
        marked[at] = true;
        return;
    }
    let mid = lines.len() / 2;
    for (part, start) in [(&lines[..mid], at), (&lines[mid..], at + mid)] {
        if sensitive_content_at(&part.join("\n"), path).is_some() {
            flag(part, start, path, marked);
        }
    }
}

/// Marks, outward from each marked line, the neighbours that carry a random-looking run.
fn spread(lines: &[&str], marked: &mut [bool]) {
    let seeds: Vec<usize> = (0..lines.len()).filter(|&i| marked[i]).collect();
    for s in seeds {
        for step in [-1isize, 1] {
            let mut i = s as isize + step;
            while i >= 0 && (i as usize) < lines.len() && !marked[i as usize] {
                if !random_run(lines[i as usize]) {
                    break;
                }
                marked[i as usize] = true;
                i += step;
            }
        }
    }
}

/// Whether `line` holds a run of 24 or more key-like characters (letters, digits, `+/=_-`) with
/// both letters and digits and at least 4 bits of entropy per character: a key's body or a
/// wrapped token, not a word or an identifier.
fn random_run(line: &str) -> bool {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || "+/=_-".contains(c)))
        .any(|run| {
            run.len() >= 24
                && run.bytes().any(|b| b.is_ascii_digit())
                && run.bytes().any(|b| b.is_ascii_alphabetic())
                && entropy(run) >= 4.0
        })
}

/// `line` redacted: its indentation, [`MARK`], and its `\r` if it had one.
fn mask(line: &str) -> String {
    let indent = &line[..line.len() - line.trim_start().len()];
    let cr = if line.ends_with('\r') { "\r" } else { "" };
    format!("{indent}{MARK}{cr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_ID: &str = "AKIAZ3MHQRT5WLXP4VNE";

    #[test]
    fn a_secret_line_is_redacted_and_the_rest_kept() {
        let text = format!(
            "# deploy settings\nregion = \"eu-west-1\"\n    aws_access_key_id = \"{KEY_ID}\"\r\nbucket = \"logs\"\n"
        );
        let Verdict::Redacted {
            text: out,
            lines,
            kind,
        } = judge(&text, Some("deploy.toml"))
        else {
            panic!("expected a redaction of {text:?}");
        };
        assert_eq!(kind, "aws access key id");
        assert_eq!(lines, 1);
        assert!(!out.contains(KEY_ID));
        assert_eq!(out.split('\n').count(), text.split('\n').count());
        assert_eq!(out.split('\n').nth(2), Some("    [redacted]\r"));
        assert!(out.contains("region = \"eu-west-1\"") && out.contains("bucket = \"logs\""));
        assert_eq!(judge(&out, Some("deploy.toml")), Verdict::Clean);
    }

    #[test]
    fn clean_text_is_clean() {
        assert_eq!(judge("fn main() {}\n", Some("main.rs")), Verdict::Clean);
    }

    #[test]
    fn a_key_block_is_left_out_whole() {
        let body: String = (0..12)
            .map(|i| format!("MIIEowIBAAKCAQEA{i}x7Qk9vZl3Jp0sWmR2tYbN8cHq4Lf6GdKe1XaUoVy5PzTi3\n"))
            .collect();
        let text = format!(
            "notes\n-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\n"
        );
        assert!(matches!(
            judge(&text, Some("notes.txt")),
            Verdict::Whole("private key block")
        ));
    }

    #[test]
    fn random_neighbours_of_a_redacted_line_go_with_it() {
        let text =
            format!("token = \"{KEY_ID}\"\n  Zx9Qm2LkP7rT4vWb8NcY3hJd6Fs1Ga5E\nplain words here\n");
        let Verdict::Redacted {
            text: out, lines, ..
        } = judge(&text, Some("a.cfg"))
        else {
            panic!("expected a redaction");
        };
        assert_eq!(lines, 2);
        assert!(
            out.ends_with("[redacted]\n  [redacted]\nplain words here\n"),
            "{out}"
        );
        assert!(!random_run("a_long_identifier_without_digits_at_all"));
    }
}
