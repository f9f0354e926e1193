//! Allocator settings for a batch engine.
//!
//! glibc serves allocations above its mmap threshold (128 KiB, adapting up to 32 MiB)
//! with fresh mappings and gives freed heap tops back to the kernel. An apply allocates
//! and frees Arrow buffers of tens of megabytes step after step, so each new buffer is a
//! run of page faults on pages the kernel zeroes first: on the benchmark machine a third
//! of a batch's time (docs/benchmarks.md). Serving large blocks from the heap and
//! keeping freed memory lets each step reuse what the previous one freed. The cost: the
//! process keeps the memory of its largest batch until it exits.

/// Keeps freed memory for reuse (glibc on Linux; elsewhere nothing to do). Call once,
/// before the first batch.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before the engine's
    // threads allocate, and glibc serialises it with allocations anyway.
    unsafe {
        let ok = libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1;
        if !ok {
            tracing::debug!("glibc refused the allocator settings; keeping its defaults");
        }
    }
}
