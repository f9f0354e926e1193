//! A table's declared columns are what it stores: the rows a query flow writes are put
//! in the declared order, each column cast to its declared type (a value that does not
//! convert fails the batch, naming the column, never becomes null), a column the query
//! does not give is null, and a NOT NULL column that holds a null fails the batch.
//! `cdcflow validate` has checked names and types (`resolve/declared.rs`).

use std::sync::Arc;

use cdcflow_plan::Dataset;
use cdcflow_plan::types::arrow_type;
use datafusion::arrow::array::{RecordBatch, new_null_array};
use datafusion::arrow::compute::cast_with_options;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};

use crate::RunError;
use crate::delta::STRICT;

/// `batches` (of `schema`) in the declared columns of `target`; as they are when it
/// declares none. `landing` names the landing files the rows came from, for errors.
pub(crate) fn conform(
    target: &Dataset,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    landing: &[String],
) -> Result<(SchemaRef, Vec<RecordBatch>), RunError> {
    let from = match landing.is_empty() {
        true => String::new(),
        false => format!(" (the batch read {})", landing.join(", ")),
    };
    if target.def.columns.is_empty() {
        return Ok((schema, batches));
    }
    let mut fields = Vec::with_capacity(target.def.columns.len());
    for column in &target.def.columns {
        let data_type = arrow_type(&column.data_type).map_err(RunError::input)?;
        let mut field = Field::new(&column.name.value, data_type, !column.not_null);
        if let Some(comment) = &column.comment {
            field = field.with_metadata([("comment".to_string(), comment.clone())].into());
        }
        fields.push(field);
    }
    let declared = Arc::new(Schema::new(fields));
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let mut columns = Vec::with_capacity(declared.fields().len());
        for field in declared.fields() {
            let given = schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(field.name()));
            let column = match given {
                None => new_null_array(field.data_type(), batch.num_rows()),
                Some(i) => cast_with_options(batch.column(i), field.data_type(), &STRICT).map_err(
                    |e| {
                        RunError::input(format!(
                            "column `{}` of `{}` is declared {}, and a value of the query's {} does not convert: {e}{from}; nothing was committed",
                            field.name(),
                            target.name,
                            field.data_type(),
                            schema.field(i).data_type()
                        ))
                        .with_help("fix the input, or cast (or try_cast) the column in the query")
                    },
                )?,
            };
            if !field.is_nullable() && column.null_count() > 0 {
                return Err(RunError::input(format!(
                    "column `{}` of `{}` is declared NOT NULL, and {} row(s) of this batch have no value{from}; nothing was committed",
                    field.name(),
                    target.name,
                    column.null_count()
                ))
                .with_help("fix the input, give the column a value in the query (coalesce), or drop the rows with an expectation (CONSTRAINT … EXPECT (col IS NOT NULL) ON VIOLATION DROP ROW)"));
            }
            columns.push(column);
        }
        out.push(RecordBatch::try_new(Arc::clone(&declared), columns)?);
    }
    Ok((declared, out))
}
