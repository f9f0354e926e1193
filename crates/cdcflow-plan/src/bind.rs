//! A query flow's plan bound to a batch's input: the plan validation made, with each
//! table it scans read from the table a run registered under the same name (the new
//! landing files, the rows a stream appended, a view's query). Where a registered table's
//! columns differ from those validated (a source whose schema drifted), the query is
//! planned again over what is registered, so the batch sees its new columns.

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::error::Result;
use datafusion::logical_expr::{LogicalPlan, TableScan, TableSource};

use crate::pipeline::{Flow, FlowKind};
use crate::planner::Planner;

impl Flow {
    /// The flow's plan over the tables `planner` has registered: the validated plan with
    /// its scans bound to them, or, when a scanned table's schema changed or the flow
    /// was not planned, its query planned again. An AUTO CDC flow's plan is its
    /// node's ([`crate::autocdc::AutoCdcNode::plan`]); this is for query flows.
    pub fn plan_with(&self, planner: &Planner) -> Result<LogicalPlan> {
        if let Some(bound) = self.plan.as_ref().and_then(|p| bind(p, planner)) {
            return Ok(bound);
        }
        match &self.kind {
            FlowKind::Query { query, .. } => planner.plan_query(query),
            FlowKind::AutoCdc(_) => Err(datafusion::error::DataFusionError::Plan(format!(
                "flow `{}` is an AUTO CDC flow, planned by its node",
                self.name
            ))),
        }
    }

    /// The flow's query as text (what a materialized view's fingerprint includes);
    /// empty for an AUTO CDC flow.
    pub fn query_text(&self) -> String {
        match &self.kind {
            FlowKind::Query { query, .. } => query.to_string(),
            FlowKind::AutoCdc(_) => String::new(),
        }
    }
}

/// `plan` with every scan reading the table `planner` registered under its name, when
/// each has the schema validated; `None` when one does not (or is not registered).
fn bind(plan: &LogicalPlan, planner: &Planner) -> Option<LogicalPlan> {
    let mut unbound = false;
    // Subqueries too: `(SELECT count(*) FROM t)` scans `t` inside an expression.
    let bound = plan
        .clone()
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::TableScan(scan) = node else {
                return Ok(Transformed::no(node));
            };
            match registered(&scan, planner) {
                Some(source) => Ok(Transformed::yes(LogicalPlan::TableScan(TableScan {
                    source,
                    ..scan
                }))),
                None => {
                    unbound = true;
                    Ok(Transformed::no(LogicalPlan::TableScan(scan)))
                }
            }
        })
        .ok()?;
    (!unbound).then_some(bound.data)
}

/// The table registered under `scan`'s name, when its schema is the one scanned.
fn registered(scan: &TableScan, planner: &Planner) -> Option<Arc<dyn TableSource>> {
    let source = planner.table_ignoring_case(scan.table_name.table())?;
    (source.schema() == scan.source.schema()).then_some(source)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::tree_node::TreeNode;
    use datafusion::datasource::empty::EmptyTable;
    use datafusion::datasource::provider_as_source;

    use super::*;

    fn flow(dir: &std::path::Path, name: &str) -> Flow {
        let pipeline = crate::load(dir, &BTreeMap::new())
            .pipeline
            .expect("pipeline");
        pipeline
            .flows
            .into_iter()
            .find(|f| f.target == name)
            .expect("flow")
    }

    fn scans(plan: &LogicalPlan) -> Vec<Arc<dyn TableSource>> {
        let mut out = Vec::new();
        plan.apply(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                out.push(Arc::clone(&scan.source));
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .expect("walk");
        out
    }

    #[test]
    fn the_validated_plan_runs_over_the_registered_table_and_a_drifted_one_is_planned_again() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("pipeline.yaml"), "name: bind\n").expect("write");
        std::fs::write(
            dir.path().join("flows.sql"),
            "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING');
CREATE OR REFRESH MATERIALIZED VIEW counts AS SELECT v, count(*) AS n FROM raw GROUP BY v;",
        )
        .expect("write");
        let counts = flow(dir.path(), "counts");
        let validated = counts.plan.as_ref().expect("planned");
        let raw = scans(validated);
        assert_eq!(raw.len(), 1);

        // The same columns: the validated plan, reading the registered table.
        let mut planner = Planner::new();
        let same = provider_as_source(Arc::new(EmptyTable::new(raw[0].schema())));
        planner.register("raw", Arc::clone(&same));
        let bound = counts.plan_with(&planner).expect("bound");
        assert!(Arc::ptr_eq(&scans(&bound)[0], &same));
        assert_eq!(bound.schema(), validated.schema());

        // A column more: planned again over what is registered.
        let drifted = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
            Field::new("w", DataType::Utf8, true),
        ]));
        let mut planner = Planner::new();
        planner.register(
            "raw",
            provider_as_source(Arc::new(EmptyTable::new(drifted))),
        );
        let planned = counts.plan_with(&planner).expect("planned again");
        assert_eq!(scans(&planned)[0].schema().fields().len(), 3);
    }
}
