//! Values a source left out of a change because they did not change (PostgreSQL's
//! unchanged TOASTed values), taken from the same key's latest row in the flow's target
//! table, the streaming table the source's rows are appended to. Every row stored there
//! is whole (its own left-out values were filled the same way), so the latest one
//! before the change holds the value the change kept.

use std::collections::HashMap;

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
    target: &cdcflow_plan::location::Location,
) -> Result<RecordBatch, RunError> {
    let Some(first) = carried.cells.first().map(|c| &c.column) else {
        return Ok(rows.clone());
    };
    let table = Table::open(target).await?;
    let Some(schema) = table.arrow_schema().filter(|_| table.exists()) else {
        return Err(missing(first));
    };
    let stored = table.read_all(&schema).await?;
    fill_from(rows, carried, &stored)
}

/// `rows` with the cells of `carried` filled from the `stored` rows.
pub fn fill_from(
    rows: &RecordBatch,
    carried: &Carried,
    stored: &RecordBatch,
) -> Result<RecordBatch, RunError> {
    let Some(first) = carried.cells.first().map(|c| &c.column) else {
        return Ok(rows.clone());
    };
    let stored_keys = text_columns(stored, &carried.keys).map_err(|_| missing(first))?;
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
            text_columns(stored, std::slice::from_ref(column)).map_err(|_| missing(first))?,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;
    use crate::sources::CarriedCell;

    fn batch(rows: &[(i64, Option<&str>, &str, i64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("notes", DataType::Utf8, true),
            Field::new("_change_type", DataType::Utf8, true),
            Field::new("_commit_lsn", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
            ],
        )
        .unwrap()
    }

    fn carried(cells: Vec<CarriedCell>) -> Carried {
        Carried {
            keys: vec!["id".into()],
            order: vec!["_commit_lsn".into()],
            skip: Some(("_change_type".into(), vec!["delete".into()])),
            cells,
        }
    }

    fn cell(row: usize, key: Option<&str>) -> CarriedCell {
        CarriedCell {
            row,
            column: "notes".into(),
            key: key.map(|k| vec![k.to_string()]),
        }
    }

    #[test]
    fn the_latest_whole_row_of_the_key_gives_the_value() {
        let stored = batch(&[
            (1, Some("old"), "snapshot", 10),
            (1, Some("new"), "update", 20),
            (1, None, "delete", 30),
            (2, Some("two"), "snapshot", 10),
        ]);
        let rows = batch(&[
            (1, None, "update", 40),
            (3, Some("x"), "insert", 40),
            (7, None, "update", 41),
        ]);
        let out = fill_from(
            &rows,
            &carried(vec![cell(0, None), cell(2, Some("2"))]),
            &stored,
        )
        .unwrap();
        let notes = out.column(1).as_string::<i32>();
        // The delete carries only the key: the update before it holds the value.
        assert_eq!(notes.value(0), "new");
        assert_eq!(notes.value(1), "x");
        // A key change takes the old key's value.
        assert_eq!(notes.value(2), "two");
    }

    #[test]
    fn a_key_with_no_stored_row_is_an_error_naming_the_column() {
        let stored = batch(&[(2, Some("two"), "snapshot", 10)]);
        let rows = batch(&[(1, None, "update", 40)]);
        let e = fill_from(&rows, &carried(vec![cell(0, None)]), &stored).unwrap_err();
        assert!(e.to_string().contains("column `notes`"), "{e}");
    }
}
