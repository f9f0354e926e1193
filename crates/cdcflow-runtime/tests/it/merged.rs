//! Merge-on-write (deletion vectors on both tables) gives the tables, state and counts
//! of the same batches applied in memory, batch after batch, and deltalake's own scan
//! (the reader `cdcflow query`, Spark and DuckDB stand for) sees the rows cdcflow's
//! reader sees. Also as a property: any delivery of any event set, with crashes between
//! the two commits, gives the reference model's table.

use std::path::{Path, PathBuf};

use cdcflow_runtime::cdc::apply;
use cdcflow_runtime::cdc::engine::merged;
use cdcflow_runtime::cdc::engine::{Streamed, Targets};
use cdcflow_runtime::cdc::kernel::{Applied, Rules, Visible};
use cdcflow_runtime::delta::{Commit, Mode, Table, write};
use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

use crate::kernel_props::delivery;
use crate::model::{Config, Event, ModelOp, Row, expected, rows_of, state_rows, to_batch};

const ROWS: i64 = 140_000;
const FOREVER: i64 = i64::MAX / 4;

fn event(id: i64, seq: i64, op: ModelOp, a: Option<i64>) -> Event {
    Event {
        id,
        seq,
        op,
        a,
        b: Some(id % 5),
    }
}

/// A target's two tables, both taking deletion vectors.
struct Target {
    _dir: tempfile::TempDir,
    state: PathBuf,
    public: PathBuf,
    state_commit: Commit,
    public_commit: Commit,
}

impl Target {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let commit = |name: &str| Commit {
            name: name.into(),
            configuration: [("delta.enableDeletionVectors".into(), "true".into())].into(),
            ..Commit::default()
        };
        Self {
            state: dir.path().join("state"),
            public: dir.path().join("public"),
            _dir: dir,
            state_commit: commit("t__state"),
            public_commit: commit("t"),
        }
    }

    /// Applies `events` (merge-on-write where it applies, else in memory); with `crash`,
    /// the state's commit is lost and the batch applied again.
    async fn apply(&self, rules: &Rules, events: &RecordBatch, crash: bool) -> bool {
        let merged = self.stage(rules, events).await;
        let was_merged = merged.is_some();
        match merged {
            Some(done) if crash => {
                done.public
                    .commit(Mode::Merge, &self.public_commit)
                    .await
                    .expect("published commit");
                let again = self.stage(rules, events).await.expect("merged again");
                self.commit(again).await;
            }
            Some(done) => self.commit(done).await,
            None => {
                let state = Table::open_dir(&self.state).await.expect("open");
                let public = Table::open_dir(&self.public).await.expect("open");
                let applied = apply(
                    rules,
                    state
                        .read_batches(&rules.state_schema())
                        .await
                        .expect("read"),
                    Visible::Rows(
                        public
                            .read_batches(&rules.public_schema())
                            .await
                            .expect("read"),
                    ),
                    events,
                    0,
                )
                .expect("in memory");
                self.overwrite(rules, applied).await;
            }
        }
        was_merged
    }

    async fn stage(&self, rules: &Rules, events: &RecordBatch) -> Option<Streamed> {
        let state = Table::open_dir(&self.state).await.expect("open");
        let public = Table::open_dir(&self.public).await.expect("open");
        let targets = Targets {
            state: &state,
            state_commit: &self.state_commit,
            public: &public,
            public_commit: &self.public_commit,
        };
        let merge = merged::prepare(rules, &targets, events, 0).expect("prepare")?;
        Some(
            merge
                .apply(&targets, events.clone())
                .await
                .expect("merged apply"),
        )
    }

    async fn commit(&self, done: Streamed) {
        let (state, public) = (
            Table::open_dir(&self.state).await.expect("open"),
            Table::open_dir(&self.public).await.expect("open"),
        );
        let targets = Targets {
            state: &state,
            state_commit: &self.state_commit,
            public: &public,
            public_commit: &self.public_commit,
        };
        done.commit(&targets).await.expect("commit");
    }

    async fn overwrite(&self, rules: &Rules, applied: Applied) {
        write(
            &crate::at(&self.public),
            &rules.public_schema(),
            applied.public,
            Mode::Overwrite,
            &self.public_commit,
        )
        .await
        .expect("write published");
        write(
            &crate::at(&self.state),
            &rules.state_schema(),
            applied.state,
            Mode::Overwrite,
            &self.state_commit,
        )
        .await
        .expect("write state");
    }

    async fn published(&self, rules: &Rules) -> Vec<Row> {
        let table = Table::open_dir(&self.public).await.expect("open");
        rows_of(
            &table
                .read_batches(&rules.public_schema())
                .await
                .expect("read"),
        )
    }

    async fn state(&self, rules: &Rules) -> Vec<String> {
        let table = Table::open_dir(&self.state).await.expect("open");
        state_rows(
            &table
                .read_batches(&rules.state_schema())
                .await
                .expect("read"),
        )
    }
}

/// The rows deltalake's DataFusion scan gives for the table at `dir`.
async fn scanned(dir: &Path, rules: &Rules) -> Vec<Row> {
    let table = Table::open_dir(dir)
        .await
        .expect("open")
        .table
        .expect("table");
    let ctx = SessionContext::new();
    ctx.register_table("t", table.table_provider().await.expect("provider"))
        .expect("register");
    let columns: Vec<String> = rules
        .public_schema()
        .fields()
        .iter()
        .map(|f| format!("\"{}\"", f.name()))
        .collect();
    let batches: Vec<RecordBatch> = ctx
        .sql(&format!("SELECT {} FROM t", columns.join(", ")))
        .await
        .expect("sql")
        .collect()
        .await
        .expect("collect");
    rows_of(&batches)
}

