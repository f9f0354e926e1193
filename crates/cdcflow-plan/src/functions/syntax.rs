//! Spark's generators, which DataFusion writes another way: `explode(a)` in a SELECT
//! list is `unnest(a)` (a row per element; `explode_outer` keeps a row of null for a
//! null or empty array, as `unnest_outer` does), its column named `col` unless
//! aliased, as Spark names it; and
//!
//! ```sql
//! SELECT o.id, item FROM orders o LATERAL VIEW explode(o.items) t AS item
//! ```
//!
//! reads from `(SELECT *, unnest(o.items) AS item FROM orders o) AS o`, `t.item`
//! becoming `item`. A LATERAL VIEW is taken over one table (no joins in that FROM) and
//! one column; other forms are left to DataFusion, which says it does not implement
//! them. Rewritten before planning, by the [`Planner`](crate::planner::Planner) and by
//! `cdcflow query`, so validate, run and query read the same SQL.

use std::ops::ControlFlow;

use cdcflow_sql::sqlparser::ast::{
    Expr, FunctionArguments, Ident, ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr,
    Statement, TableAlias, TableFactor, VisitMut, VisitorMut, visit_expressions_mut,
};
use cdcflow_sql::sqlparser::dialect::DatabricksDialect;
use cdcflow_sql::sqlparser::parser::Parser;

/// Rewrites the generators of `query` and of every query in it.
pub fn rewrite_query(query: &mut Query) {
    let _ = query.visit(&mut Generators);
}

/// [`rewrite_query`] on a statement's queries.
pub fn rewrite_statement(statement: &mut Statement) {
    let _ = statement.visit(&mut Generators);
}

struct Generators;

impl VisitorMut for Generators {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        rewrite_body(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn rewrite_body(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => rewrite_select(select),
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_body(left);
            rewrite_body(right);
        }
        _ => {}
    }
}

fn rewrite_select(select: &mut Select) {
    for item in &mut select.projection {
        if let SelectItem::UnnamedExpr(e) = item
            && to_unnest(e, false)
        {
            *item = SelectItem::ExprWithAlias {
                expr: e.clone(),
                alias: Ident::new("col"),
            };
        } else if let SelectItem::ExprWithAlias { expr, .. } = item {
            to_unnest(expr, false);
        }
    }
    while !select.lateral_views.is_empty() {
        if !lateral_view(select) {
            return;
        }
    }
}

/// Makes `explode(…)` of `e` an `unnest(…)` (`outer`: as for LATERAL VIEW OUTER);
/// whether it was one.
fn to_unnest(e: &mut Expr, outer: bool) -> bool {
    let Expr::Function(f) = e else { return false };
    let [ObjectNamePart::Identifier(name)] = f.name.0.as_slice() else {
        return false;
    };
    let unnest = match name.value.to_ascii_lowercase().as_str() {
        "explode" if outer => "unnest_outer",
        "explode" => "unnest",
        "explode_outer" => "unnest_outer",
        _ => return false,
    };
    if !matches!(f.args, FunctionArguments::List(_)) {
        return false;
    }
    f.name = ObjectName(vec![ObjectNamePart::Identifier(Ident::with_span(
        name.span, unnest,
    ))]);
    true
}

/// Folds the first LATERAL VIEW of `select` into its FROM; `false` when its form is
/// not one this module takes (it stays for DataFusion to report).
fn lateral_view(select: &mut Select) -> bool {
    let [from] = select.from.as_mut_slice() else {
        return false;
    };
    let view = &select.lateral_views[0];
    if !from.joins.is_empty() || view.lateral_col_alias.len() > 1 {
        return false;
    }
    let qualifier = match &from.relation {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            a.name.clone()
        }
        TableFactor::Table {
            name, alias: None, ..
        } => match name.0.last() {
            Some(ObjectNamePart::Identifier(i)) => i.clone(),
            _ => return false,
        },
        _ => return false,
    };
    let mut generator = view.lateral_view.clone();
    if !to_unnest(&mut generator, view.outer) {
        return false;
    }
    let column = view
        .lateral_col_alias
        .first()
        .cloned()
        .unwrap_or_else(|| Ident::new("col"));
    let view_name = view.lateral_view_name.clone();
    let Some(mut inner) = template("SELECT * FROM t") else {
        return false;
    };
    let SetExpr::Select(inner_select) = inner.body.as_mut() else {
        return false;
    };
    inner_select.projection.push(SelectItem::ExprWithAlias {
        expr: generator,
        alias: column.clone(),
    });
    inner_select.from[0].relation = from.relation.clone();
    from.relation = TableFactor::Derived {
        lateral: false,
        subquery: Box::new(inner),
        alias: Some(TableAlias {
            explicit: true,
            name: qualifier,
            columns: vec![],
            at: None,
        }),
        sample: None,
    };
    select.lateral_views.remove(0);
    // `t.item` names the view's column, which is now a column of the FROM.
    let _ = visit_expressions_mut(select, |e| {
        if let Expr::CompoundIdentifier(parts) = e
            && let [table, col] = parts.as_slice()
            && names(&view_name, table)
            && col.value.eq_ignore_ascii_case(&column.value)
        {
            *e = Expr::Identifier(col.clone());
        }
        ControlFlow::<()>::Continue(())
    });
    true
}

/// Whether `name` (a LATERAL VIEW's one-part name) is `ident`.
fn names(name: &ObjectName, ident: &Ident) -> bool {
    matches!(name.0.as_slice(), [ObjectNamePart::Identifier(i)] if i.value.eq_ignore_ascii_case(&ident.value))
}

/// The query `sql` parses to.
fn template(sql: &str) -> Option<Query> {
    let statement = Parser::parse_sql(&DatabricksDialect {}, sql).ok()?.pop()?;
    match statement {
        Statement::Query(q) => Some(*q),
        _ => None,
    }
}
