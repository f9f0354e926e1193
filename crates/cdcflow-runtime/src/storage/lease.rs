//! The run lock of a storage in a bucket: a lease. A bucket has no `flock`, and a lock
//! object that a dead run leaves behind must be taken over without a person deleting it,
//! so the lock is a record (`_run.lock`) its holder rewrites every third of its
//! time-to-live with a compare-and-swap on the record's ETag (S3's `If-Match`). A run
//! that finds it held watches it: a record that changes means its holder lives, and the
//! run stops naming it; a record unchanged for the time-to-live and a margin
//! (`ttl + ttl / 3`) on the watcher's own clock is taken over, with a compare-and-swap
//! against the version watched, so two runs taking over one dead run cannot both win.
//!
//! No clocks are compared across machines. The holder counts from the *send* time of
//! its last successful renewal and stops writing past `ttl - ttl / 3` without one
//! ([`Lease::check`]); the watcher starts counting after it has seen that write. So the
//! holder stops before the takeover while the two clocks' rates differ by less than a
//! third. A holder paused past its lease (a suspended machine) may still wake and
//! write: what keeps the tables whole then is that Delta commits are created only if
//! absent and never retried, and that records are named by the run that writes them
//! (docs/proposals/storage-anywhere.md, §2).
//!
//! The record is never deleted: a free lease is a record in state `free`, for the
//! reason the local lock file is kept (`crate::lock`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Key;
use super::remote::{Remote, Swap, Tag};
use crate::lock::Holder;
use crate::{ErrorCode, RunError};

