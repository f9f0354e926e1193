//! Second stage of the cdcflow data path: **resolve** and **plan**.
//!
//! `pipeline.yaml + *.sql` → parse → **resolve → plan** → run.
//!
//! [`load`] reads a pipeline folder, parses every flow file, builds the dataset graph,
//! derives schemas and compiles each flow to a DataFusion [`LogicalPlan`]
//! (AUTO CDC flows end in an [`autocdc::AutoCdcNode`]). Problems are [`Diagnostic`]s
//! pointing at `file:line:col`; nothing here reads table data or writes anything.
//!
//! [`LogicalPlan`]: datafusion::logical_expr::LogicalPlan

pub mod autocdc;
mod bind;
pub mod config;
pub mod connections;
pub mod delta_schema;
pub mod df_message;
pub mod diagnostic;
pub mod file_metadata;
pub mod functions;
pub mod ident_case;
pub mod lineage;
pub mod list_files;
pub mod location;
pub mod names;
pub mod namespace;
pub mod pipeline;
pub mod planner;
pub mod read_files;
pub mod read_kafka;
pub mod read_mysql;
pub mod read_postgres;
pub mod read_query;
mod relations;
mod resolve;
pub mod snapshot;
mod sql_spans;
pub mod stateful;
pub mod stored_shape;
pub mod stream_aggregate;
pub mod stream_dedup;
pub mod stream_join;
pub mod suggest;
pub mod syncs;
mod table_functions;
pub mod table_properties;
pub mod types;
pub mod volatile_filters;

/// The parser's words that a planned pipeline's readers need, so that they need not
/// depend on the parser (the runtime does not).
pub use cdcflow_sql::Span;
pub use cdcflow_sql::ast::{DatasetKind, Identity, OnViolation};
pub use cdcflow_sql::watermark::Watermark;
pub use diagnostic::{Diagnostic, Located, Severity};
pub use pipeline::{Dataset, ExternalDelta, FileId, Flow, FlowKind, Input, Pipeline, SourceFile};
pub use resolve::syncs::{Sync, generated_path};
pub use resolve::{Discovered, Loaded, load, load_discovered, load_with_columns};
