//! A reference model of AUTO CDC, as plain as possible: the visible table computed from
//! the *set* of all events ever delivered, with no state, batches or arrival order.
//! The kernel must agree with it however the events are split and ordered.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;

use cdcflow_runtime::cdc::kernel::{Op, Rules, SHARED_ROWS};
use datafusion::arrow::array::{Array, AsArray, Int8Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::util::pretty::pretty_format_batches;

/// One change event of a table `(id BIGINT, a BIGINT, b BIGINT)` sequenced by `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Event {
    pub id: i64,
    pub seq: i64,
    pub op: ModelOp,
    pub a: Option<i64>,
    pub b: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ModelOp {
    // Declared in tie-break order: at equal sequence an upsert beats a delete.
    Truncate,
    Delete,
    Upsert,
}

/// The non-key values `(a, b)` of a row.
type Values = (Option<i64>, Option<i64>);

/// A visible row: `(id, a, b, __START_AT, __END_AT)`; the last two only for SCD type 2.
pub type Row = (i64, Option<i64>, Option<i64>, Option<i64>, Option<i64>);

#[derive(Debug, Clone)]
pub struct Config {
    pub scd2: bool,
    /// Tracked columns for SCD type 2, by name (`a`, `b`).
    pub tracked: Vec<&'static str>,
    pub ignore_null: Vec<&'static str>,
    /// Every batch decided in shares, one per core (else only large ones are).
    pub shared: bool,
}

impl Config {
    pub fn rules(&self, retention_micros: i64) -> Rules {
        let columns = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let index = |n: &&str| if *n == "a" { 1 } else { 2 };
        Rules {
            columns,
            keys: vec![0],
            scd2: self.scd2,
            tracked: self.tracked.iter().map(index).collect(),
            ignore_null: self.ignore_null.iter().map(index).collect(),
            sequence_type: DataType::Int64,
            tombstone_retention_micros: retention_micros,
            min_shared_rows: if self.shared { 0 } else { SHARED_ROWS },
            generated: vec![],
        }
    }
}

/// The visible table for the set `events`, sorted.
pub fn expected(config: &Config, events: &[Event]) -> Vec<Row> {
    let set: BTreeSet<Event> = events.iter().copied().collect();
    let truncate = set
        .iter()
        .filter(|e| e.op == ModelOp::Truncate)
        .map(|e| e.seq)
        .max();
    // Per key, sequence value and kind, the greater row; at equal sequence a delete
    // applies before an upsert.
    let mut per_key: BTreeMap<i64, BTreeMap<(i64, ModelOp), Event>> = BTreeMap::new();
    for e in set.iter().filter(|e| e.op != ModelOp::Truncate) {
        if truncate.is_some_and(|t| e.seq < t) {
            continue;
        }
        let slot = per_key.entry(e.id).or_default();
        match slot.get(&(e.seq, e.op)) {
            Some(w) if (w.a, w.b) >= (e.a, e.b) => {}
            _ => {
                slot.insert((e.seq, e.op), *e);
            }
        }
    }
    let ignores = |c: &str| config.ignore_null.contains(&c);
    let merge = |prev: Option<Values>, e: &Event| match prev {
        Some((pa, pb)) => (
            if ignores("a") { e.a.or(pa) } else { e.a },
            if ignores("b") { e.b.or(pb) } else { e.b },
        ),
        None => (e.a, e.b),
    };
    let mut rows = Vec::new();
    for (id, events) in per_key {
        if !config.scd2 {
            let mut row = None;
            for e in events.values() {
                row = match e.op {
                    ModelOp::Upsert => Some(merge(row, e)),
                    _ => None,
                };
            }
            if let Some((a, b)) = row {
                rows.push((id, a, b, None, None));
            }
            continue;
        }
        let tracked = |r: Values| {
            (
                config.tracked.contains(&"a").then_some(r.0),
                config.tracked.contains(&"b").then_some(r.1),
            )
        };
        let mut open: Option<(i64, Values)> = None;
        for e in events.values() {
            match e.op {
                ModelOp::Upsert => {
                    let row = merge(open.map(|(_, r)| r), e);
                    open = match open {
                        Some((start, prev)) if tracked(prev) == tracked(row) => Some((start, row)),
                        Some((start, prev)) => {
                            rows.push((id, prev.0, prev.1, Some(start), Some(e.seq)));
                            Some((e.seq, row))
                        }
                        None => Some((e.seq, row)),
                    };
                }
                _ => {
                    if let Some((start, prev)) = open.take() {
                        rows.push((id, prev.0, prev.1, Some(start), Some(e.seq)));
                    }
                }
            }
        }
        if let Some((start, row)) = open {
            rows.push((id, row.0, row.1, Some(start), None));
        }
    }
    rows.sort();
    rows
}

/// Events as a batch of the kernel's state schema, recorded at `now`.
pub fn to_batch(rules: &Rules, events: &[Event], now: i64) -> RecordBatch {
    let id: Int64Array = events
        .iter()
        .map(|e| (e.op != ModelOp::Truncate).then_some(e.id))
        .collect();
    let a: Int64Array = events.iter().map(|e| e.a).collect();
    let b: Int64Array = events.iter().map(|e| e.b).collect();
    let seq: Int64Array = events.iter().map(|e| Some(e.seq)).collect();
    let op: Int8Array = events
        .iter()
        .map(|e| {
            Some(match e.op {
                ModelOp::Upsert => Op::Upsert as i8,
                ModelOp::Delete => Op::Delete as i8,
                ModelOp::Truncate => Op::Truncate as i8,
            })
        })
        .collect();
    let recorded = Int64Array::from(vec![now; events.len()]);
    RecordBatch::try_new(
        rules.event_schema(),
        vec![
            Arc::new(id),
            Arc::new(a),
            Arc::new(b),
            Arc::new(seq),
            Arc::new(op),
            Arc::new(recorded),
        ],
    )
    .expect("events batch")
}

/// The visible rows of a kernel output, sorted.
pub fn rows_of(batches: &[RecordBatch]) -> Vec<Row> {
    let mut rows: Vec<Row> = batches.iter().flat_map(rows_of_batch).collect();
    rows.sort();
    rows
}

fn rows_of_batch(batch: &RecordBatch) -> Vec<Row> {
    let col = |i: usize| batch.column(i).as_primitive::<Int64Type>();
    let opt = |a: &Int64Array, r: usize| (!a.is_null(r)).then(|| a.value(r));
    let mut rows: Vec<Row> = (0..batch.num_rows())
        .map(|r| {
            let scd2 = batch.num_columns() == 5;
            (
                col(0).value(r),
                opt(col(1), r),
                opt(col(2), r),
                if scd2 { opt(col(3), r) } else { None },
                if scd2 { opt(col(4), r) } else { None },
            )
        })
        .collect();
    rows.sort();
    rows
}

/// State rows as sorted text: the state's batches differ in order, not in content.
pub fn state_rows(batches: &[RecordBatch]) -> Vec<String> {
    let text = pretty_format_batches(batches).expect("format").to_string();
    let mut rows: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("| "))
        .map(String::from)
        .collect();
    rows.sort();
    rows
}
