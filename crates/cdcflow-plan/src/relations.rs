//! Finds and rewrites the relations a query reads: `STREAM(name)`, `LIVE.name`,
//! `catalog.schema.name`, `read_files(…)`. Each is handed to a resolver, which returns
//! the plain table name that stands for it; the query is rewritten in place so
//! DataFusion sees only plain names, with the original spans kept.

use std::collections::HashSet;
use std::ops::ControlFlow;

use cdcflow_sql::Span;
use cdcflow_sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, ObjectNamePart,
    Query, Spanned, TableAlias, TableFactor, Value, VisitMut, VisitorMut,
};

/// A relation found in a query.
#[derive(Debug, Clone)]
pub enum Relation {
    /// A dataset reference: its parts as written.
    Dataset {
        parts: Vec<String>,
        streaming: bool,
        span: Span,
    },
    /// A `read_files(…)` call.
    Files(FilesCall),
    /// A `read_postgres(…)` call.
    Postgres(SourceCall),
    /// A `read_mysql(…)` call.
    Mysql(SourceCall),
    /// A `read_query(…)` call.
    Query(SourceCall),
    /// A `read_kafka(…)` call.
    Kafka(SourceCall),
    /// A `list_files(…)` call (`crate::list_files`): the resolver gives its absolute
    /// path, and the call stays, its arguments made positional literals.
    ListFiles(FilesCall),
}

/// The arguments of a source function that takes named literals only
/// (`read_postgres(connection => 'crm', table => 'public.customers')`).
#[derive(Debug, Clone)]
pub struct SourceCall {
    /// Named arguments, keys lower-cased, values as text, each with its span.
    pub options: Vec<(String, String, Span)>,
    /// Arguments that are not named literals, for a diagnostic.
    pub invalid: Vec<Span>,
    pub streaming: bool,
    pub span: Span,
}

/// A named literal argument (`format => 'json'`) into `options`, keyed lower-case; any
/// other argument's span into `invalid`, for a diagnostic.
fn named_literal(
    arg: &FunctionArg,
    options: &mut Vec<(String, String, Span)>,
    invalid: &mut Vec<Span>,
) {
    match arg {
        FunctionArg::Named {
            name,
            arg: FunctionArgExpr::Expr(e),
            ..
        } => match literal_text(e) {
            Some(v) => options.push((
                name.value.to_ascii_lowercase(),
                v,
                name.span.union(&e.span()),
            )),
            None => invalid.push(e.span()),
        },
        other => invalid.push(other.span()),
    }
}

fn source_call(args: &[FunctionArg], streaming: bool, span: Span) -> SourceCall {
    let mut call = SourceCall {
        options: vec![],
        invalid: vec![],
        streaming,
        span,
    };
    for arg in args {
        named_literal(arg, &mut call.options, &mut call.invalid);
    }
    call
}

/// The arguments of a `read_files` call, as literals.
#[derive(Debug, Clone)]
pub struct FilesCall {
    pub path: Option<String>,
    /// Named options, keys lower-cased, values as text.
    pub options: Vec<(String, String, Span)>,
    /// Arguments that are not literals, for a diagnostic.
    pub invalid: Vec<Span>,
    pub streaming: bool,
    /// The older `cloud_files(path, format, map(k, v, …))` form (Auto Loader).
    pub auto_loader: bool,
    pub span: Span,
}

/// Rewrites every relation of `query` to the name `resolve` returns for it (when it
/// returns `None`, the relation is left alone: the resolver reports it).
pub fn rewrite_relations(query: &mut Query, resolve: &mut dyn FnMut(Relation) -> Option<String>) {
    let mut ctes = HashSet::new();
    let _ = query.visit(&mut CteCollector(&mut ctes));
    let mut v = Rewriter { resolve, ctes };
    let _ = query.visit(&mut v);
}

struct CteCollector<'a>(&'a mut HashSet<String>);

impl VisitorMut for CteCollector<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.0.insert(cte.alias.name.value.to_ascii_lowercase());
            }
        }
        ControlFlow::Continue(())
    }
}

struct Rewriter<'a> {
    resolve: &'a mut dyn FnMut(Relation) -> Option<String>,
    ctes: HashSet<String>,
}

fn idents(name: &ObjectName) -> Vec<&Ident> {
    name.0.iter().filter_map(ObjectNamePart::as_ident).collect()
}

fn name_span(name: &ObjectName) -> Span {
    Span::union_iter(idents(name).iter().map(|i| i.span))
}

