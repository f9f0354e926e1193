//! Second stage of the data path: a pipeline folder becomes a [`Pipeline`] — files read
//! and parsed, datasets and flows collected, references resolved, the dataset graph
//! checked for cycles, schemas derived in dependency order and every flow planned.
//! Every problem becomes a [`Diagnostic`]; resolution goes on after an error so that
//! one run reports them all.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use cdcflow_sql::ast::{
    AutoCdc, CdcSource, ColumnSelection, CreateDataset, DatasetKind, DatasetName, FlowBody,
    Spanned, Statement, UseKind,
};
use cdcflow_sql::preprocess::{Preprocessed, substitute};
use cdcflow_sql::sqlparser::ast::{Expr as SqlExpr, Ident, Query, Spanned as _};
use cdcflow_sql::{Location, Span, parse_statements};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ExprSchemable, LogicalPlan};

use crate::autocdc::{AutoCdcNode, AutoCdcSpec, END_AT, RESERVED_PREFIX, START_AT, SequenceField};
use crate::config::PipelineConfig;
use crate::connections::Connection;
use crate::diagnostic::{Diagnostic, Located};
use crate::namespace::Namespace;
use crate::pipeline::{Dataset, FileId, Flow, FlowKind, Input, Pipeline, SourceFile};
use crate::planner::Planner;
use crate::read_files::{FileFormat, ReadFiles};
use crate::read_postgres::{self, ReadPostgres, TableName};
use crate::read_query::{self, ReadQuery};
use crate::relations::{FilesCall, Relation, SourceCall, rewrite_relations};
use crate::snapshot::SnapshotSpec;
use crate::suggest;
use crate::types::{arrow_type, ddl_schema};
use lookup::Found;

