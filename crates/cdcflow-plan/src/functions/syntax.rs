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
//! becoming `item`. Over a join, the generator is applied to the one relation whose
//! columns it reads, before the join (`lateral_view`). `posexplode(a)` gives a row per
//! element with its 0-based position (`pos`, `col`, or the names given), in a SELECT list
//! or a LATERAL VIEW: `unnest(generate_series(0, cardinality(a) - 1))` and `a[pos + 1]`.
//! Other forms (a map's key and value) are left to DataFusion, which says it does not
//! implement them. Struct fields in a SELECT list take Spark's names too
//! ([`super::field_names`]), and so do the fields of `struct(…)`
//! ([`super::struct_names`]). Rewritten before planning, by the
//! [`Planner`](crate::planner::Planner) and by
//! `cdcflow query`, so validate, run and query read the same SQL.

use std::ops::ControlFlow;

use cdcflow_sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, JoinOperator, LateralView,
    ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr, Statement, TableAlias,
    TableFactor, TableWithJoins, VisitMut, VisitorMut, visit_expressions, visit_expressions_mut,
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

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        super::struct_names::name_struct(expr);
        super::spark_map::lists_of_pairs(expr);
        ControlFlow::Continue(())
    }
}

fn rewrite_body(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            rewrite_select(select);
            super::window_column::name_window(select);
            super::field_names::name_fields(select);
        }
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_body(left);
            rewrite_body(right);
        }
        _ => {}
    }
}

fn rewrite_select(select: &mut Select) {
    posexplode_items(select);
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

/// `posexplode(a)` / `posexplode_outer(a)`: the array argument and whether outer.
fn posexplode_of(e: &Expr) -> Option<(Expr, bool)> {
    let Expr::Function(f) = e else { return None };
    let [ObjectNamePart::Identifier(name)] = f.name.0.as_slice() else {
        return None;
    };
    let outer = match name.value.to_ascii_lowercase().as_str() {
        "posexplode" => false,
        "posexplode_outer" => true,
        _ => return None,
    };
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))] => Some((array.clone(), outer)),
        _ => None,
    }
}

/// `SELECT posexplode(a) [AS (p, c)] …` is `… LATERAL VIEW posexplode(a) AS p, c` with
/// `p, c` selected (`pos, col` unless named), as Spark names them.
fn posexplode_items(select: &mut Select) {
    let mut i = 0;
    while i < select.projection.len() {
        let (expr, names) = match &select.projection[i] {
            SelectItem::UnnamedExpr(e) => (e, vec![Ident::new("pos"), Ident::new("col")]),
            SelectItem::ExprWithAliases { expr, aliases } if aliases.len() == 2 => {
                (expr, aliases.clone())
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let Some((_, outer)) = posexplode_of(expr) else {
            i += 1;
            continue;
        };
        select.lateral_views.push(LateralView {
            lateral_view: expr.clone(),
            lateral_view_name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(
                "__posexplode",
            ))]),
            lateral_col_alias: names.clone(),
            outer,
        });
        let columns = names
            .into_iter()
            .map(|n| SelectItem::UnnamedExpr(Expr::Identifier(n)));
        select.projection.splice(i..=i, columns);
        i += 2;
    }
}

/// Folds the first LATERAL VIEW of `select` into its FROM; `false` when its form is
/// not one this module takes (it stays for DataFusion to report).
///
/// Over a join, the generator is applied to the one relation whose columns it reads
/// (named by their qualifier) before the join, which gives the rows Spark gives by
/// applying it after: that relation's rows are never made null by the join (it is the
/// FROM's first relation, or inner-joined, and no RIGHT or FULL join follows).
fn lateral_view(select: &mut Select) -> bool {
    let [from] = select.from.as_mut_slice() else {
        return false;
    };
    let view = select.lateral_views[0].clone();
    let target = match from.joins.is_empty() {
        true => Some(0),
        false => joined_target(from, &view.lateral_view),
    };
    let Some(target) = target else {
        return false;
    };
    let relation = match target {
        0 => &mut from.relation,
        j => &mut from.joins[j - 1].relation,
    };
    let Some(qualifier) = qualifier_of(relation) else {
        return false;
    };
    let names: Vec<Ident> = view.lateral_col_alias.clone();
    let folded = match posexplode_of(&view.lateral_view) {
        Some((array, outer)) => {
            let pos = names.first().cloned().unwrap_or_else(|| Ident::new("pos"));
            let col = names.get(1).cloned().unwrap_or_else(|| Ident::new("col"));
            let positions = format!(
                "{}(generate_series(0, CAST(cardinality(({array})) AS BIGINT) - 1))",
                if outer || view.outer {
                    "unnest_outer"
                } else {
                    "unnest"
                }
            );
            let Some(positions) = expression(&positions) else {
                return false;
            };
            let Some(element) = expression(&format!("({array})[{pos} + 1]")) else {
                return false;
            };
            wrap(relation, positions, pos.clone(), &qualifier)
                && wrap(relation, element, col.clone(), &qualifier)
                && {
                    unqualify(select, &view.lateral_view_name, &[pos, col]);
                    true
                }
        }
        None => {
            if names.len() > 1 {
                return false;
            }
            let mut generator = view.lateral_view.clone();
            if !to_unnest(&mut generator, view.outer) {
                return false;
            }
            let column = names.first().cloned().unwrap_or_else(|| Ident::new("col"));
            wrap(relation, generator, column.clone(), &qualifier) && {
                unqualify(select, &view.lateral_view_name, &[column]);
                true
            }
        }
    };
    if folded {
        select.lateral_views.remove(0);
    }
    folded
}