/// The time-to-live of a lease unless `CDCFLOW_LEASE_SECONDS` says otherwise.
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The lease's time-to-live: `CDCFLOW_LEASE_SECONDS`, else 30 s.
pub fn ttl_from_env() -> Duration {
    std::env::var("CDCFLOW_LEASE_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.3)
        .map_or(DEFAULT_TTL, Duration::from_secs_f64)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum State {
    Held,
    Free,
}

/// The lease record as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// The holding run: random, one per acquisition.
    token: String,
    #[serde(flatten)]
    holder: Holder,
    state: State,
    /// Wall-clock time of the last renewal, µs since the epoch: for messages only.
    renewed_at_micros: i64,
    ttl_seconds: f64,
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What the holder knows of its lease.
struct Held {
    record: Record,
    tag: Tag,
    /// When the last write that landed was sent.
    sent: Instant,
}

/// The leases this process holds, which every write into their storages checks first
/// ([`fence`]).
static HELD: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());

/// Fails when `url` (a table or record in a bucket) lies in a storage whose lease this
/// process holds and has lost, or is about to lose: every Delta commit and record
/// write asks before it writes. Nothing to check elsewhere (a folder's storage, or a
/// storage no lease of this process guards).
pub fn fence(url: &str) -> Result<(), RunError> {
    let guarding: Vec<Arc<Shared>> = HELD
        .lock()
        .map(|held| {
            held.iter()
                .filter(|s| url.starts_with(s.remote.url().as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    guarding.iter().try_for_each(|shared| shared.check())
}

/// Stops [`fence`] checking `shared` (its lease released or dropped).
fn unregister(shared: &Arc<Shared>) {
    if let Ok(mut held) = HELD.lock() {
        held.retain(|h| !Arc::ptr_eq(h, shared));
    }
}

struct Shared {
    remote: Remote,
    key: Key,
    ttl: Duration,
    held: Mutex<Held>,
    lost: AtomicBool,
    /// Set when the lease is let go: the renewer stops.
    stopped: AtomicBool,
}

impl Shared {
    fn margin(&self) -> Duration {
        self.ttl / 3
    }

    fn held(&self) -> Result<std::sync::MutexGuard<'_, Held>, RunError> {
        self.held
            .lock()
            .map_err(|_| RunError::internal("the run lock's state was poisoned"))
    }

    /// Fails when the lease is lost, or older than its time-to-live less the margin.
    fn check(&self) -> Result<(), RunError> {
        let expired = self.held()?.sent.elapsed() >= self.ttl.saturating_sub(self.margin());
        match self.lost.load(Ordering::SeqCst) || expired {
            true => Err(self.lost_error()),
            false => Ok(()),
        }
    }

    fn lost_error(&self) -> RunError {
        RunError::user(
            ErrorCode::Locked,
            format!(
                "the run lock on {} was lost (not renewed in time, or taken by another run)",
                self.remote.describe(&self.key)
            ),
        )
        .with_help("nothing after the last commit was written; the next run goes on from it")
    }

    /// Renews the lease once, through `remote`; false when it is lost.
    async fn renew(&self, remote: &Remote) -> bool {
        let (record, tag) = match self.held() {
            Ok(h) => (
                Record {
                    renewed_at_micros: now_micros(),
                    ..h.record.clone()
                },
                h.tag.clone(),
            ),
            Err(_) => return false,
        };
        let sent = Instant::now();
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        let landed = match remote.put_if(&self.key, &bytes, Some(&tag)).await {
            Ok(Swap::Done(tag)) => Some(tag),
            Ok(Swap::Conflict) => return false,
            // An unknown outcome: the record says whose it is now.
            Err(e) => {
                tracing::warn!(error = %e, "renewing the run lock failed; reading it back");
                match remote.get_tagged(&self.key).await {
                    Ok(Some((bytes, tag))) => serde_json::from_slice::<Record>(&bytes)
                        .ok()
                        .filter(|r| r.token == record.token && r.state == State::Held)
                        .map(|_| tag),
                    _ => None,
                }
            }
        };
        let Ok(mut held) = self.held() else {
            return false;
        };
        if let Some(tag) = landed {
            held.tag = tag;
            held.sent = sent;
            held.record = record;
        }
        held.sent.elapsed() < self.ttl.saturating_sub(self.margin())
    }
}

/// A held lease, renewed in the background until released or dropped (dropped
/// without [`Lease::release`], it runs out after its time-to-live).
pub struct Lease {
    shared: Arc<Shared>,
    /// The thread renewing it: a thread and a runtime of its own, so that a run keeping
    /// its runtime's workers busy (decoding, applying) never delays a renewal.
    renewer: Option<std::thread::JoinHandle<()>>,
    /// Whose lease this one took over, and how long it had gone unrenewed.
    took_over: Option<String>,
}

impl Lease {
    /// Takes the lease of the storage `remote` for pipeline `pipeline`, waiting out a
    /// holder that has stopped renewing; an error naming the holder when it lives.
    pub async fn acquire(remote: &Remote, pipeline: &str, ttl: Duration) -> Result<Self, RunError> {
        let key = Key::of(&["_run.lock"])?;
        let mine = Record {
            token: uuid::Uuid::new_v4().simple().to_string(),
            holder: Holder::current(),
            state: State::Held,
            renewed_at_micros: now_micros(),
            ttl_seconds: ttl.as_secs_f64(),
        };
        let bytes = serde_json::to_vec(&mine)
            .map_err(|e| RunError::internal(format!("the run lock's record: {e}")))?;
        let margin = ttl / 3;
        // The version of another run's record being watched, and since when.
        let mut watched: Option<(Tag, Instant)> = None;
        loop {
            let sent = Instant::now();
            let Some((text, tag)) = remote.get_tagged(&key).await? else {
                match remote.put_if(&key, &bytes, None).await? {
                    Swap::Done(tag) => return Self::start(remote, key, ttl, mine, tag, sent),
                    Swap::Conflict => continue,
                }
            };
            let theirs = serde_json::from_slice::<Record>(&text).ok();
            if theirs.as_ref().is_some_and(|r| r.state == State::Free) {
                match remote.put_if(&key, &bytes, Some(&tag)).await? {
                    Swap::Done(tag) => return Self::start(remote, key, ttl, mine, tag, sent),
                    Swap::Conflict => continue,
                }
            }
            let who = theirs
                .as_ref()
                .map_or("another process".to_string(), |r| r.holder.describe());
            match &watched {
                Some((seen, _)) if *seen != tag => {
                    return Err(held_by(pipeline, &who, remote, &key));
                }
                Some((_, since)) if since.elapsed() >= ttl + margin => {
                    return match remote.put_if(&key, &bytes, Some(&tag)).await? {
                        Swap::Done(tag) => {
                            let note = format!(
                                "took over the run lock of {who}, which had not renewed it for {} s (a run that stopped without releasing it)",
                                since.elapsed().as_secs()
                            );
                            tracing::warn!("{note}");
                            let mut lease = Self::start(remote, key, ttl, mine, tag, sent)?;
                            lease.took_over = Some(note);
                            Ok(lease)
                        }
                        Swap::Conflict => Err(held_by(pipeline, &who, remote, &key)),
                    };
                }
                Some(_) => {}
                None => {
                    tracing::info!(
                        "the run lock is held by {who}: waiting up to {} s to see whether it still runs",
                        (ttl + margin).as_secs()
                    );
                    watched = Some((tag, Instant::now()));
                }
            }
            tokio::time::sleep(ttl / 6).await;
        }
    }

    fn start(
        remote: &Remote,
        key: Key,
        ttl: Duration,
        record: Record,
        tag: Tag,
        sent: Instant,
    ) -> Result<Self, RunError> {
        let shared = Arc::new(Shared {
            remote: remote.clone(),
            key,
            ttl,
            held: Mutex::new(Held { record, tag, sent }),
            lost: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        });
        let renewing = Arc::clone(&shared);
        let own = remote.reopen()?;
        let renewer = std::thread::Builder::new()
            .name("cdcflow-lease".into())
            .spawn(move || renew_until_stopped(&renewing, &own))
            .map_err(|e| RunError::internal(format!("the run lock's renewer: {e}")))?;
        if let Ok(mut held) = HELD.lock() {
            held.push(Arc::clone(&shared));
        }
        Ok(Self {
            shared,
            renewer: Some(renewer),
            took_over: None,
        })
    }

    /// What taking the lease did beyond taking it: the run it took over, if any.
    pub fn took_over(&self) -> Option<&str> {
        self.took_over.as_deref()
    }

    /// Fails when the lease is lost or about to run out: every write step asks before
    /// it writes.
    pub fn check(&self) -> Result<(), RunError> {
        self.shared.check()
    }

    /// Lets the lease go: the record says `free`, and the next run takes it at once.
    pub async fn release(mut self) -> Result<(), RunError> {
        self.shared.stopped.store(true, Ordering::SeqCst);
        unregister(&self.shared);
        // A renewal under way lands (or not) before the record is let go.
        if let Some(renewer) = self.renewer.take() {
            let _ = tokio::task::spawn_blocking(move || renewer.join()).await;
        }
        if self.shared.lost.load(Ordering::SeqCst) {
            return Ok(());
        }
        let (record, tag) = {
            let held = self.shared.held()?;
            (
                Record {
                    state: State::Free,
                    renewed_at_micros: now_micros(),
                    ..held.record.clone()
                },
                held.tag.clone(),
            )
        };
        let bytes = serde_json::to_vec(&record)
            .map_err(|e| RunError::internal(format!("the run lock's record: {e}")))?;
        match self
            .shared
            .remote
            .put_if(&self.shared.key, &bytes, Some(&tag))
            .await?
        {
            Swap::Done(_) => Ok(()),
            Swap::Conflict => Err(self.shared.lost_error()),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        unregister(&self.shared);
    }
}

/// How long the renewer sleeps at a time, so it stops soon once the lease is let go.
const RENEWER_STEP: Duration = Duration::from_millis(20);

/// The renewer's thread: renews `shared` through `remote` every third of its
/// time-to-live, in a runtime of its own, until the lease is let go or lost.
fn renew_until_stopped(shared: &Shared, remote: &Remote) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            shared.lost.store(true, Ordering::SeqCst);
            tracing::error!("the run lock's renewer could not start: {e}");
            return;
        }
    };
    runtime.block_on(async {
        loop {
            let due = Instant::now() + shared.ttl / 3;
            while Instant::now() < due {
                if shared.stopped.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(RENEWER_STEP.min(due.saturating_duration_since(Instant::now())))
                    .await;
            }
            if shared.stopped.load(Ordering::SeqCst) {
                return;
            }
            if !shared.renew(remote).await {
                shared.lost.store(true, Ordering::SeqCst);
                tracing::error!("{}", shared.lost_error());
                return;
            }
        }
    });
}

fn held_by(pipeline: &str, who: &str, remote: &Remote, key: &Key) -> RunError {
    RunError::user(
        ErrorCode::Locked,
        format!("pipeline {pipeline} is being run by {who}"),
    )
    .with_help(format!(
        "wait for it to finish; its lease ({}) is renewed while it runs and taken over once it stops renewing",
        remote.describe(key)
    ))
}
