//! Resolving the relations of queries: datasets, `read_files` and the server sources
//! (`read_postgres`, `read_mysql`, `read_query`, `read_kafka`).

use super::external;
use super::lookup::Found;
use super::*;
use crate::connections::ConnectionKind;
use crate::read_mysql::{self, MysqlTable, ReadMysql};

/// What a relation of a query was found to be.
enum Resolved {
    Dataset(Found),
    /// An external table (its index) and the table name that stands for it.
    External(usize, String),
    /// A `read_files` call and the table name that stands for it.
    Files(String),
    /// A direct file reference (`json.\`path\``) and the table name that stands for it.
    Direct(crate::config::ExternalTableConfig, String),
    /// A `read_postgres` call and the table name that stands for it.
    Postgres(String),
    /// A `read_mysql` call and the table name that stands for it.
    Mysql(String),
    /// A `read_query` call and the table name that stands for it.
    Query(String),
    /// A `read_kafka` call and the table name that stands for it.
    Kafka(String),
    /// A `list_files` call: a table function, not an input.
    ListFiles,
}

impl Resolver<'_> {
    // ---- query relations -----------------------------------------------------------

    pub(super) fn resolve_query(
        &mut self,
        query: &mut Query,
        file: FileId,
        flow: &str,
        namespace: &Namespace,
    ) -> Vec<Input> {
        let mut found = Vec::new();
        let mut counter = 0usize;
        let this = &*self;
        rewrite_relations(query, &mut |rel| match &rel {
            Relation::Dataset { parts, .. } => {
                let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
                let live = parts
                    .first()
                    .is_some_and(|p| p.eq_ignore_ascii_case("live"));
                let lookup = match parts.len() - usize::from(live && parts.len() > 1) <= 3 {
                    true => this.find_relation(&parts, namespace),
                    false => external::Relation::Dataset(Found::None),
                };
                let lookup = match lookup {
                    external::Relation::Dataset(Found::None)
                        if let Some(direct) = Self::direct_reference(&parts) =>
                    {
                        counter += 1;
                        let table = format!("__files_{flow}_{counter}");
                        found.push((rel, Resolved::Direct(direct, table.clone())));
                        return Some(table);
                    }
                    external::Relation::Dataset(found) => found,
                    external::Relation::External(e) => {
                        counter += 1;
                        let table = format!("__external_{flow}_{counter}");
                        found.push((rel, Resolved::External(e, table.clone())));
                        return Some(table);
                    }
                };
                let name = lookup.one().map(|i| this.datasets[i].name.clone());
                found.push((rel, Resolved::Dataset(lookup)));
                name
            }
            Relation::Files(_) => {
                counter += 1;
                let table = format!("__files_{flow}_{counter}");
                found.push((rel, Resolved::Files(table.clone())));
                Some(table)
            }
            Relation::Postgres(_) => {
                counter += 1;
                let table = format!("__postgres_{flow}_{counter}");
                found.push((rel, Resolved::Postgres(table.clone())));
                Some(table)
            }
            Relation::Mysql(_) => {
                counter += 1;
                let table = format!("__mysql_{flow}_{counter}");
                found.push((rel, Resolved::Mysql(table.clone())));
                Some(table)
            }
            Relation::Query(_) => {
                counter += 1;
                let table = format!("__query_{flow}_{counter}");
                found.push((rel, Resolved::Query(table.clone())));
                Some(table)
            }
            Relation::Kafka(_) => {
                counter += 1;
                let table = format!("__kafka_{flow}_{counter}");
                found.push((rel, Resolved::Kafka(table.clone())));
                Some(table)
            }
            Relation::ListFiles(call) => {
                let path = call.path.as_ref().map(|p| this.root.join(p));
                found.push((rel, Resolved::ListFiles));
                path.map(|p| p.display().to_string())
            }
        });
        let mut inputs = Vec::new();
        for (rel, resolved) in found {
            match (rel, resolved) {
                (Relation::Dataset { streaming, .. }, Resolved::Dataset(Found::One(d))) => inputs
                    .push(Input::Dataset {
                        name: self.datasets[d].name.clone(),
                        streaming,
                    }),
                (Relation::Dataset { parts, span, .. }, Resolved::Dataset(found)) => match found {
                    Found::Many(_) => self.ambiguous_dataset(file, span, &parts.join("."), &found),
                    _ => self.unknown_dataset(file, span, &parts),
                },
                (
                    Relation::Dataset {
                        streaming, span, ..
                    },
                    Resolved::External(e, table),
                ) => {
                    inputs.extend(self.external_input(e, streaming, table, file, span));
                }
                (
                    Relation::Dataset {
                        parts,
                        streaming,
                        span,
                    },
                    Resolved::Direct(config, table),
                ) => {
                    let name = parts.join(".");
                    inputs.extend(
                        self.table_input(&name, &config, false, streaming, table, file, span),
                    );
                }
                (Relation::Files(call), Resolved::Files(table)) => {
                    if let Some(rf) = self.read_files(&call, table, file, true) {
                        inputs.push(Input::Files(rf));
                    }
                }
                (Relation::Postgres(call), Resolved::Postgres(table)) => {
                    if let Some(rp) = self.read_postgres(&call, table, file) {
                        inputs.push(Input::Postgres(rp));
                    }
                }
                (Relation::Mysql(call), Resolved::Mysql(table)) => {
                    if let Some(rm) = self.read_mysql(&call, table, file) {
                        inputs.push(Input::Mysql(rm));
                    }
                }
                (Relation::Query(call), Resolved::Query(table)) => {
                    if let Some(rq) = self.read_query(&call, table, file) {
                        inputs.push(Input::Query(rq));
                    }
                }
                (Relation::Kafka(call), Resolved::Kafka(table)) => {
                    if let Some(rk) = self.read_kafka(&call, table, file) {
                        inputs.push(Input::Kafka(rk));
                    }
                }
                (Relation::ListFiles(call), Resolved::ListFiles) => self.list_files(&call, file),
                _ => {}
            }
        }
        inputs
    }

    /// The diagnostics of a `list_files(path [, recursive => bool])` call.
    fn list_files(&mut self, call: &FilesCall, file: FileId) {
        const FUNCTION: &str = "cdcflow::list_files";
        for span in &call.invalid {
            self.error(
                file,
                *span,
                FUNCTION,
                "list_files takes literal arguments".into(),
                "not a literal",
                Some("list_files('landing/customers', recursive => false)".into()),
            );
        }
        let Some(path_text) = &call.path else {
            self.error(
                file,
                call.span,
                FUNCTION,
                "list_files needs a path".into(),
                "no path",
                Some("list_files('landing/customers')".into()),
            );
            return;
        };
        for (key, value, span) in &call.options {
            if let Some(fault) = crate::list_files::option_fault(key, value) {
                self.error(
                    file,
                    *span,
                    FUNCTION,
                    fault.message,
                    fault.label,
                    Some(fault.help.into()),
                );
            }
        }
        if path_text.contains("://") {
            self.warn_if_url(path_text, call.span, file, FUNCTION);
            return;
        }
        let path = self.root.join(path_text);
        if !path.exists() {
            let d = Diagnostic::warning(
                FUNCTION,
                format!("`{path_text}` does not exist: list_files fails until it is created"),
            )
            .at(self.locate(file, call.span, "no such file or folder"))
            .help("correct the path (relative paths start at the pipeline folder), or create the folder");
            self.diags.push(d);
        }
    }

    /// A warning at `span` when `path_text` is a URL cdcflow does not read there (any URL
    /// for list_files, one of another scheme for read_files): a run fails on it
    /// (`inputs.rs`). Not an error, so that a Databricks pipeline reading one still
    /// validates everything else.
    fn warn_if_url(&mut self, path_text: &str, span: Span, file: FileId, code: &'static str) {
        if !path_text.contains("://") {
            return;
        }
        let message = match code {
            "cdcflow::read_files" => format!(
                "`{path_text}` is not a folder or a URL of an object store cdcflow reads, so a run fails on it"
            ),
            _ => format!(
                "`{path_text}` is a URL: list_files lists folders of this machine, so a run fails on it"
            ),
        };
        let d = Diagnostic::warning(code, message)
            .at(self.locate(file, span, "not a local folder"))
            .help(format!(
                "give a folder path, or a `${{key}}` that --conf sets to one (relative paths start at the pipeline folder); read_files reads landing folders at {} URLs, and Delta tables there can be read as external_tables (docs/storage.md)",
                crate::location::SCHEMES
                    .iter()
                    .map(|s| format!("{s}://"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        self.diags.push(d);
    }

    /// `landing`: the call reads a landing folder (not an external table's files), so
    /// [`Discovered::landing`](super::Discovered::landing) redirects it.
    pub(super) fn read_files(
        &mut self,
        call: &FilesCall,
        table: String,
        file: FileId,
        landing: bool,
    ) -> Option<ReadFiles> {
        for span in &call.invalid {
            self.error(file, *span, "cdcflow::read_files", "read_files takes literal arguments".into(), "not a literal", Some("write the path and options as literals, e.g. read_files('landing/orders', format => 'json')".into()));
        }
        let Some(path_text) = call.path.clone() else {
            self.error(
                file,
                call.span,
                "cdcflow::read_files",
                "read_files needs a path".into(),
                "no path",
                Some("read_files('landing/orders', format => 'json')".into()),
            );
            return None;
        };
        // A landing folder at an object-store URL is fetched by the run (docs/storage.md);
        // any other URL would be taken for a local folder.
        let redirected = self
            .landing
            .as_ref()
            .filter(|_| landing)
            .map(|l| l.join(&table));
        let named = self.root.join(&path_text);
        let remote = redirected.is_none()
            && crate::location::Location::parse(self.root, &path_text).is_ok_and(|l| l.is_remote());
        if !remote {
            self.warn_if_url(&path_text, call.span, file, "cdcflow::read_files");
        }
        let path = redirected.unwrap_or_else(|| self.root.join(&path_text));
        if !path.exists() && !path_text.contains("://") {
            self.missing_landing(call, file, &path_text, &path);
        }
        let options: BTreeMap<String, String> = call
            .options
            .iter()
            .map(|(k, v, _)| (k.clone(), v.clone()))
            .collect();
        let format = match options.get("format") {
            Some(f) => match FileFormat::parse(f) {
                Some(f) => f,
                None => {
                    let span = call
                        .options
                        .iter()
                        .find(|o| o.0 == "format")
                        .map_or(call.span, |o| o.2);
                    self.error(file, span, "cdcflow::read_files", format!("unsupported format `{f}`"), "format", Some("cdcflow reads format => 'json' (newline-delimited), 'csv', 'parquet' and 'text' (a `value` column per line)".into()));
                    return None;
                }
            },
            // The format of the files the call names, wherever it reads.
            None => match ReadFiles::detect_format(&named) {
                Some(f) => f,
                None => {
                    self.error(
                        file,
                        call.span,
                        "cdcflow::read_files",
                        "the file format is not given and cannot be detected".into(),
                        "read_files",
                        Some("add format => 'json' | 'csv' | 'parquet'".into()),
                    );
                    return None;
                }
            },
        };
        let mut declared_schema = None;
        if let Some((_, ddl, span)) = call.options.iter().find(|o| o.0 == "schema") {
            match ddl_schema(ddl) {
                Ok(s) => declared_schema = Some(Arc::new(s)),
                Err(e) => {
                    self.error(
                        file,
                        *span,
                        "cdcflow::schema",
                        format!("invalid schema: {e}"),
                        "schema",
                        Some("schema => 'id BIGINT, name STRING, updated_at TIMESTAMP'".into()),
                    );
                    return None;
                }
            }
        }
        let mut schema_hints = None;
        if let Some((_, ddl, span)) = call
            .options
            .iter()
            .find(|o| o.0 == "cloudfiles.schemahints" || o.0 == "schemahints")
        {
            match ddl_schema(ddl) {
                Ok(s) => schema_hints = Some(Arc::new(s)),
                Err(e) => {
                    self.error(
                        file,
                        *span,
                        "cdcflow::schema",
                        format!("invalid schema hints: {e}"),
                        "schema hints",
                        Some(
                            "\"cloudFiles.schemaHints\", \"id BIGINT, updated_at TIMESTAMP\""
                                .into(),
                        ),
                    );
                    return None;
                }
            }
        }
        if call.auto_loader {
            self.auto_loader_notes(call, file);
        }
        if remote && declared_schema.is_none() {
            // Left to inference, the flow would wait for a schema no run infers.
            self.error(
                file,
                call.span,
                "cdcflow::read_files",
                format!("`{path_text}` is on object storage: its files' columns must be declared"),
                "no schema =>",
                Some("add schema => 'id BIGINT, …': cdcflow fetches the objects a run reads, but does not infer columns from a bucket (docs/storage.md)".into()),
            );
            return None;
        }
        Some(ReadFiles {
            table,
            path_text,
            path,
            format,
            declared_schema,
            options,
            streaming: call.streaming,
            auto_loader: call.auto_loader,
            schema_hints,
            inferred_schema: None,
            metadata: false,
            landing,
            span: call.span,
        })
    }

    /// `read_postgres` feeds a streaming table through an append flow: that flow's
    /// commits are what the slot is acknowledged after. A materialized view or a view
    /// over it would read the changes without ever letting the server free them.
    pub(super) fn check_change_source_readers(&mut self) {
        for f in 0..self.flows.len() {
            let appends = matches!(self.flows[f].kind, FlowKind::Query { .. })
                && self
                    .dataset_index(&self.flows[f].target)
                    .is_some_and(|d| self.datasets[d].kind == DatasetKind::StreamingTable);
            if appends {
                continue;
            }
            let spans: Vec<(Span, &str)> = self.flows[f]
                .inputs
                .iter()
                .filter_map(|i| match i {
                    Input::Postgres(rp) => Some((rp.span, "read_postgres")),
                    Input::Mysql(rm) => Some((rm.span, "read_mysql")),
                    Input::Query(rq) => Some((rq.span, "read_query")),
                    Input::Kafka(rk) => Some((rk.span, "read_kafka")),
                    _ => None,
                })
                .collect();
            let file = self.flows[f].file;
            for (span, source) in spans {
                let code = match source {
                    "read_kafka" => "cdcflow::read_kafka",
                    "read_mysql" => "cdcflow::read_mysql",
                    _ => "cdcflow::read_postgres",
                };
                self.error(file, span, code, format!("{source} feeds a streaming table: read it in `CREATE STREAMING TABLE … AS SELECT … FROM STREAM {source}(…)` (or a flow INSERT INTO one)"), "not a streaming table's query", Some("land the changes in a streaming table, then read that table from views, materialized views and AUTO CDC flows".into()));
            }
        }
    }

    /// What every source function checks (`read_postgres`, `read_query`): named
    /// literal arguments only, read as a stream (`why` says what a read does), and
    /// only options it takes. `what`: the function's name, its diagnostic code and an
    /// example call. Returns whether all hold.
    fn source_call(
        &mut self,
        call: &SourceCall,
        file: FileId,
        (function, code, example): (&str, &'static str, &str),
        options: &[&str],
        why: &str,
    ) -> bool {
        let mut ok = true;
        for span in &call.invalid {
            self.error(
                file,
                *span,
                code,
                format!("{function} takes named literal arguments"),
                "not a named literal",
                Some(format!("write them as name => 'value': {example}")),
            );
            ok = false;
        }
        if !call.streaming {
            self.error(
                file,
                call.span,
                code,
                format!("{function} is a streaming source: {why}"),
                "read without STREAM",
                Some(format!(
                    "read it as a stream into a streaming table: FROM {example}"
                )),
            );
            ok = false;
        }
        for (key, _, span) in &call.options {
            if !options.contains(&key.as_str()) {
                let near = suggest::did_you_mean(key, options.iter().copied())
                    .map(|d| format!("{d} "))
                    .unwrap_or_default();
                self.error(
                    file,
                    *span,
                    code,
                    format!("{function} has no option `{key}`"),
                    "unknown option",
                    Some(format!("{near}{function} takes {}", options.join(", "))),
                );
                ok = false;
            }
        }
        ok
    }

    /// A connection name pipeline.yaml does not declare, with the names it does.
    fn unknown_connection(&mut self, file: FileId, span: Span, name: &str) {
        let mut known: Vec<&str> = self.connections.keys().map(String::as_str).collect();
        known.sort();
        let help = match known.is_empty() {
            true => "declare it in pipeline.yaml: connections: { <name>: { kind: postgres | mysql, host: …, database: …, user: …, password_env: … } }".to_string(),
            false => format!(
                "{}pipeline.yaml declares: {}",
                suggest::did_you_mean(name, known.iter().copied())
                    .map(|d| format!("{d} "))
                    .unwrap_or_default(),
                known.join(", ")
            ),
        };
        self.error(
            file,
            span,
            "cdcflow::connection",
            format!("unknown connection `{name}`"),
            "not in pipeline.yaml's connections",
            Some(help),
        );
    }

    /// A `read_postgres` call: named literal options, a streaming read, a connection
    /// pipeline.yaml declares, a table name, and the columns when `schema =>` gives them.
    pub(super) fn read_postgres(
        &mut self,
        call: &SourceCall,
        table: String,
        file: FileId,
    ) -> Option<ReadPostgres> {
        let capture = Capture {
            function: "read_postgres",
            code: "cdcflow::read_postgres",
            example: "STREAM read_postgres(connection => 'crm', table => 'public.customers')",
            kind: ConnectionKind::Postgres,
            reads: "PostgreSQL",
            other_kinds: "read other databases with STREAM read_mysql(connection => …, table => …) or read_query(connection => …, query => …, watermark => …)",
            metadata: read_postgres::metadata_fields(),
            table_form: "'schema.table'",
            table_help: "write it as 'schema.table' or 'table' (in public); quote names with double quotes inside: '\"Sales\".orders'",
        };
        let call = self.capture_call(call, file, &capture, |text, _| TableName::parse(text))?;
        let mut rp = ReadPostgres {
            table,
            connection: call.connection,
            source: call.source,
            declared_columns: call.declared_columns,
            discovered_columns: None,
            max_changes_per_batch: call.max_changes_per_batch,
            span: call.span,
        };
        rp.discovered_columns = self.source_columns.get(&rp.key()).cloned();
        Some(rp)
    }

    /// A `read_mysql` call, as [`Self::read_postgres`]'s; a table named without its
    /// database is in the connection's.
    pub(super) fn read_mysql(
        &mut self,
        call: &SourceCall,
        table: String,
        file: FileId,
    ) -> Option<ReadMysql> {
        let capture = Capture {
            function: "read_mysql",
            code: "cdcflow::read_mysql",
            example: "STREAM read_mysql(connection => 'shop', table => 'shop.orders')",
            kind: ConnectionKind::Mysql,
            reads: "MySQL",
            other_kinds: "read PostgreSQL with STREAM read_postgres(connection => …, table => …)",
            metadata: read_mysql::metadata_fields(),
            table_form: "'database.table'",
            table_help: "write it as 'database.table' or 'table' (in the connection's database); quote names with backticks inside: '`my db`.orders'",
        };
        // The connections' databases, apart from the resolver the call borrows.
        let connections = self.connections.clone();
        let default_database = |name: &str| match connections.get(name).map(|c| &c.target) {
            Some(crate::connections::Target::Parts { database, .. }) => Some(database.clone()),
            _ => None,
        };
        let call = self.capture_call(call, file, &capture, |text, connection| {
            MysqlTable::parse(text, default_database(connection).as_deref())
        })?;
        let mut rm = ReadMysql {
            table,
            connection: call.connection,
            source: call.source,
            declared_columns: call.declared_columns,
            discovered_columns: None,
            max_changes_per_batch: call.max_changes_per_batch,
            span: call.span,
        };
        rm.discovered_columns = self.source_columns.get(&rm.key()).cloned();
        Some(rm)
    }

    /// The options of a call that captures a table's changes from a database's log:
    /// a connection of `capture.kind`, a table (`parse` reads its name, given the
    /// connection's), the columns when `schema =>` gives them, and the batch size.
    fn capture_call<T>(
        &mut self,
        call: &SourceCall,
        file: FileId,
        capture: &Capture,
        parse: impl Fn(&str, &str) -> Option<T>,
    ) -> Option<CaptureCall<T>> {
        let Capture {
            function,
            code,
            example,
            ..
        } = *capture;
        let mut ok = self.source_call(
            call,
            file,
            (function, code, example),
            read_postgres::OPTIONS,
            "it reads a table's snapshot and then its changes",
        );
        let option = |name: &str| call.options.iter().find(|o| o.0 == name).cloned();
        let connection = match option("connection") {
            Some((_, name, span)) => match self.connections.get(&name) {
                Some(c) if c.kind != capture.kind => {
                    self.error(
                        file,
                        span,
                        "cdcflow::connection",
                        format!(
                            "connection `{name}` is a {} connection: {function} reads {}",
                            c.kind.as_str(),
                            capture.reads
                        ),
                        &format!("not a {} connection", capture.reads),
                        Some(capture.other_kinds.into()),
                    );
                    None
                }
                Some(_) => Some(name),
                None => {
                    self.unknown_connection(file, span, &name);
                    None
                }
            },
            None => {
                self.error(
                    file,
                    call.span,
                    code,
                    format!("{function} needs connection => '<name in pipeline.yaml>'"),
                    "no connection",
                    Some(example.into()),
                );
                None
            }
        };
        let source = match (option("table"), connection.as_deref()) {
            // The connection's error is said; the name may need its database.
            (Some(_), None) => None,
            (Some((_, text, span)), Some(connection)) => match parse(&text, connection) {
                Some(t) => Some(t),
                None => {
                    self.error(
                        file,
                        span,
                        code,
                        format!("`{text}` is not a table name"),
                        "table",
                        Some(capture.table_help.into()),
                    );
                    None
                }
            },
            (None, _) => {
                self.error(
                    file,
                    call.span,
                    code,
                    format!("{function} needs table => {}", capture.table_form),
                    "no table",
                    Some(example.into()),
                );
                None
            }
        };
        let mut declared_columns = None;
        if let Some((_, ddl, span)) = option("schema") {
            match ddl_schema(&ddl) {
                Ok(s) => {
                    let clash = s.fields().iter().find(|f| {
                        capture
                            .metadata
                            .iter()
                            .any(|m| m.name().eq_ignore_ascii_case(f.name()))
                    });
                    match clash {
                        Some(f) => {
                            let added: Vec<&str> =
                                capture.metadata.iter().map(|m| m.name().as_str()).collect();
                            self.error(file, span, "cdcflow::schema", format!("column `{}` has the name of a change metadata column", f.name()), "schema", Some(format!("{function} adds {} to the table's columns; rename the column in a view of the table", added.join(", "))));
                            ok = false;
                        }
                        None => declared_columns = Some(Arc::new(s)),
                    }
                }
                Err(e) => {
                    self.error(file, span, "cdcflow::schema", format!("invalid schema: {e}"), "schema", Some("the table's columns as Databricks types: schema => 'id INT, name STRING, amount DECIMAL(10,2)'".into()));
                    ok = false;
                }
            }
        }
        let mut max_changes_per_batch = read_postgres::DEFAULT_MAX_CHANGES_PER_BATCH;
        if let Some((_, text, span)) = option("max_changes_per_batch") {
            match text.parse::<u64>() {
                Ok(n) if n > 0 => max_changes_per_batch = n,
                _ => {
                    self.error(file, span, code, format!("max_changes_per_batch must be a whole number above 0, not `{text}`"), "max_changes_per_batch", Some(format!("the changes one batch takes at most (whole transactions), by default {}", read_postgres::DEFAULT_MAX_CHANGES_PER_BATCH)));
                    ok = false;
                }
            }
        }
        let (Some(connection), Some(source), true) = (connection, source, ok) else {
            return None;
        };
        Some(CaptureCall {
            connection,
            source,
            declared_columns,
            max_changes_per_batch,
            span: call.span,
        })
    }

    /// A `read_query` call: named literal options, a streaming read, a connection
    /// pipeline.yaml declares, a query, a watermark column, an overlap, and the
    /// columns when `schema =>` gives them.
    pub(super) fn read_query(
        &mut self,
        call: &SourceCall,
        table: String,
        file: FileId,
    ) -> Option<ReadQuery> {
        const CODE: &str = "cdcflow::read_query";
        let example = "STREAM read_query(connection => 'erp', query => 'SELECT * FROM customers', watermark => 'updated_at')";
        let mut ok = self.source_call(
            call,
            file,
            ("read_query", CODE, example),
            read_query::OPTIONS,
            "each read takes the rows above the last high watermark",
        );
        let option = |name: &str| call.options.iter().find(|o| o.0 == name).cloned();
        let required = |this: &mut Self, name: &str, what: &str| match option(name) {
            Some((_, value, span)) if !value.trim().is_empty() => Some((value, span)),
            Some((_, _, span)) => {
                this.error(
                    file,
                    span,
                    CODE,
                    format!("read_query's {name} is empty"),
                    name,
                    Some(example.into()),
                );
                None
            }
            None => {
                this.error(
                    file,
                    call.span,
                    CODE,
                    format!("read_query needs {name} => {what}"),
                    &format!("no {name}"),
                    Some(example.into()),
                );
                None
            }
        };
        let connection = match required(self, "connection", "'<name in pipeline.yaml>'") {
            Some((name, span)) => match self.connections.get(&name) {
                Some(_) => Some(name),
                None => {
                    self.unknown_connection(file, span, &name);
                    None
                }
            },
            None => None,
        };
        let query = required(self, "query", "'SELECT …'").map(|(q, _)| q);
        let watermark = match required(self, "watermark", "'<column that only grows>'") {
            Some((w, span)) if w.contains(|c: char| c.is_whitespace() || c == ',' || c == '(') => {
                self.error(file, span, CODE, format!("watermark `{w}` is not a column name"), "watermark", Some("name one column of the query's result whose value only grows: a last-modified time or an increasing id".into()));
                None
            }
            Some((w, _)) => Some(w),
            None => None,
        };
        let mut overlap_seconds = read_query::DEFAULT_OVERLAP_SECONDS;
        if let Some((_, text, span)) = option("overlap_seconds") {
            match text.parse::<f64>() {
                Ok(n) if n >= 0.0 && n.is_finite() => overlap_seconds = n,
                _ => {
                    self.error(file, span, CODE, format!("overlap_seconds must be a number of seconds, 0 or more, not `{text}`"), "overlap_seconds", Some(format!("how far below the last high watermark each read starts again, by default {}", read_query::DEFAULT_OVERLAP_SECONDS)));
                    ok = false;
                }
            }
        }
        let mut max_rows_per_batch = read_query::DEFAULT_MAX_ROWS_PER_BATCH;
        if let Some((_, text, span)) = option("max_rows_per_batch") {
            match text.parse::<usize>() {
                Ok(n) if n > 0 => max_rows_per_batch = n,
                _ => {
                    self.error(file, span, CODE, format!("max_rows_per_batch must be a whole number above 0, not `{text}`"), "max_rows_per_batch", Some(format!("the rows one batch takes at most (a read with more goes on in the next batch), by default {}", read_query::DEFAULT_MAX_ROWS_PER_BATCH)));
                    ok = false;
                }
            }
        }
        let mut keys = Vec::new();
        if let Some((_, text, span)) = option("keys") {
            match read_query::parse_keys(&text) {
                Ok(k) => keys = k,
                Err(message) => {
                    self.error(file, span, CODE, message, "keys", Some("name the columns that tell rows with one watermark value apart, separated by commas: keys => 'order_id, line_no'".into()));
                    ok = false;
                }
            }
        }
        let mut declared_columns = None;
        if let Some((_, ddl, span)) = option("schema") {
            match ddl_schema(&ddl) {
                Ok(s) => declared_columns = Some(Arc::new(s)),
                Err(e) => {
                    self.error(file, span, "cdcflow::schema", format!("invalid schema: {e}"), "schema", Some("the query's columns as Databricks types: schema => 'id INT, name STRING, updated_at TIMESTAMP'".into()));
                    ok = false;
                }
            }
        }
        if let (Some(columns), Some(w)) = (&declared_columns, &watermark)
            && columns.column_with_name(w).is_none()
            && !columns
                .fields()
                .iter()
                .any(|f| f.name().eq_ignore_ascii_case(w))
        {
            let span = option("watermark").map_or(call.span, |o| o.2);
            self.error(
                file,
                span,
                CODE,
                format!("watermark `{w}` is not a column of the declared schema"),
                "watermark",
                Some("name one of the columns schema => declares".into()),
            );
            ok = false;
        }
        if let Some(columns) = &declared_columns {
            let has = |name: &str| {
                columns.column_with_name(name).is_some()
                    || columns
                        .fields()
                        .iter()
                        .any(|f| f.name().eq_ignore_ascii_case(name))
            };
            if let Some(missing) = keys.iter().find(|k| !has(k)) {
                let span = option("keys").map_or(call.span, |o| o.2);
                self.error(
                    file,
                    span,
                    CODE,
                    format!("key `{missing}` is not a column of the declared schema"),
                    "keys",
                    Some("name columns schema => declares".into()),
                );
                ok = false;
            }
        }
        let (Some(connection), Some(query), Some(watermark), true) =
            (connection, query, watermark, ok)
        else {
            return None;
        };
        let mut rq = ReadQuery {
            table,
            connection,
            query,
            watermark,
            keys,
            overlap_seconds,
            max_rows_per_batch,
            declared_columns,
            discovered_columns: None,
            span: call.span,
        };
        rq.discovered_columns = self.source_columns.get(&rq.key()).cloned();
        Some(rq)
    }

    /// A landing path that does not exist is a warning, not an error: the folder may be
    /// created when the first files land. A misspelt one would read nothing, silently.
    fn missing_landing(&mut self, call: &FilesCall, file: FileId, text: &str, path: &Path) {
        let mut help = String::from(
            "correct the path (relative paths start at the pipeline folder), or create the folder if files are yet to come",
        );
        let parent = path.parent().filter(|p| p.is_dir());
        let mut siblings: Vec<String> = parent
            .and_then(|p| std::fs::read_dir(p).ok())
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(['.', '_']))
            .collect();
        siblings.sort();
        if !siblings.is_empty() && siblings.len() <= 20 {
            help.push_str(&format!("; folders beside it: {}", siblings.join(", ")));
        }
        let d = Diagnostic::warning(
            "cdcflow::landing_missing",
            format!("landing path `{text}` does not exist: flows reading it read nothing until it is created"),
        )
        .at(self.locate(file, call.span, "no such file or folder"))
        .help(help);
        self.diags.push(d);
    }

    /// Auto Loader options with no meaning here are accepted, with a note on what
    /// cdcflow does instead.
    fn auto_loader_notes(&mut self, call: &FilesCall, file: FileId) {
        const MAPPED: &[&str] = &[
            "format",
            "header",
            "sep",
            "delimiter",
            "cloudfiles.format",
            "cloudfiles.schemahints",
            "cloudfiles.infercolumntypes",
            "cloudfiles.allowoverwrites",
        ];
        for (key, _, span) in &call.options {
            if MAPPED.contains(&key.as_str()) {
                continue;
            }
            let instead = match key.as_str() {
                "cloudfiles.usenotifications"
                | "cloudfiles.queueurl"
                | "cloudfiles.backfillinterval" => {
                    "cdcflow lists the landing folder on each run (and watches it in continuous mode); every new file is read once, tracked in the flow's checkpoint"
                }
                "cloudfiles.maxfilespertrigger" | "cloudfiles.maxbytespertrigger" => {
                    "cdcflow reads every new file in one batch per run"
                }
                "cloudfiles.schemalocation" | "cloudfiles.schemaevolutionmode" => {
                    "the schema is inferred from the landing files (or declared) and kept with the table"
                }
                "cloudfiles.includeexistingfiles" => {
                    "files already in the folder are read on the first run"
                }
                _ => "this option is not used by cdcflow",
            };
            let d = Diagnostic::note(
                "cdcflow::auto_loader_option",
                format!("cloud_files option `{key}` is accepted and not used: {instead}"),
            )
            .at(self.locate(file, *span, "Auto Loader option"));
            self.diags.push(d);
        }
    }
}

/// What tells one log-capture function from another in its diagnostics.
struct Capture {
    function: &'static str,
    code: &'static str,
    example: &'static str,
    kind: ConnectionKind,
    /// The servers it reads, as messages name them.
    reads: &'static str,
    /// The help when the connection is of another kind.
    other_kinds: &'static str,
    metadata: Vec<Field>,
    /// How a table is named, as the message for a missing one shows it.
    table_form: &'static str,
    table_help: &'static str,
}

/// A log-capture call's options, checked.
struct CaptureCall<T> {
    connection: String,
    source: T,
    declared_columns: Option<SchemaRef>,
    max_changes_per_batch: u64,
    span: Span,
}
