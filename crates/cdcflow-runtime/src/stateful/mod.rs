//! Query flows with state across batches: an aggregation over a watermarked stream
//! (`cdcflow_plan::stream_aggregate`). One batch of the flow is one Spark micro-batch
//! followed by its data-less batch: the state after the last committed batch is read
//! ([`store`]), the batch's rows are merged into it ([`aggregate`]), the groups the new
//! watermark closes are appended to the target, the late rows go to `<target>__late`,
//! and the new state is written before the target's commit. docs/semantics.md,
//! "Stateful streaming", states the rules.

mod aggregate;
mod join;
pub mod late;
mod store;

use std::path::Path;

use cdcflow_plan::Flow;
use cdcflow_plan::stream_aggregate::{self, StatefulOp};
use datafusion::arrow::array::RecordBatch;
use datafusion::logical_expr::LogicalPlan;

pub use aggregate::{StateMetrics, format_micros};
pub use store::StoredState;

/// The state flow `flow` kept after batch `committed`, for `cdcflow status`.
pub fn stored_state(
    checkpoint_dir: &Path,
    flow: &str,
    committed: Option<i64>,
) -> Option<StoredState> {
    store::StateStore::new(checkpoint_dir, flow).peek(committed)
}

use crate::RunError;
use crate::context::RunContext;

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
    /// The flow's plan with the stateful operator replaced by the rows it appends.
    pub plan: LogicalPlan,
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

/// Runs batch `batch` of the stateful operator `op` of `flow` (whose last committed
/// batch is `committed`), writes its state, and gives the plan of the rows to append.
pub(crate) async fn run(
    rc: &RunContext,
    flow: &Flow,
    plan: LogicalPlan,
    op: &StatefulOp,
    checkpoint_dir: &Path,
    committed: Option<i64>,
    batch: i64,
) -> Result<Batch, RunError> {
    let store = store::StateStore::new(checkpoint_dir, &flow.name);
    let operator = match op {
        StatefulOp::Aggregate(sa) => aggregate::operator_fingerprint(sa),
        StatefulOp::Join(sj) => join::operator_fingerprint(sj),
    };
    let loaded = store.load(committed, &operator)?;
    let (meta, mut parts): (Option<store::Meta>, _) = match loaded {
        Some(l) => (Some(l.meta), l.parts),
        None => (None, Default::default()),
    };
    let watermark_micros = meta.as_ref().map_or(0, |m| m.watermark_micros);
    let seen_rows = meta.as_ref().is_some_and(|m| m.seen_rows);
    let mut part = |name: &str| parts.remove(name).unwrap_or_default();
    // Each operator's batch: its rows to append, the node they replace, its state.
    let (node, emitted, late, metrics, after, parts) = match op {
        StatefulOp::Aggregate(sa) => {
            let before = aggregate::Before {
                watermark_micros,
                seen_rows,
                rows: part("groups"),
            };
            let s = aggregate::step(&rc.ctx, sa, before, sa.watermark.delay_micros).await?;
            let after = (s.watermark_micros, s.seen_rows, Default::default());
            let parts = vec![("groups", aggregate::state_schema(sa), s.open)];
            (&sa.node, s.closed, s.late, s.metrics, after, parts)
        }
        StatefulOp::Join(sj) => {
            let before = join::Before {
                watermark_micros,
                seen_rows,
                left: part("left"),
                right: part("right"),
            };
            let s = join::step(&rc.ctx, sj, before, batch).await?;
            let after = (s.watermark_micros, s.seen_rows, s.inputs);
            let parts = vec![
                ("left", join::side_schema(sj.join.left.schema()), s.left),
                ("right", join::side_schema(sj.join.right.schema()), s.right),
            ];
            (&sj.node, s.emitted, s.late, s.metrics, after, parts)
        }
    };
    let growing_batches = growing(meta.as_ref(), &metrics);
    let (watermark_micros, seen_rows, inputs) = after;
    let meta = store::Meta {
        batch,
        watermark_micros,
        seen_rows,
        inputs,
        rows: metrics.rows_total,
        growing_batches,
        operator,
    };
    let parts: Vec<store::Part<'_>> = parts
        .iter()
        .map(|(name, schema, rows)| store::Part { name, schema, rows })
        .collect();
    store.write(&meta, &parts)?;
    Ok(Batch {
        plan: aggregate::above(plan, node, emitted)?,
        late,
        warning: growing_warning(growing_batches, &metrics),
        metrics,
    })
}

/// The stateful operator as `cdcflow explain` shows it above the flow's plan: what it
/// keys by, when its state is let go, the watermark's delay, and the state now.
pub(crate) fn describe(
    op: &StatefulOp,
    checkpoint_dir: &Path,
    flow: &str,
    committed: Option<i64>,
) -> String {
    let state = match store::StateStore::new(checkpoint_dir, flow).peek(committed) {
        Some(s) => format!(
            "watermark {}, {} row(s) held, {} B",
            s.watermark, s.groups, s.bytes
        ),
        None => "no state yet, watermark 1970-01-01T00:00:00Z".to_string(),
    };
    let head = match op {
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
                "StatefulAggregateExec: mode=append, keys=[{}], aggr=[{}], event_time={} ({closes}), watermark_delay={}",
                keys.join(", "),
                functions.join(", "),
                sa.event_column,
                sa.watermark.delay_text,
            )
        }
        StatefulOp::Join(sj) => format!(
            "StreamingSymmetricHashJoinExec: join_type={:?}, left_event_time={} (delay {}), right_event_time={} (delay {}), right - left in [{}, {}] µs",
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
    };
    format!(
        "{head}\n  state: {state}\n  (the plan below is the flow's query over the batch; the stateful operator runs its aggregation or join over the batch and the state)\n"
    )
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
