//! Spark's `map(k1, v1, k2, v2, …)`: keys and values alternate, as many pairs as the
//! call has. DataFusion's `map` takes one pair, or a list of keys and a list of values,
//! so a call of two pairs or more is rewritten to `map([k1, k2, …], [v1, v2, …])`
//! before planning (the options of `from_avro(…, map('mode', 'PERMISSIVE',
//! 'schemaRegistryAddress', …))`). A call of one pair, or of an odd count, is left as
//! written: DataFusion plans the first and reports the second.

use cdcflow_sql::sqlparser::ast::{
    Array, Expr, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
};

/// `expr` in DataFusion's form when it is Spark's `map` of two pairs or more.
pub fn lists_of_pairs(expr: &mut Expr) {
    let Expr::Function(f) = expr else { return };
    if !f.name.to_string().eq_ignore_ascii_case("map") {
        return;
    }
    let FunctionArguments::List(list) = &f.args else {
        return;
    };
    let items: Option<Vec<Expr>> = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => Some(x.clone()),
            _ => None,
        })
        .collect();
    let Some(items) = items else { return };
    if items.len() < 4 || items.len() % 2 != 0 {
        return;
    }
    let (mut keys, mut values) = (vec![], vec![]);
    for (i, item) in items.into_iter().enumerate() {
        match i % 2 {
            0 => keys.push(item),
            _ => values.push(item),
        }
    }
    let array = |elem: Vec<Expr>| {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Array(Array {
            elem,
            named: false,
        })))
    };
    f.args = FunctionArguments::List(FunctionArgumentList {
        duplicate_treatment: None,
        args: vec![array(keys), array(values)],
        clauses: vec![],
    });
}
