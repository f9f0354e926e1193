//! Tables from outside the pipeline (pipeline.yaml `external_tables:`), found by name
//! as datasets are (`crate::namespace`) when no dataset of the pipeline has the name. A
//! table stored as files is read as `read_files` reads them, with the declared format,
//! schema and options; a Delta table from its folder (`Input::Delta`). Either is read
//! whole, or as a stream with `STREAM(name)`.

use cdcflow_sql::dialect::SparkSqlDialect;
use cdcflow_sql::sqlparser::ast::{Expr, VisitMut, VisitorMut};
use cdcflow_sql::sqlparser::parser::Parser;

use super::*;
use crate::config::{ExternalFormat, ExternalTableConfig};
use crate::location::Location;
use crate::namespace::Identity;
use crate::pipeline::ExternalDelta;

/// What a name in a query or a FROM clause is found to be.
pub(super) enum Relation {
    Dataset(Found),
    External(usize),
}

/// One entry of `external_tables:`.
pub(super) struct External {
    /// The key as written in pipeline.yaml.
    pub name: String,
    pub identity: Identity,
    pub config: ExternalTableConfig,
}

impl Resolver<'_> {
    /// The external table `parts` names where `namespace` holds, when exactly one does
    /// (or one is named exactly so).
    pub(super) fn find_external(&self, parts: &[&str], namespace: &Namespace) -> Option<usize> {
        let wanted = namespace.identity(parts);
        let matching: Vec<usize> = (0..self.externals.len())
            .filter(|&e| wanted.matches(&self.externals[e].identity))
            .collect();
        match matching.as_slice() {
            [one] => Some(*one),
            _ => matching
                .iter()
                .copied()
                .find(|&e| wanted.same(&self.externals[e].identity)),
        }
    }

    /// What `parts` names: the pipeline's dataset, or an external table. An unqualified
    /// name is the pipeline's own first; a qualified one is an external table declared
    /// so unless a dataset is named exactly so (a dataset whose catalog and schema are
    /// not known matches any, and must not hide `prod.crm.customers`).
    pub(super) fn find_relation(&self, parts: &[&str], namespace: &Namespace) -> Relation {
        let found = self.find_dataset(parts, namespace);
        let live = parts
            .first()
            .is_some_and(|p| p.eq_ignore_ascii_case("live"));
        let qualified = parts.len() > 1 && !live;
        let exact = found
            .one()
            .is_some_and(|d| namespace.identity(parts).same(&self.datasets[d].identity));
        match self.find_external(parts, namespace) {
            Some(e) if matches!(found, Found::None) || (qualified && !exact) => {
                Relation::External(e)
            }
            _ => Relation::Dataset(found),
        }
    }

    /// The input that reads external table `e` under the name `table`; `None` when its
    /// declaration cannot be read (reported at `span`, the reference).
    pub(super) fn external_input(
        &mut self,
        e: usize,
        streaming: bool,
        table: String,
        file: FileId,
        span: Span,
    ) -> Option<Input> {
        let External { name, config, .. } = &self.externals[e];
        let (name, config) = (name.clone(), config.clone());
        self.table_input(&name, &config, true, streaming, table, file, span)
    }

    /// A direct file reference, `json.\`path\``, `csv.…`, `parquet.…` or `delta.…`:
    /// its format and path, when `parts` is one and names no table.
    pub(super) fn direct_reference(parts: &[&str]) -> Option<ExternalTableConfig> {
        let [format, path] = parts else {
            return None;
        };
        let format = match format.to_ascii_lowercase().as_str() {
            "delta" => ExternalFormat::Delta,
            "parquet" => ExternalFormat::Parquet,
            "csv" => ExternalFormat::Csv,
            "json" => ExternalFormat::Json,
            _ => return None,
        };
        Some(ExternalTableConfig {
            format,
            path: path.to_string(),
            schema: None,
            options: Default::default(),
        })
    }

    /// The input reading a table stored as `config` says, named `name` in messages;
    /// `declared` for pipeline.yaml's declarations (CSV and JSON need a schema there;
    /// a direct file reference infers it as `read_files` does).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn table_input(
        &mut self,
        name: &str,
        config: &ExternalTableConfig,
        declared: bool,
        streaming: bool,
        table: String,
        file: FileId,
        span: Span,
    ) -> Option<Input> {
        let name = name.to_string();
        let fail = |r: &mut Self, message: String, help: &str| {
            r.error(
                file,
                span,
                "cdcflow::external_table",
                message,
                "external table",
                Some(help.to_string()),
            );
            None
        };
        if config.format == ExternalFormat::Delta {
            if !config.options.is_empty() {
                return fail(
                    self,
                    format!("external table `{name}` is a Delta table: it takes no `options:`"),
                    "remove `options:`; they are read_files options for CSV and JSON files",
                );
            }
            let location = match Location::parse(self.root, &config.path) {
                Ok(location) => location,
                Err(why) => {
                    return fail(
                        self,
                        format!("external table `{name}`: {why}"),
                        "`path:` is a folder (relative to the pipeline folder) or an object-store URL (s3://, gs://, az://, abfss://); credentials come from the environment",
                    );
                }
            };
            let schema = match (&config.schema, &location) {
                (Some(ddl), _) => ddl_schema(ddl).map_err(|e| format!("invalid `schema:`: {e}")),
                (None, Location::Local(path)) => crate::delta_schema::read(path),
                (None, Location::Remote(url)) => {
                    return fail(
                        self,
                        format!(
                            "external table `{name}` at {url} declares no `schema:`: validate does not read object storage"
                        ),
                        "declare its columns, `schema: \"id BIGINT, name STRING\"`; each run checks them against the table",
                    );
                }
            };
            let schema = match schema {
                Ok(s) => Arc::new(s),
                Err(why) => {
                    return fail(
                        self,
                        format!("external table `{name}`: {why}"),
                        "`path:` names the table's folder (the one holding _delta_log), relative to the pipeline folder; `schema:` declares its columns",
                    );
                }
            };
            self.planner.register_schema(&table, Arc::clone(&schema));
            return Some(Input::Delta(ExternalDelta {
                table,
                name,
                location,
                schema,
                streaming,
            }));
        }
        if Location::parse(self.root, &config.path).is_ok_and(|l| l.is_remote()) {
            return fail(
                self,
                format!(
                    "external table `{name}` ({}) is on object storage: only Delta tables are read from there",
                    config.format.name()
                ),
                "copy the files to a folder of this machine, or read them as a Delta table",
            );
        }
        if declared && config.schema.is_none() && config.format != ExternalFormat::Parquet {
            return fail(
                self,
                format!(
                    "external table `{name}` ({}) declares no `schema:`",
                    config.format.name()
                ),
                "CSV and JSON files carry no types: declare the columns, `schema: \"id BIGINT, name STRING\"`",
            );
        }
        let mut options = vec![("format".to_string(), config.format.name().to_string(), span)];
        options.extend(
            config
                .schema
                .iter()
                .map(|s| ("schema".to_string(), s.clone(), span)),
        );
        options.extend(
            config
                .options
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string(), span)),
        );
        let call = FilesCall {
            path: Some(config.path.clone()),
            options,
            invalid: vec![],
            streaming,
            auto_loader: false,
            span,
        };
        self.read_files(&call, table, file, false).map(Input::Files)
    }

    /// An AUTO CDC flow reading an external table reads it through a query of its own
    /// (`SELECT * FROM [STREAM](name)`), made into a view as any `FROM (query)` is.
    pub(super) fn external_source_query(
        &self,
        source: &cdcflow_sql::ast::SourceRef,
        namespace: &Namespace,
    ) -> Option<Box<Query>> {
        let parts = ident_list(&source.name.parts);
        let Relation::External(_) = self.find_relation(&parts, namespace) else {
            return None;
        };
        let quoted: Vec<String> = parts
            .iter()
            .map(|p| format!("`{}`", p.replace('`', "``")))
            .collect();
        let sql = match source.streaming {
            true => format!("SELECT * FROM STREAM({})", quoted.join(".")),
            false => format!("SELECT * FROM {}", quoted.join(".")),
        };
        let mut query = Parser::new(&SparkSqlDialect)
            .try_with_sql(&sql)
            .and_then(|mut p| p.parse_query())
            .ok()?;
        // Diagnostics about it point at the source as written.
        let _ = query.visit(&mut Respan(source.name.span));
        Some(query)
    }
}

struct Respan(Span);

impl VisitorMut for Respan {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> std::ops::ControlFlow<()> {
        match expr {
            Expr::Identifier(i) => i.span = self.0,
            Expr::CompoundIdentifier(parts) => parts.iter_mut().for_each(|i| i.span = self.0),
            _ => {}
        }
        std::ops::ControlFlow::Continue(())
    }

    fn pre_visit_relation(
        &mut self,
        relation: &mut cdcflow_sql::sqlparser::ast::ObjectName,
    ) -> std::ops::ControlFlow<()> {
        for part in &mut relation.0 {
            if let cdcflow_sql::sqlparser::ast::ObjectNamePart::Identifier(i) = part {
                i.span = self.0;
            }
        }
        std::ops::ControlFlow::Continue(())
    }
}
