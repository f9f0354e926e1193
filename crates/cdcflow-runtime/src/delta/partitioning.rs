//! Delta partition columns (`PARTITIONED BY`). deltalake's file writer splits each
//! write by the partition values and keeps them in the log, not in the files (as
//! Databricks does), so a reader of the files puts them back ([`with_values`]), and a
//! write to a table partitioned otherwise than its definition says is refused unless
//! it replaces the whole table ([`Commit::check_partitioning`]).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, new_null_array};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use deltalake::DeltaTable;
use deltalake::kernel::Add;

use super::{Commit, Mode};
use crate::RunError;

/// The partition columns of an existing table; `None` for a table not created yet.
pub(crate) fn of(table: &DeltaTable) -> Option<Vec<String>> {
    table.version()?;
    let snapshot = table.snapshot().ok()?;
    Some(snapshot.metadata().partition_columns().to_vec())
}

impl Commit {
    /// Whether the table exists partitioned otherwise than the commit declares.
    pub(crate) fn repartitions(&self, table: &DeltaTable) -> bool {
        match (&self.partition_columns, of(table)) {
            (Some(declared), Some(stored)) => *declared != stored,
            _ => false,
        }
    }

    /// Refuses a commit that would change the table's partitioning without replacing
    /// it: rows of one table would then be laid out two ways. A full refresh or a
    /// materialized view's recompute replaces the table and takes the new partitioning.
    pub(crate) fn check_partitioning(
        &self,
        dir: &std::path::Path,
        table: &DeltaTable,
        mode: Mode,
    ) -> Result<(), RunError> {
        if mode == Mode::Overwrite || !self.repartitions(table) {
            return Ok(());
        }
        let shown = |cols: &[String]| match cols.is_empty() {
            true => "not partitioned".to_string(),
            false => format!("partitioned by ({})", cols.join(", ")),
        };
        let stored = of(table).unwrap_or_default();
        let declared = self.partition_columns.clone().unwrap_or_default();
        Err(RunError::input(format!(
            "`{}` ({}) is {} in storage, but its definition says {}",
            self.name,
            dir.display(),
            shown(&stored),
            shown(&declared).replace("not partitioned", "no PARTITIONED BY"),
        ))
        .with_help(format!(
            "run `cdcflow run --full-refresh {}` to rebuild it with the new partitioning, or put the PARTITIONED BY clause back",
            self.name
        )))
    }

    /// The partition columns a new table is created with.
    pub(crate) fn new_table_partitions(&self) -> Vec<String> {
        self.partition_columns.clone().unwrap_or_default()
    }
}

/// `batch`, read from the data file of `add`, with the partition columns of `schema`
/// that the file does not hold: each is the file's value from the log, on every row
/// (null where the log says null).
pub(crate) fn with_values(
    batch: RecordBatch,
    add: Option<&Add>,
    schema: &SchemaRef,
) -> Result<RecordBatch, RunError> {
    let Some(add) = add.filter(|a| !a.partition_values.is_empty()) else {
        return Ok(batch);
    };
    let mut fields: Vec<Arc<Field>> = batch.schema().fields().iter().cloned().collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for (name, value) in &add.partition_values {
        let Ok(field) = schema.field_with_name(name) else {
            continue;
        };
        if batch.column_by_name(name).is_some() {
            continue;
        }
        let rows = batch.num_rows();
        let column = match value {
            None => new_null_array(field.data_type(), rows),
            Some(text) => ScalarValue::try_from_string(text.clone(), field.data_type())
                .and_then(|v| v.to_array_of_size(rows))
                .map_err(|e| {
                    RunError::input(format!(
                        "data file {}: partition value {name}={text:?} is not a {}: {e}",
                        add.path,
                        field.data_type()
                    ))
                })?,
        };
        fields.push(Arc::new(field.clone()));
        columns.push(column);
    }
    let options =
        datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &options,
    )?)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use datafusion::arrow::array::{Date32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::DataType;

    use super::*;

    #[test]
    fn a_files_partition_values_come_back_as_columns_of_its_rows() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("city", DataType::Utf8, true),
            Field::new("day", DataType::Date32, true),
            Field::new("region", DataType::Utf8, true),
        ]));
        let read = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let add = Add {
            path: "city=New%20York/day=2024-02-29/part-0.parquet".into(),
            partition_values: HashMap::from([
                ("city".to_string(), Some("New York".to_string())),
                ("day".to_string(), Some("2024-02-29".to_string())),
                ("region".to_string(), None),
                ("dropped".to_string(), Some("x".to_string())),
            ]),
            ..Add::default()
        };
        let full = super::super::conform(&with_values(read, Some(&add), &schema).unwrap(), &schema)
            .unwrap();
        let city = full
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(city.iter().collect::<Vec<_>>(), [Some("New York"); 2]);
        let day = full
            .column(2)
            .as_any()
            .downcast_ref::<Date32Array>()
            .unwrap();
        assert_eq!(day.value(0), 19782, "2024-02-29");
        assert_eq!(full.column(3).null_count(), 2);
    }

    #[test]
    fn a_partition_value_of_the_wrong_type_names_the_file() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let read = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
        )
        .unwrap();
        let add = Add {
            path: "n=four/part-0.parquet".into(),
            partition_values: HashMap::from([("n".to_string(), Some("four".to_string()))]),
            ..Add::default()
        };
        let err = with_values(read, Some(&add), &schema)
            .unwrap_err()
            .to_string();
        assert!(err.contains("n=four/part-0.parquet"), "{err}");
    }
}
