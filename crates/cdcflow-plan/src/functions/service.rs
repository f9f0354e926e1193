//! Databricks functions that call a service of the workspace (its AI model serving,
//! its identity provider) and have no local meaning. Each is registered under its name
//! so that planning a call fails with this module's message (never DataFusion's
//! `Invalid function`, which would suggest a near name); `validate` reports it as
//! `cdcflow::databricks_function` at the call. `secret()` is not here: it has a local
//! meaning (`secret.rs`).

use std::ops::ControlFlow;
use std::sync::Arc;

use cdcflow_sql::sqlparser::ast::{Expr, ObjectNamePart, Visit, visit_expressions};

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};

/// Each function, with the service it needs.
const SERVICES: &[(&str, &str)] = &[
    ("ai_analyze_sentiment", "AI Functions (model serving)"),
    ("ai_classify", "AI Functions (model serving)"),
    ("ai_extract", "AI Functions (model serving)"),
    ("ai_fix_grammar", "AI Functions (model serving)"),
    ("ai_forecast", "AI Functions (model serving)"),
    ("ai_gen", "AI Functions (model serving)"),
    ("ai_mask", "AI Functions (model serving)"),
    ("ai_parse_document", "AI Functions (model serving)"),
    ("ai_query", "AI Functions (model serving)"),
    ("ai_similarity", "AI Functions (model serving)"),
    ("ai_summarize", "AI Functions (model serving)"),
    ("ai_translate", "AI Functions (model serving)"),
    ("vector_search", "Vector Search"),
    (
        "is_member",
        "the workspace's groups (Unity Catalog identity)",
    ),
    (
        "is_account_group_member",
        "the account's groups (Unity Catalog identity)",
    ),
    (
        "session_user",
        "the signed-in user (Unity Catalog identity)",
    ),
    (
        "current_user",
        "the signed-in user (Unity Catalog identity)",
    ),
];

/// What every message of this module ends with, to know it again among planning errors.
const MARK: &str = "a Databricks service cdcflow does not have";

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    SERVICES
        .iter()
        .map(|&(name, service)| {
            Arc::new(ScalarUDF::new_from_impl(ServiceFunction {
                name,
                service,
                signature: Signature::one_of(
                    vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
                    Volatility::Volatile,
                ),
            }))
        })
        .collect()
}

/// A planning error for the first call in `node` of a function of this module: the
/// planner does not always ask a function for its type (a WHERE, a CASE condition), so
/// calls are looked for before planning rather than left to fail there.
pub fn refuse_calls<V: Visit>(node: &V) -> Result<()> {
    let found = visit_expressions(node, |e| {
        if let Expr::Function(f) = e
            && let [ObjectNamePart::Identifier(name)] = f.name.0.as_slice()
            && let Some(&(name, service)) = SERVICES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(&name.value))
        {
            return ControlFlow::Break(message(name, service));
        }
        ControlFlow::Continue(())
    });
    match found {
        ControlFlow::Break(m) => plan_err!("{m}"),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn message(name: &str, service: &str) -> String {
    format!("`{name}()` needs {service}, {MARK}")
}

/// The function a planning error of this module is about, and the help to give.
pub fn called(message: &str) -> Option<(&str, &'static str)> {
    if !message.contains(MARK) {
        return None;
    }
    let name = message.split('(').next()?.trim_start_matches('`');
    let help = match name {
        "session_user" | "current_user" | "is_member" | "is_account_group_member" => {
            "cdcflow runs as one local user with no groups: filter rows on a column, or pass the user as configuration (${user})"
        }
        _ => {
            "compute the value outside the pipeline (a job that lands it as a column), or drop the call"
        }
    };
    Some((name, help))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ServiceFunction {
    name: &'static str,
    service: &'static str,
    signature: Signature,
}

impl ServiceFunction {
    fn message(&self) -> String {
        message(self.name, self.service)
    }
}

impl ScalarUDFImpl for ServiceFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        plan_err!("{}", self.message())
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        plan_err!("{}", self.message())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!("{}", self.message())
    }
}
