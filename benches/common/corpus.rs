//! The benchmark corpus: the sources of every crate in this project's Cargo.lock, as the local
//! cargo registry holds them (a fixed, real set of several hundred crates after any build).

use ri_batch::config::Plan;
use std::path::PathBuf;

/// The registry source directories of the crates pinned in Cargo.lock that are present locally
/// (more than 100, or the bench stops and says so).
pub fn crate_dirs() -> Vec<(String, PathBuf)> {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
        .expect("Cargo.lock");
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cargo"));
    let registries: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), &name) {
            let dir_name = format!("{n}-{}", v.trim_matches('"'));
            if let Some(d) = registries
                .iter()
                .map(|r| r.join(&dir_name))
                .find(|d| d.is_dir())
            {
                out.push((dir_name, d));
            }
            name = None;
        }
    }
    out.sort();
    out.dedup();
    assert!(
        out.len() > 100,
        "expected the locked crates in the cargo registry (any build fetches them); found {}",
        out.len()
    );
    out
}

/// A plan with one plain-directory repository per crate (JSON data files excluded).
#[allow(dead_code)] // not every bench that includes this module uses it
pub fn plan(dirs: &[(String, PathBuf)]) -> Plan {
    let mut toml = String::from("[pipeline]\nname = \"bench\"\n");
    for (name, dir) in dirs {
        // Repository names allow letters, digits, '-', '_' and '.'; crate dirs may hold '+'.
        let name = name.replace('+', "_");
        toml.push_str(&format!(
            "[[repos]]\nname = \"{name}\"\ndir = \"{}\"\n",
            dir.display()
        ));
    }
    toml.push_str("[scan]\nexclude = [\"**/*.json\"]\n");
    Plan::parse(std::path::Path::new("/tmp/bench.toml"), &toml).expect("bench plan")
}

/// Each crate's chunks (default chunker) as (chunk id, analysed terms of path and text), one
/// list per crate in `crate_dirs` order.
#[allow(dead_code)] // not every bench that includes this module uses it
pub fn chunk_terms_by_crate() -> Vec<Vec<(String, Vec<String>)>> {
    let dirs = crate_dirs();
    let plan = plan(&dirs);
    let an = ri_batch::text::analyze::Analyzer::new(false, false);
    plan.repos
        .iter()
        .map(|r| {
            let (files, _) = ri_batch::repos::walk::scan_repo(&plan, r).expect("scan");
            files
                .iter()
                .flat_map(|f| ri_batch::stages::chunk::chunk_file(f, &Default::default()))
                .map(|c| {
                    let terms = an.terms(&format!("{}\n{}", c.path, c.text));
                    (c.chunk_id, terms)
                })
                .collect()
        })
        .collect()
}
