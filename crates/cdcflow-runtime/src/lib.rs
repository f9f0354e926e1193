//! Fourth stage of the cdcflow data path: **run**.
//!
//! `pipeline.yaml + *.sql` → parse → resolve → plan → **run** → CLI.
//!
//! [`run`] executes a resolved [`Pipeline`](cdcflow_plan::Pipeline) once: every flow in
//! dependency order processes what is new since its last commit (landing files not yet
//! read, rows appended to a streaming source since the version last read), and commits
//! the result to a Delta Lake table under `<storage>/tables/<name>`. Each commit carries
//! the flow's application-transaction id and batch number, and the input a batch covers
//! is written down before the commit ([`checkpoint`]), so a run that stopped anywhere is
//! resumed without skipping or repeating input.
//!
//! AUTO CDC flows apply their events with the [`cdc::kernel`], whose state (tombstones,
//! sequence values, history) lives in an internal Delta table under
//! `<storage>/state/<name>`; the published table holds only the target's columns.

pub mod allocator;
pub mod catalog;
pub mod cdc;
pub mod checkpoint;
pub mod continuous;
pub mod delta;
mod error;
pub mod event_log;
pub mod expectations;
pub mod failpoint;
pub mod files;
mod flows;
mod inputs;
pub mod landing;
pub mod lock;
pub mod metrics;
mod par;
pub mod quarantine;
mod report;
mod runner;
pub mod status;

pub use error::RunError;
pub use report::{FlowOutcome, FlowReport, RunReport};
pub use runner::{Progress, RunOptions, run};

/// Where the tables of a pipeline live, under its storage folder.
pub mod layout {
    use std::path::{Path, PathBuf};

    use cdcflow_plan::Dataset;

    /// The Delta table of a dataset: under `tables/` when published, under `private/`
    /// for `PRIVATE` and `TEMPORARY` datasets, which only the pipeline's own flows read.
    pub fn table_dir(storage: &Path, dataset: &Dataset) -> PathBuf {
        let folder = if dataset.is_published() {
            "tables"
        } else {
            "private"
        };
        storage.join(folder).join(dataset.name.to_lowercase())
    }

    /// The internal state table of an AUTO CDC target.
    pub fn state_dir(storage: &Path, dataset: &str) -> PathBuf {
        storage.join("state").join(dataset.to_lowercase())
    }

    /// The checkpoint folder of a flow.
    pub fn checkpoint_dir(storage: &Path, flow: &str) -> PathBuf {
        storage.join("checkpoints").join(flow.to_lowercase())
    }

    /// The application-transaction id a flow's commits carry.
    pub fn app_id(flow: &str) -> String {
        format!("cdcflow:{}", flow.to_lowercase())
    }
}
