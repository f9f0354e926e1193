//! A batch applied with the tables streaming through gives the tables, state and counts
//! of the same batch applied in memory: for a narrow SCD type 1 state, one with IGNORE
//! NULL UPDATES, and SCD type 2, over tables of two files each larger than the rows a
//! new file's encoding is judged on.

use cdcflow_runtime::cdc::apply;
use cdcflow_runtime::cdc::engine::streamed::{self, Targets};
use cdcflow_runtime::cdc::kernel::{Applied, Visible};
use cdcflow_runtime::delta::{Commit, Mode, Table, write};
use datafusion::arrow::array::RecordBatch;

use crate::model::{Config, Event, ModelOp, rows_of, state_rows, to_batch};

const ROWS: i64 = 140_000;

fn event(id: i64, seq: i64, op: ModelOp, a: Option<i64>) -> Event {
    Event {
        id,
        seq,
        op,
        a,
        b: Some(id % 5),
    }
}

/// The second batch: updates, deletes, late and duplicate events, nulls, new keys.
fn second_batch() -> Vec<Event> {
    let mut events = Vec::new();
    for id in (0..ROWS).step_by(7) {
        let op = if id % 3 == 0 {
            ModelOp::Delete
        } else {
            ModelOp::Upsert
        };
        events.push(event(id, 20, op, (id % 2 == 0).then_some(id + 1)));
    }
    for id in (0..ROWS).step_by(11) {
        events.push(event(id, 5, ModelOp::Upsert, Some(-id))); // late: older than the first
    }
    for id in (0..ROWS).step_by(13) {
        events.push(event(id, 20, ModelOp::Upsert, Some(id + 2))); // ties with the above
    }
    for id in ROWS..ROWS + 5_000 {
        events.push(event(id, 1, ModelOp::Upsert, Some(id)));
    }
    events
}

/// Writes `batches` as the table at `dir` in two commits, so that it has two files.
async fn two_files(
    dir: &std::path::Path,
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    name: &str,
) {
    let all = datafusion::arrow::compute::concat_batches(schema, batches).expect("concat");
    let half = all.num_rows() / 2;
    let commit = Commit {
        name: name.into(),
        ..Commit::default()
    };
    for (i, part) in [all.slice(0, half), all.slice(half, all.num_rows() - half)]
        .into_iter()
        .enumerate()
    {
        let mode = if i == 0 {
            Mode::Overwrite
        } else {
            Mode::Append
        };
        write(&crate::at(dir), schema, vec![part], mode, &commit)
            .await
            .expect("write");
    }
}

async fn check(config: Config) {
    let rules = config.rules(i64::MAX / 4);
    let first: Vec<Event> = (0..ROWS)
        .map(|id| event(id, 10, ModelOp::Upsert, Some(id)))
        .collect();
    let first = apply(
        &rules,
        vec![],
        Visible::Rows(vec![]),
        &to_batch(&rules, &first, 0),
        0,
    )
    .expect("first batch");
    let events = to_batch(&rules, &second_batch(), 1);
    let in_memory: Applied = apply(
        &rules,
        first.state.clone(),
        Visible::Rows(first.public.clone()),
        &events,
        1,
    )
    .expect("in memory");

    let dir = tempfile::tempdir().expect("tempdir");
    let (state_dir, public_dir) = (dir.path().join("state"), dir.path().join("public"));
    two_files(&state_dir, &rules.state_schema(), &first.state, "t__state").await;
    two_files(&public_dir, &rules.public_schema(), &first.public, "t").await;
    let state = Table::open_dir(&state_dir).await.expect("open");
    let public = Table::open_dir(&public_dir).await.expect("open");
    let (public_commit, state_commit) = (
        Commit {
            name: "t".into(),
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
    let done = streamed::apply(&rules, &targets, &events, 1)
        .await
        .expect("streamed")
        .expect("taken streaming");
    assert_eq!(done.metrics, in_memory.metrics);
    assert_eq!(done.public_rows, in_memory.public_rows());
    done.commit(&targets).await.expect("commit");

    let public = Table::open_dir(&public_dir).await.expect("open");
    let state = Table::open_dir(&state_dir).await.expect("open");
    let streamed_public = public
        .read_batches(&rules.public_schema())
        .await
        .expect("read");
    let streamed_state = state
        .read_batches(&rules.state_schema())
        .await
        .expect("read");
    assert_eq!(rows_of(&streamed_public), rows_of(&in_memory.public));
    assert_eq!(state_rows(&streamed_state), state_rows(&in_memory.state));
}

#[tokio::test(flavor = "multi_thread")]
async fn narrow_scd1_streamed_equals_in_memory() {
    check(Config {
        scd2: false,
        tracked: vec![],
        ignore_null: vec![],
        shared: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scd1_ignore_null_updates_streamed_equals_in_memory() {
    check(Config {
        scd2: false,
        tracked: vec![],
        ignore_null: vec!["a"],
        shared: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scd2_streamed_equals_in_memory() {
    check(Config {
        scd2: true,
        tracked: vec!["a", "b"],
        ignore_null: vec![],
        shared: false,
    })
    .await;
}
