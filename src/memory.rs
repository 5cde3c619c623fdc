//! The process's one allocator policy, in two phases, and what it measures. A run keeps large
//! blocks in their own mappings so that freed memory goes back to the system between
//! repositories; while a model runs, freed tensor buffers are kept for reuse instead. The model
//! phase is held by a guard: dropping it (the embed stage ending) restores the run's policy and
//! hands the model's freed memory back.

/// The run's policy: blocks of 1 MiB and more get their own mapping, returned to the system when
/// freed. Otherwise glibc raises that threshold to the largest block freed so far (up to 32 MiB)
/// and serves such blocks from the heap, which rarely gives memory back, so one large
/// repository's buffers stay resident through the rest of the run. Measured at 457 repositories:
/// peak 166 → 122 MiB, wall time +2.6% (docs/performance.md, "Many repositories").
pub fn for_run() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator settings, under glibc's own lock; every value is
    // within its documented range (the trim threshold and top pad are glibc's defaults).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TOP_PAD, 128 << 10);
    }
}

/// Models loaded and not yet dropped; the model policy holds while any is.
static MODELS: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// While held, freed tensor memory stays in the process: every candle op allocates its output,
/// and with the run's policy buffers over 1 MiB are mapped and unmapped each time, page faults
/// costing about a third of CPU embedding time. Each loaded model holds one; the run's policy
/// comes back when the last is dropped (a server reloading a run holds two for a moment).
#[must_use = "the model's policy lasts as long as the guard"]
pub struct ModelPhase(());

impl ModelPhase {
    /// Enters the model phase: raised mmap and trim thresholds and a large top pad.
    pub fn enter() -> ModelPhase {
        let mut live = MODELS.lock().unwrap_or_else(|p| p.into_inner());
        if *live == 0 {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: as in `for_run`.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
                libc::mallopt(libc::M_TOP_PAD, 256 << 20);
            }
        }
        *live += 1;
        ModelPhase(())
    }

    /// Models whose phase is held now.
    pub fn live() -> usize {
        *MODELS.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ModelPhase {
    fn drop(&mut self) {
        let mut live = MODELS.lock().unwrap_or_else(|p| p.into_inner());
        *live -= 1;
        if *live == 0 {
            for_run();
            release_free();
        }
    }
}

/// Hands freed memory back to the system. The allocator keeps freed memory in per-thread arenas;
/// without this, each stage's peak would stay resident through the next ones.
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The process's peak resident memory so far, in MB (Linux): recorded in each stage's manifest as
/// `peak_rss_mb`, the peak of the run up to the end of that stage.
pub fn peak_mb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb.div_ceil(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_phase_lasts_while_any_model_holds_it_and_peak_memory_is_read() {
        let (a, b) = (ModelPhase::enter(), ModelPhase::enter());
        assert!(ModelPhase::live() >= 2);
        let big = vec![1u8; 8 << 20];
        assert_eq!(big.iter().map(|&b| b as usize).sum::<usize>(), 8 << 20);
        drop((big, a));
        assert!(ModelPhase::live() >= 1, "b still holds it");
        drop(b);
        #[cfg(target_os = "linux")]
        assert!(peak_mb().is_some_and(|mb| mb >= 8), "{:?}", peak_mb());
    }
}
