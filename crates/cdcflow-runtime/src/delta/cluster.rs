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
    if !sorts(&batches, columns) {
        return Ok(batches);
    }
    Ok(sorted_whole(batches, columns)?.map_or_else(Vec::new, |all| cut(&all, BATCH_ROWS)))
}

/// Whether `batches` have one of `columns` to sort by.
pub(crate) fn sorts(batches: &[RecordBatch], columns: &[String]) -> bool {
    batches
        .first()
        .is_some_and(|b| columns.iter().any(|c| b.column_by_name(c).is_some()))
}

/// `batches` as one batch sorted by `columns` (`None` for no batches). The inputs are
/// let go before the sort copies the rows.
pub(crate) fn sorted_whole(
    batches: Vec<RecordBatch>,
    columns: &[String],
) -> Result<Option<RecordBatch>, RunError> {
    let Some(schema) = batches.first().map(RecordBatch::schema) else {
        return Ok(None);
    };
    let all = concat_batches(&schema, &batches)?;
    drop(batches);
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    Ok(Some(sorted(all, &names)?))
}

/// `rows` in consecutive slices of at most `size` rows.
pub(crate) fn cut(rows: &RecordBatch, size: usize) -> Vec<RecordBatch> {
    let size = size.max(1);
    (0..rows.num_rows())
        .step_by(size)
        .map(|start| rows.slice(start, size.min(rows.num_rows() - start)))
        .collect()
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
    let n = u32::try_from(rows.num_rows()).map_err(|_| {
        RunError::user(
            crate::ErrorCode::BatchTooLarge,
            "more than 2^32 rows to cluster in one batch",
        )
    })?;
    let mut indices: Vec<u32> = (0..n).collect();
    indices.sort_by(|&a, &b| order.compare(a as usize, b as usize));
    Ok(take_record_batch(&rows, &UInt32Array::from(indices))?)
}
