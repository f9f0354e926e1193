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
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
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

/// The rows of an expected CSV file (`text`, read from `path`), each value read as the
/// type of the table's column of that name (`types`, in the file's column order), then
/// formatted as [`TableRows`] formats the table's.
pub fn expected_rows(
    path: &std::path::Path,
    text: &[u8],
    types: &[DataType],
) -> Result<Vec<Row>, CaseError> {
    if types.is_empty() {
        return Ok(vec![]);
    }
    read_typed(path, text, types)
}

/// The column names of a CSV file's first line.
pub fn header(text: &[u8]) -> Result<Vec<String>, String> {
    let records = csv_records(text)?;
    let Some((_, first)) = records.first() else {
        return Err("the file has no header line naming the columns it checks".into());
    };
    first
        .iter()
        .map(|c| match c.as_deref() {
            Some(name) if !name.is_empty() => Ok(name.to_string()),
            _ => Err("a column of the header line has no name".to_string()),
        })
        .collect()
}

/// The records of CSV text (RFC 4180: a field in double quotes may hold commas, line
/// ends and `""` for a quote), each with the line it starts on. An empty field is NULL
/// (`None`); a quoted empty field (`""`) is the empty string. Blank lines are skipped.
fn csv_records(text: &[u8]) -> Result<Vec<(usize, Row)>, String> {
    let text = std::str::from_utf8(text).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let mut records = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while chars.peek().is_some() {
        let start = line;
        let mut record = Vec::new();
        loop {
            let mut field = String::new();
            let quoted = chars.peek() == Some(&'"');
            if quoted {
                chars.next();
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            field.push(c);
                        }
                        None => return Err(format!("line {start}: a quoted field is not closed")),
                    }
                }
            }
            while let Some(&c) = chars.peek() {
                if c == ',' || c == '\n' || c == '\r' {
                    break;
                }
                if quoted {
                    return Err(format!("line {line}: text after a quoted field"));
                }
                field.push(c);
                chars.next();
            }
            record.push((quoted || !field.is_empty()).then_some(field));
            match chars.next() {
                Some(',') => continue,
                Some('\r') if chars.peek() == Some(&'\n') => {
                    chars.next();
                }
                _ => {}
            }
            line += 1;
            break;
        }
        let blank = record.len() == 1 && record[0].is_none();
        if !blank {
            records.push((start, record));
        }
    }
    Ok(records)
}

fn read_typed(
    path: &std::path::Path,
    text: &[u8],
    types: &[DataType],
) -> Result<Vec<Row>, CaseError> {
    let records = csv_records(text).map_err(|e| CaseError::at(path, e))?;
    let Some(((_, names), rows)) = records.split_first() else {
        return Ok(vec![]);
    };
    for (line, row) in rows {
        if row.len() != names.len() {
            return Err(CaseError::at(
                path,
                format!(
                    "line {line} has {} cells, the header names {} columns",
                    row.len(),
                    names.len()
                ),
            ));
        }
    }
    let mut typed: Vec<Vec<Option<String>>> = Vec::new();
    for (i, to) in types.iter().enumerate() {
        let column: ArrayRef = Arc::new(StringArray::from_iter(
            rows.iter().map(|(_, r)| r[i].clone()),
        ));
        let converted = typed_column(&column, to).map_err(|bad_row| {
            let value = rows[bad_row].1[i].clone().unwrap_or_default();
            let name = names[i].clone().unwrap_or_default();
            let line = rows[bad_row].0;
            CaseError::at(
                path,
                format!(
                    "line {line}: `{value}` in column `{name}` is no {}",
                    cdcflow_plan::types::sql_type(to)
                ),
            )
        })?;
        typed.push(cells(&converted)?);
    }
    Ok((0..rows.len())
        .map(|r| typed.iter().map(|c| c[r].clone()).collect())
        .collect())
}

/// The text column as `to` (kept as text when it cannot be cast, and for binary
/// columns, whose table values are formatted as hex text: compared as text then);
/// `Err(row)` names a value that is no `to`.
fn typed_column(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, usize> {
    if !can_cast_types(column.data_type(), to)
        || matches!(
            to,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
        )
    {
        return Ok(Arc::clone(column));
    }
    let safe = CastOptions {
        safe: true,
        ..Default::default()
    };
    let cast = cast_with_options(column, to, &safe).map_err(|_| 0usize)?;
    if let Some(bad) = (0..column.len()).find(|&i| column.is_valid(i) && cast.is_null(i)) {
        return Err(bad);
    }
    // A decimal with more places than the column's scale would be rounded into a
    // match: it is no value of the column.
    if let (DataType::Decimal128(_, scale) | DataType::Decimal256(_, scale), Some(texts)) =
        (to, column.as_any().downcast_ref::<StringArray>())
    {
        let places = |t: &str| {
            t.trim()
                .split_once('.')
                .map_or(0, |(_, f)| f.bytes().take_while(u8::is_ascii_digit).count())
        };
        if let Some(bad) = (0..texts.len()).find(|&i| {
            texts.is_valid(i) && places(texts.value(i)) > usize::try_from(*scale).unwrap_or(0)
        }) {
            return Err(bad);
        }
    }
    Ok(cast)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cell_is_null_and_a_quoted_empty_one_the_empty_string() {
        let records = csv_records(b"a,b,c\n1,,\"\"\n\n\"x, \"\"y\"\"\nz\",2,3\r\n").unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(
            records[1],
            (2, vec![Some("1".into()), None, Some(String::new())])
        );
        assert_eq!(records[2].0, 4);
        assert_eq!(records[2].1[0].as_deref(), Some("x, \"y\"\nz"));
        assert!(csv_records(b"a\n\"open").is_err());
    }

    #[test]
    fn a_decimal_with_more_places_than_its_scale_is_no_value_of_its_column() {
        let path = std::path::Path::new("expect/t.csv");
        let to = [DataType::Decimal128(12, 2)];
        let rows = read_typed(path, b"amount\n12.5\n12.50\n", &to).unwrap();
        assert_eq!(rows[0], rows[1]);
        let e = read_typed(path, b"amount\n12.555\n", &to).unwrap_err();
        assert!(
            e.message
                .contains("line 2: `12.555` in column `amount` is no DECIMAL(12,2)"),
            "{e}"
        );
    }
}
