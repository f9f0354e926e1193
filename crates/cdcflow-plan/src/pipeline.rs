//! The resolved pipeline: datasets, the flows that feed them, and their order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use cdcflow_sql::Span;
use cdcflow_sql::ast::{CreateDataset, DatasetKind};
use cdcflow_sql::preprocess::Preprocessed;
use cdcflow_sql::sqlparser::ast::Query;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::LogicalPlan;

use crate::autocdc::AutoCdcSpec;
use crate::config::PipelineConfig;
use crate::diagnostic::Located;
use crate::location::Location;
use crate::read_files::ReadFiles;
use crate::read_kafka::ReadKafka;
use crate::read_mysql::ReadMysql;
use crate::read_postgres::ReadPostgres;
use crate::read_query::ReadQuery;

/// Index of a file in [`Pipeline::files`].
pub type FileId = usize;

/// One SQL file of the pipeline, as written and as parsed.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Relative to the pipeline folder.
    pub path: String,
    /// The text as written (diagnostics quote it).
    pub text: Arc<str>,
    /// The text after `${key}` substitution, with the map back.
    pub pre: Preprocessed,
}

impl SourceFile {
    /// A place in this file; `span` is in substituted coordinates.
    pub fn locate(&self, span: Span, label: impl Into<String>) -> Located {
        Located {
            path: self.path.clone(),
            text: Arc::clone(&self.text),
            span: self.pre.original_span(span),
            label: label.into(),
        }
    }
}

/// A table or view of the pipeline.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The name it is known by (case kept, lookups ignore case): its last part, or as
    /// many of its last parts as tell it apart from the pipeline's other datasets
    /// (`silver.orders` beside `bronze.orders`). Its folder under the storage is named so.
    pub name: String,
    /// Its catalog, schema and name (`crate::namespace`).
    pub identity: crate::namespace::Identity,
    pub kind: DatasetKind,
    pub def: CreateDataset,
    pub file: FileId,
    /// Known once the definition or its inputs give it; `None` when it cannot be known
    /// without data (then checks that need it are skipped with a note).
    pub schema: Option<SchemaRef>,
    /// `TBLPROPERTIES`, keys as written.
    pub properties: BTreeMap<String, String>,
    /// `PARTITIONED BY`: the Delta partition columns, named as the schema names them
    /// (as written while the schema is unknown).
    pub partition_columns: Vec<String>,
    /// `CLUSTER BY`: the columns rows are sorted by within the files a write makes.
    pub cluster_columns: Vec<String>,
    /// For the view made of an AUTO CDC flow's `FROM (query)`: that flow's name. Such
    /// a view is the flow's own; nothing else reads it.
    pub source_of: Option<String>,
}

impl Dataset {
    /// True for datasets stored as tables others may read: not private, not views.
    pub fn is_published(&self) -> bool {
        !self.def.private && self.kind != DatasetKind::View
    }
}

/// Where a flow reads from.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Another dataset of the pipeline; `streaming` for `STREAM(name)`.
    Dataset { name: String, streaming: bool },
    /// Files in a landing folder (`read_files`), or an external table stored as files.
    Files(ReadFiles),
    /// A PostgreSQL table's snapshot and changes (`read_postgres`).
    Postgres(ReadPostgres),
    /// A MySQL or MariaDB table's snapshot and changes from its binary log
    /// (`read_mysql`).
    Mysql(ReadMysql),
    /// A query's rows above a high watermark (`read_query`).
    Query(ReadQuery),
    /// An external Delta table (pipeline.yaml `external_tables:`).
    Delta(ExternalDelta),
    /// The records of Kafka topics (`read_kafka`).
    Kafka(ReadKafka),
}

impl Input {
    /// Whether a server gives this input (PostgreSQL, MySQL, a `read_query` database, Kafka),
    /// not a file or table of the pipeline's machine: it is polled, not watched, and
    /// reading it moves a slot, a watermark or offsets.
    pub fn reads_a_server(&self) -> bool {
        matches!(
            self,
            Self::Postgres(_) | Self::Mysql(_) | Self::Query(_) | Self::Kafka(_)
        )
    }
}

/// A Delta table from outside the pipeline, read from its folder and never written.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalDelta {
    /// The table name that stands for it in the flow's rewritten query.
    pub table: String,
    /// Its name as pipeline.yaml declares it.
    pub name: String,
    /// A local folder (absolute: a relative path is taken from the pipeline folder) or
    /// an object-store URL.
    pub location: Location,
    /// Declared, or read from the local table's log.
    pub schema: SchemaRef,
    /// `STREAM(name)`: each batch reads the rows of the commits after the last read.
    pub streaming: bool,
}

impl ExternalDelta {
    /// The key of the version read in a flow's checkpoint (apart from the datasets').
    pub fn offset_key(&self) -> String {
        format!("external:{}", self.name)
    }
}

