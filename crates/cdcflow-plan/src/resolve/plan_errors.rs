//! DataFusion's errors in planning a flow, as diagnostics: placed on the identifier or
//! call they are about rather than on the whole query, worded without DataFusion's
//! error kinds (`df_message`), and an unknown column with the nearest column's name.
//! DataFusion gives a column reference in a SELECT list or WHERE a span of its own; a
//! column in GROUP BY or ORDER BY, or a call no signature takes, it does not: those are
//! found again in the query by name.

use cdcflow_sql::sqlparser::ast::{Expr as SqlExpr, Query};
use datafusion::common::{Column, SchemaError};

use super::*;
use crate::df_message::{NO_SIGNATURE, user_message};
use crate::ident_case::Ambiguous;
use crate::sql_spans::find_expr;

/// How the planner names a `read_files` source's table (`references.rs`).
const FILES_TABLE_PREFIX: &str = "__files_";

impl Resolver<'_> {
    /// Reports `err`, at its own span or else at `fallback`.
    pub(super) fn datafusion_error(&mut self, file: FileId, err: &DataFusionError, fallback: Span) {
        self.plan_error(file, err, fallback, None);
    }

    /// Reports `err`, raised in planning `query`: at its own span, or at the identifier
    /// or call it names, or else at the whole query.
    pub(super) fn query_error(&mut self, file: FileId, err: &DataFusionError, query: &Query) {
        self.plan_error(file, err, query.span(), Some(query));
    }

    fn plan_error(
        &mut self,
        file: FileId,
        err: &DataFusionError,
        fallback: Span,
        query: Option<&Query>,
    ) {
        let own_span = err
            .diagnostic()
            .and_then(|d| d.span)
            .map(|s| {
                Span::new(
                    Location::new(s.start.line, s.start.column),
                    Location::new(s.end.line, s.end.column),
                )
            })
            .filter(|s| *s != Span::empty());
        // A LATERAL VIEW `functions::syntax` could not fold into its FROM.
        if err.to_string().contains("not implemented: LATERAL VIEW") {
            let span = query.and_then(lateral_view_span).unwrap_or(fallback);
            self.error(
                file,
                span,
                "cdcflow::lateral_view",
                "this LATERAL VIEW form is not supported".into(),
                "LATERAL VIEW",
                Some("over a join, qualify the generator's column by the table it reads (`explode(o.items)`), a table whose rows the join keeps (the FROM's first one, or an inner-joined one); explode(a) and posexplode(a) of an array, one LATERAL VIEW column each (two for posexplode), are supported".into()),
            );
            return;
        }
        if let Some(a) = ambiguous(err) {
            let span = Some(a.span)
                .filter(|s| *s != Span::empty())
                .unwrap_or(fallback);
            let help = format!(
                "names ignore case, as in Spark; write one of {} exactly, or rename a column in a view",
                a.candidates
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            self.error(
                file,
                span,
                "cdcflow::ambiguous_column",
                a.to_string(),
                "ambiguous",
                Some(help),
            );
            return;
        }
        if let Some((column, valid)) = unknown_column(err) {
            let span = own_span
                .or_else(|| query.and_then(|q| identifier_span(q, column)))
                .unwrap_or(fallback);
            let names = column_names(valid);
            let mut help = format!("the columns are: {}", names.join(", "));
            if let Some(near) =
                suggest::did_you_mean(&column.name, names.iter().map(String::as_str))
            {
                help = format!("{near} {help}");
            }
            self.error(
                file,
                span,
                "cdcflow::unknown_column",
                format!("unknown column `{}`", column.flat_name()),
                "not a column here",
                Some(help),
            );
            return;
        }
        let message = user_message(err);
        if let Some((function, help)) = crate::functions::service::called(&message) {
            let span = own_span
                .or_else(|| function_span(query?, function))
                .unwrap_or(fallback);
            self.error(
                file,
                span,
                "cdcflow::databricks_function",
                message.clone(),
                "needs Databricks",
                Some(help.to_string()),
            );
            return;
        }
        let span = own_span
            .or_else(|| {
                let function = function_without_signature(&message)?;
                function_span(query?, function)
            })
            .unwrap_or(fallback);
        let (message, help) = match err.diagnostic() {
            // DataFusion's short message, with its help and notes (`Possible function
            // 'upper'`), or else what its error said besides.
            Some(d) => {
                // A note with a span refers to a place this diagnostic does not show.
                let said: Vec<&str> = d
                    .helps
                    .iter()
                    .map(|h| h.message.as_str())
                    .chain(
                        d.notes
                            .iter()
                            .filter(|n| n.span.is_none())
                            .map(|n| n.message.as_str()),
                    )
                    .collect();
                let help = match said.is_empty() {
                    false => Some(said.join("; ")),
                    true => (d.message != message).then_some(message),
                };
                (d.message.clone(), help)
            }
            // A long message: its first line, and the rest (the candidate signatures).
            None => match message.split_once('\n') {
                Some((first, rest)) => (
                    first.to_string(),
                    Some(rest.split_whitespace().collect::<Vec<_>>().join(" ")),
                ),
                None => (message, None),
            },
        };
        let help = help.map(|h| without_internal_names(&h));
        let message = without_internal_names(&message);
        self.error(file, span, "cdcflow::plan", message, "here", help);
    }
}

