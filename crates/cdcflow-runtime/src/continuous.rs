//! `cdcflow run --continuous`: keep the pipeline up to date. Landing folders are
//! watched (notify; a rescan every trigger interval where notifications are not
//! available), a batch starts once new files have settled, batches are at least the
//! trigger interval apart, and an idle pipeline sleeps. A pipeline that reads a server
//! (PostgreSQL, Kafka, a query) runs a batch every trigger interval (0.5 s at least):
//! the server sends no notifications, and its changes need no settling. The run lock
//! is held throughout; on shutdown the batch under way finishes and the loop ends.

use std::future::Future;
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

/// Runs batches until `shutdown` completes; `on_batch` sees every run's report.
pub async fn run_continuous(
    pipeline: &Pipeline,
    options: &RunOptions,
    on_batch: impl FnMut(&RunReport),
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let lock = PipelineLock::acquire(pipeline).await?;
    let ended = batches(pipeline, options, on_batch, shutdown, &lock).await;
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
) -> Result<(), RunError> {
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
            for dir in landing_folders(pipeline) {
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
    let settle = crate::inputs::settle_period(&pipeline.config);
    loop {
        let started = Instant::now();
        // A polled server is asked every trigger interval (the wait below, after each
        // batch) and its changes are committed already: nothing to settle. Landing
        // files the same batch finds still young are left for a later one
        // (`landing_settle_seconds`).
        if !first && !polled {
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
        let mut report = run_locked(pipeline, &options).await?;
        lock.check()?;
        falling_behind(&mut report, pipeline.config.trigger_interval_seconds);
        options.full_refresh = None;
        pending = report.flows.iter().any(|f| f.pending_files > 0);
        on_batch(&report);
        // Batches are at least the trigger interval apart.
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = sleep_until(started + interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
