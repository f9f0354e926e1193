//! One `cdcflow run` per pipeline at a time: an OS advisory lock (`flock`) on a file in
//! the storage folder, held for the run's lifetime. The operating system releases it
//! when the holder exits, however it ends (SIGKILL, a crash), so a dead run's lock
//! needs no taking over: there is no read-delete-create step two runs could race
//! through. The file also names the holder (pid and host) for the message a second run
//! stops with.
//!
//! The file itself is never deleted: a run waiting to lock the old file while another
//! created a new one would both hold "the" lock. An empty or stale file is harmless;
//! only the lock on it counts.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{ErrorCode, RunError};

/// Who holds a lock, as written in its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
}

impl Holder {
    /// The holder as messages name it: `pid 42 on host-a`.
    pub fn describe(&self) -> String {
        match self.host.is_empty() {
            true => format!("pid {} on this host", self.pid),
            false => format!("pid {} on {}", self.pid, self.host),
        }
    }

    /// This process.
    pub fn current() -> Self {
        Self {
            pid: std::process::id(),
            host: fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
        }
    }
}

/// The lock of a pipeline, held while this value lives (the OS releases it when the
/// file is closed, or the process ends).
#[derive(Debug)]
pub struct RunLock {
    file: File,
}

impl RunLock {
    /// The lock file of a pipeline's storage folder.
    pub fn path(storage: &Path) -> PathBuf {
        storage.join("_run.lock")
    }

    /// Takes the lock of the pipeline stored in `storage`, or says who holds it.
    pub fn acquire(storage: &Path, pipeline: &str) -> Result<Self, RunError> {
        fs::create_dir_all(storage).map_err(|e| RunError::io(storage, e))?;
        let path = Self::path(storage);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| RunError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(held(&mut file, &path, pipeline)),
            Err(TryLockError::Error(e)) => return Err(RunError::io(&path, e)),
        }
        let text = serde_json::to_string(&Holder::current()).unwrap_or_default();
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(text.as_bytes()))
            .and_then(|()| file.sync_all())
            .map_err(|e| RunError::io(&path, e))?;
        Ok(Self { file })
    }
}

/// The error of a second run: who holds the lock, as far as its file says (a holder
/// that has locked it but not written its name yet is "another process").
fn held(file: &mut File, path: &Path, pipeline: &str) -> RunError {
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let who = match serde_json::from_str::<Holder>(&text) {
        Ok(h) => h.describe(),
        Err(_) => "another process".to_string(),
    };
    RunError::user(
        ErrorCode::Locked,
        format!("pipeline {pipeline} is being run by {who}"),
    )
    .with_help(format!(
        "wait for it to finish; the lock ({}) is released when that process ends, however it ends",
        path.display()
    ))
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // The name goes before the lock does, so no reader sees a stale holder named
        // in a free lock's file.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_holder_that_has_not_written_its_name_yet_keeps_the_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = RunLock::path(dir.path());
        // Another run has created and locked the file, and is about to write its name.
        let starting = File::create(&path).expect("create");
        starting.try_lock().expect("lock");
        let err = RunLock::acquire(dir.path(), "p").expect_err("held");
        assert!(
            err.to_string()
                .contains("pipeline p is being run by another process"),
            "{err}"
        );
        drop(starting);
        let lock = RunLock::acquire(dir.path(), "p").expect("free once its holder is gone");
        let named: Holder =
            serde_json::from_str(&fs::read_to_string(&path).expect("read")).expect("holder");
        assert_eq!(named.pid, std::process::id());
        let err = RunLock::acquire(dir.path(), "p").expect_err("held");
        assert!(
            err.to_string()
                .contains(&format!("being run by pid {}", std::process::id())),
            "{err}"
        );
        drop(lock);
        assert_eq!(fs::read_to_string(&path).expect("read"), "");
        RunLock::acquire(dir.path(), "p").expect("free after release");
    }

    #[test]
    fn a_lock_file_left_by_a_dead_run_is_no_obstacle_and_is_never_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = RunLock::path(dir.path());
        fs::write(&path, r#"{"pid":1,"host":"elsewhere"}"#).expect("write");
        let lock = RunLock::acquire(dir.path(), "p").expect("nobody holds it");
        drop(lock);
        assert!(
            path.exists(),
            "deleting the file would let two runs lock two files"
        );
    }
}
