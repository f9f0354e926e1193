//! A target's first batch applied a partition of its keys at a time gives the published
//! table, state and counts of the same batch applied in memory at once: for a narrow
//! SCD type 1 state, one with IGNORE NULL UPDATES, and SCD type 2, with deletes,
//! out-of-order sequences, duplicates and (separately) a TRUNCATE, over many small
//! partitions and event parts; and so with the published table partitioned or
//! clustered (`PARTITIONED BY`, `CLUSTER BY`).

use cdcflow_runtime::cdc::apply;
use cdcflow_runtime::cdc::engine::Targets;
use cdcflow_runtime::cdc::engine::partitioned::{PARTITION_ROWS, apply_in_partitions};
use cdcflow_runtime::cdc::kernel::{Applied, Visible};
use cdcflow_runtime::delta::{Commit, Table};
use datafusion::arrow::array::RecordBatch;

use crate::model::{Config, Event, ModelOp, rows_of, state_rows, to_batch};

const KEYS: i64 = 3_000;

fn event(id: i64, seq: i64, op: ModelOp, a: Option<i64>) -> Event {
    Event {
        id,
        seq,
        op,
        a,
        b: Some(id % 3),
    }
}

/// A first batch in arrival order: inserts, later updates arriving before earlier
/// ones, deletes (some followed by a re-insert), nulls, and re-delivered events.
fn first_batch(truncate: bool) -> Vec<Event> {
    let mut events = Vec::new();
    for id in (0..KEYS).rev() {
        events.push(event(
            id,
            30,
            ModelOp::Upsert,
            (id % 4 != 0).then_some(id + 30),
        ));
    }
    for id in (0..KEYS).step_by(3) {
        events.push(event(id, 10, ModelOp::Upsert, Some(id + 10))); // out of order
    }
    for id in (0..KEYS).step_by(5) {
        let op = if id % 2 == 0 {
            ModelOp::Delete
        } else {
            ModelOp::Upsert
        };
        events.push(event(id, 40, op, None));
    }
    for id in (0..KEYS).step_by(10) {
        events.push(event(id, 50, ModelOp::Upsert, Some(id + 50))); // re-insert
    }
    if truncate {
        events.push(Event {
            id: 0,
            seq: 35,
            op: ModelOp::Truncate,
            a: None,
            b: None,
        });
    }
    // Re-deliveries of a share of everything above.
    let again: Vec<Event> = events.iter().step_by(7).copied().collect();
    events.extend(again);
    events
}

/// `events` cut into parts of `size` rows, as the flow's expressions give them.
fn parts(events: &RecordBatch, size: usize) -> Vec<RecordBatch> {
    (0..events.num_rows())
        .step_by(size)
        .map(|start| events.slice(start, size.min(events.num_rows() - start)))
        .collect()
}

async fn check(config: Config, truncate: bool) {
    check_laid_out(config, truncate, None, vec![]).await;
}

/// [`check`] with the published table partitioned by `partitions` and clustered by
/// `cluster`.
async fn check_laid_out(
    config: Config,
    truncate: bool,
    partitions: Option<Vec<String>>,
    cluster: Vec<String>,
) {
    let rules = config.rules(i64::MAX / 4);
    let events = to_batch(&rules, &first_batch(truncate), 7);
    let in_memory: Applied =
        apply(&rules, vec![], Visible::Rows(vec![]), &events, 7).expect("in memory");

    let dir = tempfile::tempdir().expect("tempdir");
    let (state_dir, public_dir) = (dir.path().join("state"), dir.path().join("public"));
    let state = Table::open_dir(&state_dir).await.expect("open");
    let public = Table::open_dir(&public_dir).await.expect("open");
    let (public_commit, state_commit) = (
        Commit {
            name: "t".into(),
            partition_columns: partitions.clone(),
            cluster_columns: cluster,
            ..Commit::default()
        },
        Commit {
            name: "t__state".into(),
            ..Commit::default()
        },
    );
    let targets = Targets {
        state: &state,
        state_commit: &state_commit,
        public: &public,
        public_commit: &public_commit,
    };
    // About 14 partitions of 400 events, from parts that are not partition-sized.
    let partition_rows = 400;
    assert!(events.num_rows() > 10 * partition_rows && partition_rows < PARTITION_ROWS);
    let done = apply_in_partitions(&rules, &targets, &parts(&events, 999), 7, partition_rows)
        .await
        .expect("partitioned")
        .expect("taken by partitions: the target has no tables");
    assert_eq!(done.metrics, in_memory.metrics);
    assert_eq!(done.public_rows, in_memory.public_rows());
    done.commit(&targets).await.expect("commit");

    let public = Table::open_dir(&public_dir).await.expect("open");
    let state = Table::open_dir(&state_dir).await.expect("open");
    let public_rows = public
        .read_batches(&rules.public_schema())
        .await
        .expect("read");
    let state_rows_read = state
        .read_batches(&rules.state_schema())
        .await
        .expect("read");
    let expected_public = rows_of(&in_memory.public);
    assert!(expected_public.len() > KEYS as usize / 10, "a real table");
    assert_eq!(rows_of(&public_rows), expected_public);
    assert_eq!(state_rows(&state_rows_read), state_rows(&in_memory.state));
    if let Some(partitions) = &partitions {
        let stored = public
            .table
            .as_ref()
            .and_then(|t| t.snapshot().ok())
            .map(|s| s.metadata().partition_columns().to_vec());
        assert_eq!(stored.as_ref(), Some(partitions));
        for column in partitions {
            let folders = std::fs::read_dir(&public_dir)
                .expect("table folder")
                .filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{column}="))
                })
                .count();
            assert!(folders >= 2, "one folder per value of `{column}`");
        }
    }

    // The second batch finds tables: it is not the partitions' to apply.
    let again = apply_in_partitions(&rules, &targets_of(&state, &public, &targets), &[], 8, 1)
        .await
        .expect("declined");
    assert!(again.is_none());
}

fn targets_of<'a>(state: &'a Table, public: &'a Table, like: &Targets<'a>) -> Targets<'a> {
    Targets {
        state,
        state_commit: like.state_commit,
        public,
        public_commit: like.public_commit,
    }
}

fn scd1() -> Config {
    Config {
        scd2: false,
        tracked: vec![],
        ignore_null: vec![],
        shared: false,
    }
}

fn scd1_ignore_null() -> Config {
    Config {
        scd2: false,
        tracked: vec![],
        ignore_null: vec!["a"],
        shared: true,
    }
}

fn scd2() -> Config {
    Config {
        scd2: true,
        tracked: vec!["a"],
        ignore_null: vec![],
        shared: true,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn narrow_scd1_partitioned_equals_in_memory() {
    check(scd1(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scd1_ignore_null_updates_partitioned_equals_in_memory() {
    check(scd1_ignore_null(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scd2_partitioned_equals_in_memory() {
    check(scd2(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn truncate_in_a_first_batch_partitioned_equals_in_memory() {
    check(scd1(), true).await;
    check(scd2(), true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_published_table_holds_the_same_rows() {
    check_laid_out(scd1(), false, Some(vec!["b".into()]), vec![]).await;
    check_laid_out(scd2(), true, Some(vec!["b".into()]), vec![]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clustered_published_table_holds_the_same_rows() {
    check_laid_out(scd1_ignore_null(), false, None, vec!["a".into()]).await;
}
