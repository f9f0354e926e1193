//! AUTO CDC: source rows turned into change events and applied, as the execution plans
//! of a batch ([`exec`]); the rules that decide what one key's events make of its stored
//! rows ([`rules`], [`kernel`]); and the fast ways many keys' decisions reach the tables
//! ([`engine`]), where all the threads are.

mod apply_error;
mod decision;
pub mod engine;
pub mod events;
pub mod exec;
mod first_split;
pub(crate) mod flow;
pub mod kernel;
pub mod rules;
pub mod slice;
pub mod snapshot;

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_plan::autocdc::AutoCdcSpec;
use datafusion::arrow::datatypes::{Schema, SchemaRef};

use crate::RunError;
pub use apply_error::ApplyError;
pub use engine::apply;
use kernel::Rules;

pub use cdcflow_plan::table_properties::{DEFAULT_TOMBSTONE_RETENTION_SECS, TOMBSTONE_RETENTION};

/// The apply rules of `spec` for a source of `source` schema and the target's
/// `TBLPROPERTIES`.
pub fn rules_for(
    spec: &AutoCdcSpec,
    source: &Schema,
    properties: &BTreeMap<String, String>,
) -> Result<Rules, RunError> {
    let target = spec.target_schema(source);
    let own: Vec<_> = target
        .fields()
        .iter()
        .filter(|f| spec.columns.iter().any(|c| c == f.name()))
        .map(|f| f.as_ref().clone())
        .collect();
    let columns: SchemaRef = Arc::new(Schema::new(own));
    let index = |name: &String| -> Result<usize, RunError> {
        columns.index_of(name).map_err(|_| {
            RunError::internal(format!(
                "flow `{}`: column `{name}` is not among the target's columns",
                spec.flow
            ))
        })
    };
    let retention_secs = match properties
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(TOMBSTONE_RETENTION))
    {
        Some((_, v)) => v.trim().parse::<i64>().map_err(|_| {
            RunError::input(format!(
                "table `{}`: {TOMBSTONE_RETENTION} = '{v}' is not a number of seconds",
                spec.target
            ))
        })?,
        None => DEFAULT_TOMBSTONE_RETENTION_SECS,
    };
    Ok(Rules {
        keys: spec.keys.iter().map(index).collect::<Result<_, _>>()?,
        scd2: spec.scd_type == 2,
        tracked: spec
            .track_history
            .iter()
            .map(index)
            .collect::<Result<_, _>>()?,
        ignore_null: spec
            .ignore_null_updates
            .iter()
            .map(index)
            .collect::<Result<_, _>>()?,
        sequence_type: spec.sequence_type(),
        tombstone_retention_micros: retention_secs.saturating_mul(1_000_000),
        min_shared_rows: kernel::SHARED_ROWS,
        generated: vec![],
        columns,
    })
}
