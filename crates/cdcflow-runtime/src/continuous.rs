//! `cdcflow run --continuous`: keep the pipeline up to date. Landing folders are
//! watched (notify; a rescan every trigger interval where notifications are not
//! available), a batch starts once new files have settled, batches are at least the
//! trigger interval apart, and an idle pipeline sleeps. A pipeline that reads a server
//! (PostgreSQL, Kafka, a query) runs a batch every trigger interval (0.5 s at least):
//! the server sends no notifications, and its changes need no settling. The run lock
//! is held throughout; on shutdown the batch under way finishes and the loop ends.

use std::future::Future;

use futures::future::BoxFuture;
use std::path::PathBuf;
use std::time::Duration;

use cdcflow_plan::{Input, Pipeline};
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, sleep_until};

use crate::RunError;
use crate::pipeline_lock::PipelineLock;
use crate::report::RunReport;
use crate::runner::{RunOptions, run_locked};

/// How long the landing folders must be quiet before a batch starts, at least: files
/// younger than `landing_settle_seconds` are waited for (or left) by the batch itself.
const QUIET: Duration = Duration::from_millis(200);

/// The shortest pause between two batches of a pipeline that polls a server, and
/// between two rescans of landing folders without notifications.
const POLL_FLOOR: Duration = Duration::from_millis(500);

/// The longest pause between two batches while a source server is out of reach.
const MOST_BACK_OFF: Duration = Duration::from_secs(30);

/// The pause before the next batch: the trigger interval, or while some flow's source
/// server is out of reach (restarting, shutting down), a back-off that doubles from a
/// second to [`MOST_BACK_OFF`], so that a server coming back is not met by a
/// connection a second from every poll. `backing` is the back-off in force, reset by a
/// batch that reached its servers.
fn next_pause(report: &RunReport, interval: Duration, backing: &mut Option<Duration>) -> Duration {
    let unreachable = report
        .flows
        .iter()
        .any(|f| f.error_code == Some(crate::ErrorCode::SourceUnreachable.as_str()));
    *backing = match (unreachable, *backing) {
        (false, _) => None,
        (true, None) => Some(Duration::from_secs(1)),
        (true, Some(b)) => Some((b * 2).min(MOST_BACK_OFF)),
    };
    backing.map_or(interval, |b| b.max(interval))
}

/// In `cdcflow run --continuous`, warns on each stateful flow whose batch took 80% of
/// the trigger interval or more: the batches fall behind the interval (Spark's "current
/// batch is falling behind"), and the state's merge grows with it.
fn falling_behind(report: &mut RunReport, interval_seconds: f64) {
    if interval_seconds <= 0.0 {
        return;
    }
    for f in report.flows.iter_mut().filter(|f| f.state.is_some()) {
        let took = f.millis as f64 / 1000.0;
        if took >= 0.8 * interval_seconds {
            f.warnings.push(format!(
                "the batch took {took:.1} s of a {interval_seconds} s trigger interval: the flow falls behind it; a longer interval gives larger batches, or the state (now {} rows) is too large for the interval",
                f.state.as_ref().map_or(0, |s| s.rows_total)
            ));
        }
    }
}

