//! cdcflow-runtime integration tests: one binary (build economy), one module per topic.

mod fuzz_readers;
mod kernel_examples;
mod kernel_props;
mod model;
mod recovery;
