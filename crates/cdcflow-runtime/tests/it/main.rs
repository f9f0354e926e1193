//! cdcflow-runtime integration tests: one binary (build economy), one module per topic.

mod kernel_examples;
mod kernel_props;
mod model;
mod recovery;
