//! Query flows with state across batches: an aggregation over a watermarked stream
//! (`cdcflow_plan::stream_aggregate`). One batch of the flow is one Spark micro-batch
//! followed by its data-less batch: the state after the last committed batch is read
//! ([`store`]), the batch's rows are merged into it ([`aggregate`]), the groups the new
//! watermark closes are appended to the target, the late rows go to `<target>__late`,
//! and the new state is written before the target's commit. docs/semantics.md,
//! "Stateful streaming", states the rules.

mod aggregate;
mod dedup;
mod join;
pub mod late;
mod metrics;
mod node;
mod operator;
mod run;
mod store;

use std::sync::Arc;

use cdcflow_plan::Flow;
use cdcflow_plan::stream_aggregate::{self, StatefulOp};
use datafusion::arrow::array::RecordBatch;
use datafusion::logical_expr::LogicalPlan;

pub use metrics::{StateMetrics, format_micros};
pub use store::StoredState;

/// The state flow `flow` kept after batch `committed`, for `cdcflow status`.
pub async fn stored_state(
    checkpoint: &crate::checkpoint::Checkpoint,
    flow: &str,
    progress: &crate::checkpoint::Processed,
) -> Option<StoredState> {
    store::StateStore::of(checkpoint, flow)
        .ok()?
        .peek(progress.committed, progress.state_version())
        .await
}

/// The name of the state version batch `batch` of this run writes, which its offsets
/// record.
pub(crate) fn version_name(batch: i64) -> String {
    store::version_name(batch)
}

use crate::RunError;
use crate::context::RunContext;
use run::StateRun;

/// The stateful operator of `flow`'s plan for this batch, if it has one.
pub(crate) fn find(
    rc: &RunContext,
    flow: &Flow,
    plan: &LogicalPlan,
) -> Result<Option<StatefulOp>, RunError> {
    if flow.watermarks.is_empty() {
        return Ok(None);
    }
    let streams = flow.stream_names(|n| rc.pipeline.dataset(n).map(|d| d.kind));
    let is_stream = |t: &str| streams.iter().any(|s| s.eq_ignore_ascii_case(t));
    stream_aggregate::analyze(plan, &flow.watermarks, &is_stream)
        .map_err(|r| RunError::internal(r.describe(&format!("flow `{}`", flow.name))))
}

/// What a stateful batch gives the flow's commit.
pub(crate) struct Batch {
    pub late: Option<RecordBatch>,
    pub metrics: StateMetrics,
    /// Said when the state has grown for [`GROWING_WARNS_AFTER`] batches in a row while
    /// the watermark stayed.
    pub warning: Option<String>,
}

/// Batches in a row of a growing state under a watermark that does not move before
/// `run` warns: an idle input holding the watermark back, or event times that stopped.
pub const GROWING_WARNS_AFTER: u32 = 3;

/// How many batches in a row, up to this one, grew the state under a still watermark.
fn growing(before: Option<&store::Meta>, metrics: &StateMetrics) -> u32 {
    match before {
        Some(b)
            if metrics.rows_total > b.rows && metrics.watermark_micros == b.watermark_micros =>
        {
            b.growing_batches + 1
        }
        _ => 0,
    }
}

fn growing_warning(batches: u32, metrics: &StateMetrics) -> Option<String> {
    (batches >= GROWING_WARNS_AFTER).then(|| {
        format!(
            "the state has grown for {batches} batches (now {} rows) while the watermark stayed at {}: an input without new rows holds a join's watermark back, or event times stopped advancing; the state shrinks only when the watermark moves",
            metrics.rows_total,
            format_micros(metrics.watermark_micros)
        )
    })
}

/// The plan of batch `batch` of `flow` (whose last committed batch is `committed`, its
/// state the version `named`):
/// `plan` with its stateful operator `op` in place ([`node`]), to run in [`session`];
/// then [`finish`] commits the state the run wrote. `dry` (for `explain`) reads the
/// state without tidying it and writes none.
pub(crate) async fn plan(
    flow: &Flow,
    plan: LogicalPlan,
    op: &StatefulOp,
    checkpoint: &crate::checkpoint::Checkpoint,
    (committed, named, batch): (Option<i64>, Option<&str>, i64),
    dry: bool,
) -> Result<(LogicalPlan, Arc<StateRun>), RunError> {
    let store = store::StateStore::of(checkpoint, &flow.name)?;
    let operator = match op {
        StatefulOp::Aggregate(sa) => aggregate::operator_fingerprint(sa),
        StatefulOp::Join(sj) => join::operator_fingerprint(sj),
        StatefulOp::Dedup(sd) => dedup::operator_fingerprint(sd)?,
    };
    let (before, version) = match dry {
        true => {
            let before = store.look(committed, named, &operator).await?;
            let version = store.begin_dry(batch, before.as_ref()).await?;
            (before, version)
        }
        false => {
            let before = store.load(committed, named, &operator).await?;
            let version = store.begin(batch, before.as_ref()).await?;
            (before, version)
        }
    };
    let run = Arc::new(StateRun::new(store, before, batch, version, operator));
    Ok((node::with_node(plan, op, &run)?, run))
}

