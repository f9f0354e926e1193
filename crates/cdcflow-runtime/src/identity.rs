//! Identity columns (`GENERATED … AS IDENTITY`): each row a flow writes gets the next
//! value, `start`, `start + step`, …, following the values the table holds already (an
//! append) or from `start` (a materialized view's recompute, as Databricks warns its
//! views may do). Values are unique and ordered along the writes, not contiguous: the
//! next batch goes on after the largest value in the table (the smallest for a
//! negative step), which the files' statistics give without reading them. A value a
//! query gives a `BY DEFAULT` column is kept; its nulls are generated.
//!
//! The Delta schema does not mark the column (`delta.identity.*`): delta-rs cannot
//! write tables with the identity feature, so other Delta writers would not generate
//! the values.

use std::sync::Arc;

use cdcflow_plan::Dataset;
use cdcflow_plan::Identity;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::RunError;
use crate::delta::{Mode, Table};

/// `batches` (of `schema`) with the identity columns of `target` filled in.
pub(crate) async fn fill(
    target: &Dataset,
    table: &Table,
    mode: Mode,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<(SchemaRef, Vec<RecordBatch>), RunError> {
    let mut out = (schema, batches);
    for (position, column) in target.def.columns.iter().enumerate() {
        let Some(identity) = &column.identity else {
            continue;
        };
        let name = column.name.value.as_str();
        let first = match mode {
            Mode::Overwrite => identity.start,
            _ => next_after(table, name, identity).await?,
        };
        out = fill_column(&out.0, out.1, name, position, identity, first)?;
    }
    Ok(out)
}

/// The first value of a batch appended to `table`: one step past the values its
/// files hold (their statistics), or `start` for an empty table.
async fn next_after(table: &Table, column: &str, identity: &Identity) -> Result<i64, RunError> {
    let rising = identity.step > 0;
    let bound = if rising { "maxValues" } else { "minValues" };
    let mut furthest: Option<i64> = None;
    table.fetch_vectors().await?;
    for file in table.files()? {
        let Some(add) = &file.add else { continue };
        let value = add
            .stats
            .as_deref()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|s| s.get(bound)?.get(column)?.as_i64());
        let Some(value) = value else {
            // A file without statistics for the column (or only nulls): read it.
            table.fetch(vec![add.path.clone()]).await?;
            let read = Arc::new(Schema::new(vec![Field::new(column, DataType::Int64, true)]));
            for batch in crate::delta::read::read_files(std::slice::from_ref(&file), &read)? {
                let values = batch.column(0);
                let values = values
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| RunError::internal("identity column read as another type"))?;
                let extreme = match rising {
                    true => datafusion::arrow::compute::max(values),
                    false => datafusion::arrow::compute::min(values),
                };
                furthest = further(furthest, extreme, rising);
            }
            continue;
        };
        furthest = further(furthest, Some(value), rising);
    }
    match furthest {
        None => Ok(identity.start),
        Some(v) => v
            .checked_add(identity.step)
            .ok_or_else(|| exhausted(column)),
    }
}

fn further(a: Option<i64>, b: Option<i64>, rising: bool) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if rising { a.max(b) } else { a.min(b) }),
        (a, b) => a.or(b),
    }
}

/// The column `name` of `batches` generated from `first` where it is null or missing
/// (missing: added at the declared `position`, or last).
fn fill_column(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    name: &str,
    position: usize,
    identity: &Identity,
    first: i64,
) -> Result<(SchemaRef, Vec<RecordBatch>), RunError> {
    let existing = schema.index_of(name).ok();
    let schema = match existing {
        Some(_) => {
            let fields = schema
                .fields()
                .iter()
                .map(|f| match f.name() == name {
                    true => Arc::new(Field::new(name, DataType::Int64, false)),
                    false => Arc::clone(f),
                })
                .collect::<Vec<_>>();
            Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
        }
        None => {
            let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
            let at = position.min(fields.len());
            fields.insert(at, Arc::new(Field::new(name, DataType::Int64, false)));
            Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
        }
    };
    let mut next = first;
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let given = match existing {
            Some(i) if !identity.always => Some(cast(batch.column(i), &DataType::Int64)?),
            _ => None,
        };
        let mut values = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let kept = given
                .as_ref()
                .and_then(|g| g.as_any().downcast_ref::<Int64Array>())
                .filter(|g| g.is_valid(row))
                .map(|g| g.value(row));
            values.push(match kept {
                Some(v) => v,
                None => {
                    let v = next;
                    next = next
                        .checked_add(identity.step)
                        .ok_or_else(|| exhausted(name))?;
                    v
                }
            });
        }
        let column: ArrayRef = Arc::new(Int64Array::from(values));
        let mut columns = batch.columns().to_vec();
        match existing {
            Some(i) => columns[i] = column,
            None => columns.insert(position.min(columns.len()), column),
        }
        out.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
    }
    Ok((schema, out))
}

fn exhausted(column: &str) -> RunError {
    RunError::input(format!(
        "identity column `{column}` has run out of BIGINT values"
    ))
    .with_help("start it again with a full refresh, or declare a smaller step")
}
