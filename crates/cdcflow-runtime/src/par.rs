//! CPU-bound work over many batches, spread over the cores.

/// The cores this process may use.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `f` of every item, in order, computed by one thread per core over contiguous runs of
/// the items; the first error wins. Items are taken, so each can be let go as soon as
/// it is done with.
pub(crate) fn map<T, R, E>(items: Vec<T>, f: impl Fn(T) -> Result<R, E> + Sync) -> Result<Vec<R>, E>
where
    T: Send,
    R: Send,
    E: Send,
{
    let cores = cores();
    if cores <= 1 || items.len() <= 1 {
        return items.into_iter().map(&f).collect();
    }
    let per_thread = items.len().div_ceil(cores);
    let mut runs: Vec<Vec<T>> = Vec::with_capacity(cores);
    let mut rest = items.into_iter();
    loop {
        let run: Vec<T> = rest.by_ref().take(per_thread).collect();
        if run.is_empty() {
            break;
        }
        runs.push(run);
    }
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .into_iter()
            .map(|run| scope.spawn(move || run.into_iter().map(f).collect::<Result<Vec<R>, E>>()))
            .collect();
        let mut out = Vec::new();
        for handle in handles {
            // A panic in `f` goes on to the caller, as it would without threads (the
            // landing-file reader catches the parquet reader's).
            let results = handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
            out.extend(results);
        }
        Ok(out)
    })
}
