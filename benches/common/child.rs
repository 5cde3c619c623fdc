//! Child runs of the ri-batch binary for the whole-pipeline benches: wall time and peak RSS of
//! each, and the content hashes of a finished run's stages.

use ri_batch::artifact::Store;
use std::path::Path;
use std::time::Instant;

/// Stage → content hash of its committed files (equal hashes: the same tables).
#[allow(dead_code)] // not every bench that includes this module uses it
pub fn stage_hashes(store: &Store) -> Vec<(String, String)> {
    store
        .manifests()
        .unwrap()
        .iter()
        // The run history is not a stage: it differs between any two runs by design.
        .filter(|(s, _)| s.as_str() != ri_batch::artifact::history::DIR)
        .map(|(s, m)| (s.clone(), ri_batch::pipeline::content_hash(m)))
        .collect()
}

/// Runs `ri-batch run <pipeline> --quiet`, returning wall seconds and the child's peak RSS in MB.
pub fn run_child(bin: &str, pipeline: &Path) -> (f64, f64) {
    run_args(bin, &["run", pipeline.to_str().unwrap(), "--quiet"])
}

/// Runs the binary with `args`, returning wall seconds and the child's peak RSS in MB.
pub fn run_args(bin: &str, args: &[&str]) -> (f64, f64) {
    let t = Instant::now();
    // Reaped with wait4 below, which also gives the child's resource usage.
    #[allow(clippy::zombie_processes)]
    let child = std::process::Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start ri-batch");
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child with valid pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "ri-batch {} failed",
        args.join(" ")
    );
    (t.elapsed().as_secs_f64(), usage.ru_maxrss as f64 / 1024.0)
}