/// The landing folders of the pipeline's streaming file sources.
fn landing_folders(pipeline: &Pipeline) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = pipeline
        .flows
        .iter()
        .flat_map(|f| f.inputs.iter())
        .filter_map(|i| match i {
            Input::Files(rf) if rf.streaming => Some(rf.path.clone()),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Loads the pipeline again, its sources asked for their columns: how a continuous run
/// takes in a schema that grew while it ran.
pub type Replan = Box<dyn FnMut() -> BoxFuture<'static, Result<Pipeline, RunError>> + Send>;

/// Runs batches until `shutdown` completes; `on_batch` sees every run's report. A
/// batch in which a table gained columns the pipeline was not planned with
/// ([`RunReport::needs_planning`]) is followed at once by `replan` and a batch of the
/// new plan, so that the readers of that table take in the new columns, as a sequence
/// of triggered runs would.
pub async fn run_continuous(
    pipeline: &Pipeline,
    options: &RunOptions,
    on_batch: impl FnMut(&RunReport),
    shutdown: impl Future<Output = ()>,
    replan: Replan,
) -> Result<(), RunError> {
    let lock = PipelineLock::acquire(pipeline).await?;
    let ended = batches(pipeline, options, on_batch, shutdown, &lock, replan).await;
    if let Some(sources) = &options.sources {
        sources.0.finish().await;
    }
    if let Err(e) = lock.release().await {
        tracing::warn!(error = %e, "the run lock was not released");
    }
    ended
}

/// The batches of [`run_continuous`], the run lock held.
async fn batches(
    pipeline: &Pipeline,
    options: &RunOptions,
    mut on_batch: impl FnMut(&RunReport),
    shutdown: impl Future<Output = ()>,
    lock: &PipelineLock,
    mut replan: Replan,
) -> Result<(), RunError> {
    let mut pipeline = pipeline.clone();
    let interval = pipeline.config.trigger_interval();
    let (tx, mut rx) = mpsc::channel::<()>(64);
    // The watcher's callback runs on notify's thread; events only wake the loop, the
    // run itself rescans the folders.
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.try_send(());
        }
    });
    let mut watching = false;
    let _watcher = match watcher {
        Ok(mut w) => {
            for dir in landing_folders(&pipeline) {
                let _ = std::fs::create_dir_all(&dir);
                watching |= w.watch(&dir, RecursiveMode::Recursive).is_ok();
            }
            Some(w)
        }
        Err(e) => {
            tracing::warn!(error = %e, "file notifications unavailable; rescanning every trigger interval");
            None
        }
    };
    // Sources outside the storage send no notifications: they are polled every
    // trigger interval.
    let polled = pipeline
        .flows
        .iter()
        .flat_map(|f| f.inputs.iter())
        .any(Input::reads_a_server);
    let rescan = match watching {
        true => interval.max(Duration::from_secs(30)),
        false => interval.max(POLL_FLOOR),
    };
    // A server is not asked more often than this, whatever the trigger interval.
    let interval = match polled {
        true => interval.max(POLL_FLOOR),
        false => interval,
    };
    tokio::pin!(shutdown);
    // A full refresh asked for applies to the first batch only.
    let mut options = options.clone();
    let mut first = true;
    // A file left by a batch because it was still being written may get no further
    // notification: look again once it could have settled.
    let mut pending = false;
    let mut backing = None;
    let settle = crate::inputs::settle_period(&pipeline.config);
    // Set by a batch whose tables outgrew the plan: the next starts at once, planned
    // again.
    let mut replanned = false;
    loop {
        let started = Instant::now();
        // A polled server is asked every trigger interval (the wait below, after each
        // batch) and its changes are committed already: nothing to settle. Landing
        // files the same batch finds still young are left for a later one
        // (`landing_settle_seconds`).
        if !first && !polled && !replanned {
            // Wait for a wake-up (or the rescan period), then for the files to settle.
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                _ = rx.recv() => {}
                () = sleep(if pending { settle.max(QUIET) } else { rescan }) => {}
            }
            loop {
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    _ = rx.recv() => continue,
                    () = sleep(QUIET) => break,
                }
            }
        }
        first = false;
        // A lease lost (a pause past it, a store out of reach) ends the run: another
        // may hold it now, and batches that would only fail at their commits are not
        // begun.
        lock.check()?;
        let mut report = run_locked(&pipeline, &options).await?;
        lock.check()?;
        falling_behind(&mut report, pipeline.config.trigger_interval_seconds);
        options.full_refresh = None;
        pending = report.flows.iter().any(|f| f.pending_files > 0);
        let pause = next_pause(&report, interval, &mut backing);
        on_batch(&report);
        replanned = report.needs_planning();
        if replanned {
            // No batch runs on the old plan meanwhile: the readers of the grown table
            // would apply its new rows without the new columns.
            let mut wait = Duration::from_secs(1);
            pipeline = loop {
                match replan().await {
                    Ok(planned) => break planned,
                    Err(e) if e.code() == crate::ErrorCode::SourceUnreachable => {
                        tracing::warn!(error = %e, retry_in_seconds = wait.as_secs(), "the pipeline could not be planned again: its source server is out of reach");
                        tokio::select! {
                            () = &mut shutdown => return Ok(()),
                            () = sleep(wait) => {}
                        }
                        wait = (wait * 2).min(MOST_BACK_OFF);
                    }
                    Err(e) => return Err(e),
                }
            };
            continue;
        }
        // Batches are at least the trigger interval apart; while a source server is
        // out of reach, backing off.
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = sleep_until(started + pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_source_backs_off_doubling_and_a_reached_one_resets() {
        let interval = Duration::from_millis(500);
        let mut down = RunReport::default();
        let mut failed = crate::report::FlowReport::new("pg", "t", "append");
        failed.error_code = Some(crate::ErrorCode::SourceUnreachable.as_str());
        down.flows = vec![failed];
        let up = RunReport::default();
        let mut backing = None;
        let pauses: Vec<u64> = (0..7)
            .map(|_| next_pause(&down, interval, &mut backing).as_secs())
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(next_pause(&up, interval, &mut backing), interval);
        assert_eq!(next_pause(&down, interval, &mut backing).as_secs(), 1);
    }

    #[test]
    fn a_stateful_batch_near_the_trigger_interval_is_said() {
        let mut report = RunReport::default();
        let mut slow = crate::report::FlowReport::new("agg", "t", "append");
        slow.millis = 900;
        slow.state = Some(crate::stateful::StateMetrics {
            rows_total: 5,
            ..Default::default()
        });
        let mut stateless = crate::report::FlowReport::new("copy", "u", "append");
        stateless.millis = 5_000;
        report.flows = vec![slow, stateless];
        falling_behind(&mut report, 1.0);
        assert!(report.flows[0].warnings[0].contains("took 0.9 s of a 1 s trigger interval"));
        assert!(report.flows[1].warnings.is_empty());
        report.flows[0].warnings.clear();
        falling_behind(&mut report, 2.0);
        assert!(report.flows[0].warnings.is_empty());
    }
}