fn is_named(name: &ObjectName, wanted: &str) -> bool {
    let parts = idents(name);
    parts.len() == 1
        && parts[0].quote_style.is_none()
        && parts[0].value.eq_ignore_ascii_case(wanted)
}

fn literal_text(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.clone()),
            Value::Boolean(b) => Some(b.to_string()),
            _ => None,
        },
        Expr::Identifier(i)
            if i.value.eq_ignore_ascii_case("true") || i.value.eq_ignore_ascii_case("false") =>
        {
            Some(i.value.to_ascii_lowercase())
        }
        _ => None,
    }
}

/// A positional literal argument at `span`.
fn literal_arg(value: Value, span: Span) -> FunctionArg {
    FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value.with_span(span))))
}

fn files_call(args: &[FunctionArg], streaming: bool, span: Span) -> FilesCall {
    let mut call = FilesCall {
        path: None,
        options: vec![],
        invalid: vec![],
        streaming,
        auto_loader: false,
        span,
    };
    for arg in args {
        match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) if call.path.is_none() => {
                match literal_text(e) {
                    Some(p) => call.path = Some(p),
                    None => call.invalid.push(e.span()),
                }
            }
            other => named_literal(other, &mut call.options, &mut call.invalid),
        }
    }
    call
}

/// `cloud_files(path, format [, map(key, value, …)])`: always a streaming source.
fn cloud_files_call(args: &[FunctionArg], span: Span) -> FilesCall {
    let mut call = FilesCall {
        path: None,
        options: vec![],
        invalid: vec![],
        streaming: true,
        auto_loader: true,
        span,
    };
    for (n, arg) in args.iter().enumerate() {
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = arg else {
            call.invalid.push(arg.span());
            continue;
        };
        match (n, e) {
            (0, _) => match literal_text(e) {
                Some(p) => call.path = Some(p),
                None => call.invalid.push(e.span()),
            },
            (1, _) => match literal_text(e) {
                Some(f) => call.options.push(("format".into(), f, e.span())),
                None => call.invalid.push(e.span()),
            },
            (2, Expr::Function(f)) if is_named(&f.name, "map") => {
                let items: Vec<&Expr> = match &f.args {
                    FunctionArguments::List(l) => l
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => Some(x),
                            _ => None,
                        })
                        .collect(),
                    _ => vec![],
                };
                for pair in items.chunks(2) {
                    match (
                        pair.first().and_then(|k| literal_text(k)),
                        pair.get(1).and_then(|v| literal_text(v)),
                    ) {
                        (Some(k), Some(v)) => call.options.push((
                            k.to_ascii_lowercase(),
                            v,
                            pair[0].span().union(&pair[pair.len() - 1].span()),
                        )),
                        _ => call.invalid.push(pair[0].span()),
                    }
                }
            }
            _ => call.invalid.push(e.span()),
        }
    }
    call
}

