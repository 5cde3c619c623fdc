//! The HTML report in a real browser: headless Chromium renders it, the numbers it shows equal
//! the `summary` table, and the plots are drawn (their colours are on the screenshot).

mod common;

use ri_batch::artifact::outcomes::VariantStatus;

use common::*;
use ri_batch::artifact::schema::SummaryRow;
use ri_batch::artifact::Store;
use std::process::Command;

fn chromium(args: &[&str]) -> std::process::Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .args(args)
        .output()
        .expect("chromium is installed (scripts/test installs Debian's chromium)")
}

#[test]
fn report_renders_in_chromium_with_the_summary_numbers_and_plots() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(
        t.path(),
        "[[variants]]\nname = \"bm25-rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudgets = [350, 1400]\n\
         [[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudgets = [350, 1400]\n\
         [[variants]]\nname = \"hybrid-rank\"\nretriever = \"hybrid\"\npacker = \"rank\"\nbudget = 1400\n",
    );
    run_quiet(&plan);
    let report = ri_batch::report::write(&plan.output_dir).unwrap();
    let url = format!("file://{}", report.display());
    let profile = t.path().join("chromium-profile");
    let profile_arg = format!("--user-data-dir={}", profile.display());

    let dom = chromium(&[&profile_arg, "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&dom.stdout).to_string();
    assert!(
        dom.contains("ri-batch report: out"),
        "page did not load: {}",
        &dom[..dom.len().min(300)]
    );
    let summary: Vec<SummaryRow> = Store::new(&plan.output_dir).read().unwrap();
    let mut checked = 0;
    for s in &summary {
        if s.status != VariantStatus::Ok {
            assert!(
                dom.contains(&s.status.to_string()),
                "not-run reason of {} is shown",
                s.variant
            );
            continue;
        }
        for (metric, value) in [
            ("pool_recall", s.pool_recall),
            ("packed_recall", s.packed_recall),
        ] {
            let shown = format!(
                "data-variant=\"{}\" data-split=\"{}\" data-metric=\"{metric}\">{:.4}<",
                s.variant,
                s.split,
                value.unwrap()
            );
            assert!(dom.contains(&shown), "{shown} not in the rendered report");
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        2 * summary
            .iter()
            .filter(|s| s.status == VariantStatus::Ok)
            .count()
    );
    assert!(checked >= 16, "{checked}");
    assert!(
        dom.matches("<svg").count() >= 4,
        "budget, pool/packed and difference plots per split"
    );
    assert!(
        summary
            .iter()
            .any(|s| matches!(s.status, VariantStatus::NotRun(_))),
        "hybrid without [embed] is reported as not run"
    );

    let png = t.path().join("report.png");
    let shot = chromium(&[
        &profile_arg,
        "--window-size=1200,4000",
        &format!("--screenshot={}", png.display()),
        &url,
    ]);
    assert!(png.exists(), "{}", String::from_utf8_lossy(&shot.stderr));
    let out = Command::new(python())
        .arg(root().join("tests/pixels.py"))
        .arg(&png)
        .args(["31,119,180", "255,127,14", "127,127,127"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect();
    // Blue: compact line, packed bars; orange: rank line; grey: pool bars and intervals.
    for (c, name) in counts.iter().zip(["blue", "orange", "grey"]) {
        assert!(*c > 500, "{name} plot pixels: {c}");
    }
}
