//! Compatibility on checked-in data: the bundled repositories and questions under the BM25
//! variants give the same tables (retrievals, packs, extracts, evaluation, comparisons, summary,
//! BM25 terms and documents) as the golden file made by an earlier release
//! (`evaluation/make_compat_golden.sh`), compared through `ri-batch sql` CSV hashes.

mod common;

use common::{bundled_repos, ri_batch, root};
use sha2::{Digest, Sha256};

fn sha(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn bundled_bm25_tables_equal_the_golden_file() {
    bundled_repos();
    let dir = tempfile::tempdir().unwrap();
    let data = root().join("tests/data/compat");
    let template = std::fs::read_to_string(data.join("bundled-bm25.toml")).unwrap();
    let out = dir.path().join("out");
    let toml: String = template
        .lines()
        .map(|l| {
            if l.starts_with("root = ") {
                format!("root = \"{}\"", root().display())
            } else if l.starts_with("output_dir = ") {
                format!("output_dir = \"{}\"", out.display())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let p = dir.path().join("p.toml");
    std::fs::write(&p, toml).unwrap();
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let golden = std::fs::read_to_string(data.join("bundled-bm25.golden")).unwrap();
    let queries = std::fs::read_to_string(data.join("queries.tsv")).unwrap();
    let mut checked = 0;
    for line in queries.lines() {
        let (name, query) = line.split_once('\t').unwrap();
        let want = golden
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("{name} is not in the golden file"));
        let got = ri_batch(&["sql", out.to_str().unwrap(), query, "--format", "csv"]);
        assert!(
            got.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        let csv = String::from_utf8(got.stdout).unwrap();
        // The script hashed the output as `$(…)` keeps it: without trailing newlines.
        let csv = csv.trim_end_matches('\n');
        if name == "summary" {
            let want_csv = std::fs::read_to_string(data.join("bundled-bm25-summary.csv")).unwrap();
            assert_eq!(csv, want_csv.trim_end_matches('\n'), "summary differs");
        }
        assert_eq!(sha(csv), want, "{name} differs from the golden file");
        checked += 1;
    }
    assert_eq!(checked, 8);
}