impl Rewriter<'_> {
    fn replace(&mut self, factor: &mut TableFactor, relation: Relation, keep_span: Span) {
        let written = match &relation {
            Relation::Dataset { parts, .. } => parts.last().cloned(),
            Relation::Files(_)
            | Relation::Postgres(_)
            | Relation::Mysql(_)
            | Relation::Query(_)
            | Relation::Kafka(_)
            | Relation::ListFiles(_) => None,
        };
        if let Some(new_name) = (self.resolve)(relation)
            && let TableFactor::Table {
                name, args, alias, ..
            } = factor
        {
            // Columns qualified as written (`orders.id` over `main.bronze.orders`) keep
            // meaning the table known as `bronze.orders`.
            if alias.is_none()
                && let Some(written) = written.filter(|w| !w.eq_ignore_ascii_case(&new_name))
            {
                *alias = Some(TableAlias {
                    explicit: false,
                    name: Ident::with_span(keep_span, written),
                    columns: vec![],
                    at: None,
                });
            }
            // A name of several parts is one identifier (`silver.orders`).
            let mut ident = Ident::with_span(keep_span, new_name);
            if ident.value.contains('.') {
                ident.quote_style = Some('`');
            }
            *name = ObjectName(vec![ObjectNamePart::Identifier(ident)]);
            *args = None;
        }
    }
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, args, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let span = name_span(name);
        let relation = match args {
            Some(targs) if is_named(name, "STREAM") => {
                let inner = targs.args.first().cloned();
                match inner {
                    Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => match &e {
                        Expr::Identifier(i) => Relation::Dataset {
                            parts: vec![i.value.clone()],
                            streaming: true,
                            span: i.span,
                        },
                        Expr::CompoundIdentifier(parts) => Relation::Dataset {
                            parts: parts.iter().map(|p| p.value.clone()).collect(),
                            streaming: true,
                            span: Span::union_iter(parts.iter().map(|p| p.span)),
                        },
                        Expr::Function(f)
                            if f.name.0.len() == 1 && (is_named(&f.name, "read_files")) =>
                        {
                            let fargs = match &f.args {
                                FunctionArguments::List(l) => l.args.clone(),
                                _ => vec![],
                            };
                            Relation::Files(files_call(&fargs, true, e.span()))
                        }
                        Expr::Function(f)
                            if f.name.0.len() == 1 && is_named(&f.name, "read_postgres") =>
                        {
                            let fargs = match &f.args {
                                FunctionArguments::List(l) => l.args.clone(),
                                _ => vec![],
                            };
                            Relation::Postgres(source_call(&fargs, true, e.span()))
                        }
                        Expr::Function(f)
                            if f.name.0.len() == 1 && is_named(&f.name, "read_mysql") =>
                        {
                            let fargs = match &f.args {
                                FunctionArguments::List(l) => l.args.clone(),
                                _ => vec![],
                            };
                            Relation::Mysql(source_call(&fargs, true, e.span()))
                        }
                        Expr::Function(f)
                            if f.name.0.len() == 1 && is_named(&f.name, "read_query") =>
                        {
                            let fargs = match &f.args {
                                FunctionArguments::List(l) => l.args.clone(),
                                _ => vec![],
                            };
                            Relation::Query(source_call(&fargs, true, e.span()))
                        }
                        Expr::Function(f)
                            if f.name.0.len() == 1 && is_named(&f.name, "read_kafka") =>
                        {
                            let fargs = match &f.args {
                                FunctionArguments::List(l) => l.args.clone(),
                                _ => vec![],
                            };
                            Relation::Kafka(source_call(&fargs, true, e.span()))
                        }
                        Expr::Function(f)
                            if f.name.0.len() == 1 && (is_named(&f.name, "cloud_files")) =>
                        {
                            let fargs = match &f.args {
                                FunctionArguments::List(l) => l.args.clone(),
                                _ => vec![],
                            };
                            Relation::Files(cloud_files_call(&fargs, e.span()))
                        }
                        _ => return ControlFlow::Continue(()),
                    },
                    _ => return ControlFlow::Continue(()),
                }
            }
            Some(targs) if is_named(name, "read_files") => {
                Relation::Files(files_call(&targs.args, false, span))
            }
            Some(targs) if is_named(name, "cloud_files") => {
                Relation::Files(cloud_files_call(&targs.args, span))
            }
            Some(targs) if is_named(name, "read_postgres") => {
                Relation::Postgres(source_call(&targs.args, false, span))
            }
            Some(targs) if is_named(name, "read_mysql") => {
                Relation::Mysql(source_call(&targs.args, false, span))
            }
            Some(targs) if is_named(name, "read_query") => {
                Relation::Query(source_call(&targs.args, false, span))
            }
            Some(targs) if is_named(name, "read_kafka") => {
                Relation::Kafka(source_call(&targs.args, false, span))
            }
            Some(targs) if is_named(name, crate::list_files::NAME) => {
                let call = files_call(&targs.args, false, span);
                let recursive = call
                    .options
                    .iter()
                    .find(|o| o.0 == "recursive")
                    .is_none_or(|o| !o.1.eq_ignore_ascii_case("false"));
                if let Some(path) = (self.resolve)(Relation::ListFiles(call)) {
                    targs.args = vec![
                        literal_arg(Value::SingleQuotedString(path), span),
                        literal_arg(Value::Boolean(recursive), span),
                    ];
                }
                return ControlFlow::Continue(());
            }
            Some(_) => return ControlFlow::Continue(()),
            None => {
                let parts: Vec<String> = idents(name).iter().map(|i| i.value.clone()).collect();
                if parts.len() == 1 && self.ctes.contains(&parts[0].to_ascii_lowercase()) {
                    return ControlFlow::Continue(());
                }
                Relation::Dataset {
                    parts,
                    streaming: false,
                    span,
                }
            }
        };
        let keep = match &relation {
            Relation::Dataset { span, .. } => *span,
            Relation::Files(f) => f.span,
            Relation::Postgres(c)
            | Relation::Mysql(c)
            | Relation::Query(c)
            | Relation::Kafka(c) => c.span,
            Relation::ListFiles(c) => c.span,
        };
        self.replace(factor, relation, keep);
        ControlFlow::Continue(())
    }
}
