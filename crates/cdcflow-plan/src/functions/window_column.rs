//! Spark names the column a `GROUP BY window(ts, …)` makes `window` (its
//! `TimeWindowing` rule; `session_window` for a session window), so a query reads
//! `SELECT window.start, window.end, count(*) … GROUP BY window(ts, '1 minute')`.
//! DataFusion has no such column: in a SELECT that groups by a window, its name is
//! rewritten into the call it names, `window.start` into the call's field, and a bare
//! `window` keeps its name.

use std::ops::ControlFlow;

use cdcflow_sql::sqlparser::ast::{
    AccessExpr, Expr, GroupByExpr, Ident, Select, SelectItem, Subscript, Value,
    visit_expressions_mut,
};

const WINDOWS: [&str; 2] = ["window", "session_window"];

fn is_window_call(e: &Expr) -> bool {
    matches!(e, Expr::Function(f) if WINDOWS.iter().any(|w| f.name.to_string().eq_ignore_ascii_case(w)))
}

/// The column's name: `window`, or `session_window` for a session window.
fn column_name(call: &Expr) -> &'static str {
    match call {
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("session_window") => {
            "session_window"
        }
        _ => "window",
    }
}

/// Rewrites `select`'s references to the `window` column of its GROUP BY's window.
pub(super) fn name_window(select: &mut Select) {
    let GroupByExpr::Expressions(exprs, _) = &select.group_by else {
        return;
    };
    let Some(window) = exprs.iter().find(|e| is_window_call(e)).cloned() else {
        return;
    };
    let name = column_name(&window);
    let is_window_name = |i: &Ident| i.quote_style.is_none() && i.value.eq_ignore_ascii_case(name);
    for item in &mut select.projection {
        match item {
            SelectItem::UnnamedExpr(Expr::Identifier(i)) if is_window_name(i) => {
                *item = SelectItem::ExprWithAlias {
                    expr: window.clone(),
                    alias: Ident::new(name),
                };
            }
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts))
                if parts.len() == 2 && is_window_name(&parts[0]) =>
            {
                let alias = parts[1].clone();
                *item = SelectItem::ExprWithAlias {
                    expr: field(&window, &alias),
                    alias,
                };
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                replace(e, &window, &is_window_name)
            }
            _ => {}
        }
    }
    if let Some(h) = &mut select.having {
        replace(h, &window, &is_window_name);
    }
}

fn field(window: &Expr, name: &Ident) -> Expr {
    Expr::CompoundFieldAccess {
        root: Box::new(window.clone()),
        access_chain: vec![AccessExpr::Subscript(Subscript::Index {
            index: Expr::value(Value::SingleQuotedString(name.value.to_ascii_lowercase())),
        })],
    }
}

fn replace(e: &mut Expr, window: &Expr, is_window_name: &dyn Fn(&Ident) -> bool) {
    let _ = visit_expressions_mut(e, |x| {
        match x {
            Expr::Identifier(i) if is_window_name(i) => *x = window.clone(),
            Expr::CompoundIdentifier(parts) if parts.len() == 2 && is_window_name(&parts[0]) => {
                *x = field(window, &parts[1]);
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}
