//! A table for the rules' unit tests: key `id`, values `a` and `b` (BIGINT), sequenced by
//! a BIGINT, and a decision on a few stored and incoming events, read back as rows.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int8Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

use super::{ApplyMetrics, Op, Rules, SHARED_ROWS, decide_events};

/// SCD type 1 (or 2) rules, tombstones kept 10 µs; `a` is column 1, `b` column 2.
pub(super) fn rules(scd2: bool) -> Rules {
    Rules {
        columns: Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ])),
        keys: vec![0],
        scd2,
        // As the planner gives it when no TRACK HISTORY is declared: every column.
        tracked: if scd2 { vec![1, 2] } else { vec![] },
        ignore_null: vec![],
        sequence_type: DataType::Int64,
        tombstone_retention_micros: 10,
        min_shared_rows: SHARED_ROWS,
        generated: vec![],
    }
}

/// An event: key (none for a TRUNCATE), sequence value, operation, values.
#[derive(Debug, Clone, Copy)]
pub(super) struct E {
    id: Option<i64>,
    seq: i64,
    op: Op,
    a: Option<i64>,
    b: Option<i64>,
}

pub(super) fn up(id: i64, seq: i64, a: Option<i64>, b: Option<i64>) -> E {
    E {
        id: Some(id),
        seq,
        op: Op::Upsert,
        a,
        b,
    }
}

pub(super) fn del(id: i64, seq: i64) -> E {
    E {
        id: Some(id),
        seq,
        op: Op::Delete,
        a: None,
        b: None,
    }
}

pub(super) fn truncate(seq: i64) -> E {
    E {
        id: None,
        seq,
        op: Op::Truncate,
        a: None,
        b: None,
    }
}

/// The horizon of collected tombstones, a marker of the state.
pub(super) fn gc_horizon(seq: i64) -> E {
    E {
        id: None,
        seq,
        op: Op::GcHorizon,
        a: None,
        b: None,
    }
}

/// `events` in the events' columns, recorded at `at` (µs).
fn batch(rules: &Rules, events: &[E], at: i64) -> RecordBatch {
    let column = |f: fn(&E) -> Option<i64>| Arc::new(events.iter().map(f).collect::<Int64Array>());
    let ops: Int8Array = events.iter().map(|e| Some(e.op as i8)).collect();
    let result = RecordBatch::try_new(
        rules.event_schema(),
        vec![
            column(|e| e.id),
            column(|e| e.a),
            column(|e| e.b),
            column(|e| Some(e.seq)),
            Arc::new(ops),
            Arc::new(Int64Array::from(vec![at; events.len()])),
        ],
    );
    result.unwrap_or_else(|e| panic!("events batch: {e}"))
}

/// A visible row: `id, a, b` and, for SCD type 2, `__START_AT, __END_AT`.
pub(super) type Row = Vec<Option<i64>>;

/// The decision on `stored` (recorded at 0) and `incoming` (recorded at `now`): the
/// visible rows of the keys with incoming events, sorted, and what was counted.
pub(super) fn decide(
    rules: &Rules,
    stored: &[E],
    incoming: &[E],
    now: i64,
) -> (Vec<Row>, ApplyMetrics) {
    let stored = vec![batch(rules, stored, 0)];
    let decided = decide_events(rules, stored, false, batch(rules, incoming, now), now);
    let decision = decided.unwrap_or_else(|e| panic!("decide: {e}"));
    let mut rows = Vec::new();
    for part in decision.public() {
        let part = part.unwrap_or_else(|e| panic!("rows: {e}"));
        for r in 0..part.num_rows() {
            let cell = |c: &Arc<dyn Array>| {
                let c = c.as_primitive::<Int64Type>();
                (!c.is_null(r)).then(|| c.value(r))
            };
            rows.push(part.columns().iter().map(cell).collect());
        }
    }
    rows.sort();
    (rows, decision.metrics)
}
