//! Names are types: no string literal in `src/` spells a table, a stage, an extract outcome or
//! reason, a unit kind or an answer outside the type that declares it. A literal that happens to
//! be the same word in another role (a column, a config section, a stop word) is allowed below,
//! each with its reason; any other is reported with its file and line.

use ri_batch::artifact::outcomes::{Answer, NotRun, Outcome, PackedKind, Reason};
use ri_batch::artifact::schema::Table;
use ri_batch::artifact::StageId;
use std::collections::BTreeSet;
use std::path::Path;

/// Every declared name.
fn names() -> BTreeSet<String> {
    let mut n: BTreeSet<String> = Table::ALL.iter().map(|t| t.name().to_string()).collect();
    n.extend(StageId::ALL.iter().map(|s| s.name().to_string()));
    n.extend(Outcome::ALL.iter().map(|o| o.name().to_string()));
    n.extend(Reason::NAMED.iter().map(|(_, name)| name.to_string()));
    n.extend(PackedKind::ALL.iter().map(|u| u.name().to_string()));
    n.extend(Answer::ALL.iter().map(|a| a.name().to_string()));
    n.extend(NotRun::ALL.iter().map(|r| r.name().to_string()));
    n
}

/// (file, literal, why the word is not the name there).
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "src/report/trec.rs",
        "chunk",
        "the TREC export level, not the stage",
    ),
    (
        "src/secrets/sensitive.rs",
        "empty",
        "a placeholder word of the secret filter",
    ),
    (
        "src/packing/intellirag/text.rs",
        "errors",
        "IntelliRAG's stop words",
    ),
    ("src/serve/http.rs", "ok", "the health endpoint's status"),
    (
        "src/models/bert_fused.rs",
        "embeddings",
        "a weight name in the model file",
    ),
    (
        "src/models/nomic_fused.rs",
        "embeddings",
        "a weight name in the model file",
    ),
    (
        "src/artifact/readers.rs",
        "chunks",
        "a column of scope_members",
    ),
    (
        "src/artifact/readers.rs",
        "files",
        "a column of scope_members",
    ),
    (
        "src/config/spec.rs",
        "files",
        "a variant's file ranking, a key of its serialized form",
    ),
    (
        "src/stages/index.rs",
        "files",
        "the file index's config key and cache salt",
    ),
    (
        "src/config/mod.rs",
        "embed",
        "the [embed] section in a config error",
    ),
    (
        "src/artifact/history.rs",
        "history",
        "the history's directory, beside its tables",
    ),
];

/// The literal's role by what precedes and follows it on its line: a column of a schema, a JSON
/// config key, a manifest statistic or a located config key.
fn in_another_role(before: &str, after: &str) -> bool {
    let column = [
        "utf8(",
        "utf8_null(",
        "u32f(",
        "u32n(",
        "u64f(",
        "f64f(",
        "list(",
        "f(",
    ];
    column.iter().any(|c| before.ends_with(c))
        || after.starts_with(':')
        || before.ends_with("ctx.stat(")
        || before.ends_with("key_error(")
}

/// Rust files under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_literal_spells_a_declared_name_outside_its_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let names = names();
    assert!(names.contains("retrievals") && names.contains("false_refusal"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    for path in &files {
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "src/artifact/outcomes.rs" {
            continue; // the declarations
        }
        let text = std::fs::read_to_string(path).unwrap();
        // Unit tests may spell stored names: they check the on-disk contract.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (i, line) in code.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            let declaring =
                (rel == "src/artifact/table.rs" && t.contains(" = \"") && t.ends_with("\","))
                    || (rel == "src/artifact/mod.rs" && t.starts_with("StageId::"))
                    || (rel == "src/config/sections.rs" && t.starts_with("pub struct "));
            for (at, _) in line.match_indices('"') {
                let rest = &line[at + 1..];
                let Some(end) = rest.find('"') else { continue };
                let word = &rest[..end];
                if !names.contains(word) || declaring {
                    continue;
                }
                if in_another_role(&line[..at], &rest[end + 1..]) {
                    continue;
                }
                if let Some(a) = ALLOWED.iter().find(|(f, w, _)| *f == rel && *w == word) {
                    used.insert(*a);
                    continue;
                }
                found.push(format!("{rel}:{}: \"{word}\": {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "names spelled as strings:\n{}",
        found.join("\n")
    );
    let stale: Vec<_> = ALLOWED.iter().filter(|a| !used.contains(a)).collect();
    assert!(stale.is_empty(), "allowances no longer needed: {stale:?}");
}
