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

fn poisoned() -> RunError {
    RunError::internal("a stateful batch's lock was poisoned")
}