/// The result of loading a pipeline folder: the pipeline (absent only when
/// `pipeline.yaml` itself is unusable) and every diagnostic found.
#[derive(Debug)]
pub struct Loaded {
    pub pipeline: Option<Pipeline>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Loaded {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

const CONFIG_FILE: &str = "pipeline.yaml";

/// Loads, resolves and plans the pipeline in `root`. `overrides` replace
/// `configuration` values of `pipeline.yaml`. Nothing is written.
pub fn load(root: &Path, overrides: &BTreeMap<String, String>) -> Loaded {
    load_with_columns(root, overrides, &BTreeMap::new())
}

/// As [`load`], with the columns of sources that only a server knows (found by the
/// run before planning), by [`ReadPostgres::key`].
pub fn load_with_columns(
    root: &Path,
    overrides: &BTreeMap<String, String>,
    columns: &BTreeMap<String, SchemaRef>,
) -> Loaded {
    load_discovered(
        root,
        overrides,
        &Discovered {
            columns: columns.clone(),
            ..Discovered::default()
        },
    )
}

/// What only the sources' servers know, asked before planning.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    /// The columns of sources that do not declare them, by [`ReadPostgres::key`].
    pub columns: BTreeMap<String, SchemaRef>,
    /// The tables each sync's server has in the schemas it names, by sync.
    pub tables: BTreeMap<String, Vec<crate::syncs::SourceTable>>,
    /// Tables a sync synced once that its server no longer has, by sync: their
    /// tables stay in the pipeline, readable, without flows.
    pub gone: BTreeMap<String, Vec<crate::syncs::SourceTable>>,
    /// Of the tables `gone` tables fed, those the storage holds, when the caller looked
    /// (a storage in a bucket, which the loader does not read); `None`: the loader looks
    /// in the storage folder.
    pub stored: Option<std::collections::BTreeSet<String>>,
    /// When set, every `read_files` call reads the folder `<landing>/<t>`, `t` the name
    /// that stands for the call in its flow's query ([`ReadFiles::table`]), instead of
    /// the landing folder it names: `cdcflow test` feeds a case's rows through them.
    pub landing: Option<std::path::PathBuf>,
    /// A storage used in place of pipeline.yaml's `storage` (`cdcflow test` runs each
    /// case in a storage of its own).
    pub storage: Option<String>,
}

/// As [`load`], with what the servers said ([`Discovered`]).
pub fn load_discovered(
    root: &Path,
    overrides: &BTreeMap<String, String>,
    discovered: &Discovered,
) -> Loaded {
    let columns = &discovered.columns;
    let mut diags = Vec::new();
    let config_path = root.join(CONFIG_FILE);
    let config_text: Arc<str> = match std::fs::read_to_string(&config_path) {
        Ok(t) => t.into(),
        Err(e) => {
            diags.push(
                Diagnostic::error(
                    "cdcflow::no_pipeline",
                    format!("cannot read {}: {e}", config_path.display()),
                )
                .help("a pipeline folder holds a pipeline.yaml with at least `name: <pipeline>`"),
            );
            return Loaded {
                pipeline: None,
                diagnostics: diags,
            };
        }
    };
    let config = match PipelineConfig::parse(&config_text) {
        Ok(c) => c,
        Err(e) => {
            let line = e.line.unwrap_or(1);
            let col = e.column.unwrap_or(1);
            // A `connections:` entry gets its own code and help.
            let connection = e.message.starts_with("connections");
            let (code, help) = match connection {
                false if e.message.starts_with("syncs") => (
                    "cdcflow::sync",
                    "a sync takes connection and tables (a name or pattern, or a list), and optionally exclude, scd_type (1, 2 or [1, 2]), bronze_table, target and history_target (name templates with {schema}, {table}, {sync}), max_changes_per_batch and overrides (per table: keys, exclude_columns, scd_type, bronze_table, target, history_target, track_history_on, track_history_except); docs/sources.md, \"Many tables, one declaration\"",
                ),
                true => (
                    "cdcflow::connection",
                    "a connection takes kind (postgres, mysql or mariadb), host, port, database, user and password_env (or dsn_env alone), and for TLS sslmode, sslrootcert, and sslcert with sslkey (each a PEM file, or sslcert_env/sslkey_env naming a variable that holds the PEM); secrets come from environment variables, never from the file (docs/sources.md)",
                ),
                false => (
                    "cdcflow::config",
                    "pipeline.yaml takes name, storage, libraries, configuration, catalog, schema, external_tables, connections, syncs, bad_records, trigger_interval_seconds, landing_settle_seconds and follow_symlinks_out_of_landing (docs/pipeline-format.md)",
                ),
            };
            // The snippet shown with the error must not show a secret it refuses.
            let shown = match e.message.contains(crate::connections::NOT_SHOWN) {
                true => Arc::from(crate::connections::masked(&config_text)),
                false => Arc::clone(&config_text),
            };
            let d = Diagnostic::error(code, format!("invalid pipeline.yaml: {}", e.message))
                .at(Located {
                    path: CONFIG_FILE.to_string(),
                    text: shown,
                    span: Span::new(Location::new(line, col), Location::new(line, col + 1)),
                    label: "here".into(),
                })
                .help(help);
            diags.push(d);
            return Loaded {
                pipeline: None,
                diagnostics: diags,
            };
        }
    };
    let mut config = config;
    if let Some(storage) = &discovered.storage {
        config.storage = storage.clone();
    }
    let mut conf = config.configuration_strings();
    conf.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));

    let mut r = Resolver {
        root,
        files: Vec::new(),
        datasets: Vec::new(),
        flows: Vec::new(),
        diags,
        planner: Planner::new(),
        pending_cdc: Vec::new(),
        file_schemas: HashMap::new(),
        unresolved: Vec::new(),
        by_name: HashMap::new(),
        broken: Default::default(),
        broken_references: 0,
        externals: Vec::new(),
        connections: config.connections.clone(),
        source_columns: columns.clone(),
        watermarks: HashMap::new(),
        snapshots: HashMap::new(),
        landing: discovered.landing.clone(),
    };
    let defaults = Namespace::new(config.catalog.clone(), config.schema.clone());
    r.externals = config
        .external_tables
        .iter()
        .map(|(name, config)| external::External {
            name: name.clone(),
            identity: defaults.identity(&name.split('.').collect::<Vec<_>>()),
            config: config.clone(),
        })
        .collect();
    r.check_storage_location(&config, &config_text);
    let used = r.read_libraries(&config, &config_text, &conf);
    let syncs = r.expand_syncs(&config, &config_text, discovered);
    r.check_overrides(&config, overrides, &used);
    r.collect(&defaults);
    let storage = root.join(&config.storage);
    r.check_moved_folders(&storage);
    r.check_targets();
    r.check_snapshot_targets();
    r.check_change_source_readers();
    let order = r.order_datasets();
    r.check_view_depth(&order);
    r.derive_schemas(&order);
    r.check_stateful_streams();
    r.check_layouts();
    r.check_generated_columns();
    r.check_declared_columns();
    r.check_expectations();
    r.check_table_properties();
    r.check_stored_shapes(&storage);
    // Landing-file schemas were inferred once here; the run reuses them.
    for flow in &mut r.flows {
        for input in &mut flow.inputs {
            if let Input::Files(rf) = input
                && let Some(Some(s)) = r.file_schemas.get(&rf.table)
            {
                rf.inferred_schema = Some(Arc::clone(s));
            }
        }
    }
    let flow_order = r.order_flows(&order);
    syncs::unknown_until_asked(&syncs, &mut r.diags);
    r.diags.sort_by_key(|d| {
        d.at.as_ref()
            .map(|a| (a.path.clone(), a.span.start.line, a.span.start.column))
    });
    Loaded {
        pipeline: Some(Pipeline {
            root: root.to_path_buf(),
            config,
            files: r.files,
            datasets: r.datasets,
            flows: r.flows,
            order: flow_order,
            syncs,
        }),
        diagnostics: r.diags,
    }
}

