//! The sensitivity filter and what it decides: files that hold secrets by name or by content
//! (Gitleaks' maintained rules, vendored under `rules/`, plus credentials found by where they
//! stand), and the line-by-line redaction that keeps the rest of a flagged file.

pub mod credentials;
pub mod gitleaks;
pub mod redact;
pub mod sensitive;
