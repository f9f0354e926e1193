//! Spark's names for struct fields in a SELECT list: `SELECT e.id FROM (SELECT
//! debezium(…) AS e …)` gives a column `id`, where DataFusion would name it `e[id]`.
//! Rewritten before planning, with the generators ([`super::syntax`]), so validate,
//! run and query name the columns alike.
//!
//! A compound name `a.b…z` in the list without an alias is named `z` when `a` is not a
//! relation of the SELECT's FROM (so `a` is a struct column), or when it has three parts
//! or more (`t.e.id`): Spark's rule, and for `t.id` DataFusion's own name already. A
//! name that another item of the same list also gives is left as DataFusion names it,
//! so that no query that plans today stops planning for two columns of one name.

use cdcflow_sql::sqlparser::ast::{Expr, Select, SelectItem, TableFactor, TableWithJoins};

/// Names the struct fields of `select`'s list as Spark does.
pub fn name_fields(select: &mut Select) {
    let relations = relation_names(&select.from);
    let outputs: Vec<Option<String>> = select.projection.iter().map(output_name).collect();
    let taken = |name: &str| {
        outputs
            .iter()
            .flatten()
            .filter(|o| o.eq_ignore_ascii_case(name))
            .count()
            > 1
    };
    for item in &mut select.projection {
        let SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) = item else {
            continue;
        };
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
            continue;
        };
        let qualified_column = parts.len() == 2
            && relations
                .iter()
                .any(|r| r.eq_ignore_ascii_case(&first.value));
        if qualified_column || taken(&last.value) {
            continue;
        }
        let alias = last.clone();
        *item = SelectItem::ExprWithAlias {
            expr: Expr::CompoundIdentifier(parts.clone()),
            alias,
        };
    }
}

/// The name an item of a SELECT list gives its column, when it is a plain one.
fn output_name(item: &SelectItem) -> Option<String> {
    match item {
        SelectItem::UnnamedExpr(Expr::Identifier(i)) => Some(i.value.clone()),
        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
            parts.last().map(|i| i.value.clone())
        }
        SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
        _ => None,
    }
}

/// The names a FROM clause's relations are known by: their aliases, else the last
/// part of a table's name.
fn relation_names(from: &[TableWithJoins]) -> Vec<String> {
    let mut out = Vec::new();
    for t in from {
        relation_name(&t.relation, &mut out);
        for j in &t.joins {
            relation_name(&j.relation, &mut out);
        }
    }
    out
}

fn relation_name(factor: &TableFactor, out: &mut Vec<String>) {
    match factor {
        TableFactor::Table { name, alias, .. } => match alias {
            Some(a) => out.push(a.name.value.clone()),
            None => {
                if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
                    out.push(last.value.clone());
                }
            }
        },
        TableFactor::NestedJoin {
            table_with_joins,
            alias,
        } => {
            if let Some(a) = alias {
                out.push(a.name.value.clone());
            }
            out.extend(relation_names(std::slice::from_ref(table_with_joins)));
        }
        TableFactor::Derived { alias, .. }
        | TableFactor::TableFunction { alias, .. }
        | TableFactor::Function { alias, .. }
        | TableFactor::UNNEST { alias, .. } => {
            if let Some(a) = alias {
                out.push(a.name.value.clone());
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use cdcflow_sql::sqlparser::ast::{SetExpr, Statement};
    use cdcflow_sql::sqlparser::dialect::DatabricksDialect;
    use cdcflow_sql::sqlparser::parser::Parser;

    use super::*;

    fn named(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&DatabricksDialect {}, sql).unwrap();
        let Statement::Query(q) = &mut statements[0] else {
            panic!("a query")
        };
        let SetExpr::Select(select) = q.body.as_mut() else {
            panic!("a select")
        };
        name_fields(select);
        statements[0].to_string()
    }

    #[test]
    fn struct_fields_take_their_own_name_and_qualified_columns_stay() {
        assert_eq!(
            named("SELECT e.id, e._op, t.e.name FROM (SELECT x AS e FROM s) t"),
            "SELECT e.id AS id, e._op AS _op, t.e.name AS name FROM (SELECT x AS e FROM s) t"
        );
        assert_eq!(
            named("SELECT t.id, o.id AS oid FROM t JOIN orders o ON t.id = o.id"),
            "SELECT t.id, o.id AS oid FROM t JOIN orders o ON t.id = o.id"
        );
        assert_eq!(
            named("SELECT e.`Id` FROM s"),
            "SELECT e.`Id` AS `Id` FROM s"
        );
        // Two columns of one name: left as DataFusion names them.
        assert_eq!(named("SELECT e.id, id FROM s"), "SELECT e.id, id FROM s");
    }
}
