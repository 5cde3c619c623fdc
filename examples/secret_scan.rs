//! The sensitivity filter over directories, for its false-positive rate and its cost: every file
//! under the given directories (UTF-8, at most 512 KiB) is judged by content, and the files each
//! kind flags are counted; the time of ri-batch's own rules alone and of the whole filter (with
//! the Gitleaks rule set) are printed side by side, and what redaction makes of the flagged
//! files (kept with lines redacted, or left out whole).
//!
//!     cargo run --release --example secret_scan -- DIR [DIR ...] [--list] [--lines]
//!
//! `--list` prints each flagged file and its kind; `--lines` also the lines that are flagged on
//! their own (a finding that spans lines, such as a key block, shows none).

use ri_batch::secrets::redact::{judge, Verdict};
use ri_batch::secrets::sensitive::{own_rules, sensitive_content_at};
use std::collections::BTreeMap;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = args.iter().any(|a| a == "--list");
    let lines = args.iter().any(|a| a == "--lines");
    let mut files = Vec::new();
    for dir in args.iter().filter(|a| !a.starts_with("--")) {
        for e in ignore::WalkBuilder::new(dir)
            .hidden(false)
            .build()
            .flatten()
        {
            if e.file_type().is_some_and(|t| t.is_file()) {
                let p = e.into_path();
                if let Ok(text) = std::fs::read_to_string(&p) {
                    if text.len() <= 512 * 1024 {
                        files.push((p.display().to_string(), text));
                    }
                }
            }
        }
    }
    let bytes: usize = files.iter().map(|(_, t)| t.len()).sum();
    let t0 = Instant::now();
    let own = files.iter().filter(|(_, t)| own_rules(t).is_some()).count();
    let own_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut flagged = Vec::new();
    for (p, t) in &files {
        if let Some(k) = sensitive_content_at(t, Some(p)) {
            *kinds.entry(k).or_default() += 1;
            flagged.push((p.as_str(), k));
        }
    }
    let all_s = t1.elapsed().as_secs_f64();
    println!(
        "{} files, {:.1} MB; flagged {} ({:.3}%); by ri-batch's own rules alone: {}",
        files.len(),
        bytes as f64 / 1e6,
        flagged.len(),
        100.0 * flagged.len() as f64 / files.len().max(1) as f64,
        own
    );
    println!("time: ri-batch's own rules {own_s:.2} s; every rule (with Gitleaks') {all_s:.2} s");
    // What the scan's default (`[scan] secrets = "redact"`) makes of the flagged files.
    let texts: BTreeMap<&str, &str> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let (mut whole, mut redacted, mut lines_redacted) = (0, 0, 0);
    let t2 = Instant::now();
    for (p, _) in &flagged {
        match judge(texts[p], Some(p)) {
            Verdict::Redacted { lines, .. } => {
                redacted += 1;
                lines_redacted += lines;
            }
            _ => whole += 1,
        }
    }
    println!(
        "redact: {redacted} files kept with {lines_redacted} lines redacted, {whole} left out whole ({:.3}% of files); {:.2} s",
        100.0 * whole as f64 / files.len().max(1) as f64,
        t2.elapsed().as_secs_f64()
    );
    for (k, n) in &kinds {
        println!("  {n:>5}  {k}");
    }
    if list || lines {
        for (p, k) in flagged {
            println!("{k}\t{p}");
            if lines {
                for (n, l) in texts[p].lines().enumerate() {
                    if let Some(k) = sensitive_content_at(l, Some(p)) {
                        println!("    {}: [{k}] {:.160}", n + 1, l.trim());
                    }
                }
            }
        }
    }
}
