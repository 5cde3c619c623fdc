//! Where in the TOML text an error is: byte offsets → file, line, column and dotted key; and
//! lexical path cleaning for messages.

use crate::error::Error;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Turns byte offsets of the TOML text into file:line:column:key errors.
pub(super) struct Locator<'a> {
    pub(super) file: &'a Path,
    pub(super) text: &'a str,
}

impl Locator<'_> {
    pub(super) fn error(&self, span: Range<usize>, message: impl Into<String>) -> Error {
        let (line, column) = line_col(self.text, span.start);
        Error::Config {
            file: self.file.to_path_buf(),
            line,
            column,
            key: key_at(self.text, span.start),
            message: message.into(),
        }
    }

    /// An error about a key path, located at the key's first appearance.
    pub(super) fn key_error(&self, key: &str, message: impl Into<String>) -> Error {
        let last = key.rsplit('.').next().unwrap_or(key);
        let section = key.split('.').next().unwrap_or(key);
        let header = format!("[{section}]");
        let start = self.text.find(&header).unwrap_or(0);
        let offset = self.text[start..]
            .lines()
            .scan(start, |pos, l| {
                let here = *pos;
                *pos += l.len() + 1;
                Some((here, l))
            })
            .find(|(_, l)| l.trim_start().starts_with(last))
            .map(|(p, _)| p)
            .unwrap_or(start);
        let (line, column) = line_col(self.text, offset);
        Error::Config {
            file: self.file.to_path_buf(),
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = offset - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, column)
}

/// The dotted key at `offset`: the enclosing `[table]` header plus the key on that line.
fn key_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line_end = text[offset..]
        .find('\n')
        .map(|i| offset + i)
        .unwrap_or(text.len());
    let line = text[line_start..line_end].trim();
    let mut header = String::new();
    let mut array_index: BTreeMap<String, usize> = BTreeMap::new();
    for l in text[..line_start].lines() {
        let t = l.trim();
        if let Some(h) = t.strip_prefix("[[").and_then(|t| t.split("]]").next()) {
            let n = array_index.entry(h.trim().to_string()).or_insert(0);
            *n += 1;
            header = format!("{}[{}]", h.trim(), *n - 1);
        } else if let Some(h) = t.strip_prefix('[').and_then(|t| t.split(']').next()) {
            header = h.trim().to_string();
        }
    }
    if line.starts_with('[') {
        return line
            .trim_matches(|c| c == '[' || c == ']')
            .trim()
            .to_string();
    }
    let key = line.split('=').next().unwrap_or("").trim();
    match (header.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => header,
        (false, false) => format!("{header}.{key}"),
    }
}

/// Removes `.` and resolves `..` lexically, so paths print the way users wrote them.
pub(super) fn clean(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// Parses `s` as one of an enum's kebab-case names, or an error at its span listing `allowed`.
pub(super) fn parse_enum<T: serde::de::DeserializeOwned>(
    loc: &Locator,
    s: &Spanned<String>,
) -> Result<T, Error> {
    serde_json::from_value(serde_json::Value::String(s.get_ref().clone())).map_err(|e| {
        // The allowed names come from the enum itself (serde lists its variants), so the message
        // cannot drift from what is accepted.
        let e = e.to_string();
        let allowed = e
            .split_once("expected one of ")
            .or_else(|| e.split_once("expected "))
            .map_or(e.as_str(), |(_, rest)| rest);
        loc.error(
            s.span(),
            format!(
                "unknown value `{}`; expected one of {}",
                s.get_ref(),
                allowed.replace('`', "")
            ),
        )
    })
}
