//! How a batch is applied: by the cheapest way its target's tables allow. A target's
//! first batch a partition of its keys at a time (`partitioned.rs`); later ones by
//! merge-on-write where both tables take deletion vectors (`merged.rs`, the default);
//! else streaming through both tables (`streamed.rs`); else, for what none of these
//! takes, in memory (left to the caller, who knows the target).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, new_empty_array};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;

use super::streamed::{Streamed, Targets};
use super::{merged, partitioned, streamed};
use crate::RunError;
use crate::cdc::kernel::Rules;

/// A staged batch, or its events back when only the in-memory apply can take it.
pub enum Staging {
    Staged(Box<Streamed>),
    InMemory(RecordBatch),
}

/// Applies `events` to `targets` and stages both tables' files, without committing.
pub async fn stage(
    rules: &Rules,
    targets: &Targets<'_>,
    events: Vec<RecordBatch>,
    now_micros: i64,
) -> Result<Staging, RunError> {
    if let Some(done) = partitioned::apply(rules, targets, &events, now_micros).await? {
        return Ok(Staging::Staged(Box::new(done)));
    }
    let events = concat_parts(&rules.event_schema(), events)?;
    if let Some(merge) = merged::prepare(rules, targets, &events, now_micros)? {
        return Ok(Staging::Staged(Box::new(
            merge.apply(targets, events).await?,
        )));
    }
    if let Some(done) = streamed::apply(rules, targets, &events, now_micros).await? {
        return Ok(Staging::Staged(Box::new(done)));
    }
    Ok(Staging::InMemory(events))
}

/// Event `parts` as one batch, put together a column at a time: each column's parts
/// are let go once it is copied.
pub fn concat_parts(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<RecordBatch, ArrowError> {
    let mut columns: Vec<Vec<ArrayRef>> =
        vec![Vec::with_capacity(batches.len()); schema.fields().len()];
    for batch in batches {
        for (c, column) in batch.columns().iter().enumerate() {
            columns[c].push(Arc::clone(column));
        }
    }
    let mut out = Vec::with_capacity(columns.len());
    for (parts, field) in columns.iter_mut().zip(schema.fields()) {
        let column = match parts.len() {
            0 => new_empty_array(field.data_type()),
            1 => parts.remove(0),
            _ => {
                let arrays: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
                concat(&arrays)?
            }
        };
        parts.clear();
        out.push(column);
    }
    RecordBatch::try_new(Arc::clone(schema), out)
}
