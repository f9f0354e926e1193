//! Third stage of the cdcflow data path: **run** — incremental file sources, the AUTO CDC
//! apply (SCD type 1 and 2), Delta Lake sinks and checkpoints.
//!
//! `pipeline.yaml + *.sql` → parse → resolve → plan → **run**.
//!
//! Not built yet: this crate is where issue "`cdcflow run`" lands. It is a workspace
//! member already so that the dependency build (delta-rs) is cached by CI.