/// What a flow computes.
#[derive(Debug, Clone)]
pub enum FlowKind {
    /// A query: the defining query of a table or view, or an `INSERT INTO … BY NAME`
    /// append flow. The query is rewritten so that every dataset reference is a plain
    /// table name and every `read_files` call a table named by [`ReadFiles::table`].
    Query { query: Box<Query>, append: bool },
    /// An AUTO CDC flow.
    AutoCdc(Arc<AutoCdcSpec>),
}

/// A flow: a computation writing into one dataset.
#[derive(Debug, Clone)]
pub struct Flow {
    pub name: String,
    /// The dataset written, by its declared name.
    pub target: String,
    pub kind: FlowKind,
    pub inputs: Vec<Input>,
    /// Runs once (and again on full refresh).
    pub once: bool,
    pub file: FileId,
    pub span: Span,
    /// The DataFusion plan, when every input schema is known.
    pub plan: Option<LogicalPlan>,
    /// The WATERMARK clauses of the flow's query, each naming its from item by alias.
    pub watermarks: Vec<cdcflow_sql::watermark::Watermark>,
}

impl Flow {
    /// The rows the flow gives its target: its query's, or an AUTO CDC flow's target
    /// rows (its plan returns what the apply did).
    pub fn rows_schema(&self) -> Option<&datafusion::common::DFSchemaRef> {
        let plan = self.plan.as_ref()?;
        Some(match crate::autocdc::AutoCdcNode::of(plan) {
            Some(node) => &node.target,
            None => plan.schema(),
        })
    }

    /// The names under which the flow's query scans what it reads as a stream;
    /// `kind_of` gives a dataset's kind by name. The runtime reads STREAM(materialized
    /// view) whole, so that is no stream.
    pub fn stream_names(&self, kind_of: impl Fn(&str) -> Option<DatasetKind>) -> Vec<String> {
        self.inputs
            .iter()
            .filter_map(|i| match i {
                Input::Dataset {
                    name,
                    streaming: true,
                } => (kind_of(name) != Some(DatasetKind::MaterializedView)).then(|| name.clone()),
                Input::Files(rf) if rf.streaming => Some(rf.table.clone()),
                Input::Delta(d) if d.streaming => Some(d.table.clone()),
                Input::Postgres(rp) => Some(rp.table.clone()),
                Input::Mysql(rm) => Some(rm.table.clone()),
                Input::Query(rq) => Some(rq.table.clone()),
                Input::Kafka(rk) => Some(rk.table.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn auto_cdc(&self) -> Option<&AutoCdcSpec> {
        match &self.kind {
            FlowKind::AutoCdc(s) => Some(s),
            FlowKind::Query { .. } => None,
        }
    }
}

/// A pipeline folder after parsing, resolution and planning.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub root: PathBuf,
    pub config: PipelineConfig,
    pub files: Vec<SourceFile>,
    pub datasets: Vec<Dataset>,
    pub flows: Vec<Flow>,
    /// Flow indexes in an order where every flow comes after the flows feeding its inputs.
    pub order: Vec<usize>,
    /// `syncs:` of pipeline.yaml as this load expanded them.
    pub syncs: Vec<crate::resolve::syncs::Sync>,
}

impl Pipeline {
    /// Whether running `flow` reads a server: one of its inputs does, or a view it
    /// reads does (a view is run by its readers), however deep.
    pub fn reads_a_server(&self, flow: &Flow) -> bool {
        let mut seen: Vec<&str> = Vec::new();
        let mut inputs: Vec<&Input> = flow.inputs.iter().collect();
        while let Some(input) = inputs.pop() {
            if input.reads_a_server() {
                return true;
            }
            let Input::Dataset { name, .. } = input else {
                continue;
            };
            let is_view = self
                .dataset(name)
                .is_some_and(|d| d.kind == DatasetKind::View);
            if !is_view || seen.iter().any(|s| s.eq_ignore_ascii_case(name)) {
                continue;
            }
            seen.push(name);
            for f in self.flows_into(name) {
                inputs.extend(f.inputs.iter());
            }
        }
        false
    }

    pub fn dataset(&self, name: &str) -> Option<&Dataset> {
        self.datasets
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
    }

    pub fn flow(&self, name: &str) -> Option<&Flow> {
        self.flows
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// The flows writing into `dataset`.
    pub fn flows_into<'a>(&'a self, dataset: &'a str) -> impl Iterator<Item = &'a Flow> + 'a {
        self.flows
            .iter()
            .filter(move |f| f.target.eq_ignore_ascii_case(dataset))
    }

    /// The storage folder, absolute.
    pub fn storage_dir(&self) -> PathBuf {
        self.root.join(&self.config.storage)
    }

    /// Where the pipeline's storage is: a folder ([`Self::storage_dir`]) or a bucket
    /// prefix (`storage: s3://bucket/prefix`). A URL `validate` refuses is taken as
    /// the folder it would be, as [`Self::storage_dir`] takes it.
    pub fn storage(&self) -> Location {
        Location::parse(&self.root, &self.config.storage)
            .unwrap_or_else(|_| Location::Local(self.storage_dir()))
    }
}