/// `text` without the qualifier of the internal table a `read_files` source is planned
/// as (`__files_bronze_1.name` → `name`): the user never wrote that name.
fn without_internal_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(FILES_TABLE_PREFIX) {
        out.push_str(&rest[..at]);
        let name = &rest[at..];
        let end = name
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(name.len());
        match name[end..].strip_prefix('.') {
            Some(after) => rest = after,
            None => {
                out.push_str(&name[..end]);
                rest = &name[end..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The reference an error says matches two columns that differ only in case.
fn ambiguous(err: &DataFusionError) -> Option<&Ambiguous> {
    match err {
        DataFusionError::Diagnostic(_, inner) | DataFusionError::Context(_, inner) => {
            ambiguous(inner)
        }
        DataFusionError::External(e) => e.downcast_ref::<Ambiguous>(),
        _ => None,
    }
}

/// The column an error says is not there, with the columns that are.
fn unknown_column(err: &DataFusionError) -> Option<(&Column, &[Column])> {
    let mut e = err;
    loop {
        match e {
            DataFusionError::Diagnostic(_, inner) | DataFusionError::Context(_, inner) => {
                e = inner.as_ref()
            }
            DataFusionError::SchemaError(inner, _) => {
                return match inner.as_ref() {
                    SchemaError::FieldNotFound {
                        field,
                        valid_fields,
                    } => Some((field.as_ref(), valid_fields.as_slice())),
                    _ => None,
                };
            }
            _ => return None,
        }
    }
}

/// Column names without their table, each once, in schema order.
fn column_names(columns: &[Column]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for c in columns {
        if !names.iter().any(|n| n == &c.name) {
            names.push(c.name.clone());
        }
    }
    names
}

/// The first reference to `column` in `query` (`name`, or `t.name` when it has a table).
fn identifier_span(query: &Query, column: &Column) -> Option<Span> {
    let named = |i: &Ident, n: &str| i.value.eq_ignore_ascii_case(n);
    find_expr(query, |e| match e {
        SqlExpr::Identifier(i) if column.relation.is_none() && named(i, &column.name) => {
            Some(i.span)
        }
        SqlExpr::CompoundIdentifier(parts) => {
            let (last, first) = (parts.last()?, parts.first()?);
            let table_matches = column
                .relation
                .as_ref()
                .is_none_or(|r| parts.len() > 1 && named(&parts[parts.len() - 2], r.table()));
            (named(last, &column.name) && table_matches).then(|| first.span.union(&last.span))
        }
        _ => None,
    })
}

/// `sum` of `No function matches the given name and argument types 'sum(Utf8)'`.
fn function_without_signature(message: &str) -> Option<&str> {
    let rest = message
        .strip_prefix(NO_SIGNATURE)?
        .trim_start()
        .strip_prefix('\'')?;
    rest.split('(').next().filter(|f| !f.is_empty())
}

/// The first call of `function` in `query`.
fn function_span(query: &Query, function: &str) -> Option<Span> {
    find_expr(query, |e| match e {
        SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case(function) => {
            Some(f.name.span())
        }
        _ => None,
    })
}

/// The span of the first LATERAL VIEW's generator in `query`.
fn lateral_view_span(query: &Query) -> Option<Span> {
    use cdcflow_sql::sqlparser::ast::{Select, Visit, Visitor};
    struct First(Option<Span>);
    impl Visitor for First {
        type Break = ();
        fn pre_visit_select(&mut self, select: &Select) -> std::ops::ControlFlow<()> {
            if let Some(view) = select.lateral_views.first() {
                self.0 = Some(view.lateral_view.span());
                return std::ops::ControlFlow::Break(());
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut first = First(None);
    let _ = query.visit(&mut first);
    first.0.filter(|s| *s != Span::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_table_names_are_left_out() {
        assert_eq!(
            without_internal_names(
                "Either add '__files_bronze_1.name' to GROUP BY, or ANY_VALUE(__files_bronze_1.name)"
            ),
            "Either add 'name' to GROUP BY, or ANY_VALUE(name)"
        );
        assert_eq!(without_internal_names("no table here"), "no table here");
        assert_eq!(without_internal_names("in __files_x_2"), "in __files_x_2");
    }
}
