//! Plans queries and expressions with DataFusion's SQL planner against a set of named
//! tables. Validation registers empty tables of the known schemas; the runtime registers
//! real ones. Planning is synchronous and needs no catalog I/O.

use std::collections::HashMap;
use std::sync::Arc;

use cdcflow_sql::sqlparser::ast::{Expr as SqlExpr, Query, Statement as SqlStatement};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DFSchema, TableReference};
use datafusion::datasource::empty::EmptyTable;
use datafusion::datasource::provider_as_source;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::logical_expr::planner::{ExprPlanner, TypePlanner};
use datafusion::logical_expr::{
    AggregateUDF, Expr, LogicalPlan, ScalarUDF, TableSource, WindowUDF,
};
use datafusion::prelude::SessionConfig;
use datafusion::sql::planner::{ContextProvider, ParserOptions, PlannerContext, SqlToRel};

use crate::ident_case;

/// DataFusion configuration for the dialect: identifiers keep their case (column names
/// come from files, `userId` must stay `userId`), strings are `Utf8`, spans are kept.
pub fn session_config() -> SessionConfig {
    let mut config = SessionConfig::new();
    let options = config.options_mut();
    options.sql_parser.enable_ident_normalization = false;
    options.sql_parser.map_string_types_to_utf8view = false;
    options.sql_parser.collect_spans = true;
    options.sql_parser.dialect = datafusion::config::Dialect::Databricks;
    // Off: it moves each field access `e.id` of a struct computed below (`debezium(…)
    // AS e`, `from_json(…) AS j`) down into a copy of the computation, so that a row's
    // JSON was decoded once per field read.
    options.optimizer.enable_leaf_expression_pushdown = false;
    config
}

/// A SQL planner over named tables.
#[derive(Clone)]
pub struct Planner {
    state: SessionState,
    tables: HashMap<String, Arc<dyn TableSource>>,
    /// The relations of `last_snapshot_version()` and `current_snapshot_version()`,
    /// where a snapshot flow's queries are planned (`crate::snapshot`).
    bindings: HashMap<&'static str, Arc<dyn TableSource>>,
}

impl Default for Planner {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("tables", &self.tables.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Planner {
    /// A planner with every function of the dialect ([`crate::functions`]).
    pub fn new() -> Self {
        Self::with_state(crate::functions::session_state(session_config()))
    }

    /// A planner that uses the functions of `state` (the runtime's session).
    pub fn with_state(state: SessionState) -> Self {
        Self {
            state,
            tables: HashMap::new(),
            bindings: HashMap::new(),
        }
    }

    /// Makes the table function `function` (one of [`crate::snapshot::FUNCTIONS`])
    /// give `source`.
    pub fn bind(&mut self, function: &'static str, source: Arc<dyn TableSource>) {
        self.bindings.insert(function, source);
    }

    /// Makes `function` unknown again.
    pub fn unbind(&mut self, function: &'static str) {
        self.bindings.remove(function);
    }

    /// Binds what `other` binds (a view's queries are planned by a planner of their own).
    pub fn inherit_bindings(&mut self, other: &Planner) {
        self.bindings.extend(other.bindings.clone());
    }

    /// Makes `name` resolve to `source`.
    pub fn register(&mut self, name: &str, source: Arc<dyn TableSource>) {
        self.tables.insert(name.to_string(), source);
    }

    /// The source registered as `name`.
    pub fn table(&self, name: &str) -> Option<Arc<dyn TableSource>> {
        self.tables.get(name).cloned()
    }

    /// Makes `name` resolve to an empty table of `schema` (for planning without data).
    pub fn register_schema(&mut self, name: &str, schema: SchemaRef) {
        self.register(name, provider_as_source(Arc::new(EmptyTable::new(schema))));
    }

    fn sql_to_rel<'a>(&self, provider: &'a Provider<'a>) -> SqlToRel<'a, Provider<'a>> {
        let options = ParserOptions::new()
            .with_enable_ident_normalization(false)
            .with_map_string_types_to_utf8view(false)
            .with_collect_spans(true);
        SqlToRel::new_with_options(provider, options)
    }

    /// The source registered as `name`, ignoring case when no name matches exactly.
    pub fn table_ignoring_case(&self, name: &str) -> Option<Arc<dyn TableSource>> {
        self.source(name).cloned()
    }

    /// The source registered as `name`, ignoring case when no name matches exactly.
    fn source(&self, name: &str) -> Option<&Arc<dyn TableSource>> {
        self.tables.get(name).or_else(|| {
            self.tables
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
    }

    /// Plans a query whose table references are registered names. A Databricks service
    /// function is refused; identifiers resolve ignoring case (`ident_case`), and
    /// Spark's generators (`explode`, LATERAL VIEW) are rewritten
    /// ([`crate::functions::syntax`]).
    pub fn plan_query(&self, query: &Query) -> Result<LogicalPlan> {
        crate::functions::service::refuse_calls(query)?;
        let mut query = ident_case::query(query, &|name| self.source(name).map(|s| s.schema()))
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        crate::functions::syntax::rewrite_query(&mut query);
        let provider = Provider { planner: self };
        self.sql_to_rel(&provider)
            .sql_statement_to_plan(SqlStatement::Query(Box::new(query)))
    }

    /// Plans an expression over the columns of `schema`, ignoring case.
    pub fn plan_expr(&self, expr: &SqlExpr, schema: &DFSchema) -> Result<Expr> {
        crate::functions::service::refuse_calls(expr)?;
        let expr =
            ident_case::expr(expr, schema).map_err(|e| DataFusionError::External(Box::new(e)))?;
        let provider = Provider { planner: self };
        self.sql_to_rel(&provider)
            .sql_to_expr(expr, schema, &mut PlannerContext::new())
    }
}

struct Provider<'a> {
    planner: &'a Planner,
}

impl ContextProvider for Provider<'_> {
    fn get_table_source(&self, name: TableReference) -> Result<Arc<dyn TableSource>> {
        self.planner
            .source(name.table())
            .cloned()
            .ok_or_else(|| DataFusionError::Plan(format!("table '{name}' not found")))
    }

    fn get_table_function_source(
        &self,
        name: &str,
        args: Vec<Expr>,
    ) -> Result<Arc<dyn TableSource>> {
        if let Some(function) = crate::snapshot::function(name) {
            return crate::snapshot::bound(function, &self.planner.bindings, &args);
        }
        crate::table_functions::source(&self.planner.state, name, args)
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        self.planner.state.expr_planners()
    }

    fn get_type_planner(&self) -> Option<Arc<dyn TypePlanner>> {
        None
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.planner.state.scalar_functions().get(name).cloned()
    }

    fn get_higher_order_meta(
        &self,
        name: &str,
    ) -> Option<Arc<datafusion::logical_expr::HigherOrderUDF>> {
        self.planner
            .state
            .higher_order_functions()
            .get(name)
            .cloned()
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.planner.state.aggregate_functions().get(name).cloned()
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.planner.state.window_functions().get(name).cloned()
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        self.planner.state.config_options()
    }

    fn udf_names(&self) -> Vec<String> {
        self.planner
            .state
            .scalar_functions()
            .keys()
            .cloned()
            .collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        self.planner
            .state
            .higher_order_functions()
            .keys()
            .cloned()
            .collect()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.planner
            .state
            .aggregate_functions()
            .keys()
            .cloned()
            .collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.planner
            .state
            .window_functions()
            .keys()
            .cloned()
            .collect()
    }
}
