//! The hidden `_metadata` column of file sources, as Databricks gives it to `read_files`
//! and Auto Loader: `_metadata.file_path`, `file_name`, `file_size` and
//! `file_modification_time` of the file each row was read from, and Spark's
//! `input_file_name()` (the path). A query that names neither reads its files as it
//! always has; one that does gets the column on its file sources
//! (`ReadFiles::metadata`), filled per file by the runtime, and its `*` leaves the
//! column out, as Databricks' does (a hidden column is not part of `*`).

use std::ops::ControlFlow;
use std::sync::Arc;

use cdcflow_sql::Span;
use cdcflow_sql::sqlparser::ast::Spanned as _;
use cdcflow_sql::sqlparser::ast::{
    ExcludeSelectItem, Expr, FunctionArguments, Ident, ObjectName, ObjectNamePart, Query, Select,
    SelectItem, SelectItemQualifiedWildcardKind, TableFactor, Visit, VisitMut, Visitor, VisitorMut,
    WildcardAdditionalOptions,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// The column's name.
pub const COLUMN: &str = "_metadata";
pub const FILE_PATH: &str = "file_path";
pub const FILE_NAME: &str = "file_name";
pub const FILE_SIZE: &str = "file_size";
pub const FILE_MODIFICATION_TIME: &str = "file_modification_time";

/// The column's fields: path (a `file://` URL), name, size in bytes, modification time.
pub fn fields() -> Fields {
    Fields::from(vec![
        Field::new(FILE_PATH, DataType::Utf8, false),
        Field::new(FILE_NAME, DataType::Utf8, false),
        Field::new(FILE_SIZE, DataType::Int64, false),
        Field::new(
            FILE_MODIFICATION_TIME,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ])
}

/// The `file://` URL of `path`, made absolute: `_metadata.file_path` and
/// `list_files`' `path`, so that one can be compared with the other.
pub fn file_url(path: &std::path::Path) -> String {
    // Fully qualified, as Spark gives it, whatever folder the run started in.
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    url::Url::from_file_path(&absolute)
        .map(|u| u.to_string())
        .unwrap_or_else(|()| path.display().to_string())
}

/// A file's last modification as microseconds since the epoch (`_metadata` and
/// `list_files` give it as a UTC TIMESTAMP); `None` when unknown.
pub fn modified_micros(meta: &std::fs::Metadata) -> Option<i64> {
    meta.modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_micros()).ok())
}

/// `schema` with the `_metadata` column after its own.
pub fn with_column(schema: &Schema) -> SchemaRef {
    let mut columns: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    columns.push(Arc::new(Field::new(
        COLUMN,
        DataType::Struct(fields()),
        false,
    )));
    Arc::new(Schema::new_with_metadata(
        columns,
        schema.metadata().clone(),
    ))
}

/// True when `query` reads `_metadata` or calls `input_file_name()`.
pub fn used_by(query: &Query) -> bool {
    !uses(query).is_empty()
}

/// A place where a query reads the column.
#[derive(Debug, Clone)]
pub enum Use {
    /// `_metadata` or `_metadata.field` (the field, if named).
    Column(Span, Option<Ident>),
    /// `input_file_name()`.
    Function(Span),
}

/// Where `query` reads `_metadata` or calls `input_file_name()`.
pub fn uses(query: &Query) -> Vec<Use> {
    struct Finder(Vec<Use>);
    impl Visitor for Finder {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Identifier(i) if is_column(i) => self.0.push(Use::Column(i.span, None)),
                Expr::CompoundIdentifier(parts) => {
                    if let Some(at) = parts.iter().position(is_column) {
                        self.0
                            .push(Use::Column(parts[at].span, parts.get(at + 1).cloned()));
                    }
                }
                Expr::Function(f) if is_input_file_name(&f.name, &f.args) => {
                    self.0.push(Use::Function(f.name.span()))
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut finder = Finder(vec![]);
    let _ = query.visit(&mut finder);
    finder.0
}

fn is_column(i: &Ident) -> bool {
    i.value.eq_ignore_ascii_case(COLUMN)
}

fn is_input_file_name(name: &ObjectName, args: &FunctionArguments) -> bool {
    let empty = match args {
        FunctionArguments::None => true,
        FunctionArguments::List(l) => l.args.is_empty(),
        FunctionArguments::Subquery(_) => false,
    };
    name.0.len() == 1
        && name.0[0]
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("input_file_name"))
        && empty
}

/// Makes `input_file_name()` `_metadata.file_path`, and leaves `_metadata` out of each
/// `*` (and `t.*`) over a relation in `files` (the table names of the query's file
/// sources, after `rewrite_relations`).
pub fn rewrite(query: &mut Query, files: &[String]) {
    struct Rewriter<'a>(&'a [String]);
    impl VisitorMut for Rewriter<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::Function(f) = expr
                && is_input_file_name(&f.name, &f.args)
            {
                let span = f.name.0.first().and_then(|p| p.as_ident()).map(|i| i.span);
                let ident = |v: &str| match span {
                    Some(s) => Ident::with_span(s, v),
                    None => Ident::new(v),
                };
                *expr = Expr::CompoundIdentifier(vec![ident(COLUMN), ident(FILE_PATH)]);
            }
            ControlFlow::Continue(())
        }

        fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
            let names = file_relations(select, self.0);
            if names.is_empty() {
                return ControlFlow::Continue(());
            }
            for item in &mut select.projection {
                match item {
                    SelectItem::Wildcard(options) => exclude(options),
                    SelectItem::QualifiedWildcard(
                        SelectItemQualifiedWildcardKind::ObjectName(name),
                        options,
                    ) if name
                        .0
                        .last()
                        .and_then(ObjectNamePart::as_ident)
                        .is_some_and(|q| {
                            names.iter().any(|n| n.eq_ignore_ascii_case(&q.value))
                        }) =>
                    {
                        exclude(options)
                    }
                    _ => {}
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = query.visit(&mut Rewriter(files));
}

/// The names (alias, else table name) under which `select` reads a file source.
fn file_relations(select: &Select, files: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    for t in &select.from {
        for factor in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            if let TableFactor::Table { name, alias, .. } = factor
                && let Some(table) = name.0.last().and_then(ObjectNamePart::as_ident)
                && files.iter().any(|f| f == &table.value)
            {
                names.push(
                    alias
                        .as_ref()
                        .map_or(table.value.clone(), |a| a.name.value.clone()),
                );
            }
        }
    }
    names
}

fn exclude(options: &mut WildcardAdditionalOptions) {
    let column = ObjectName(vec![ObjectNamePart::Identifier(Ident::new(COLUMN))]);
    options.opt_exclude = match options.opt_exclude.take() {
        None => Some(ExcludeSelectItem::Multiple(vec![column])),
        Some(ExcludeSelectItem::Single(one)) => {
            Some(ExcludeSelectItem::Multiple(vec![one, column]))
        }
        Some(ExcludeSelectItem::Multiple(mut many)) => {
            many.push(column);
            Some(ExcludeSelectItem::Multiple(many))
        }
    };
}
