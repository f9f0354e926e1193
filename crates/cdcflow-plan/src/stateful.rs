//! Operators that need state across the batches of a stream. A streaming table appends
//! the result of its query over each batch's new rows; an aggregate, DISTINCT, a window
//! function or a join of two streams computed that way is computed per batch, not over
//! the stream (two batches with one `oslo` row each give two counts of 1, not one of
//! 2). Over a watermarked stream a streaming table's own query keeps that state
//! (`crate::stream_aggregate`); elsewhere (a view read as a stream, an AUTO CDC flow's
//! FROM query) validation rejects them ([`first_stateful`]) and says where
//! ([`locate`]). The decision is taken on the DataFusion plan (what the query computes:
//! `count(*)` without GROUP BY is an aggregate too); the place is found in the SQL.

use std::ops::ControlFlow;

use cdcflow_sql::Span;
use cdcflow_sql::sqlparser::ast::{
    Distinct, Expr as SqlExpr, GroupByExpr, ObjectNamePart, Query, SetExpr, Spanned, TableFactor,
    Visit, Visitor,
};
use datafusion::logical_expr::{Expr, LogicalPlan};

/// An operator whose result over a stream depends on more than one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stateful {
    /// `GROUP BY` (with the first aggregate function, if any).
    GroupBy(Option<String>),
    /// An aggregate function over all rows (`SELECT count(*) FROM STREAM(x)`).
    Aggregate(String),
    /// `SELECT DISTINCT`, or a `UNION` without `ALL`.
    Distinct,
    /// A window function (`… OVER (…)`).
    Window(String),
    /// A join of two streams.
    StreamJoin,
    /// `ORDER BY` over a stream.
    Sort,
    /// `LIMIT` over a stream.
    Limit,
}

impl Stateful {
    /// The operator as the user wrote it.
    pub fn describe(&self) -> String {
        match self {
            Stateful::GroupBy(_) => "GROUP BY".into(),
            Stateful::Aggregate(f) => format!("aggregate `{f}`"),
            Stateful::Distinct => "DISTINCT".into(),
            Stateful::Window(f) => format!("window function `{f}`"),
            Stateful::StreamJoin => "join of two streams".into(),
            Stateful::Sort => "ORDER BY".into(),
            Stateful::Limit => "LIMIT".into(),
        }
    }

    /// What the operator does to a stream, and what it would compute per batch.
    pub fn consequence(&self) -> String {
        const AGGREGATED: &str =
            "each batch would be aggregated on its own and its result appended";
        match self {
            Stateful::GroupBy(_) => format!("groups a stream (GROUP BY): {AGGREGATED}"),
            Stateful::Aggregate(f) => format!("aggregates a stream with `{f}`: {AGGREGATED}"),
            Stateful::Distinct => {
                "applies DISTINCT to a stream: duplicates would be dropped within each batch only"
                    .into()
            }
            Stateful::Window(f) => format!(
                "applies window function `{f}` to a stream: each batch would be windowed on its own"
            ),
            Stateful::StreamJoin => {
                "joins two streams: only rows of the same batch would meet".into()
            }
            Stateful::Sort => "sorts a stream: each batch would be sorted on its own".into(),
            Stateful::Limit => "limits a stream: each batch would be limited on its own".into(),
        }
    }
}

/// The first stateful operator of `plan` over a stream, where `streaming` tells which
/// scanned tables are read as streams. A join with a table read whole is not one: each
/// batch's rows meet the whole table, as Databricks' stream-static joins do.
pub fn first_stateful(plan: &LogicalPlan, streaming: &dyn Fn(&str) -> bool) -> Option<Stateful> {
    let mut found = None;
    visit(plan, streaming, &mut found);
    found
}

/// Whether `plan`'s output is a stream; records the first stateful operator over one.
fn visit(
    plan: &LogicalPlan,
    streaming: &dyn Fn(&str) -> bool,
    found: &mut Option<Stateful>,
) -> bool {
    if let LogicalPlan::TableScan(scan) = plan {
        return streaming(scan.table_name.table());
    }
    let inputs: Vec<bool> = plan
        .inputs()
        .into_iter()
        .map(|p| visit(p, streaming, found))
        .collect();
    let stream = inputs.iter().any(|s| *s);
    if stream && found.is_none() {
        *found = match plan {
            LogicalPlan::Aggregate(a) => {
                let function = a.aggr_expr.first().and_then(function_name);
                match a.group_expr.is_empty() {
                    false => Some(Stateful::GroupBy(function)),
                    true => function.map(Stateful::Aggregate),
                }
            }
            LogicalPlan::Distinct(_) => Some(Stateful::Distinct),
            LogicalPlan::Window(w) => w
                .window_expr
                .first()
                .and_then(function_name)
                .map(Stateful::Window),
            LogicalPlan::Join(_) if inputs.iter().all(|s| *s) => Some(Stateful::StreamJoin),
            _ => None,
        };
    }
    stream
}

fn function_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Alias(a) => function_name(&a.expr),
        Expr::AggregateFunction(f) => Some(f.func.name().to_string()),
        Expr::WindowFunction(w) => Some(w.fun.name().to_string()),
        _ => None,
    }
}

