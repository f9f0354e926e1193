//! Allocator settings for a batch engine.
//!
//! glibc serves allocations above its mmap threshold (128 KiB, adapting up to 32 MiB)
//! with fresh mappings and gives freed heap tops back to the kernel. An apply allocates
//! and frees Arrow buffers of tens of megabytes step after step, so each new buffer is a
//! run of page faults on pages the kernel zeroes first: on the benchmark machine a third
//! of a batch's time (docs/benchmarks.md). Serving large blocks from the heap and
//! keeping freed memory lets each step reuse what the previous one freed. The cost: the
//! process keeps the memory of its largest batch until it exits.
//!
//! glibc also gives each new thread an arena of its own (up to eight per core), and the
//! engine's steps run on short-lived threads: memory freed in one arena is not reused by
//! a thread on another, so fewer arenas keep reuse high (at N = 1e7 the SCD1 apply peaks
//! near 1.5 GiB with one per core instead of 2.0 GiB with eight). Too few make threads
//! wait for each other's arena lock: with one per core, a flow that allocates per row
//! (`debezium()` decoding 1e6 Kafka messages) took 30–45 s in most runs and 11–13 s in
//! the others, as the threads happened to share an arena or not. Two per core ran it in
//! 10–15 s every time (docs/benchmarks.md, "Kafka to SCD type 1").
//!
//! Between flows the kept memory is handed back ([`release_freed_memory`]): flows of a
//! run are steps of their own, and what the bronze append kept would otherwise add to
//! the AUTO CDC flow's peak (an initial load of 1e7 rows: 1,072 MiB for the run against
//! 947 and 998 MiB for its two flows alone).

/// malloc arenas per core: enough that busy threads seldom wait for one, few enough
/// that freed memory is found again (above).
const ARENAS_PER_CORE: usize = 2;

/// Keeps freed memory for reuse (glibc on Linux; elsewhere nothing to do). Call once,
/// before the first batch.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before the engine's
    // threads allocate, and glibc serialises it with allocations anyway.
    unsafe {
        // Not the thread pool's count: asking it starts the pool, whose threads must
        // find these settings in place.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ok = libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
            && libc::mallopt(
                libc::M_ARENA_MAX,
                i32::try_from(cores * ARENAS_PER_CORE).unwrap_or(16),
            ) == 1;
        if !ok {
            tracing::debug!("glibc refused the allocator settings; keeping its defaults");
        }
    }
}

/// Hands the memory freed so far back to the kernel (glibc's `malloc_trim`), between
/// steps whose buffers do not carry over.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages; glibc locks each arena.
    unsafe {
        libc::malloc_trim(0);
    }
}
