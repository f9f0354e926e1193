//! The run lock of a pipeline's storage, wherever the storage is: a `flock` on a file
//! of its folder (`lock.rs`), or a lease on a record of its bucket
//! (`storage/lease.rs`).

use crate::RunError;
use crate::lock::RunLock;
use crate::storage::Storage;
use crate::storage::lease::{self, Lease};

/// The run lock of a pipeline's storage: held while this value lives, let go by
/// [`PipelineLock::release`].
pub enum PipelineLock {
    Folder(RunLock),
    Bucket(Lease),
}

impl PipelineLock {
    /// Takes the run lock of `pipeline`'s storage, or says who holds it.
    pub async fn acquire(pipeline: &cdcflow_plan::Pipeline) -> Result<Self, RunError> {
        let name = &pipeline.config.name;
        match Storage::of(pipeline)? {
            Storage::Local(dir) => RunLock::acquire(&dir, name).map(Self::Folder),
            Storage::Remote(remote) => Lease::acquire(&remote, name, lease::ttl_from_env())
                .await
                .map(Self::Bucket),
        }
    }

    /// Fails when the lock is no longer held: a lease lost (not renewed in time, or
    /// taken by another run). A folder's lock is held until the process ends.
    pub fn check(&self) -> Result<(), RunError> {
        match self {
            Self::Folder(_) => Ok(()),
            Self::Bucket(lease) => lease.check(),
        }
    }

    /// What a run's report says of taking the lock: a dead run's lease taken over.
    pub fn note(&self) -> Option<String> {
        match self {
            Self::Folder(_) => None,
            Self::Bucket(lease) => lease.took_over().map(str::to_string),
        }
    }

    /// Lets the lock go (a lease is marked free, so the next run takes it at once).
    pub async fn release(self) -> Result<(), RunError> {
        match self {
            Self::Folder(lock) => {
                drop(lock);
                Ok(())
            }
            Self::Bucket(lease) => lease.release().await,
        }
    }
}
