//! The pipeline reference, generated from the sections' declarations (`sections.rs`): every key
//! with its type, default, checks and doc. `docs/pipeline-reference.md` is this text, and a test
//! holds it to it.

use super::sections::{
    ChunkConfig, EmbedConfig, EvaluateConfig, ExtractConfig, IndexConfig, Key, LlmConfig,
    PackConfig, ReaderConfig, RetrieveConfig, ScanConfig, Section,
};

/// A section's heading, doc, keys and defaults.
struct Entry {
    name: &'static str,
    doc: String,
    keys: Vec<Key>,
    defaults: serde_json::Value,
}

fn entry<T: Section>() -> Entry {
    Entry {
        name: T::SECTION,
        doc: T::doc(),
        keys: T::keys(),
        defaults: serde_json::to_value(T::default()).unwrap_or_default(),
    }
}

/// A Rust type as a pipeline file spells its values.
fn kind(ty: &str) -> String {
    let ty = ty.replace(' ', "");
    if let Some(inner) = ty.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')) {
        return kind(inner);
    }
    if let Some(inner) = ty.strip_prefix("Vec<").and_then(|t| t.strip_suffix('>')) {
        return format!("list of {}", kind(inner));
    }
    match ty.as_str() {
        "String" | "Spanned<String>" => "string".into(),
        "bool" => "bool".into(),
        "u32" | "u64" | "usize" => "integer".into(),
        "f64" => "number".into(),
        "Device" => "`auto`, `cpu` or `cuda:N`".into(),
        "Precision" => "`f32`, `f16`, `bf16` or `int8`".into(),
        "Tokenizer" => "`approx`, `chars4` or a tokenizer.json path".into(),
        "ChunkMethod" => "`lines`, `syntax` or `intellirag`".into(),
        "ReaderSelection" => "`greedy` or `likeliest`".into(),
        "crate::evaluation::metrics::RecallRule" => "`merged` or `passage`".into(),
        "LlmConfig" => "section `[extract.llm]`".into(),
        "ReaderConfig" => "section `[extract.reader]`".into(),
        other => format!("`{other}`"),
    }
}

/// A default value as a pipeline file would write it (unset ones say so); a key left out of the
/// serialized defaults shows its declared default.
fn shown(k: &Key, v: Option<&serde_json::Value>) -> String {
    match v {
        None if !k.ty.replace(' ', "").starts_with("Option<") => format!("`{}`", k.default),
        None | Some(serde_json::Value::Null) => "unset".into(),
        Some(serde_json::Value::Array(a)) if a.is_empty() => "none".into(),
        Some(serde_json::Value::String(s)) if s.is_empty() => "required".into(),
        Some(v) => format!("`{v}`"),
    }
}

/// The reference, as Markdown.
pub fn reference() -> String {
    let sections = [
        entry::<ScanConfig>(),
        entry::<ChunkConfig>(),
        entry::<IndexConfig>(),
        entry::<EmbedConfig>(),
        entry::<RetrieveConfig>(),
        entry::<PackConfig>(),
        entry::<ExtractConfig>(),
        entry::<LlmConfig>(),
        entry::<ReaderConfig>(),
        entry::<EvaluateConfig>(),
    ];
    let mut out = String::from(
        "# Pipeline reference\n\n\
         Generated from the sections' declarations in `src/config/sections.rs`, where each key's\n\
         doc, type, default and checks are written once; `tests/reference.rs` holds this file to\n\
         them (regenerate: `cargo run --release --example pipeline_reference > docs/pipeline-reference.md`).\n\
         `[pipeline]`, `[[repos]]`, `[[variants]]`, `[import]` and `[[expect]]` are described in\n\
         `docs/pipeline.md`.\n",
    );
    for s in &sections {
        out.push_str(&format!("\n## `[{}]`\n\n{}\n\n", s.name, s.doc));
        out.push_str("| key | type | default | must be | meaning |\n|---|---|---|---|---|\n");
        for k in &s.keys {
            let checks = if k.checks.is_empty() {
                String::new()
            } else {
                k.checks
                    .iter()
                    .map(|c| c.trim_start_matches("must be ").to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                k.name,
                kind(k.ty),
                shown(k, s.defaults.get(k.name)),
                checks.replace('|', "\\|"),
                k.doc().replace('|', "\\|")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_in_the_reference_with_its_default_and_doc() {
        let r = reference();
        assert_eq!(
            super::super::sections::doc_of(&["doc =\nr\" Commits (0: none).\"", "serde(default)"]),
            "Commits (0: none)."
        );
        assert_eq!(
            super::super::sections::doc_of(&["doc = \" say \\\"hi\\\"\""]),
            "say \"hi\""
        );
        assert!(
            r.contains("| `max_file_bytes` | integer | `524288` | at least 1; at most"),
            "{r}"
        );
        assert!(r.contains("| `model` | string | required |"), "{r}");
        assert!(
            r.contains("| `dtype` | `f32`, `f16`, `bf16` or `int8` | unset |"),
            "{r}"
        );
        assert!(r.contains("| `rank_prior` | number | `0.0` |"), "{r}");
        for k in ScanConfig::keys().into_iter().chain(PackConfig::keys()) {
            assert!(!k.doc().is_empty(), "{} has no doc", k.name);
            assert!(r.contains(&format!("| `{}` |", k.name)), "{}", k.name);
        }
    }
}
