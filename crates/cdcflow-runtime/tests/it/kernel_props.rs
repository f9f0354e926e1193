//! The ordering, duplication and batching guarantees, as properties: any split of any
//! arrival order of an event set, with re-deliveries, gives the reference model's table.

use cdcflow_runtime::cdc::apply;
use cdcflow_runtime::cdc::kernel::{Applied, Visible};
use datafusion::arrow::array::RecordBatch;
use proptest::prelude::*;

use crate::model::{Config, Event, ModelOp, expected, rows_of, state_rows, to_batch};

const FOREVER: i64 = i64::MAX / 4;

fn event(truncates: bool) -> impl Strategy<Value = Event> {
    let op = if truncates {
        prop_oneof![6 => Just(ModelOp::Upsert), 2 => Just(ModelOp::Delete), 1 => Just(ModelOp::Truncate)].boxed()
    } else {
        prop_oneof![3 => Just(ModelOp::Upsert), 1 => Just(ModelOp::Delete)].boxed()
    };
    (
        0i64..4,
        0i64..10,
        op,
        proptest::option::of(0i64..3),
        proptest::option::of(0i64..3),
    )
        .prop_map(|(id, seq, op, a, b)| Event { id, seq, op, a, b })
}

/// An event set and how it is delivered: an arrival order, re-deliveries and batches.
pub(crate) fn delivery(truncates: bool) -> impl Strategy<Value = (Vec<Event>, Vec<Vec<Event>>)> {
    proptest::collection::vec(event(truncates), 0..24).prop_flat_map(|events| {
        let n = events.len();
        (
            Just(events.clone()).prop_shuffle(),
            proptest::collection::vec(0..n.max(1), 0..6),
            proptest::collection::vec(any::<bool>(), n + 6),
        )
            .prop_map(move |(order, dups, cuts)| {
                let mut arrivals = order.clone();
                for d in dups {
                    if let Some(e) = order.get(d) {
                        arrivals.push(*e);
                    }
                }
                let mut batches = vec![vec![]];
                for (i, e) in arrivals.into_iter().enumerate() {
                    if cuts.get(i).copied().unwrap_or(false) {
                        batches.push(vec![]);
                    }
                    if let Some(b) = batches.last_mut() {
                        b.push(e);
                    }
                }
                (events.clone(), batches)
            })
    })
}

fn run_batches(config: &Config, batches: &[Vec<Event>]) -> Applied {
    let rules = config.rules(FOREVER);
    let mut state: Vec<RecordBatch> = vec![];
    let mut public: Vec<RecordBatch> = vec![];
    let mut last = None;
    for batch in batches {
        let events = to_batch(&rules, batch, 0);
        let applied = apply(
            &rules,
            state.clone(),
            Visible::Rows(public.clone()),
            &events,
            0,
        )
        .expect("apply");
        // A crash between the two commits: the published table is one batch ahead of the
        // state, and the batch is applied again; nothing changes.
        let redo = apply(
            &rules,
            state.clone(),
            Visible::Rows(applied.public.clone()),
            &events,
            0,
        )
        .expect("apply again");
        assert_eq!(
            rows_of(&redo.public),
            rows_of(&applied.public),
            "redo of {batch:?}"
        );
        assert_eq!(
            state_rows(&redo.state),
            state_rows(&applied.state),
            "redo of {batch:?}"
        );
        state = applied.state.clone();
        public = applied.public.clone();
        last = Some(applied);
    }
    last.unwrap_or_else(|| {
        apply(
            &rules,
            state.clone(),
            Visible::Rows(public.clone()),
            &to_batch(&rules, &[], 0),
            0,
        )
        .expect("apply")
    })
}

fn check(config: &Config, events: &[Event], batches: &[Vec<Event>]) -> Result<(), TestCaseError> {
    let applied = run_batches(config, batches);
    let want = expected(config, events);
    prop_assert_eq!(
        rows_of(&applied.public),
        want.clone(),
        "batches: {:?}",
        batches
    );
    let rules = config.rules(FOREVER);
    // Where the state keeps values, the visible table is a function of the state alone.
    if !rules.narrow_state() {
        let derived = apply(
            &rules,
            applied.state.clone(),
            Visible::Recompute,
            &to_batch(&rules, &[], 0),
            0,
        )
        .expect("apply");
        prop_assert_eq!(rows_of(&derived.public), want.clone());
    }
    // Applying everything again changes nothing.
    let again = apply(
        &rules,
        applied.state.clone(),
        Visible::Rows(applied.public.clone()),
        &to_batch(&rules, events, 0),
        0,
    )
    .expect("apply");
    prop_assert_eq!(rows_of(&again.public), want);
    prop_assert_eq!(again.metrics.upserted + again.metrics.deleted, 0);
    Ok(())
}

fn scd1(ignore_null: Vec<&'static str>, shared: bool) -> Config {
    Config {
        shared,
        scd2: false,
        tracked: vec![],
        ignore_null,
    }
}

fn scd2(tracked: Vec<&'static str>, ignore_null: Vec<&'static str>, shared: bool) -> Config {
    Config {
        shared,
        scd2: true,
        tracked,
        ignore_null,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn scd1_depends_only_on_the_event_set((events, batches) in delivery(true), shared in any::<bool>()) {
        check(&scd1(vec![], shared), &events, &batches)?;
    }

    #[test]
    fn scd1_ignore_null_updates_depends_only_on_the_event_set((events, batches) in delivery(true), shared in any::<bool>()) {
        check(&scd1(vec!["a"], shared), &events, &batches)?;
    }

    #[test]
    fn scd2_depends_only_on_the_event_set((events, batches) in delivery(false), shared in any::<bool>()) {
        check(&scd2(vec!["a", "b"], vec![], shared), &events, &batches)?;
    }

    #[test]
    fn scd2_track_history_depends_only_on_the_event_set((events, batches) in delivery(false), shared in any::<bool>()) {
        check(&scd2(vec!["a"], vec![], shared), &events, &batches)?;
    }

    #[test]
    fn scd2_ignore_null_updates_depends_only_on_the_event_set((events, batches) in delivery(false), shared in any::<bool>()) {
        check(&scd2(vec!["a", "b"], vec!["b"], shared), &events, &batches)?;
    }
}
