//! Child runs of the ri-batch binary for the whole-pipeline benches: wall time and peak RSS of
//! each.

use std::path::Path;
use std::time::Instant;

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
