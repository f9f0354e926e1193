//! cdcflow-runtime integration tests: one binary (build economy), one module per topic.

// Tests may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

mod codec;
mod compaction;
mod containment;
mod delta_writes;
mod doubling;
mod fuzz_landing;
mod fuzz_readers;
mod kernel_examples;
mod kernel_props;
mod landing_columns;
mod merged;
mod model;
mod module_cycles;
mod mv_fingerprint;
mod partitioned;
mod recovery;
mod schedule;
mod split;
mod streamed;
mod vacuum;

/// The table location of the folder `dir`.
pub fn at(dir: &std::path::Path) -> cdcflow_plan::location::Location {
    cdcflow_plan::location::Location::Local(dir.to_path_buf())
}
