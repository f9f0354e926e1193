//! A table's rows as text cells, for comparing a table with its expected CSV: both
//! sides are turned into the table's types first, then formatted alike, so `12.5` and
//! `12.50` in a DECIMAL(12,2) column, or `2024-01-01 10:00:00` and
//! `2024-01-01T10:00:00` in a TIMESTAMP column, are the same value. An empty CSV cell is
//! NULL.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::compute::{
    CastOptions, can_cast_types, cast_with_options, concat_batches, take,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::SessionContext;

use super::CaseError;

/// A row's cells over some columns; `None` is NULL.
pub type Row = Vec<Option<String>>;

/// A table's rows, read after a run.
pub struct TableRows {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl TableRows {
    /// The table `name` of the session, or `None` when no run has created it yet.
    pub async fn read(ctx: &SessionContext, name: &str) -> Result<Option<Self>, CaseError> {
        let reference = crate::catalog::reference(name);
        if !ctx.table_exist(reference.clone()).unwrap_or(false) {
            return Ok(None);
        }
        let df = ctx
            .table(reference)
            .await
            .map_err(|e| CaseError::new(format!("table `{name}`: {e}")))?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let batches = df
            .collect()
            .await
            .map_err(|e| CaseError::new(format!("table `{name}`: {e}")))?;
        Ok(Some(Self { schema, batches }))
    }

    /// The position of each of `columns` in the table: exact, else ignoring case.
    pub fn positions(
        &self,
        columns: &[String],
        file: &std::path::Path,
        table: &str,
    ) -> Result<Vec<usize>, CaseError> {
        columns
            .iter()
            .map(|c| {
                column_position(&self.schema, c).ok_or_else(|| {
                    let names: Vec<&str> = self
                        .schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect();
                    CaseError::at(file, format!("`{table}` has no column `{c}`"))
                        .help(format!("its columns: {}", names.join(", ")))
                })
            })
            .collect()
    }

    /// Every row over the columns at `positions`, ordered by their values (by the
    /// first column, then the next, …; NULL first), as an expected file lists them.
    pub fn sorted_rows(&self, positions: &[usize]) -> Result<Vec<Row>, CaseError> {
        use datafusion::arrow::row::{RowConverter, SortField};
        let fail = |e: datafusion::arrow::error::ArrowError| CaseError::new(e.to_string());
        let Some(first) = self.batches.first() else {
            return Ok(vec![]);
        };
        let batch = concat_batches(&first.schema(), &self.batches).map_err(fail)?;
        let columns: Vec<ArrayRef> = positions
            .iter()
            .map(|&p| Arc::clone(batch.column(p)))
            .collect();
        let fields = columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).map_err(fail)?;
        let rows = converter.convert_columns(&columns).map_err(fail)?;
        let mut order: Vec<usize> = (0..batch.num_rows()).collect();
        order.sort_by(|a, b| rows.row(*a).cmp(&rows.row(*b)));
        let indices = UInt64Array::from_iter_values(order.into_iter().map(|i| i as u64));
        let sorted: Vec<Vec<Option<String>>> = columns
            .iter()
            .map(|c| {
                take(c.as_ref(), &indices, None)
                    .map_err(fail)
                    .and_then(|c| cells(&c))
            })
            .collect::<Result<_, _>>()?;
        Ok((0..batch.num_rows())
            .map(|r| sorted.iter().map(|c| c[r].clone()).collect())
            .collect())
    }

    /// Every row over the columns at `positions`.
    pub fn rows(&self, positions: &[usize]) -> Result<Vec<Row>, CaseError> {
        let mut out = Vec::new();
        for batch in &self.batches {
            let columns: Vec<Vec<Option<String>>> = positions
                .iter()
                .map(|&p| cells(batch.column(p)))
                .collect::<Result<_, _>>()?;
            for r in 0..batch.num_rows() {
                out.push(columns.iter().map(|c| c[r].clone()).collect());
            }
        }
        Ok(out)
    }
}

