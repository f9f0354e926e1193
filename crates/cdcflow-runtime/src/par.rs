//! CPU-bound work over many batches, spread over the cores.

/// `f` of every item, in order, computed by one thread per core over contiguous runs of
/// the items; the first error wins.
pub(crate) fn map<T, R, E>(items: &[T], f: impl Fn(&T) -> Result<R, E> + Sync) -> Result<Vec<R>, E>
where
    T: Sync,
    R: Send,
    E: Send,
{
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores <= 1 || items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let per_thread = items.len().div_ceil(cores);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(per_thread)
            .map(|run| scope.spawn(|| run.iter().map(&f).collect::<Result<Vec<R>, E>>()))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for handle in handles {
            let results = handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
            out.extend(results);
        }
        Ok(out)
    })
}