/// A session that plans [`node::StatefulNode`]s into their execution plans.
pub(crate) fn session(rc: &RunContext) -> datafusion::prelude::SessionContext {
    let state = datafusion::execution::session_state::SessionStateBuilder::new_from_existing(
        rc.ctx.state(),
    )
    .with_query_planner(Arc::new(node::StatefulQueryPlanner))
    .build();
    datafusion::prelude::SessionContext::new_with_state(state)
}

/// Commits the state batch `run` wrote, once its plan has run (before the target's
/// commit), and gives what the flow's commit reports.
pub(crate) async fn finish(run: &StateRun) -> Result<Batch, RunError> {
    let (version, outcome) = run.finished()?;
    let metrics = outcome.metrics;
    let growing_batches = growing(run.before.as_ref(), &metrics);
    let meta = store::Meta {
        batch: run.batch,
        watermark_micros: outcome.watermark_micros,
        seen_rows: outcome.seen_rows,
        inputs: outcome.inputs,
        rows: metrics.rows_total,
        growing_batches,
        operator: run.operator.clone(),
        process: run::process(),
        layout: 0,
        files: Vec::new(),
    };
    run.store.commit(version, meta).await?;
    Ok(Batch {
        late: outcome.late,
        warning: growing_warning(growing_batches, &metrics),
        metrics,
    })
}

/// What the operator is, as `explain` shows it: what it keys by, when its state is
/// let go, the watermark's delay.
pub(crate) fn describe_op(op: &StatefulOp) -> String {
    match op {
        StatefulOp::Aggregate(sa) => {
            let keys: Vec<String> = sa
                .aggregate
                .group_expr
                .iter()
                .map(|g| g.to_string())
                .collect();
            let functions: Vec<String> = sa
                .aggregate
                .aggr_expr
                .iter()
                .map(|a| a.to_string())
                .collect();
            let closes = match sa.event_time.window {
                None if sa.event_time.session_gap.is_some() => format!(
                    "session window with a gap of {} µs closes at its end",
                    sa.event_time.session_gap.unwrap_or_default()
                ),
                Some(w) if w.is_tumbling() => format!("window of {} µs closes at its end", w.width),
                Some(w) => format!(
                    "window of {} µs every {} µs closes at its end",
                    w.width, w.slide
                ),
                None => "group closes at its event time".to_string(),
            };
            format!(
                "keys=[{}], aggr=[{}], event_time={} ({closes}), watermark_delay={}",
                keys.join(", "),
                functions.join(", "),
                sa.event_column,
                sa.watermark.delay_text,
            )
        }
        StatefulOp::Dedup(sd) => format!(
            "keys=[{}], event_time={} (a key is kept until its first row's event time + the delay), watermark_delay={}",
            sd.on
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            sd.event_column,
            sd.watermark.delay_text,
        ),
        StatefulOp::Join(sj) => format!(
            "join_type={:?}, left_event_time={} (delay {}), right_event_time={} (delay {}), right - left in [{}, {}] µs",
            sj.join.join_type,
            sj.left.event_column,
            sj.left.watermark.delay_text,
            sj.right.event_column,
            sj.right.watermark.delay_text,
            sj.bounds
                .lower
                .map_or("-inf".to_string(), |b| b.to_string()),
            sj.bounds
                .upper
                .map_or("+inf".to_string(), |b| b.to_string()),
        ),
    }
}

/// The state a batch starts from, as `explain` shows it.
pub(crate) fn describe_state(before: Option<&store::Meta>) -> String {
    match before {
        Some(m) => format!(
            "watermark={}, state={} row(s) in {} file(s), {} B",
            format_micros(m.watermark_micros),
            m.files.iter().map(|f| f.rows).sum::<u64>(),
            m.files.len(),
            m.bytes()
        ),
        None => "watermark=1970-01-01T00:00:00Z, state=none yet".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(rows: u64, watermark_micros: i64, growing_batches: u32) -> store::Meta {
        store::Meta {
            batch: 0,
            watermark_micros,
            seen_rows: true,
            inputs: Default::default(),
            rows,
            growing_batches,
            operator: String::new(),
            process: String::new(),
            layout: 0,
            files: Vec::new(),
        }
    }

    fn after(rows_total: u64, watermark_micros: i64) -> StateMetrics {
        StateMetrics {
            rows_total,
            watermark_micros,
            ..StateMetrics::default()
        }
    }

    #[test]
    fn a_state_growing_under_a_still_watermark_is_said_after_three_batches() {
        assert_eq!(growing(None, &after(10, 0)), 0);
        assert_eq!(growing(Some(&meta(10, 5, 0)), &after(20, 5)), 1);
        assert_eq!(growing(Some(&meta(20, 5, 2)), &after(30, 5)), 3);
        // The watermark moved, or the state did not grow: the count starts again.
        assert_eq!(growing(Some(&meta(20, 5, 2)), &after(30, 6)), 0);
        assert_eq!(growing(Some(&meta(20, 5, 2)), &after(20, 5)), 0);
        assert!(growing_warning(2, &after(30, 5)).is_none());
        let said = growing_warning(3, &after(30, 5)).expect("a warning");
        assert!(said.contains("grown for 3 batches (now 30 rows)"), "{said}");
    }
}
