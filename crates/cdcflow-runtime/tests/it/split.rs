//! A batch applied in slices of its keys (`cdc/slice.rs`: each slice decides its own
//! keys, writes its files and returns what it changed; one commit unites them) gives
//! the tables, state and counts of the same batch applied whole: SCD type 1 and 2,
//! updates, deletes, late events, ties, tombstones collected across slices. The first
//! batch, which creates the tables, is applied whole; every later one is split. Also
//! as a property over random batches, for 2, 3 and 7 slices, and the split plan goes
//! through the codec.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cdcflow_plan::Pipeline;
use cdcflow_plan::autocdc::AutoCdcSpec;
use cdcflow_runtime::cdc::exec::{Applied, ApplyTarget, BatchSource, apply_plan, run_apply};
use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::physical_plan::displayable;
use proptest::prelude::*;

use crate::codec::{FLOWS, round_trip, source_schema, spec_of, tables, target};
use crate::recovery::pipeline_of;

/// id, value, operation, sequence.
type Event = (i64, Option<String>, &'static str, i64);

fn batch_of(events: &[Event]) -> RecordBatch {
    RecordBatch::try_new(
        source_schema(),
        vec![
            Arc::new(Int64Array::from(
                events.iter().map(|e| e.0).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                events.iter().map(|e| e.1.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                events.iter().map(|e| e.2).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                events.iter().map(|e| e.3).collect::<Vec<_>>(),
            )),
        ],
    )
    .expect("batch")
}

/// The target of `spec` under `root` for batch `b`, split into `slices`; tombstones
/// are kept 1.5 s (a batch is a second apart), and every batch is decided in shares.
fn sliced(
    pipeline: &Pipeline,
    spec: &AutoCdcSpec,
    root: &Path,
    b: i64,
    slices: usize,
) -> ApplyTarget {
    let mut t = target(pipeline, spec, root, b);
    let mut rules = (*t.rules).clone();
    rules.tombstone_retention_micros = 1_500_000;
    rules.min_shared_rows = 8;
    t.rules = Arc::new(rules);
    t.slices = slices;
    t
}

/// Applies `batches` one after another with `slices`, sending every plan through the
/// codec when `sent`: what each did, and whether each was split.
async fn apply_all(
    pipeline: &Pipeline,
    spec: &Arc<AutoCdcSpec>,
    root: &Path,
    batches: &[Vec<Event>],
    slices: usize,
    sent: bool,
) -> (Vec<Applied>, Vec<bool>) {
    let mut applied = Vec::new();
    let mut split = Vec::new();
    for (b, events) in batches.iter().enumerate() {
        let b = i64::try_from(b).expect("batch") + 1;
        let rows = vec![(format!("batch {b}"), batch_of(events))];
        let plan = apply_plan(
            spec,
            &source_schema(),
            BatchSource::Rows(rows),
            sliced(pipeline, spec, root, b, slices),
            None,
        )
        .await
        .expect("plan");
        let shown = displayable(plan.plan.as_ref()).indent(true).to_string();
        split.push(shown.contains("AutoCdcCommitExec"));
        let plan = match sent {
            true => round_trip(&plan.plan),
            false => plan,
        };
        applied.push(run_apply(plan).await.expect("apply"));
    }
    (applied, split)
}

/// `batches` applied whole and in `slices`: the same counts and tables.
async fn check(flow: &str, batches: &[Vec<Event>], slices: usize, sent: bool) -> Vec<Applied> {
    let dir = pipeline_of(&format!("split_{flow}_{slices}"), FLOWS);
    let pipeline = cdcflow_plan::load(dir.path(), &BTreeMap::new())
        .pipeline
        .expect("pipeline");
    let spec = spec_of(&pipeline, flow);
    let (whole, parts) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (expected, unsplit) = apply_all(&pipeline, &spec, whole.path(), batches, 1, false).await;
    let (mut got, split) = apply_all(&pipeline, &spec, parts.path(), batches, slices, sent).await;
    // A split batch says what each slice's task did; the sums are the batch's.
    for (applied, was_split) in got.iter_mut().zip(&split) {
        let tasks = std::mem::take(&mut applied.slices);
        let indexes: Vec<usize> = tasks.iter().map(|t| t.slice).collect();
        match was_split {
            true => assert_eq!(indexes, (0..slices).collect::<Vec<_>>()),
            false => assert!(indexes.is_empty()),
        }
        let events: u64 = tasks.iter().map(|t| t.metrics.events).sum();
        assert!(!was_split || events == applied.metrics.events, "{tasks:?}");
    }
    assert!(unsplit.iter().all(|s| !s), "{unsplit:?}");
    // The first batch creates the tables: whole. Every later one is split.
    let want: Vec<bool> = (0..batches.len()).map(|b| b > 0).collect();
    assert_eq!(split, want, "{flow} {slices}");
    assert_eq!(got, expected, "{flow} {slices}");
    let t = sliced(&pipeline, &spec, whole.path(), 1, 1);
    assert_eq!(
        tables(parts.path(), &spec, &t).await,
        tables(whole.path(), &spec, &t).await,
        "{flow} {slices}"
    );
    got
}

fn up(id: i64, v: &str, seq: i64) -> Event {
    (id, Some(v.to_string()), "U", seq)
}

fn del(id: i64, seq: i64) -> Event {
    (id, None, "D", seq)
}

/// Updates, deletes, a late event, a tie, and tombstones old enough to be collected
/// by the fourth batch, over keys that fall in every slice.
fn scenario() -> Vec<Vec<Event>> {
    vec![
        (0..40).map(|id| up(id, "a", 1)).collect(),
        (0..40)
            .filter(|id| id % 3 == 0)
            .map(|id| del(id, 2))
            .chain((0..40).filter(|id| id % 3 == 1).map(|id| up(id, "b", 3)))
            .chain([up(1, "late", 2), up(4, "tie-x", 3), up(4, "tie-a", 3)])
            .collect(),
        vec![up(100, "new", 1), up(2, "c", 5)],
        vec![up(3, "back", 1), up(6, "again", 9), up(101, "n", 1)],
    ]
}

#[tokio::test]
async fn a_batch_split_in_slices_gives_the_tables_and_counts_of_the_batch_whole() {
    for flow in ["cur_cdc", "hist_cdc"] {
        for slices in [2, 3, 7] {
            let applied = check(flow, &scenario(), slices, false).await;
            let sum = |f: fn(&Applied) -> u64| applied.iter().map(f).sum::<u64>();
            assert!(sum(|a| a.metrics.late) >= 1, "{flow}: {applied:?}");
            assert!(sum(|a| a.metrics.deleted) >= 13, "{flow}: {applied:?}");
            if flow == "cur_cdc" {
                // The second batch's 14 tombstones, collected by the fourth, but key
                // 6's, which an upsert replaced.
                assert_eq!(sum(|a| a.metrics.tombstones_collected), 13, "{applied:?}");
            }
        }
    }
}

#[tokio::test]
async fn a_split_plan_goes_through_the_codec_and_gives_the_same_tables() {
    for flow in ["cur_cdc", "hist_cdc"] {
        check(flow, &scenario(), 3, true).await;
    }
}

fn event() -> impl Strategy<Value = Event> {
    (
        0..50_i64,
        prop::option::of(0..4_u8),
        prop::sample::select(vec!["I", "U", "D"]),
        0..30_i64,
    )
        .prop_map(|(id, v, op, seq)| {
            let v = match op {
                "D" => None,
                _ => v.map(|v| format!("v{v}")),
            };
            (id, v, op, seq)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn any_batches_split_in_any_slices_give_the_tables_of_the_batches_whole(
        batches in prop::collection::vec(prop::collection::vec(event(), 1..60), 2..5),
        slices in prop::sample::select(vec![2_usize, 3, 7]),
        scd2 in any::<bool>(),
    ) {
        let flow = if scd2 { "hist_cdc" } else { "cur_cdc" };
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(check(flow, &batches, slices, false));
    }
}

#[tokio::test]
async fn a_slices_files_are_tagged_with_its_buckets_and_read_only_by_the_slices_they_concern() {
    let dir = pipeline_of("split_tags", FLOWS);
    let pipeline = cdcflow_plan::load(dir.path(), &BTreeMap::new())
        .pipeline
        .expect("pipeline");
    let spec = spec_of(&pipeline, "cur_cdc");
    let root = tempfile::tempdir().expect("dir");
    let batches = scenario();
    let (earlier, last) = batches.split_at(batches.len() - 1);
    let _ = apply_all(&pipeline, &spec, root.path(), earlier, 3, false).await;
    // The first batch's files are untagged (it was applied whole); the second's are
    // tagged with the buckets of the slice that wrote them.
    let mut untagged = 0;
    let mut tagged = 0;
    for table in ["state", "public"] {
        let t = cdcflow_runtime::delta::Table::open_dir(&root.path().join(table))
            .await
            .expect("open");
        for file in t.files().expect("files") {
            match file.tag(cdcflow_runtime::cdc::slice::TAG) {
                None => untagged += 1,
                Some(tag) => {
                    let parsed = tag
                        .split_once('-')
                        .map(|(a, b)| (a.parse::<u8>(), b.parse::<u8>()));
                    assert!(matches!(parsed, Some((Ok(_), Ok(_)))), "{tag}");
                    tagged += 1;
                }
            }
        }
    }
    assert!(
        untagged > 0 && tagged >= 3,
        "{untagged} untagged, {tagged} tagged"
    );
    // The last batch: every slice reads the untagged files and its own tagged ones.
    let at = sliced(&pipeline, &spec, root.path(), 4, 3);
    let rows = vec![("batch 4".to_string(), batch_of(&last[0]))];
    let plan = apply_plan(&spec, &source_schema(), BatchSource::Rows(rows), at, None)
        .await
        .expect("plan");
    let applied = run_apply(plan).await.expect("apply");
    let read: Vec<usize> = applied.slices.iter().map(|s| s.files_read).collect();
    assert_eq!(read.len(), 3);
    assert!(
        read.iter().all(|&r| r >= untagged && r < untagged + tagged),
        "{read:?}: {untagged} untagged, {tagged} tagged"
    );
}
