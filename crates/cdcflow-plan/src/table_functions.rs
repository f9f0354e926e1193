//! Table functions in FROM. Spark's `range(end)`, `range(start, end[, step])` is
//! DataFusion's `range` (the same numbers, `end` excluded) with its column named `id`,
//! as Spark names it; `list_files` is Databricks' (`crate::list_files`); any other table
//! function is DataFusion's own (`generate_series`).

use std::sync::Arc;

use datafusion::catalog::TableFunctionArgs;
use datafusion::catalog::view::ViewTable;
use datafusion::common::{DFSchema, plan_datafusion_err};
use datafusion::datasource::provider_as_source;
use datafusion::error::Result;
use datafusion::execution::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, TableSource, col};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;

/// The source of `name(args)` in a FROM clause.
pub(crate) fn source(
    state: &SessionState,
    name: &str,
    args: Vec<Expr>,
) -> Result<Arc<dyn TableSource>> {
    let lowered = name.to_ascii_lowercase();
    if lowered == crate::list_files::NAME {
        return crate::list_files::source(&args);
    }
    let datafusion_own = datafusion_function(state, &lowered, args)?;
    if lowered != "range" {
        return Ok(datafusion_own);
    }
    // Spark's range yields a BIGINT column `id`; DataFusion's calls it `value`.
    let plan = LogicalPlanBuilder::scan("range", datafusion_own, None)?
        .project(vec![col("value").alias("id")])?
        .build()?;
    Ok(provider_as_source(Arc::new(ViewTable::new(plan, None))))
}

/// DataFusion's table function `name` over `args`, folded to constants first (as its
/// own session does: `range(-3, 3)` has a negated literal).
fn datafusion_function(
    state: &SessionState,
    name: &str,
    args: Vec<Expr>,
) -> Result<Arc<dyn TableSource>> {
    let function = state
        .table_functions()
        .get(name)
        .cloned()
        .ok_or_else(|| plan_datafusion_err!("table function '{name}' not found"))?;
    let context = SimplifyContext::builder()
        .with_config_options(Arc::clone(state.config_options()))
        .with_query_execution_start_time(state.execution_props().query_execution_start_time)
        .build();
    let simplifier = ExprSimplifier::new(context);
    let schema = DFSchema::empty();
    let args = args
        .into_iter()
        .map(|arg| {
            simplifier
                .coerce(arg, &schema)
                .and_then(|e| simplifier.simplify(e))
        })
        .collect::<Result<Vec<_>>>()?;
    let provider =
        function.create_table_provider_with_args(TableFunctionArgs::new(&args, state))?;
    Ok(provider_as_source(provider))
}
