//! One `cdcflow run` per pipeline at a time: a lock file in the storage folder names
//! the process holding it. A lock left by a process that is gone (killed, crashed) is
//! taken over; a live holder makes the second run stop with its pid.
//!
//! The holder is identified by its pid *and* its start time (Linux `/proc/<pid>/stat`),
//! so a pid reused by an unrelated process does not keep a stale lock alive.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunError;

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// Clock ticks after boot when the process started (`None` where unknown).
    pub start_time: Option<u64>,
    pub host: String,
}

impl Holder {
    /// This process.
    pub fn current() -> Self {
        Self::of_pid(std::process::id())
    }

    /// Process `pid` of this host, as it is now.
    pub fn of_pid(pid: u32) -> Self {
        Self {
            pid,
            start_time: start_time(pid),
            host: host(),
        }
    }

    /// Whether the holder still runs: on this host, the same pid with the same start
    /// time. A holder on another host is assumed alive.
    fn alive(&self) -> bool {
        if self.host != host() {
            return true;
        }
        if !Path::new("/proc").is_dir() {
            return true;
        }
        match (self.start_time, start_time(self.pid)) {
            (_, None) => false,
            (Some(then), Some(now)) => then == now,
            (None, Some(_)) => true,
        }
    }
}

fn host() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat` (the process start time), read after the command
/// name, which may itself hold spaces and parentheses.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// The lock of a pipeline, released when dropped.
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
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
        let me = Holder::current();
        let text = serde_json::to_string(&me).unwrap_or_default();
        // Two attempts: the second after removing a lock whose holder is gone.
        for _ in 0..2 {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    f.write_all(text.as_bytes())
                        .and_then(|()| f.sync_all())
                        .map_err(|e| RunError::io(&path, e))?;
                    return Ok(Self { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let held = fs::read_to_string(&path).unwrap_or_default();
                    match serde_json::from_str::<Holder>(&held) {
                        Ok(h) if h.alive() => {
                            return Err(RunError::input(format!(
                                "pipeline {pipeline} is being run by pid {} on {}",
                                h.pid,
                                if h.host.is_empty() { "this host" } else { &h.host }
                            ))
                            .with_help(format!(
                                "wait for it to finish; if that process is gone for good, delete {}",
                                path.display()
                            )));
                        }
                        // Gone, or a lock file cut short by a crash: take it over.
                        _ => {
                            tracing::warn!(lock = %path.display(), "taking over a lock left by a run that is gone");
                            let _ = fs::remove_file(&path);
                        }
                    }
                }
                Err(e) => return Err(RunError::io(&path, e)),
            }
        }
        Err(RunError::input(format!(
            "pipeline {pipeline}: could not take the run lock {}",
            path.display()
        )))
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
