//! Query flows with state across batches: an aggregation over a watermarked stream
//! (`cdcflow_plan::stream_aggregate`). One batch of the flow is one Spark micro-batch
//! followed by its data-less batch: the state after the last committed batch is read
//! ([`store`]), the batch's rows are merged into it ([`aggregate`]), the groups the new
//! watermark closes are appended to the target, the late rows go to `<target>__late`,
//! and the new state is written before the target's commit. docs/semantics.md,
//! "Stateful streaming", states the rules.

mod aggregate;
pub mod late;
mod store;

use std::path::Path;

use cdcflow_plan::Flow;
use cdcflow_plan::stream_aggregate::{self, StreamAggregate};
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

/// The stateful aggregation of `flow`'s plan for this batch, if it has one.
pub(crate) fn find(
    rc: &RunContext,
    flow: &Flow,
    plan: &LogicalPlan,
) -> Result<Option<StreamAggregate>, RunError> {
    if flow.watermarks.is_empty() {
        return Ok(None);
    }
    let streams = flow.stream_names(|n| rc.pipeline.dataset(n).map(|d| d.kind));
    let is_stream = |t: &str| streams.iter().any(|s| s.eq_ignore_ascii_case(t));
    stream_aggregate::analyze(plan, &flow.watermarks, &is_stream)
        .map_err(|r| RunError::internal(format!("flow `{}`: {}", flow.name, r.message)))
}

/// What a stateful batch gives the flow's commit.
pub(crate) struct Batch {
    /// The flow's plan with the aggregation replaced by the groups it closed.
    pub plan: LogicalPlan,
    pub late: Option<RecordBatch>,
    pub metrics: StateMetrics,
}

/// Runs batch `batch` of the aggregation `sa` of `flow` (whose last committed batch is
/// `committed`), writes its state, and gives the plan of the rows to append.
pub(crate) async fn run(
    rc: &RunContext,
    flow: &Flow,
    plan: LogicalPlan,
    sa: &StreamAggregate,
    checkpoint_dir: &Path,
    committed: Option<i64>,
    batch: i64,
) -> Result<Batch, RunError> {
    let store = store::StateStore::new(checkpoint_dir, &flow.name);
    let operator = aggregate::operator_fingerprint(sa);
    let loaded = store.load(committed, &operator)?;
    let before = match loaded {
        Some(l) => aggregate::Before {
            watermark_micros: l.meta.watermark_micros,
            seen_rows: l.meta.seen_rows,
            rows: l.rows,
        },
        None => aggregate::Before {
            watermark_micros: 0,
            seen_rows: false,
            rows: Vec::new(),
        },
    };
    let stepped = aggregate::step(&rc.ctx, sa, before, sa.watermark.delay_micros).await?;
    let meta = store::Meta {
        batch,
        watermark_micros: stepped.watermark_micros,
        seen_rows: stepped.seen_rows,
        operator,
    };
    store.write(&meta, &aggregate::state_schema(sa), &stepped.open)?;
    Ok(Batch {
        plan: aggregate::above(plan, sa, stepped.closed)?,
        late: stepped.late,
        metrics: stepped.metrics,
    })
}

/// The stateful operator as `cdcflow explain` shows it above the flow's plan: what it
/// keys by, when a group closes, the watermark's delay, and the state now.
pub(crate) fn describe(
    sa: &StreamAggregate,
    checkpoint_dir: &Path,
    flow: &str,
    committed: Option<i64>,
) -> String {
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
        Some(w) if w.is_tumbling() => format!("window of {} µs closes at its end", w.width),
        Some(w) => format!(
            "window of {} µs every {} µs closes at its end",
            w.width, w.slide
        ),
        None => "group closes at its event time".to_string(),
    };
    let state = match store::StateStore::new(checkpoint_dir, flow).peek(committed) {
        Some(s) => format!(
            "watermark {}, {} group(s) held, {} B",
            s.watermark, s.groups, s.bytes
        ),
        None => "no state yet, watermark 1970-01-01T00:00:00Z".to_string(),
    };
    format!(
        "StatefulAggregateExec: mode=append, keys=[{}], aggr=[{}], event_time={} ({closes}), watermark_delay={}\n  state: {state}\n  (the plan below is the flow's query over the batch; its aggregation is this operator's, merged with the state)\n",
        keys.join(", "),
        functions.join(", "),
        sa.event_column,
        sa.watermark.delay_text,
    )
}
