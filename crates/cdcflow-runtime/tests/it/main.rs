//! cdcflow-runtime integration tests: one binary (build economy), one module per topic.

mod delta_writes;
mod fuzz_landing;
mod fuzz_readers;
mod kernel_examples;
mod kernel_props;
mod model;
mod recovery;
mod streamed;