fn column_position(schema: &Schema, name: &str) -> Option<usize> {
    schema
        .fields()
        .iter()
        .position(|f| f.name() == name)
        .or_else(|| {
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(name))
        })
}

/// Each value of `array` as text, formatted as every cell of a comparison is.
fn cells(array: &ArrayRef) -> Result<Vec<Option<String>>, CaseError> {
    let options = FormatOptions::default();
    let formatter = ArrayFormatter::try_new(array.as_ref(), &options)
        .map_err(|e| CaseError::new(e.to_string()))?;
    Ok((0..array.len())
        .map(|i| (!array.is_null(i)).then(|| formatter.value(i).to_string()))
        .collect())
}

/// An expected CSV file: its columns (its header) and its rows, each value read as the
/// type of the table's column of that name (`types`), then formatted as [`TableRows`]
/// formats the table's.
pub fn expected_rows(
    path: &std::path::Path,
    types: &[DataType],
) -> Result<(Vec<String>, Vec<Row>), CaseError> {
    let text = std::fs::read(path).map_err(|e| CaseError::at(path, e.to_string()))?;
    let columns = header(&text).map_err(|e| CaseError::at(path, e))?;
    if types.is_empty() {
        return Ok((columns, vec![]));
    }
    Ok((columns, read_typed(path, &text, types)?))
}

/// The column names of a CSV file's first line.
pub fn header(text: &[u8]) -> Result<Vec<String>, String> {
    let (schema, _) = datafusion::arrow::csv::reader::Format::default()
        .with_header(true)
        .infer_schema(std::io::Cursor::new(text), Some(0))
        .map_err(|e| format!("not CSV with a header line: {e}"))?;
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    if names.is_empty() || names.iter().all(|n| n.is_empty()) {
        return Err("the file has no header line naming the columns it checks".into());
    }
    Ok(names)
}

fn read_typed(
    path: &std::path::Path,
    text: &[u8],
    types: &[DataType],
) -> Result<Vec<Row>, CaseError> {
    let columns = header(text).map_err(|e| CaseError::at(path, e))?;
    let texts = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let reader = datafusion::arrow::csv::ReaderBuilder::new(Arc::clone(&texts))
        .with_header(true)
        .build(std::io::Cursor::new(text))
        .map_err(|e| CaseError::at(path, e.to_string()))?;
    let mut out = Vec::new();
    let mut line = 2;
    for batch in reader {
        let batch = batch.map_err(|e| CaseError::at(path, e.to_string()))?;
        let mut typed: Vec<Vec<Option<String>>> = Vec::new();
        for (i, to) in types.iter().enumerate() {
            let column = batch.column(i);
            let converted = typed_column(column, to).map_err(|bad_row| {
                let strings = column.as_any().downcast_ref::<StringArray>();
                let value = strings
                    .map(|s| s.value(bad_row).to_string())
                    .unwrap_or_default();
                CaseError::at(
                    path,
                    format!(
                        "line {}: `{value}` in column `{}` is no {to}",
                        line + bad_row,
                        columns[i]
                    ),
                )
            })?;
            typed.push(cells(&converted)?);
        }
        for r in 0..batch.num_rows() {
            out.push(typed.iter().map(|c| c[r].clone()).collect());
        }
        line += batch.num_rows();
    }
    Ok(out)
}

/// The text column as `to` (kept as text when it cannot be cast: the table's values
/// are compared as formatted text then); `Err(row)` names a value that is no `to`.
fn typed_column(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, usize> {
    if !can_cast_types(column.data_type(), to)
        || matches!(
            to,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        )
    {
        return Ok(Arc::clone(column));
    }
    let safe = CastOptions {
        safe: true,
        ..Default::default()
    };
    let cast = cast_with_options(column, to, &safe).map_err(|_| 0usize)?;
    match (0..column.len()).find(|&i| column.is_valid(i) && cast.is_null(i)) {
        Some(bad) => Err(bad),
        None => Ok(cast),
    }
}
