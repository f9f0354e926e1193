//! Generated columns (`GENERATED ALWAYS AS (expr)`): computed from the other columns of
//! each row a flow writes, cast to the declared type, at the declared position.
//! `cdcflow validate` has checked that the expression plans over the table's columns
//! and that no query gives the column itself.

use std::sync::Arc;

use cdcflow_plan::Dataset;
use cdcflow_plan::planner::Planner;
use cdcflow_plan::types::arrow_type;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::execution::SessionState;

use crate::RunError;

/// `batches` (of `schema`) with the generated columns of `target` computed.
pub(crate) fn fill(
    target: &Dataset,
    planner: &Planner,
    state: &SessionState,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<(SchemaRef, Vec<RecordBatch>), RunError> {
    let mut out = (schema, batches);
    for (position, column) in target.def.columns.iter().enumerate() {
        let Some(expr) = &column.generated else {
            continue;
        };
        let name = column.name.value.as_str();
        let data_type = arrow_type(&column.data_type).map_err(RunError::input)?;
        let (schema, batches) = out;
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let logical = planner.plan_expr(expr, &df_schema)?;
        let physical = state.create_physical_expr(logical, &df_schema)?;
        let existing = schema.index_of(name).ok();
        let field = Arc::new(Field::new(name, data_type.clone(), !column.not_null));
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        match existing {
            Some(i) => fields[i] = Arc::clone(&field),
            None => fields.insert(position.min(fields.len()), Arc::clone(&field)),
        }
        let new_schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        let mut computed = Vec::with_capacity(batches.len());
        for batch in batches {
            let values = physical.evaluate(&batch)?.into_array(batch.num_rows())?;
            let values = cast(&values, &data_type).map_err(|e| {
                RunError::input(format!(
                    "generated column `{name}` of `{}`: {e}",
                    target.name
                ))
            })?;
            if column.not_null && values.null_count() > 0 {
                return Err(RunError::input(format!(
                    "generated column `{name}` of `{}` is NOT NULL, but `{expr}` is null on {} row(s); nothing was committed",
                    target.name,
                    values.null_count()
                )));
            }
            let mut columns = batch.columns().to_vec();
            match existing {
                Some(i) => columns[i] = values,
                None => columns.insert(position.min(columns.len()), values),
            }
            computed.push(RecordBatch::try_new(Arc::clone(&new_schema), columns)?);
        }
        out = (new_schema, computed);
    }
    Ok(out)
}

/// The computed columns of AUTO CDC target `target`, planned over the visible row
/// `from` (`Rules::computed_from`): the kernel makes them on each row it publishes.
pub(crate) fn for_auto_cdc(
    target: &Dataset,
    planner: &Planner,
    state: &SessionState,
    from: &SchemaRef,
) -> Result<Vec<crate::cdc::kernel::GeneratedColumn>, RunError> {
    let df_schema = DFSchema::try_from(from.as_ref().clone())?;
    let mut out = Vec::new();
    for column in &target.def.columns {
        let Some(expr) = &column.generated else {
            continue;
        };
        let data_type = arrow_type(&column.data_type).map_err(RunError::input)?;
        let logical = planner.plan_expr(expr, &df_schema)?;
        out.push(crate::cdc::kernel::GeneratedColumn {
            field: Field::new(&column.name.value, data_type, !column.not_null),
            expr: state.create_physical_expr(logical, &df_schema)?,
            text: expr.to_string(),
        });
    }
    Ok(out)
}
