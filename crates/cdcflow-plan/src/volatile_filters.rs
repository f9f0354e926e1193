//! A filter written below a projection keeps guarding it. DataFusion 55's physical
//! filter pushdown moves a filter down through a projection by copying the projected
//! expressions into it (`ProjectionExec::gather_filters_for_pushdown`), whatever their
//! volatility, and may then push a filter written below the projection into the scan,
//! where it only prunes files: in
//!
//! ```sql
//! SELECT e.id FROM (SELECT debezium(value, 'id INT') AS e FROM events WHERE value LIKE '{%')
//! WHERE e IS NOT NULL
//! ```
//!
//! `debezium(value, …) IS NOT NULL` then runs on every row of the scan, and a record the
//! inner `WHERE` was there to keep out fails the query. `debezium()` and `from_json()`
//! are declared volatile so that no optimizer copies them (each copy decodes every row
//! again); a plan that projects a volatile expression keeps its filters where the query
//! put them. Scans still prune by the query's filters (the logical plan hands them
//! over), and plans without such a projection are pushed down as before.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::config::ConfigOptions;
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;

/// The physical optimizer's rules, with each filter pushdown guarded.
pub fn guarded(
    rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    rules
        .into_iter()
        .map(|rule| match rule.name().starts_with("FilterPushdown") {
            true => Arc::new(Guarded(rule)) as Arc<dyn PhysicalOptimizerRule + Send + Sync>,
            false => rule,
        })
        .collect()
}

/// A filter pushdown that leaves alone a plan projecting a volatile expression.
#[derive(Debug)]
struct Guarded(Arc<dyn PhysicalOptimizerRule + Send + Sync>);

impl PhysicalOptimizerRule for Guarded {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match projects_volatile(&plan) {
            true => Ok(plan),
            false => self.0.optimize(plan, config),
        }
    }

    fn name(&self) -> &str {
        self.0.name()
    }

    fn schema_check(&self) -> bool {
        self.0.schema_check()
    }
}

/// Whether `plan` has a projection of a volatile expression anywhere.
fn projects_volatile(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let here = plan
        .downcast_ref::<ProjectionExec>()
        .is_some_and(|p| p.expr().iter().any(|e| is_volatile(&e.expr)));
    here || plan.children().into_iter().any(projects_volatile)
}
