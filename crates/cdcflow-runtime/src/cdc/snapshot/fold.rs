//! A snapshot query's uncorrelated scalar subqueries in its filters are evaluated
//! before the query runs and replaced by their values, as Spark evaluates such a
//! subquery before the query that uses it. The filter `_metadata.file_path = (SELECT
//! version.path FROM current_snapshot_version())` so becomes a comparison with a
//! literal, which DataFusion pushes down to the `read_files` scan, and the scan opens
//! the one file it names (`inputs::files_table`) rather than the whole folder.

use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Subquery};
use datafusion::prelude::SessionContext;

use crate::RunError;

/// `plan` with each uncorrelated scalar subquery of its filters replaced by its value.
pub(super) async fn scalar_subqueries(
    ctx: &SessionContext,
    plan: LogicalPlan,
) -> Result<LogicalPlan, RunError> {
    let mut found: Vec<Subquery> = Vec::new();
    plan.apply(|node| {
        if let LogicalPlan::Filter(filter) = node {
            filter.predicate.apply(|e| {
                if let Expr::ScalarSubquery(sq) = e
                    && sq.outer_ref_columns.is_empty()
                    && !found.contains(sq)
                {
                    found.push(sq.clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if found.is_empty() {
        return Ok(plan);
    }
    let mut values = Vec::with_capacity(found.len());
    for sq in &found {
        values.push(value(ctx, sq).await?);
    }
    let folded = plan.transform_up(|node| match node {
        LogicalPlan::Filter(_) => node.map_expressions(|e| {
            e.transform_up(|e| match &e {
                Expr::ScalarSubquery(sq) => match found.iter().position(|f| f == sq) {
                    Some(at) => Ok(Transformed::yes(Expr::Literal(values[at].clone(), None))),
                    None => Ok(Transformed::no(e)),
                },
                _ => Ok(Transformed::no(e)),
            })
        }),
        node => Ok(Transformed::no(node)),
    })?;
    Ok(folded.data)
}

/// The one value `sq` gives: null for no row, an error for more than one.
async fn value(ctx: &SessionContext, sq: &Subquery) -> Result<ScalarValue, RunError> {
    let plan = sq.subquery.as_ref().clone();
    let data_type = plan.schema().field(0).data_type().clone();
    let rows = ctx.execute_logical_plan(plan).await?.collect().await?;
    let count: usize = rows.iter().map(|b| b.num_rows()).sum();
    match rows.iter().find(|b| b.num_rows() > 0) {
        None => Ok(ScalarValue::try_from(&data_type)?),
        Some(_) if count > 1 => Err(RunError::input(format!(
            "a scalar subquery of the snapshot query gave {count} rows, not one"
        ))
        .with_help(
            "a subquery used as a value gives one row: add a condition, an aggregate or LIMIT 1",
        )),
        Some(b) => Ok(ScalarValue::try_from_array(b.column(0), 0)?),
    }
}