/// Updates, deletes, late and tied events, nulls and new keys, by `round`.
fn batch(round: i64) -> Vec<Event> {
    let seq = 10 + 10 * round;
    let mut events = Vec::new();
    for id in (round..ROWS).step_by(7) {
        let op = match id % 3 {
            0 => ModelOp::Delete,
            _ => ModelOp::Upsert,
        };
        events.push(event(id, seq, op, (id % 2 == 0).then_some(id + round)));
    }
    for id in (0..ROWS).step_by(11) {
        events.push(event(id, 5, ModelOp::Upsert, Some(-id))); // late
    }
    for id in (0..ROWS).step_by(13) {
        events.push(event(id, seq, ModelOp::Upsert, Some(id + 2))); // ties with the above
    }
    for id in (0..ROWS).step_by(17) {
        events.push(event(id, seq - 10, ModelOp::Upsert, Some(id + 3))); // ties the stored
    }
    for id in ROWS + 5_000 * round..ROWS + 5_000 * (round + 1) {
        events.push(event(id, 1, ModelOp::Upsert, Some(id)));
    }
    events
}

async fn check(config: Config) {
    let rules = config.rules(FOREVER);
    let target = Target::new();
    let first: Vec<Event> = (0..ROWS)
        .map(|id| event(id, 10, ModelOp::Upsert, Some(id)))
        .collect();
    let first = to_batch(&rules, &first, 0);
    assert!(!target.apply(&rules, &first, false).await, "a new table");
    let mut in_memory = apply(&rules, vec![], Visible::Rows(vec![]), &first, 0).expect("first");
    // Rounds 3 and 4 touch only keys above every stored one, then only those: files
    // whose key range holds none of them are left unread.
    for round in 1..=4 {
        let events = match round {
            1 | 2 => batch(round),
            3 => (0..1_000)
                .map(|i| event(4 * ROWS + i, 100, ModelOp::Upsert, Some(i)))
                .collect(),
            _ => (0..1_000)
                .step_by(3)
                .map(|i| event(4 * ROWS + i, 110, ModelOp::Delete, None))
                .chain(
                    (1..1_000)
                        .step_by(3)
                        .map(|i| event(4 * ROWS + i, 90, ModelOp::Upsert, Some(-i))),
                )
                .chain(
                    (2..1_000)
                        .step_by(3)
                        .map(|i| event(4 * ROWS + i, 120, ModelOp::Upsert, Some(-i))),
                )
                .collect(),
        };
        let events = to_batch(&rules, &events, 0);
        assert!(target.apply(&rules, &events, round == 2).await, "merged");
        in_memory = apply(
            &rules,
            in_memory.state,
            Visible::Rows(in_memory.public),
            &events,
            0,
        )
        .expect("in memory");
        let want = rows_of(&in_memory.public);
        assert_eq!(target.published(&rules).await, want, "round {round}");
        assert_eq!(scanned(&target.public, &rules).await, want, "round {round}");
        assert_eq!(
            target.state(&rules).await,
            state_rows(&in_memory.state),
            "round {round}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn narrow_scd1_merged_equals_in_memory() {
    check(Config {
        scd2: false,
        tracked: vec![],
        ignore_null: vec![],
        shared: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scd1_ignore_null_updates_merged_equals_in_memory() {
    check(Config {
        scd2: false,
        tracked: vec![],
        ignore_null: vec!["a"],
        shared: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scd2_merged_equals_in_memory() {
    check(Config {
        scd2: true,
        tracked: vec!["a", "b"],
        ignore_null: vec![],
        shared: false,
    })
    .await;
}

fn run_deliveries(config: &Config, batches: &[Vec<Event>], crashes: &[bool]) -> Vec<Row> {
    let rules = config.rules(FOREVER);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let target = Target::new();
        for (i, batch) in batches.iter().enumerate() {
            let events = to_batch(&rules, batch, 0);
            let crash = crashes.get(i).copied().unwrap_or(false);
            target.apply(&rules, &events, crash).await;
        }
        let mine = target.published(&rules).await;
        if Table::open_dir(&target.public)
            .await
            .expect("open")
            .exists()
        {
            assert_eq!(scanned(&target.public, &rules).await, mine);
        }
        mine
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]

    #[test]
    fn merged_scd1_depends_only_on_the_event_set(
        (events, batches) in delivery(true),
        crashes in proptest::collection::vec(any::<bool>(), 8),
    ) {
        let config = Config { scd2: false, tracked: vec![], ignore_null: vec![], shared: false };
        prop_assert_eq!(run_deliveries(&config, &batches, &crashes), expected(&config, &events));
    }

    #[test]
    fn merged_scd2_depends_only_on_the_event_set(
        (events, batches) in delivery(false),
        crashes in proptest::collection::vec(any::<bool>(), 8),
    ) {
        let config = Config { scd2: true, tracked: vec![], ignore_null: vec![], shared: false };
        prop_assert_eq!(run_deliveries(&config, &batches, &crashes), expected(&config, &events));
    }
}
