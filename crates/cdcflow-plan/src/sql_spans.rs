//! Finding where in a query's text something is, for diagnostics.

use std::ops::ControlFlow;

use cdcflow_sql::Span;
use cdcflow_sql::sqlparser::ast::{Expr as SqlExpr, Query, visit_expressions};

/// The span `pick` returns for the first expression of `query` it picks (an empty span
/// is no position, and the search goes on).
pub(crate) fn find_expr(
    query: &Query,
    mut pick: impl FnMut(&SqlExpr) -> Option<Span>,
) -> Option<Span> {
    let found = visit_expressions(query, |e| match pick(e) {
        Some(span) if span != Span::empty() => ControlFlow::Break(span),
        _ => ControlFlow::Continue(()),
    });
    match found {
        ControlFlow::Break(span) => Some(span),
        ControlFlow::Continue(()) => None,
    }
}