struct Resolver<'a> {
    root: &'a Path,
    files: Vec<SourceFile>,
    datasets: Vec<Dataset>,
    flows: Vec<Flow>,
    diags: Vec<Diagnostic>,
    planner: Planner,
    /// The AUTO CDC clauses of each CDC flow (by flow index), resolved once schemas are known.
    pending_cdc: Vec<(usize, AutoCdc)>,
    /// Schemas of `read_files` sources, by their table name.
    file_schemas: HashMap<String, Option<SchemaRef>>,
    /// Flows whose references did not resolve: planning them would only repeat the error.
    unresolved: Vec<usize>,
    /// Dataset indexes by lower-cased name (names ignore case).
    by_name: HashMap<String, usize>,
    /// Lower-cased names of datasets whose definition did not parse (reported there).
    broken: std::collections::HashSet<String>,
    /// References to such datasets met so far: the flows holding them are not planned.
    broken_references: usize,
    /// Tables from outside the pipeline (pipeline.yaml `external_tables:`).
    externals: Vec<external::External>,
    /// `connections:` of pipeline.yaml, by name.
    connections: BTreeMap<String, Connection>,
    /// Columns of sources found on their servers, by [`ReadPostgres::key`].
    source_columns: BTreeMap<String, SchemaRef>,
    /// The WATERMARK clauses of each file (`cdcflow_sql::watermark`), by file.
    watermarks: HashMap<FileId, Vec<cdcflow_sql::watermark::Watermark>>,
    /// The views of each AUTO CDC FROM SNAPSHOT flow, by lower-cased flow name.
    snapshots: HashMap<String, snapshot::SnapshotViews>,
    /// The folder whose subfolders are read instead of the landing folders the flows
    /// name ([`Discovered::landing`]).
    landing: Option<std::path::PathBuf>,
}

/// A flow as parsed, before its references are resolved.
struct PendingFlow {
    name: String,
    name_span: Span,
    target: DatasetName,
    once: bool,
    /// The dataset whose defining query this is, rather than a `CREATE FLOW`/`APPLY CHANGES`.
    implicit: Option<usize>,
    body: PendingBody,
    file: FileId,
    /// The default catalog and schema where the flow is written.
    namespace: Namespace,
}

/// What a pending flow computes.
enum PendingBody {
    Query { query: Box<Query>, append: bool },
    AutoCdc(Box<AutoCdc>),
}

pub(super) fn ident_list(idents: &[Ident]) -> Vec<&str> {
    idents.iter().map(|i| i.value.as_str()).collect()
}