/// Which relation of a FROM with joins (0: the first, `j`: the `j`-th join) the
/// generator `e` reads, when it reads exactly one and that one's rows survive the joins.
fn joined_target(from: &TableWithJoins, e: &Expr) -> Option<usize> {
    let mut qualifiers = Vec::new();
    let _ = visit_expressions(e, |x| {
        if let Expr::CompoundIdentifier(parts) = x
            && parts.len() > 1
        {
            qualifiers.push(parts[0].value.to_ascii_lowercase());
        }
        ControlFlow::<()>::Continue(())
    });
    qualifiers.dedup();
    let [wanted] = qualifiers.as_slice() else {
        return None;
    };
    let named =
        |r: &TableFactor| qualifier_of(r).is_some_and(|q| q.value.eq_ignore_ascii_case(wanted));
    let nulls_all = from.joins.iter().any(|j| {
        matches!(
            j.join_operator,
            JoinOperator::RightOuter(_) | JoinOperator::Right(_) | JoinOperator::FullOuter(_)
        )
    });
    if nulls_all {
        return None;
    }
    if named(&from.relation) {
        return Some(0);
    }
    from.joins
        .iter()
        .position(|j| named(&j.relation))
        .and_then(|j| {
            matches!(
                from.joins[j].join_operator,
                JoinOperator::Inner(_) | JoinOperator::Join(_) | JoinOperator::CrossJoin(_)
            )
            .then_some(j + 1)
        })
}

/// The name a relation's columns are qualified by: its alias, else its table name.
fn qualifier_of(relation: &TableFactor) -> Option<Ident> {
    match relation {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            Some(a.name.clone())
        }
        TableFactor::Table {
            name, alias: None, ..
        } => match name.0.last() {
            Some(ObjectNamePart::Identifier(i)) => Some(i.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Makes `relation` `(SELECT *, <generator> AS <column> FROM relation) AS <qualifier>`.
fn wrap(relation: &mut TableFactor, generator: Expr, column: Ident, qualifier: &Ident) -> bool {
    let Some(mut inner) = template("SELECT * FROM t") else {
        return false;
    };
    let SetExpr::Select(inner_select) = inner.body.as_mut() else {
        return false;
    };
    inner_select.projection.push(SelectItem::ExprWithAlias {
        expr: generator,
        alias: column,
    });
    inner_select.from[0].relation = relation.clone();
    *relation = TableFactor::Derived {
        lateral: false,
        subquery: Box::new(inner),
        alias: Some(TableAlias {
            explicit: true,
            name: qualifier.clone(),
            columns: vec![],
            at: None,
        }),
        sample: None,
    };
    true
}

/// `view.column` names the view's column, which is now a column of the FROM.
fn unqualify(select: &mut Select, view_name: &ObjectName, columns: &[Ident]) {
    let _ = visit_expressions_mut(select, |e| {
        if let Expr::CompoundIdentifier(parts) = e
            && let [table, col] = parts.as_slice()
            && names(view_name, table)
            && columns
                .iter()
                .any(|c| c.value.eq_ignore_ascii_case(&col.value))
        {
            *e = Expr::Identifier(col.clone());
        }
        ControlFlow::<()>::Continue(())
    });
}

/// The expression `sql` parses to.
fn expression(sql: &str) -> Option<Expr> {
    Parser::new(&DatabricksDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
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
