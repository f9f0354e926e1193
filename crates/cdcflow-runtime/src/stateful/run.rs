//! One batch of a flow's stateful operator: the state it starts from, the version its
//! execution plan writes, and what it did, handed from the plan to the flow's commit.

use std::fmt;
use std::sync::Mutex;

use datafusion::arrow::array::RecordBatch;

use super::metrics::StateMetrics;
use super::store::{Meta, StateStore, Version};
use crate::RunError;

/// What a batch of a stateful operator did, for the flow's commit.
#[derive(Default)]
pub(crate) struct Outcome {
    pub watermark_micros: i64,
    pub seen_rows: bool,
    pub inputs: std::collections::BTreeMap<String, i64>,
    pub late: Option<RecordBatch>,
    pub metrics: StateMetrics,
}

/// One batch of a flow's stateful operator: the state it starts from, the version it
/// writes (taken by the execution plan), and what it did.
pub(crate) struct StateRun {
    pub store: StateStore,
    /// The state after the last committed batch.
    pub before: Option<Meta>,
    pub batch: i64,
    /// What the state is of ([`Meta::operator`]).
    pub operator: String,
    version: Mutex<Option<Version>>,
    outcome: Mutex<Option<Outcome>>,
}

impl fmt::Debug for StateRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateRun")
            .field("batch", &self.batch)
            .field("before", &self.before)
            .finish_non_exhaustive()
    }
}

impl StateRun {
    pub fn new(
        store: StateStore,
        before: Option<Meta>,
        batch: i64,
        version: Version,
        operator: String,
    ) -> Self {
        Self {
            store,
            before,
            batch,
            operator,
            version: Mutex::new(Some(version)),
            outcome: Mutex::new(None),
        }
    }

    pub fn watermark_micros(&self) -> i64 {
        self.before.as_ref().map_or(0, |m| m.watermark_micros)
    }

    /// Each input's own watermark after the batch before, when that batch ran in this
    /// process: a run of the query (`cdcflow run`, or `run --continuous` across its
    /// cycles) keeps its inputs' watermarks, and a new run starts them afresh.
    pub fn inputs_this_run(&self) -> std::collections::BTreeMap<String, i64> {
        self.before
            .as_ref()
            .filter(|m| m.process == process())
            .map(|m| m.inputs.clone())
            .unwrap_or_default()
    }

    pub fn seen_rows(&self) -> bool {
        self.before.as_ref().is_some_and(|m| m.seen_rows)
    }

    /// The version to write, once: a batch's plan runs once.
    pub fn take_version(&self) -> Result<Version, RunError> {
        self.version
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .ok_or_else(|| RunError::internal("a stateful batch's plan ran twice"))
    }

    /// Hands back the version written and what the batch did.
    pub fn done(&self, version: Version, outcome: Outcome) -> Result<(), RunError> {
        *self.version.lock().map_err(|_| poisoned())? = Some(version);
        *self.outcome.lock().map_err(|_| poisoned())? = Some(outcome);
        Ok(())
    }

    /// The version written and what the batch did, once its plan has run.
    pub fn finished(&self) -> Result<(Version, Outcome), RunError> {
        let outcome = self.outcome.lock().map_err(|_| poisoned())?.take();
        let version = self.version.lock().map_err(|_| poisoned())?.take();
        match (version, outcome) {
            (Some(v), Some(o)) => Ok((v, o)),
            _ => Err(RunError::internal(
                "a stateful batch's plan did not run its operator",
            )),
        }
    }
}

/// This process, as a state version records the run that wrote it: its id and the
/// time it first asked (an id alone is reused by later processes).
pub(crate) fn process() -> String {
    static PROCESS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PROCESS
        .get_or_init(|| {
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros())
                .unwrap_or_default();
            format!("{}@{started}", std::process::id())
        })
        .clone()
}

fn poisoned() -> RunError {
    RunError::internal("a stateful batch's lock was poisoned")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run_after(process: String) -> StateRun {
        let dir = std::env::temp_dir();
        let checkpoint =
            crate::checkpoint::Checkpoint::in_storage(&crate::storage::Storage::local(&dir), "f")
                .expect("checkpoint");
        let store = StateStore::of(&checkpoint, "f").expect("store");
        let before = Meta {
            batch: 0,
            watermark_micros: 10,
            seen_rows: true,
            inputs: [("left".to_string(), 40), ("right".to_string(), 10)].into(),
            process,
            rows: 0,
            growing_batches: 0,
            operator: String::new(),
            layout: 0,
            files: Vec::new(),
        };
        let version = store.begin_dry(1, Some(&before)).await.expect("version");
        StateRun::new(store, Some(before), 1, version, String::new())
    }

    #[tokio::test]
    async fn inputs_keep_their_watermarks_within_a_run_of_the_query_only() {
        // A batch before in this process: the inputs go on from where they were.
        let same = run_after(process()).await;
        assert_eq!(same.inputs_this_run()["left"], 40);
        // A batch of an earlier run (another process): they start afresh.
        let other = run_after("1@1".into()).await;
        assert!(other.inputs_this_run().is_empty());
        assert_eq!(other.watermark_micros(), 10);
    }
}
