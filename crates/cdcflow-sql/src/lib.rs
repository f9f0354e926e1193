//! First stage of the cdcflow data path: the Databricks declarative-pipelines SQL dialect.
//!
//! `pipeline.yaml + *.sql` → **parse** → resolve → plan → run.
//!
//! This crate turns the text of one flow file into [`ast::Statement`]s that keep the
//! source span of every name, clause and expression. It does no I/O and knows nothing
//! about schemas: expressions and queries are sqlparser's own AST (through DataFusion's
//! re-export, so there is one sqlparser in the build), the pipeline statements around
//! them (`CREATE STREAMING TABLE`, `CREATE FLOW … AUTO CDC`, `APPLY CHANGES`, …) are ours.

pub mod ast;
pub mod dialect;
mod display;
mod error;
pub mod notebook;
mod parser;
pub mod preprocess;
mod spark_forms;
mod tokens;
pub mod watermark;

pub use datafusion::sql::sqlparser;
pub use error::ParseError;
pub use parser::{ParsedFile, parse_statements};
pub use sqlparser::tokenizer::{Location, Span};
