//! DataFusion's planning errors as a user reads them: without the kind of error they
//! start with (`Error during planning: `, `Schema error: `), a parser's message
//! without its Rust wrapping, and a call no signature matches said as such rather than
//! as an internal error that asks for a DataFusion bug report.

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;

/// What DataFusion wrote for a function call whose argument types no signature takes,
/// after its internal error (`Internal error: Function 'sum' failed to match …`).
pub const NO_SIGNATURE: &str = "No function matches the given name and argument types";

/// The message of `e` for a user who wrote the SQL.
pub fn user_message(e: &DataFusionError) -> String {
    let mut e = e;
    // The Diagnostic's own message is the short form; the inner error says more
    // (`Valid fields are …`).
    while let DataFusionError::Diagnostic(_, inner) = e {
        e = inner.as_ref();
    }
    let text = match e {
        DataFusionError::SQL(error, _) => match error.as_ref() {
            ParserError::ParserError(m) | ParserError::TokenizerError(m) => {
                format!("syntax error: {m}")
            }
            ParserError::RecursionLimitExceeded => "the query nests too deeply".to_string(),
        },
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => e.message().into_owned(),
        _ => e.strip_backtrace(),
    };
    match text.find(NO_SIGNATURE) {
        Some(at) => text[at..].replace('\t', "  "),
        None => text,
    }
    .trim_end()
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Planner;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn planning_error(sql: &str) -> String {
        let mut planner = Planner::new();
        let schema = Schema::new(vec![Field::new("name", DataType::Utf8, true)]);
        planner.register_schema("t", Arc::new(schema));
        let statements = cdcflow_sql::sqlparser::parser::Parser::parse_sql(
            &cdcflow_sql::sqlparser::dialect::DatabricksDialect {},
            sql,
        )
        .expect("parses");
        let Some(cdcflow_sql::sqlparser::ast::Statement::Query(q)) = statements.first() else {
            panic!("a query");
        };
        let err = planner.plan_query(q).expect_err("fails");
        user_message(&err)
    }

    #[test]
    fn messages_lose_datafusion_s_error_kinds() {
        let m = planning_error("SELECT nope FROM t");
        assert!(m.starts_with("No field named nope."), "{m}");
        let m = planning_error("SELECT sum(name) FROM t");
        assert!(
            m.starts_with("No function matches the given name and argument types 'sum(Utf8)'"),
            "{m}"
        );
        assert!(
            !m.contains("Internal error") && !m.contains("bug report"),
            "{m}"
        );
    }
}
