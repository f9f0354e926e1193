//! Kernel behaviour the model does not cover: tombstone retention, and the counters.

use cdcflow_runtime::cdc::apply;
use cdcflow_runtime::cdc::kernel::{OP, Op, Visible};
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int8Type;

use crate::model::{Config, Event, ModelOp, rows_of, to_batch};

fn up(id: i64, seq: i64, a: i64) -> Event {
    Event {
        id,
        seq,
        op: ModelOp::Upsert,
        a: Some(a),
        b: None,
    }
}

fn del(id: i64, seq: i64) -> Event {
    Event {
        id,
        seq,
        op: ModelOp::Delete,
        a: None,
        b: None,
    }
}

const SCD1: Config = Config {
    shared: false,
    scd2: false,
    tracked: vec![],
    ignore_null: vec![],
};

#[test]
fn a_tombstone_blocks_a_late_upsert_until_it_is_collected_then_the_upsert_is_reported() {
    tombstone_lifecycle(&SCD1);
    // The GC horizon marker concerns every key: decided in shares, each share sees it.
    tombstone_lifecycle(&Config {
        shared: true,
        ..SCD1
    });
}

fn tombstone_lifecycle(config: &Config) {
    let rules = config.rules(10);
    let empty: Vec<RecordBatch> = vec![];
    // t=0: key 1 inserted at seq 5 and deleted at seq 8.
    let first = apply(
        &rules,
        empty.clone(),
        Visible::Rows(vec![]),
        &to_batch(&rules, &[up(1, 5, 1), del(1, 8)], 0),
        0,
    )
    .expect("apply");
    assert_eq!(rows_of(&first.public), vec![]);
    assert_eq!(first.metrics.deleted, 1);
    // t=5: a late upsert (seq 7) meets the tombstone and is dropped as late.
    let second = apply(
        &rules,
        first.state.clone(),
        Visible::Rows(first.public.clone()),
        &to_batch(&rules, &[up(1, 7, 2)], 5),
        5,
    )
    .expect("apply");
    assert_eq!(rows_of(&second.public), vec![]);
    assert_eq!(second.metrics.late, 1);
    assert_eq!(second.metrics.tombstones_collected, 0);
    // t=100: the tombstone is past its retention and collected.
    let third = apply(
        &rules,
        second.state.clone(),
        Visible::Rows(second.public.clone()),
        &to_batch(&rules, &[up(2, 1, 1)], 100),
        100,
    )
    .expect("apply");
    assert_eq!(third.metrics.tombstones_collected, 1);
    assert_eq!(rows_of(&third.public), vec![(2, Some(1), None, None, None)]);
    // A late upsert older than the collected tombstone is reported, not applied; a
    // newer one revives the key.
    let fourth = apply(
        &rules,
        third.state.clone(),
        Visible::Rows(third.public.clone()),
        &to_batch(&rules, &[up(1, 6, 3), up(3, 2, 1)], 101),
        101,
    )
    .expect("apply");
    assert_eq!(fourth.metrics.late_after_gc, 2);
    assert_eq!(
        rows_of(&fourth.public),
        vec![(2, Some(1), None, None, None)]
    );
    let fifth = apply(
        &rules,
        fourth.state.clone(),
        Visible::Rows(fourth.public.clone()),
        &to_batch(&rules, &[up(1, 9, 4)], 102),
        102,
    )
    .expect("apply");
    assert_eq!(fifth.metrics.late_after_gc, 0);
    assert_eq!(markers(&fifth.state), 1, "one GC horizon, however decided");
    assert_eq!(
        rows_of(&fifth.public),
        vec![
            (1, Some(4), None, None, None),
            (2, Some(1), None, None, None)
        ]
    );
}

/// The marker rows (no key) of a state.
fn markers(state: &[RecordBatch]) -> usize {
    state
        .iter()
        .map(|b| {
            let ops = b.column_by_name(OP).expect("op column");
            let ops = ops.as_primitive::<Int8Type>();
            ops.values()
                .iter()
                .filter(|&&op| op == Op::GcHorizon as i8 || op == Op::Truncate as i8)
                .count()
        })
        .sum()
}

#[test]
fn counters_name_what_happened_to_each_incoming_event() {
    let rules = SCD1.rules(i64::MAX / 4);
    let empty: Vec<RecordBatch> = vec![];
    let first = apply(
        &rules,
        empty.clone(),
        Visible::Rows(vec![]),
        &to_batch(&rules, &[up(1, 5, 1), up(2, 5, 1)], 0),
        0,
    )
    .expect("apply");
    let batch = [up(1, 4, 9), up(1, 5, 1), up(2, 6, 2), del(3, 1)];
    let second = apply(
        &rules,
        first.state.clone(),
        Visible::Rows(first.public.clone()),
        &to_batch(&rules, &batch, 0),
        0,
    )
    .expect("apply");
    let m = second.metrics;
    assert_eq!(
        (m.events, m.late, m.duplicates, m.upserted, m.deleted),
        (4, 1, 1, 1, 1)
    );
}

/// A late event is applied or dropped, and the counters say which: SCD2 inserts it
/// into history, SCD1 keeps the newer state.
#[test]
fn late_events_are_counted_as_applied_or_dropped() {
    let late_after = |config: &Config| {
        let rules = config.rules(i64::MAX / 4);
        let first = apply(
            &rules,
            vec![],
            Visible::Rows(vec![]),
            &to_batch(&rules, &[up(1, 5, 1)], 0),
            0,
        )
        .expect("apply");
        // seq 3 is older than the stored seq 5.
        let second = apply(
            &rules,
            first.state.clone(),
            Visible::Rows(first.public.clone()),
            &to_batch(&rules, &[up(1, 3, 7)], 0),
            0,
        )
        .expect("apply");
        let m = second.metrics;
        (m.late, m.late_applied, m.late_dropped)
    };
    let scd2 = Config { scd2: true, ..SCD1 };
    assert_eq!(late_after(&scd2), (1, 1, 0));
    assert_eq!(late_after(&SCD1), (1, 0, 1));
}
