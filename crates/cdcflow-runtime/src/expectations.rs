//! Expectations (`CONSTRAINT name EXPECT (cond) [ON VIOLATION DROP ROW | FAIL UPDATE]`)
//! checked on the rows a flow is about to commit. A row violates an expectation when its
//! condition is false or NULL. Without `ON VIOLATION` the row is kept and counted.

use cdcflow_plan::Dataset;
use cdcflow_plan::OnViolation;
use cdcflow_plan::planner::Planner;
use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::execution::SessionState;
use serde::Serialize;

use crate::RunError;

/// The outcome of one expectation over a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpectationResult {
    pub name: String,
    /// `warn`, `drop` or `fail`.
    pub action: &'static str,
    pub passed: u64,
    pub failed: u64,
}

/// Checks `dataset`'s expectations on `batches` (rows of `schema`); returns the rows to
/// commit and the counts, or fails on a violated `FAIL UPDATE` expectation.
pub fn enforce(
    dataset: &Dataset,
    planner: &Planner,
    state: &SessionState,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<(Vec<RecordBatch>, Vec<ExpectationResult>), RunError> {
    let expectations = &dataset.def.expectations;
    if expectations.is_empty() {
        return Ok((batches, vec![]));
    }
    let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
    let mut checks = Vec::with_capacity(expectations.len());
    for e in expectations {
        let logical = planner.plan_expr(&e.condition, &df_schema)?;
        // The session coerces types (`value >= 0` on a DOUBLE) as a query would.
        let physical = state.create_physical_expr(logical, &df_schema)?;
        checks.push((e, physical));
    }
    let mut results: Vec<ExpectationResult> = expectations
        .iter()
        .map(|e| ExpectationResult {
            name: e.name.value.clone(),
            action: match e.on_violation {
                OnViolation::Warn => "warn",
                OnViolation::DropRow => "drop",
                OnViolation::FailUpdate => "fail",
            },
            passed: 0,
            failed: 0,
        })
        .collect();
    let mut kept = Vec::with_capacity(batches.len());
    for batch in batches {
        let mut keep = vec![true; batch.num_rows()];
        for ((e, check), result) in checks.iter().zip(results.iter_mut()) {
            let values = check.evaluate(&batch)?.into_array(batch.num_rows())?;
            let ok: &BooleanArray = values.as_boolean_opt().ok_or_else(|| {
                RunError::input(format!("expectation `{}` is not a condition", e.name.value))
            })?;
            for (row, k) in keep.iter_mut().enumerate() {
                if ok.is_valid(row) && ok.value(row) {
                    result.passed += 1;
                } else {
                    result.failed += 1;
                    if e.on_violation == OnViolation::DropRow {
                        *k = false;
                    }
                }
            }
            if e.on_violation == OnViolation::FailUpdate && result.failed > 0 {
                return Err(RunError::input(format!(
                    "expectation `{}` of `{}` failed on {} row(s): {}; nothing was committed",
                    e.name.value, dataset.name, result.failed, e.condition
                ))
                .with_help("fix the input, or relax the expectation (ON VIOLATION DROP ROW, or no ON VIOLATION to keep and count)"));
            }
        }
        kept.push(match keep.iter().all(|&k| k) {
            true => batch,
            false => filter_record_batch(&batch, &BooleanArray::from(keep))?,
        });
    }
    Ok((kept, results))
}

/// How many rows a result let through.
pub fn summary(results: &[ExpectationResult]) -> String {
    results
        .iter()
        .map(|r| {
            format!(
                "{} ({}): {} passed, {} failed",
                r.name, r.action, r.passed, r.failed
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
