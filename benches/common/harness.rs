//! Plumbing shared by the benches: the sizes a whole-pipeline bench runs, the folder a bench
//! writes to, and medians of direct timings.

use std::path::PathBuf;
use std::time::Instant;

/// The sizes a whole-pipeline bench runs: the comma-separated numbers (or `all`, for `all`) of
/// the environment variable `var`, else of `default`.
#[allow(dead_code)] // not every bench that includes this module uses it
pub fn sizes(var: &str, default: &str, all: usize) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| match s.trim() {
            "all" => all,
            n => n
                .parse()
                .unwrap_or_else(|_| panic!("{var}: numbers or `all`, not {n:?}")),
        })
        .collect()
}

/// `<target>/<name>`, created: where a bench leaves its data and report.
#[allow(dead_code)] // not every bench that includes this module uses it
pub fn out_dir(name: &str) -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target").into());
    let d = PathBuf::from(target).join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Median wall seconds of `runs` calls of `f` (its result kept live).
#[allow(dead_code)] // not every bench that includes this module uses it
pub fn median_seconds<R>(runs: usize, mut f: impl FnMut() -> R) -> f64 {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[runs / 2]
}
