//! `CLUSTER BY`: the rows of a write sorted by the table's clustering columns before
//! they are cut into files, so each file holds a narrow range of them and readers skip
//! files by their minimum and maximum. Compaction sorts the same way.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::{
    LexicographicalComparator, SortColumn, concat_batches, take_record_batch,
};

use crate::RunError;

/// Rows per batch of a sorted write, so that it can still be shared out over cores.
const BATCH_ROWS: usize = 64 * 1024;

/// `batches` as one run sorted by `columns` (those it has), cut again into batches;
/// as they are when there is no column to sort by.
pub(crate) fn sorted_batches(
    batches: Vec<RecordBatch>,
    columns: &[String],
) -> Result<Vec<RecordBatch>, RunError> {
    let Some(first) = batches.first() else {
        return Ok(batches);
    };
    if columns.is_empty() || !columns.iter().any(|c| first.column_by_name(c).is_some()) {
        return Ok(batches);
    }
    let all = concat_batches(first.schema_ref(), &batches)?;
    drop(batches);
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    let all = sorted(all, &names)?;
    Ok((0..all.num_rows())
        .step_by(BATCH_ROWS)
        .map(|start| all.slice(start, BATCH_ROWS.min(all.num_rows() - start)))
        .collect())
}

/// `rows` ordered by the columns `keys` (those it has; as they are without any). The
/// sort is stable: rows equal in the keys keep their order.
pub(crate) fn sorted(rows: RecordBatch, keys: &[&str]) -> Result<RecordBatch, RunError> {
    if keys.is_empty() || rows.num_rows() < 2 {
        return Ok(rows);
    }
    let columns: Vec<SortColumn> = keys
        .iter()
        .filter_map(|k| rows.column_by_name(k))
        .map(|c| SortColumn {
            values: Arc::clone(c),
            options: None,
        })
        .collect();
    if columns.is_empty() {
        return Ok(rows);
    }
    let order = LexicographicalComparator::try_new(&columns)?;
    let mut indices: Vec<u32> = (0..rows.num_rows() as u32).collect();
    indices.sort_by(|&a, &b| order.compare(a as usize, b as usize));
    Ok(take_record_batch(&rows, &UInt32Array::from(indices))?)
}
