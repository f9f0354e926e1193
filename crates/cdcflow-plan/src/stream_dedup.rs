//! Deduplication within the watermark, cdcflow's SQL for Spark's
//! `dropDuplicatesWithinWatermark` (Databricks has no SQL form): `SELECT DISTINCT ON
//! (keys) … FROM STREAM(src) WATERMARK ts DELAY OF …` appends the first row of each key
//! as soon as it arrives and drops the rows of that key that follow while the key is
//! kept: until the watermark passes the first row's event time plus the delay. A row at
//! or below the watermark is late. [`analyze`] finds such a DISTINCT ON in a flow's
//! plan; docs/semantics.md, "Stateful streaming", states the rules.

use std::sync::Arc;

use cdcflow_sql::watermark::Watermark;
use datafusion::common::Column;
use datafusion::logical_expr::{DistinctOn, Expr, LogicalPlan};

use crate::stateful::Stateful;
use crate::stream_aggregate::{Refusal, is_event_time};

/// A deduplication of a watermarked stream by keys.
#[derive(Debug, Clone)]
pub struct StreamDedup {
    /// The keys (`DISTINCT ON (…)`), over the input.
    pub on: Vec<Expr>,
    /// The output columns, over the input.
    pub select: Vec<Expr>,
    pub input: Arc<LogicalPlan>,
    pub watermark: Watermark,
    /// The event-time column in the input.
    pub event_column: Column,
    /// The plan node replaced by the rows appended.
    pub node: LogicalPlan,
}

/// The deduplication `node` (a DISTINCT ON over a stream) runs, or why it cannot.
pub(crate) fn analyze(
    node: &LogicalPlan,
    d: &DistinctOn,
    watermarks: &[Watermark],
) -> Result<StreamDedup, Refusal> {
    if d.sort_expr.is_some() {
        return Err(Refusal::ours(
            "applies DISTINCT ON with ORDER BY to a stream: over a stream the row kept per key is the first to arrive (the earliest event time within a batch), not one chosen by an order",
            "drop the ORDER BY: SELECT DISTINCT ON (id) * FROM STREAM(src) WATERMARK ts DELAY OF INTERVAL 10 MINUTES AS s",
            Stateful::Distinct,
        ));
    }
    let found: Vec<(&Watermark, Column)> = watermarks
        .iter()
        .filter_map(|w| {
            d.input
                .schema()
                .columns()
                .into_iter()
                .find(|c| is_event_time(&d.input, c, w))
                .map(|c| (w, c))
        })
        .collect();
    let [(watermark, event_column)] = found.as_slice() else {
        let message = match found.len() {
            0 => {
                "deduplicates a stream (DISTINCT ON) without a watermarked event time among its input's columns: its state would never shrink"
            }
            _ => "deduplicates several watermarked streams at once: not run yet",
        };
        return Err(Refusal::ours(
            message,
            "put a WATERMARK on the one stream, whose event time bounds how long a key is kept: SELECT DISTINCT ON (id) * FROM STREAM(src) WATERMARK ts DELAY OF INTERVAL 10 MINUTES AS s",
            Stateful::Distinct,
        ));
    };
    Ok(StreamDedup {
        on: d.on_expr.clone(),
        select: d.select_expr.clone(),
        input: Arc::clone(&d.input),
        watermark: (*watermark).clone(),
        event_column: event_column.clone(),
        node: node.clone(),
    })
}
