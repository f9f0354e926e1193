//! Spark's operators DataFusion plans but cannot run: `v:field`, a variant path, here on
//! JSON text: `get_json_object(v, '$.field')`, a string, so `v:n::int` casts it.
//! (`a DIV b` does not reach here: the Databricks dialect of the SQL parser does not
//! read `DIV` as an operator yet.)

use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{Expr, lit};
use datafusion::sql::sqlparser::ast::BinaryOperator;

/// The [`ExprPlanner`] of Spark's operators.
#[derive(Debug)]
pub(super) struct SparkOperators;

impl ExprPlanner for SparkOperators {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        _schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        match &expr.op {
            BinaryOperator::Custom(op) if op == ":" => {
                let Expr::Literal(ScalarValue::Utf8(Some(path)), _) = &expr.right else {
                    return Ok(PlannerResult::Original(expr));
                };
                let path = json_path(path);
                let call = super::json::get_json_object().call(vec![expr.left, lit(path)]);
                Ok(PlannerResult::Planned(call))
            }
            _ => Ok(PlannerResult::Original(expr)),
        }
    }
}

/// The JSON path of a variant path as written after the `:` (`a.b[0]`, `['a b']`).
fn json_path(path: &str) -> String {
    match path.starts_with('[') {
        true => format!("${path}"),
        false => format!("$.{path}"),
    }
}
