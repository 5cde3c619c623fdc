//! How embedding uses the CPU cores: one single-threaded worker per core, each embedding whole
//! batches, with candle's per-operation threading off; and how the process gets there without
//! changing its own environment.
//!
//! Candle reads its per-operation thread count from `RAYON_NUM_THREADS` at every matrix product;
//! nothing else sets it. One worker per core with that count at 1 was measured here at 1.24× the
//! throughput of one worker whose every product is split over both cores, and 1.43× that of
//! workers in one-thread pools of their own with the count left alone. So the `ri-batch` binary
//! starts itself again, once, with `RAYON_NUM_THREADS=1` in its environment ([`configure`]), and
//! sizes its own thread pool explicitly; the environment is never changed by `set_var`.

use crate::error::{Error, Result};

/// The variable that carries the pool size across [`configure`]'s re-execution.
const THREADS: &str = "RI_BATCH_THREADS";

/// Called first thing by the binary. Unless the user set `RAYON_NUM_THREADS` or
/// `CANDLE_NUM_THREADS` (then both follow the user and embedding uses one worker), the process
/// replaces itself with the same program and arguments plus `RAYON_NUM_THREADS=1` and
/// `RI_BATCH_THREADS=<cores>`; in that second image the global thread pool is built with all
/// cores. If the re-execution fails, the run goes on with one embedding worker.
pub fn configure() {
    if let Some(n) = std::env::var(THREADS)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global();
        return;
    }
    let user_set = std::env::var_os("RAYON_NUM_THREADS").is_some()
        || std::env::var_os("CANDLE_NUM_THREADS").is_some();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if user_set || cores <= 1 {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        if let Ok(exe) = std::env::current_exe() {
            let mut args = std::env::args_os();
            let mut cmd = std::process::Command::new(exe);
            if let Some(arg0) = args.next() {
                cmd.arg0(arg0);
            }
            // `exec` only returns on failure; the run then goes on in this process.
            let _ = cmd
                .args(args)
                .env("RAYON_NUM_THREADS", "1")
                .env(THREADS, cores.to_string())
                .exec();
        }
    }
}

/// The number of embedding workers on the CPU: one per thread of the pool when candle's
/// per-operation threading is off (`RAYON_NUM_THREADS=1`, as [`configure`] arranges), else one
/// worker whose products candle splits itself.
pub fn cpu_workers() -> usize {
    let candle_single = std::env::var("RAYON_NUM_THREADS").is_ok_and(|v| v.trim() == "1")
        && std::env::var_os("CANDLE_NUM_THREADS").is_none();
    let pool = rayon::current_num_threads();
    if candle_single && pool > 1 {
        pool
    } else {
        1
    }
}

/// Runs `work` on `workers` scoped threads (the calling thread when there is one) and returns the
/// first error. A worker's panic comes back as an error naming `what`, never as a panic of the
/// caller.
pub fn run_workers(workers: usize, what: &str, work: impl Fn() -> Result<()> + Sync) -> Result<()> {
    let panicked = |p: Box<dyn std::any::Any + Send>| {
        let msg = crate::error::panic_message(p.as_ref());
        Error::Invalid(format!("{what}: an embedding worker panicked: {msg}"))
    };
    if workers <= 1 {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
            .unwrap_or_else(|p| Err(panicked(p)));
    }
    let work = &work;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
        let mut first = Ok(());
        for h in handles {
            let r = h.join().unwrap_or_else(|p| Err(panicked(p)));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// mimalloc's `mi_option_purge_delay`: the option before `mi_option_use_numa_nodes` in its
/// `mi_option_e` (the crate declares the one, not the other).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t =
    libmimalloc_sys::mi_option_use_numa_nodes - 1;

/// Keeps freed memory for reuse instead of handing it back to the kernel (the binary's allocator
/// purges after 1 s by default). A model's activations are freed and allocated again at every
/// layer; purging them cost the reader a third of its time in the kernel. The process then holds
/// its peak until it exits. Called when a reader model or a CPU embedding model loads.
pub fn keep_freed_memory() {
    // SAFETY: sets a process-wide allocator option; mimalloc reads it atomically.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_panic_is_an_error_not_a_panic() {
        for workers in [1, 2] {
            let calls = std::sync::atomic::AtomicUsize::new(0);
            let r = run_workers(workers, "m", || {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    panic!("bad batch shape");
                }
                Ok(())
            });
            let e = r.unwrap_err().to_string();
            assert!(e.contains("panicked: bad batch shape"), "{e}");
        }
        let failed = run_workers(2, "m", || Err(Error::Invalid("no".into())));
        assert!(failed.is_err());
        let calls = std::sync::atomic::AtomicUsize::new(0);
        run_workers(3, "m", || {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        assert_eq!(calls.into_inner(), 3);
    }

    #[test]
    fn the_purge_delay_option_is_the_one_mimalloc_documents() {
        // Its default in mimalloc v3's options.c is 1000 ms, and setting it reads back.
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let before = get();
        assert!(before == 1000 || before == -1, "{before}");
        keep_freed_memory();
        assert_eq!(get(), -1);
    }
}
