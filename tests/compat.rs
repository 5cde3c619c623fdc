//! Compatibility on checked-in data: the bundled repositories and questions under the BM25
//! variants give the same tables (retrievals, packs, extracts, evaluation, comparisons, summary,
//! BM25 terms and documents) as an earlier release, row for row. The expected rows are inline,
//! one CSV per query (`tests/data/compat/bundled-bm25/<name>.csv`, the query beside it in
//! `queries.tsv`), so a failure names the rows that differ; each file is itself checked against
//! the SHA-256 that release's output had (`bundled-bm25.golden`, made by
//! `evaluation/make_compat_golden.sh`), so the rows cannot drift with the code.

mod common;

use common::{bundled_repos, ri_batch, root};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

fn sha(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What differs between the expected and the produced CSV of `name`: how many lines each has,
/// and up to ten lines found only in one of them (lost, changed or new rows), with their line
/// numbers.
fn rows_differ(name: &str, want: &str, got: &str) -> String {
    fn count(text: &str) -> HashMap<&str, i64> {
        let mut n: HashMap<&str, i64> = HashMap::new();
        for l in text.lines() {
            *n.entry(l).or_default() += 1;
        }
        n
    }
    let (w, g) = (count(want), count(got));
    let only = |text: &str, other: &HashMap<&str, i64>, mine: &HashMap<&str, i64>| {
        let mut left: HashMap<&str, i64> = mine
            .iter()
            .map(|(l, n)| (*l, n - other.get(l).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        let mut out = Vec::new();
        for (i, l) in text.lines().enumerate() {
            if let Some(n) = left.get_mut(l).filter(|n| **n > 0) {
                *n -= 1;
                out.push(format!("    line {}: {l}", i + 1));
            }
        }
        let total = out.len();
        out.truncate(10);
        (total, out.join("\n"))
    };
    let (lost, lost_rows) = only(want, &g, &w);
    let (new, new_rows) = only(got, &w, &g);
    format!(
        "{name} differs from the earlier release: {} expected lines, {} produced; {lost} \
         expected lines not produced:\n{lost_rows}\n{new} produced lines not expected:\n{new_rows}",
        want.lines().count(),
        got.lines().count()
    )
}

#[test]
fn bundled_bm25_tables_equal_the_golden_rows() {
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
        let hash = golden
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("{name} is not in the golden file"));
        let rows = data.join("bundled-bm25").join(format!("{name}.csv"));
        let want = std::fs::read_to_string(&rows).unwrap();
        // The release's output was hashed as `$(…)` keeps it: without trailing newlines.
        let want = want.trim_end_matches('\n');
        assert_eq!(
            sha(want),
            hash,
            "{} are not the earlier release's rows of {name}",
            rows.display()
        );
        let got = ri_batch(&["sql", out.to_str().unwrap(), query, "--format", "csv"]);
        assert!(
            got.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        let got = String::from_utf8(got.stdout).unwrap();
        let got = got.trim_end_matches('\n');
        assert!(got == want, "{}", rows_differ(name, want, got));
        checked += 1;
    }
    assert_eq!(checked, 8);
}

#[test]
fn a_difference_names_its_rows() {
    let want = "a,b\n1,x\n2,y\n3,z";
    let got = "a,b\n1,x\n2,Y\n3,z\n4,w";
    let d = rows_differ("t", want, got);
    assert!(d.contains("4 expected lines, 5 produced"), "{d}");
    assert!(
        d.contains("1 expected lines not produced:\n    line 3: 2,y"),
        "{d}"
    );
    assert!(
        d.contains("2 produced lines not expected:\n    line 3: 2,Y\n    line 5: 4,w"),
        "{d}"
    );
}
