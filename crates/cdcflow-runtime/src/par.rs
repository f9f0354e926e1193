//! CPU-bound work over many batches, spread over the cores by rayon's pool: one pool
//! per process, so flows that run at the same time share the cores rather than each
//! starting a thread per core.

use rayon::prelude::*;

/// The cores this process may use.
pub(crate) fn cores() -> usize {
    rayon::current_num_threads()
}

/// `f` of every item, in order, computed on the pool; the first error wins. Items are
/// taken, so each can be let go as soon as it is done with. A panic in `f` goes on to
/// the caller, as it would without threads (the landing-file reader catches the
/// parquet reader's).
pub(crate) fn map<T, R, E>(items: Vec<T>, f: impl Fn(T) -> Result<R, E> + Sync) -> Result<Vec<R>, E>
where
    T: Send,
    R: Send,
    E: Send,
{
    if items.len() <= 1 || cores() <= 1 {
        return items.into_iter().map(&f).collect();
    }
    let f = &f;
    items.into_par_iter().map(f).collect()
}