/// Where `query` writes `op`: the GROUP BY expression or aggregate call, the SELECT of a
/// SELECT DISTINCT, the window call, the joined stream (one of `streams`, as the query
/// names it after resolution). `None` when it cannot be told (the caller points at the
/// query).
pub fn locate(query: &Query, op: &Stateful, streams: &[String]) -> Option<Span> {
    let span = match op {
        Stateful::GroupBy(function) => selects(query, |s| match &s.group_by {
            GroupByExpr::Expressions(exprs, _) => exprs.first().map(Spanned::span),
            GroupByExpr::All(_) => None,
        })
        .or_else(|| function.as_deref().and_then(|f| call(query, f, false))),
        Stateful::Aggregate(f) => call(query, f, false),
        Stateful::Window(f) => call(query, f, true),
        Stateful::Distinct => selects(query, |s| match s.distinct {
            Some(Distinct::Distinct | Distinct::On(_)) => Some(s.select_token.0.span),
            _ => None,
        }),
        Stateful::Sort => {
            let mut found = None;
            let _ = query.visit(&mut Queries(|q: &Query| {
                found = found.or_else(|| q.order_by.as_ref().map(Spanned::span));
            }));
            found
        }
        Stateful::Limit => {
            let mut found = None;
            let _ = query.visit(&mut Queries(|q: &Query| {
                found = found.or_else(|| q.limit_clause.as_ref().map(Spanned::span));
            }));
            found
        }
        Stateful::StreamJoin => selects(query, |s| {
            s.from.iter().flat_map(|t| &t.joins).find_map(|j| {
                let TableFactor::Table { name, .. } = &j.relation else {
                    return None;
                };
                let last = name.0.last().and_then(ObjectNamePart::as_ident)?;
                streams
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(&last.value))
                    .then(|| j.relation.span())
            })
        }),
    };
    span.filter(|s| *s != Span::empty())
}

/// Calls its function on every query and subquery.
struct Queries<F>(F);

impl<F: FnMut(&Query)> Visitor for Queries<F> {
    type Break = ();
    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        (self.0)(query);
        ControlFlow::Continue(())
    }
}

/// The first span `pick` gives for a SELECT of `query` (its subqueries included).
fn selects(
    query: &Query,
    pick: impl FnMut(&cdcflow_sql::sqlparser::ast::Select) -> Option<Span>,
) -> Option<Span> {
    struct Selects<F>(F);
    impl<F: FnMut(&cdcflow_sql::sqlparser::ast::Select) -> Option<Span>> Visitor for Selects<F> {
        type Break = Span;
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Span> {
            in_body(&query.body, &mut self.0)
        }
    }
    fn in_body(
        body: &SetExpr,
        pick: &mut dyn FnMut(&cdcflow_sql::sqlparser::ast::Select) -> Option<Span>,
    ) -> ControlFlow<Span> {
        match body {
            SetExpr::Select(s) => match pick(s) {
                Some(span) if span != Span::empty() => ControlFlow::Break(span),
                _ => ControlFlow::Continue(()),
            },
            SetExpr::SetOperation { left, right, .. } => {
                in_body(left, pick)?;
                in_body(right, pick)
            }
            // Nested queries are visited on their own.
            _ => ControlFlow::Continue(()),
        }
    }
    match query.visit(&mut Selects(pick)) {
        ControlFlow::Break(span) => Some(span),
        ControlFlow::Continue(()) => None,
    }
}

/// The first call of `function`, with (`window`) or without an OVER clause.
fn call(query: &Query, function: &str, window: bool) -> Option<Span> {
    crate::sql_spans::find_expr(query, |e| match e {
        SqlExpr::Function(f)
            if f.over.is_some() == window && f.name.to_string().eq_ignore_ascii_case(function) =>
        {
            Some(f.name.span())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Planner;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn check(sql: &str) -> Option<(String, Option<(u64, u64)>)> {
        let mut planner = Planner::new();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("city", DataType::Utf8, true),
        ]));
        for t in ["s", "s2", "dim"] {
            planner.register_schema(t, Arc::clone(&schema));
        }
        let parsed =
            cdcflow_sql::parse_statements(&format!("CREATE MATERIALIZED VIEW v AS {sql};"));
        let cdcflow_sql::ast::Statement::CreateDataset(def) = &parsed.statements[0] else {
            panic!("not a dataset");
        };
        let query = def.query.as_ref().expect("query");
        let plan = planner.plan_query(query).expect("plans");
        let streams = ["s".to_string(), "s2".to_string()];
        let op = first_stateful(&plan, &|t| streams.iter().any(|s| s == t))?;
        let at = locate(query, &op, &streams).map(|s| (s.start.line, s.start.column));
        Some((op.describe(), at))
    }

    #[test]
    fn stateful_operators_over_a_stream_are_found_where_written() {
        let at = |c| Some((1, c));
        assert_eq!(
            check("SELECT city, count(*) AS n FROM s GROUP BY city"),
            Some(("GROUP BY".into(), at(74)))
        );
        assert_eq!(
            check("SELECT count(*) AS n FROM s"),
            Some(("aggregate `count`".into(), at(38)))
        );
        assert_eq!(
            check("SELECT DISTINCT city FROM s"),
            Some(("DISTINCT".into(), at(31)))
        );
        assert_eq!(
            check("SELECT id, row_number() OVER (PARTITION BY city ORDER BY id) AS r FROM s"),
            Some(("window function `row_number`".into(), at(42)))
        );
        assert_eq!(
            check("SELECT s.id FROM s JOIN s2 ON s.id = s2.id"),
            Some(("join of two streams".into(), at(55)))
        );
    }

    #[test]
    fn stateless_queries_and_static_sides_pass() {
        assert_eq!(
            check("SELECT id, upper(city) AS c FROM s WHERE id > 1"),
            None
        );
        assert_eq!(
            check("SELECT s.id, dim.city FROM s JOIN dim ON s.id = dim.id"),
            None
        );
        assert_eq!(
            check("SELECT city, count(*) AS n FROM dim GROUP BY city"),
            None
        );
        assert_eq!(check("SELECT id FROM s UNION ALL SELECT id FROM s2"), None);
    }
}
