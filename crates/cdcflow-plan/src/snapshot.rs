//! `AUTO CDC … FROM SNAPSHOT (query) [WITH VERSION (query)]`: a target kept equal to
//! the latest snapshot of a source that has no change log. Each snapshot is compared
//! with the target's current rows: a new key is an insert, a key whose values changed
//! an update, a key missing a delete (the runtime's `cdc/snapshot`). The changes are
//! then applied as an AUTO CDC batch sequenced by the snapshot's version, so SCD type 2
//! versions run from one snapshot version to the next.
//!
//! Without WITH VERSION each run reads one snapshot, versioned by the run's start time
//! (Databricks' periodic snapshots: "the ingestion time is used as the snapshot
//! version"). With it, the version query picks the next snapshot: it sees the last
//! applied version through `last_snapshot_version()`, and the snapshot query sees the
//! picked one through `current_snapshot_version()`; a run applies snapshots until the
//! version query gives no row.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::datasource::empty::EmptyTable;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{Expr, TableSource};

/// `last_snapshot_version()`: the version applied last, 0 or 1 row; only inside
/// WITH VERSION (…).
pub const LAST_VERSION: &str = "last_snapshot_version";
/// `current_snapshot_version()`: the version being applied, 1 row; only inside
/// FROM SNAPSHOT (…) of a flow with WITH VERSION (…).
pub const CURRENT_VERSION: &str = "current_snapshot_version";
/// Both functions.
pub const FUNCTIONS: [&str; 2] = [LAST_VERSION, CURRENT_VERSION];

/// The column of a snapshot's change events that holds its version: their sequence.
pub const VERSION_COLUMN: &str = "__cdcflow_snapshot_version";
/// The column of a snapshot's change events that says a key left the snapshot.
pub const DELETED_COLUMN: &str = "__cdcflow_snapshot_deleted";

/// What makes an AUTO CDC flow a snapshot flow.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct SnapshotSpec {
    /// The private view of the WITH VERSION query; none for one snapshot per run.
    pub version_view: Option<String>,
    /// The version's column name and type (`__START_AT`'s type for SCD type 2).
    pub version: Field,
}

impl SnapshotSpec {
    /// A snapshot per run, versioned by the run's start time.
    pub fn periodic() -> Self {
        Self {
            version_view: None,
            version: Field::new("version", periodic_version_type(), false),
        }
    }

    /// The schema of the version relation, as both functions give it.
    pub fn version_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(vec![self.version.clone()]))
    }
}

/// A periodic snapshot's version: the run's start, a TIMESTAMP.
pub fn periodic_version_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The change events of a snapshot of `snapshot` columns keyed by `keys`: the
/// snapshot's columns (a deleted key's other columns are null), its version and whether
/// the key was deleted.
pub fn event_schema(snapshot: &Schema, keys: &[String], version: &Field) -> SchemaRef {
    let mut fields: Vec<Field> = snapshot
        .fields()
        .iter()
        .map(|f| {
            let key = keys.contains(f.name());
            f.as_ref().clone().with_nullable(!key || f.is_nullable())
        })
        .collect();
    fields.push(Field::new(
        VERSION_COLUMN,
        version.data_type().clone(),
        false,
    ));
    fields.push(Field::new(DELETED_COLUMN, DataType::Boolean, false));
    Arc::new(Schema::new(fields))
}

/// Which of the two functions `name` is, ignoring case.
pub(crate) fn function(name: &str) -> Option<&'static str> {
    FUNCTIONS.into_iter().find(|f| f.eq_ignore_ascii_case(name))
}

/// The relation `function()` gives where it is bound; else the error Databricks gives
/// for it outside its clause.
pub(crate) fn bound(
    function: &'static str,
    bindings: &HashMap<&'static str, Arc<dyn TableSource>>,
    args: &[Expr],
) -> Result<Arc<dyn TableSource>> {
    if !args.is_empty() {
        return plan_err!("{function}() takes no arguments");
    }
    match bindings.get(function) {
        Some(source) => Ok(Arc::clone(source)),
        None => Err(DataFusionError::Plan(outside(function))),
    }
}

/// Why `function()` cannot be used where it is.
pub fn outside(function: &str) -> String {
    match function {
        LAST_VERSION => "last_snapshot_version() is available only inside the WITH VERSION (...) clause of an AUTO CDC ... FROM SNAPSHOT flow".into(),
        _ => "current_snapshot_version() is available only inside the FROM SNAPSHOT (...) clause of an AUTO CDC ... FROM SNAPSHOT flow that has a WITH VERSION (...) clause".into(),
    }
}

/// An empty relation of `schema`, for planning.
pub fn empty(schema: SchemaRef) -> Arc<dyn TableSource> {
    provider_as_source(Arc::new(EmptyTable::new(schema)))
}
