//! The functions a query can call, registered in one place: every DataFusion session of
//! cdcflow (validation's [`Planner`](crate::planner::Planner), the runtime's flows and
//! AUTO CDC events, `cdcflow query`) is made by [`session_state`], so a function that
//! validates is one that runs.
//!
//! Three layers, later ones winning a name: DataFusion's built-ins; Spark's, from
//! `datafusion-spark` (Databricks is Spark, so `concat`, `round`, `date_add`, … behave
//! as there); then ours, filling what `datafusion-spark` leaves out, one module per
//! concept. Forms that are syntax rather than calls (`col:field`, `explode`,
//! `LATERAL VIEW`) are planned by [`operators`] and rewritten by [`syntax`].
//! docs/pipeline-format.md, "Spark functions", lists what is where.

mod aliases;
mod avro;
mod by;
mod casts;
mod coerced;
mod date_parts;
pub mod debezium;
mod field_names;
pub mod from_json;
mod json;
mod mode;
mod nulls;
mod operators;
mod options;
mod raw_row;
mod regex_fns;
pub mod rejected;
mod secret;
pub mod service;
mod spark_map;
mod struct_names;
pub mod syntax;
pub mod time_window;
mod to_timestamp;
mod unix_timestamp;
mod window_column;

use std::sync::Arc;

use datafusion::execution::SessionState;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_spark::SessionStateBuilderSpark;

/// A session with the dialect's configuration and every function of the dialect.
pub fn session_state(config: SessionConfig) -> SessionState {
    with_dialect(
        SessionStateBuilder::new()
            .with_config(config)
            .with_default_features(),
    )
    .build()
}

/// `builder` (with DataFusion's default features) with every function of the dialect:
/// what a session that decodes a flow's physical plan needs (a worker's).
pub fn with_dialect(builder: SessionStateBuilder) -> SessionStateBuilder {
    let mut builder = builder.with_spark_features();
    builder
        .scalar_functions()
        .get_or_insert_with(Vec::new)
        .extend(scalar_functions());
    builder
        .aggregate_functions()
        .get_or_insert_with(Vec::new)
        .extend(aggregate_functions());
    // Ahead of DataFusion's own, which would plan `:` as an operator nothing executes.
    builder
        .expr_planners()
        .get_or_insert_with(Vec::new)
        .insert(0, Arc::new(operators::SparkOperators));
    // The whole list of physical rules (`physical_optimizer_rules` would add to it).
    let rules = builder
        .physical_optimizers()
        .take()
        .unwrap_or_default()
        .rules;
    *builder.physical_optimizers() = Some(PhysicalOptimizer::with_rules(
        crate::volatile_filters::guarded(rules),
    ));
    builder
}

/// A [`SessionContext`] over [`session_state`] of the dialect's configuration.
pub fn session_context() -> SessionContext {
    SessionContext::new_with_state(session_state(crate::planner::session_config()))
}

/// Our scalar functions: what `datafusion-spark` does not have.
fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    let mut all = Vec::new();
    all.extend(casts::functions());
    all.extend(coerced::functions());
    all.extend(date_parts::functions());
    all.extend(nulls::functions());
    all.extend(json::functions());
    all.push(from_json::function());
    all.push(avro::function());
    all.push(debezium::function());
    all.extend(regex_fns::functions());
    all.extend(unix_timestamp::functions());
    all.extend(time_window::functions());
    all.push(to_timestamp::function());
    all.extend(aliases::scalar());
    all.push(secret::function());
    all.extend(service::functions());
    all
}

/// Our aggregate functions: Spark's names for DataFusion's, and `max_by`, `min_by`,
/// `mode`.
fn aggregate_functions() -> Vec<Arc<AggregateUDF>> {
    let mut all = aliases::aggregate();
    all.extend(by::functions());
    all.push(mode::function());
    all
}

/// A function's result: a scalar when every argument was one (a call on literals),
/// else the array of a value per row.
fn columnar(
    out: datafusion::arrow::array::ArrayRef,
    args: &[datafusion::logical_expr::ColumnarValue],
) -> datafusion::common::Result<datafusion::logical_expr::ColumnarValue> {
    use datafusion::logical_expr::ColumnarValue;
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        let value = datafusion::common::ScalarValue::try_from_array(&out, 0)?;
        return Ok(ColumnarValue::Scalar(value));
    }
    Ok(ColumnarValue::Array(out))
}

/// The argument types of a function of `count` strings: each taken as `Utf8`.
fn string_args(
    name: &str,
    args: &[datafusion::arrow::datatypes::DataType],
    count: usize,
) -> datafusion::common::Result<Vec<datafusion::arrow::datatypes::DataType>> {
    if args.len() != count {
        let given = args.len();
        return datafusion::common::plan_err!("{name}() takes {count} argument(s), not {given}");
    }
    Ok(vec![datafusion::arrow::datatypes::DataType::Utf8; count])
}

#[cfg(test)]
mod tests;
