//! Values a source left out of a change because they did not change (PostgreSQL's
//! unchanged TOASTed values), taken from the same key's latest row in the flow's target
//! table, the streaming table the source's rows are appended to. Every row stored there
//! is whole (its own left-out values were filled the same way), so the latest one
//! before the change holds the value the change kept.

use std::collections::HashMap;
use std::path::Path;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::{cast, interleave};
use datafusion::arrow::datatypes::{DataType, Int64Type};

use crate::RunError;
use crate::delta::Table;
use crate::sources::Carried;

fn missing(column: &str) -> RunError {
    RunError::input(format!(
        "an update left column `{column}` out of the change stream (an unchanged TOASTed value), and no earlier row of its key is stored to take it from"
    ))
    .with_help("ALTER TABLE … REPLICA IDENTITY FULL makes PostgreSQL send such values; read the source into a streaming table that keeps its columns (SELECT *)")
}

/// The key of row `r` as text, `None` when a key column is null.
fn key_of(columns: &[ArrayRef], r: usize) -> Option<String> {
    let mut key = String::new();
    for c in columns {
        if c.is_null(r) {
            return None;
        }
        key.push_str(c.as_string::<i32>().value(r));
        key.push('\u{1f}');
    }
    Some(key)
}

fn text_columns(batch: &RecordBatch, names: &[String]) -> Result<Vec<ArrayRef>, RunError> {
    names
        .iter()
        .map(|n| {
            let c = batch
                .column_by_name(n)
                .ok_or_else(|| RunError::input(format!("column `{n}` is not stored")))?;
            Ok(cast(c, &DataType::Utf8)?)
        })
        .collect()
}

/// `rows` with the cells of `carried` filled from `target`'s rows.
pub async fn fill(
    rows: &RecordBatch,
    carried: &Carried,
    target: &Path,
) -> Result<RecordBatch, RunError> {
    let Some(first) = carried.cells.first().map(|c| &c.column) else {
        return Ok(rows.clone());
    };
    let table = Table::open(target).await?;
    let Some(schema) = table.arrow_schema().filter(|_| table.exists()) else {
        return Err(missing(first));
    };
    let stored = table.read_all(&schema)?;
    let stored_keys = text_columns(&stored, &carried.keys).map_err(|_| missing(first))?;
    let order = carried
        .order
        .iter()
        .map(|n| {
            let c = stored.column_by_name(n).ok_or_else(|| missing(first))?;
            Ok(cast(c, &DataType::Int64)?)
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let skip = match &carried.skip {
        Some((column, values)) => Some((
            text_columns(&stored, std::slice::from_ref(column)).map_err(|_| missing(first))?,
            values,
        )),
        None => None,
    };
    // The latest whole stored row of each key.
    let mut latest: HashMap<String, (Vec<i64>, usize)> = HashMap::new();
    for r in 0..stored.num_rows() {
        if let Some((column, values)) = &skip
            && !column[0].is_null(r)
            && values
                .iter()
                .any(|v| v == column[0].as_string::<i32>().value(r))
        {
            continue;
        }
        let Some(key) = key_of(&stored_keys, r) else {
            continue;
        };
        let at: Vec<i64> = order
            .iter()
            .map(|o| {
                let o = o.as_primitive::<Int64Type>();
                if o.is_null(r) { i64::MIN } else { o.value(r) }
            })
            .collect();
        match latest.get(&key) {
            Some((seen, _)) if *seen >= at => {}
            _ => {
                latest.insert(key, (at, r));
            }
        }
    }
    let row_keys = text_columns(rows, &carried.keys)?;
    let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
    let mut by_column: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for cell in &carried.cells {
        let key = match &cell.key {
            Some(parts) => Some(parts.iter().map(|p| format!("{p}\u{1f}")).collect()),
            None => key_of(&row_keys, cell.row),
        };
        let from = key
            .and_then(|k| latest.get(&k))
            .map(|(_, r)| *r)
            .ok_or_else(|| missing(&cell.column))?;
        by_column
            .entry(&cell.column)
            .or_default()
            .push((cell.row, from));
    }
    for (column, cells) in by_column {
        let i = rows
            .schema()
            .index_of(column)
            .map_err(|_| missing(column))?;
        let have = &columns[i];
        let source = stored
            .column_by_name(column)
            .ok_or_else(|| missing(column))?;
        let source = cast(source, have.data_type())?;
        let mut indices: Vec<(usize, usize)> = (0..rows.num_rows()).map(|r| (0, r)).collect();
        for (row, from) in cells {
            indices[row] = (1, from);
        }
        columns[i] = interleave(&[have.as_ref(), source.as_ref()], &indices)?;
    }
    Ok(RecordBatch::try_new(rows.schema(), columns)?)
}
