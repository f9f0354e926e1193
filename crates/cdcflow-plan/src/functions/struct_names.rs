//! Spark's field names for `struct(a, b.c, x + 1, y AS z)`: a column gives its name
//! (`a`), a struct field its field's (`c`), an aliased value its alias (`z`), any other
//! value `col<n>` by its 1-based place (`col3`), as Spark's `CreateStruct` names them.
//! DataFusion names every field `c<n>` from 0, so `struct(modification_time,
//! path).path` (Databricks' snapshot example) would not plan. Rewritten to
//! `named_struct('a', a, …)` before planning. A typed `STRUCT<…>(…)` keeps its fields.

use cdcflow_sql::sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName, ObjectNamePart, Value,
};

/// `expr` as a `named_struct` when it is an untyped `struct(…)`.
pub fn name_struct(expr: &mut Expr) {
    let Expr::Struct { values, fields } = expr else {
        return;
    };
    if !fields.is_empty() || values.is_empty() {
        return;
    }
    let mut args = Vec::with_capacity(values.len() * 2);
    for (n, value) in values.iter().enumerate() {
        let (name, value) = match value {
            Expr::Named { expr, name } => (name.value.clone(), expr.as_ref()),
            Expr::Identifier(i) => (i.value.clone(), value),
            Expr::CompoundIdentifier(parts) => match parts.last() {
                Some(last) => (last.value.clone(), value),
                None => return,
            },
            _ => (format!("col{}", n + 1), value),
        };
        args.push(positional(Expr::Value(
            Value::SingleQuotedString(name).into(),
        )));
        args.push(positional(value.clone()));
    }
    *expr = Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new("named_struct"))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args,
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    });
}

fn positional(expr: Expr) -> FunctionArg {
    FunctionArg::Unnamed(FunctionArgExpr::Expr(expr))
}
