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
pub mod carried;
pub mod cascade;
pub mod catalog;
pub mod cdc;
pub mod checkpoint;
pub mod cluster;
pub mod compact;
mod context;
pub mod continuous;
mod declared;
pub mod delta;
pub mod describe;
mod error;
pub mod event_log;
pub mod expectations;
pub mod explain;
pub mod failpoint;
mod file_metadata;
pub mod files;
mod fingerprint;
mod generated;
pub mod history;
mod identity;
mod inputs;
pub mod landing;
mod landing_remote;
pub mod layout;
pub mod lock;
pub mod metrics;
pub mod metrics_http;
pub mod panics;
mod par;
pub mod pipeline_lock;
pub mod pipeline_tests;
pub mod quarantine;
mod query_flow;
mod report;
mod runner;
pub mod schedule;
pub mod sizes;
pub mod sources;
pub mod stateful;
pub mod status;
pub mod storage;
pub mod storage_id;
pub mod syncs;
pub mod time_travel;
pub mod ui;
pub mod vacuum;

pub use error::{ErrorCode, RunError};
pub use report::{FlowOutcome, FlowReport, RunReport};
pub use runner::{Progress, RunOptions, run};