impl Resolver<'_> {
    fn locate(&self, file: FileId, span: Span, label: impl Into<String>) -> Located {
        self.files[file].locate(span, label)
    }

    fn error(
        &mut self,
        file: FileId,
        span: Span,
        code: &'static str,
        message: String,
        label: &str,
        help: Option<String>,
    ) {
        let mut d = Diagnostic::error(code, message).at(self.locate(file, span, label));
        if let Some(h) = help {
            d = d.help(h);
        }
        self.diags.push(d);
    }

    /// The WATERMARK clauses written in `query` (taken out of its text by the parser).
    fn watermarks_of(&self, file: FileId, query: &Query) -> Vec<cdcflow_sql::watermark::Watermark> {
        let span = query.span();
        self.watermarks
            .get(&file)
            .into_iter()
            .flatten()
            .filter(|w| span.start <= w.span.start && w.span.start <= span.end)
            .cloned()
            .collect()
    }

    fn position(&self, file: FileId, span: Span) -> String {
        let l = self.locate(file, span, "");
        format!("{}:{}:{}", l.path, l.span.start.line, l.span.start.column)
    }

    // ---- collection ----------------------------------------------------------------

    fn collect(&mut self, defaults: &Namespace) {
        let mut pending: Vec<PendingFlow> = Vec::new();
        for file in 0..self.files.len() {
            let mut namespace = defaults.clone();
            let parsed = parse_statements(&self.files[file].pre.text);
            self.watermarks.insert(file, parsed.watermarks.clone());
            for u in self.files[file].pre.unknown.clone() {
                let located = Located {
                    path: self.files[file].path.clone(),
                    text: Arc::clone(&self.files[file].text),
                    span: u.span,
                    label: "unknown key".into(),
                };
                self.diags.push(
                    Diagnostic::error("cdcflow::unknown_configuration", format!("unknown configuration key `{}`", u.key))
                        .at(located)
                        .help("define it under `configuration:` in pipeline.yaml or pass --conf key=value"),
                );
            }
            self.broken
                .extend(parsed.broken.iter().map(|n| n.to_ascii_lowercase()));
            for e in parsed.errors {
                let mut d = Diagnostic::error("cdcflow::syntax", e.message.clone())
                    .at(self.locate(file, e.span, "here"));
                if let Some(h) = e.help {
                    d = d.help(h);
                }
                self.diags.push(d);
            }
            for stmt in parsed.statements {
                match stmt {
                    Statement::CreateDataset(def) => {
                        let index = self.datasets.len();
                        let implicit = def.query.clone().map(|query| PendingFlow {
                            name: String::new(), // the dataset's, once names are known
                            name_span: def.name.span,
                            target: def.name.clone(),
                            once: false,
                            implicit: Some(index),
                            body: PendingBody::Query {
                                query,
                                append: false,
                            },
                            file,
                            namespace: namespace.clone(),
                        });
                        // A rejected duplicate keeps no flow: it would feed the first definition.
                        if self.add_dataset(def, file, &namespace) {
                            pending.extend(implicit);
                        }
                    }
                    Statement::CreateFlow(f) => {
                        self.check_folder_name(file, f.name.span, &f.name.value, "flow");
                        let (target, once, body) = match f.body {
                            FlowBody::AutoCdc(a) => {
                                (a.target.clone(), a.once, PendingBody::AutoCdc(a))
                            }
                            FlowBody::InsertInto(i) => (
                                i.target.clone(),
                                i.once,
                                PendingBody::Query {
                                    query: i.query,
                                    append: true,
                                },
                            ),
                        };
                        pending.push(PendingFlow {
                            name: f.name.value.clone(),
                            name_span: f.name.span,
                            target,
                            once,
                            implicit: None,
                            body,
                            file,
                            namespace: namespace.clone(),
                        });
                    }
                    Statement::ApplyChanges(a) => {
                        pending.push(PendingFlow {
                            name: String::new(), // its target's, once names are known
                            name_span: a.target.span,
                            target: a.target.clone(),
                            once: false,
                            implicit: None,
                            body: PendingBody::AutoCdc(a),
                            file,
                            namespace: namespace.clone(),
                        });
                    }
                    Statement::Use(u) => {
                        let parts: Vec<&str> = ident_list(&u.name.parts);
                        match u.kind {
                            UseKind::Catalog => parts.iter().for_each(|c| namespace.use_catalog(c)),
                            UseKind::Schema => namespace.use_schema(&parts),
                        }
                    }
                    // `${key}` substitution already took SET's values (`preprocess`).
                    Statement::Set(_) => {}
                }
            }
        }
        self.assign_names();
        self.name_flows(&mut pending);
        for flow in pending {
            let (name, name_span, file) = (&flow.name, flow.name_span, flow.file);
            if let Some(first) = self
                .flows
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(name))
            {
                let at = self.position(first.file, first.span);
                self.error(
                    file,
                    name_span,
                    "cdcflow::duplicate_flow",
                    format!("flow `{name}` is defined twice"),
                    "second definition",
                    Some(format!(
                        "the first definition is at {at}; rename one of them"
                    )),
                );
                continue;
            }
            let flow = self.with_source_view(flow);
            self.add_flow(flow);
        }
    }

    /// Adds a dataset; false when the name is taken (reported).
    fn add_dataset(&mut self, def: CreateDataset, file: FileId, namespace: &Namespace) -> bool {
        let name = def.name.name().to_string();
        let identity = namespace.identity(&ident_list(&def.name.parts));
        if let Some(first) = self.datasets.iter().find(|d| d.identity.same(&identity)) {
            let at = self.position(first.file, first.def.name.span);
            self.error(
                file,
                def.name.span,
                "cdcflow::duplicate_dataset",
                format!("dataset `{identity}` is defined twice"),
                "second definition",
                Some(format!("`{identity}` is first defined at {at}; a dataset has one definition (add more inputs with CREATE FLOW … INSERT INTO)")),
            );
            return false;
        }
        self.check_qualifier(&def.name, file);
        // Its short name (`namespace::short_names`) may hold any of its parts.
        for part in &def.name.parts {
            if !part.value.eq_ignore_ascii_case("live") {
                self.check_folder_name(file, part.span, &part.value, "dataset");
            }
        }
        let properties = def
            .properties
            .iter()
            .map(|p| (p.key.clone(), p.value.clone()))
            .collect();
        let partition_columns = ident_list(&def.partitioned_by)
            .into_iter()
            .map(str::to_string)
            .collect();
        let cluster_columns = ident_list(&def.cluster_by)
            .into_iter()
            .map(str::to_string)
            .collect();
        self.datasets.push(Dataset {
            name,
            identity,
            kind: def.kind,
            def,
            file,
            schema: None,
            properties,
            partition_columns,
            cluster_columns,
            source_of: None,
        });
        true
    }

    fn check_qualifier(&mut self, name: &DatasetName, file: FileId) {
        if name.qualifier().len() > 2 {
            self.error(
                file,
                name.span,
                "cdcflow::invalid_name",
                format!("`{name}` has too many parts"),
                "name",
                Some("use name, schema.name or catalog.schema.name".into()),
            );
        }
    }

    /// Reports a dataset or flow name that cannot be the one folder its table or
    /// checkpoint is stored in (`names`).
    fn check_folder_name(&mut self, file: FileId, span: Span, name: &str, what: &str) {
        if let Some(problem) = crate::names::problem(name) {
            self.error(
                file,
                span,
                "cdcflow::invalid_name",
                format!("{what} name `{}` {problem}", name.escape_debug()),
                "not usable as a folder name",
                Some(format!("each {what} is stored in a folder named after it under the storage folder; use letters, digits and `_`")),
            );
        }
    }

    /// The flows that write the dataset `name`, by index.
    fn flows_into(&self, name: &str) -> Vec<usize> {
        (0..self.flows.len())
            .filter(|&f| self.flows[f].target.eq_ignore_ascii_case(name))
            .collect()
    }

    fn dataset_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(&name.to_ascii_lowercase()).copied()
    }

    fn unknown_dataset(&mut self, file: FileId, span: Span, parts: &[String]) {
        // Its definition's syntax error is the one to fix; this reference is fine.
        if parts
            .last()
            .is_some_and(|n| self.broken.contains(&n.to_ascii_lowercase()))
        {
            self.broken_references += 1;
            return;
        }
        let written = parts.join(".");
        let known: Vec<&str> = self
            .datasets
            .iter()
            .filter(|d| d.source_of.is_none())
            .map(|d| d.name.as_str())
            .collect();
        let near = parts
            .last()
            .and_then(|name| suggest::closest(name, known.iter().copied()));
        let same_name: Vec<String> = match parts.last() {
            Some(last) if parts.len() > 1 => self
                .datasets
                .iter()
                .filter(|d| d.source_of.is_none() && d.identity.name.eq_ignore_ascii_case(last))
                .map(|d| format!("`{}`", d.identity))
                .collect(),
            _ => vec![],
        };
        let help = if !same_name.is_empty() {
            format!(
                "`{written}` is not a dataset of this pipeline, which has {}; a table from outside is declared under `external_tables:` in pipeline.yaml",
                same_name.join(", ")
            )
        } else if let Some(near) = near {
            format!(
                "did you mean `{near}`? the pipeline defines: {}",
                known.join(", ")
            )
        } else if parts.len() > 1 && !parts[0].eq_ignore_ascii_case("live") {
            format!(
                "`{written}` names a table outside this pipeline; to read a local copy, declare it in pipeline.yaml:\nexternal_tables:\n  {written}:\n    format: delta   # or parquet, csv, json (these with schema: \"id BIGINT, …\")\n    path: copies/{}",
                parts.last().map_or("table", String::as_str)
            )
        } else if known.is_empty() {
            "declare it with CREATE STREAMING TABLE, CREATE MATERIALIZED VIEW or CREATE VIEW"
                .to_string()
        } else {
            format!("the pipeline defines: {}", known.join(", "))
        };
        self.error(
            file,
            span,
            "cdcflow::unknown_dataset",
            format!("unknown dataset `{written}`"),
            "not defined in this pipeline",
            Some(help),
        );
    }

    fn add_flow(&mut self, flow: PendingFlow) {
        let PendingFlow {
            name,
            name_span: span,
            target: target_name,
            once,
            implicit,
            body,
            file,
            namespace,
        } = flow;
        let mut target = target_name.name().to_string();
        if implicit.is_none() {
            let found = self.find_dataset(&ident_list(&target_name.parts), &namespace);
            if let Found::One(i) = found {
                target = self.datasets[i].name.clone();
            }
            match found.one() {
                None if matches!(found, Found::Many(_)) => {
                    self.ambiguous_dataset(
                        file,
                        target_name.span,
                        &target_name.to_string(),
                        &found,
                    );
                    return;
                }
                None => {
                    self.error(
                        file,
                        target_name.span,
                        "cdcflow::undeclared_target",
                        format!("flow `{name}` writes into `{target}`, which is not declared"),
                        "undeclared target",
                        Some(format!(
                            "declare it first: CREATE OR REFRESH STREAMING TABLE {target};"
                        )),
                    );
                    return;
                }
                Some(i) if self.datasets[i].kind != DatasetKind::StreamingTable => {
                    let kind = self.datasets[i].kind.noun();
                    self.error(
                        file,
                        target_name.span,
                        "cdcflow::target_not_streaming_table",
                        format!("flow `{name}` writes into `{target}`, a {kind}"),
                        "not a streaming table",
                        Some("flows write only into streaming tables; a materialized view or view is defined by its own query".into()),
                    );
                    return;
                }
                Some(_) => {}
            }
        }
        if let Some(d) = implicit {
            target = self.datasets[d].name.clone();
        }
        match body {
            PendingBody::Query { mut query, append } => {
                let (errors, broken) = (self.diags.len(), self.broken_references);
                let watermarks = self.watermarks_of(file, &query);
                let mut inputs = self.resolve_query(&mut query, file, &name, &namespace);
                self.file_metadata(&mut query, &mut inputs, file);
                if self.diags[errors..].iter().any(Diagnostic::is_error)
                    || self.broken_references > broken
                {
                    self.unresolved.push(self.flows.len());
                }
                self.flows.push(Flow {
                    name,
                    target,
                    kind: FlowKind::Query { query, append },
                    inputs,
                    once,
                    file,
                    span,
                    plan: None,
                    watermarks,
                });
            }
            PendingBody::AutoCdc(cdc) => {
                let CdcSource::Dataset(source) = &cdc.source else {
                    return; // `with_source_view` made it a view
                };
                let src = &source.name;
                // The view `with_source_view` made of this flow's FROM (query).
                let own_view = self
                    .dataset_index(src.name())
                    .filter(|&d| self.datasets[d].source_of.as_deref() == Some(name.as_str()));
                let found = match own_view {
                    Some(d) => Found::One(d),
                    None => self.find_dataset(&ident_list(&src.parts), &namespace),
                };
                let snapshot = self.snapshot_of(&name).map(|v| SnapshotSpec {
                    version_view: v.version_view.clone(),
                    ..SnapshotSpec::periodic()
                });
                let mut inputs = match found.one() {
                    Some(i) if src.qualifier().len() <= 2 => vec![Input::Dataset {
                        name: self.datasets[i].name.clone(),
                        streaming: source.streaming,
                    }],
                    _ if matches!(found, Found::Many(_)) => {
                        self.ambiguous_dataset(file, src.span, &src.to_string(), &found);
                        vec![]
                    }
                    _ => {
                        let parts: Vec<String> =
                            src.parts.iter().map(|p| p.value.clone()).collect();
                        self.unknown_dataset(file, src.span, &parts);
                        vec![]
                    }
                };
                // The spec is completed once the source schema is known.
                let spec = AutoCdcSpec {
                    flow: name.clone(),
                    target: target.clone(),
                    source: inputs
                        .first()
                        .map(|i| match i {
                            Input::Dataset { name, .. } => name.clone(),
                            Input::Files(f) => f.table.clone(),
                            Input::Delta(d) => d.table.clone(),
                            Input::Postgres(p) => p.table.clone(),
                            Input::Mysql(m) => m.table.clone(),
                            Input::Query(q) => q.table.clone(),
                            Input::Kafka(k) => k.table.clone(),
                        })
                        .unwrap_or_default(),
                    streaming: source.streaming,
                    once: cdc.once,
                    keys: ident_list(&cdc.keys.node)
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                    sequence: vec![],
                    delete_when: None,
                    truncate_when: None,
                    filter: None,
                    columns: vec![],
                    scd_type: cdc.scd_type().min(255) as u8,
                    track_history: vec![],
                    ignore_null_updates: vec![],
                    snapshot,
                };
                // A snapshot flow reads its version view too (graphs show it).
                if let Some(v) = spec.snapshot.as_ref().and_then(|s| s.version_view.clone()) {
                    inputs.push(Input::Dataset {
                        name: v,
                        streaming: false,
                    });
                }
                self.check_cdc_clauses(&cdc, file);
                self.pending_cdc.push((self.flows.len(), *cdc));
                self.flows.push(Flow {
                    name,
                    target,
                    kind: FlowKind::AutoCdc(Arc::new(spec)),
                    inputs,
                    once,
                    file,
                    span,
                    plan: None,
                    watermarks: Vec::new(),
                });
            }
        }
    }
}

mod cdc;
mod declared;
mod expectations;
mod external;
mod file_metadata;
mod generated_columns;
mod graph;
mod kafka;
mod layout;
mod library;
mod lookup;
mod plan_errors;
mod references;
mod schemas;
mod snapshot;
mod source_query;
mod stored_shape;
mod streams;
pub mod syncs;
mod table_properties;
mod view_depth;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_duplicate_dataset_contributes_no_flow() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("pipeline.yaml"), "name: p\n").expect("write");
        std::fs::write(
            dir.path().join("a.sql"),
            "CREATE OR REFRESH STREAMING TABLE t;\nCREATE FLOW f AS INSERT INTO t BY NAME SELECT 1 AS x;\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("b.sql"),
            "CREATE MATERIALIZED VIEW T AS SELECT 2 AS x;\n",
        )
        .expect("write");
        let loaded = load(dir.path(), &BTreeMap::new());
        let codes: Vec<&str> = loaded.diagnostics.iter().map(|d| d.code).collect();
        assert_eq!(codes, ["cdcflow::duplicate_dataset"]);
        let pipeline = loaded.pipeline.expect("pipeline");
        let flows: Vec<&str> = pipeline.flows.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(flows, ["f"], "the second `T` must not feed `t`");
    }
}
