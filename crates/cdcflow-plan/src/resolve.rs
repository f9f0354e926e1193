//! Second stage of the data path: a pipeline folder becomes a [`Pipeline`] — files read
//! and parsed, datasets and flows collected, references resolved, the dataset graph
//! checked for cycles, schemas derived in dependency order and every flow planned.
//! Every problem becomes a [`Diagnostic`]; resolution goes on after an error so that
//! one run reports them all.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use cdcflow_sql::ast::{
    AutoCdc, ColumnSelection, CreateDataset, DatasetKind, DatasetName, FlowBody, Spanned, Statement,
};
use cdcflow_sql::preprocess::{Preprocessed, substitute};
use cdcflow_sql::sqlparser::ast::{Expr as SqlExpr, Ident, Query, Spanned as _};
use cdcflow_sql::{Location, Span, parse_statements};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ExprSchemable, Extension, LogicalPlan, LogicalPlanBuilder};

use crate::autocdc::{AutoCdcNode, AutoCdcSpec, END_AT, RESERVED_PREFIX, START_AT, SequenceField};
use crate::config::PipelineConfig;
use crate::diagnostic::{Diagnostic, Located};
use crate::pipeline::{Dataset, FileId, Flow, FlowKind, Input, Pipeline, SourceFile};
use crate::planner::Planner;
use crate::read_files::{FileFormat, ReadFiles};
use crate::relations::{FilesCall, Relation, rewrite_relations};
use crate::types::{arrow_type, ddl_schema};

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
            let d = Diagnostic::error(
                "cdcflow::config",
                format!("invalid pipeline.yaml: {}", e.message),
            )
            .at(Located {
                path: CONFIG_FILE.to_string(),
                text: Arc::clone(&config_text),
                span: Span::new(Location::new(line, col), Location::new(line, col + 1)),
                label: "here".into(),
            })
            .help("pipeline.yaml takes name, storage, libraries and configuration");
            diags.push(d);
            return Loaded {
                pipeline: None,
                diagnostics: diags,
            };
        }
    };
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
    };
    r.read_libraries(&config, &config_text, &conf);
    r.collect();
    r.check_targets();
    let order = r.order_datasets();
    r.derive_schemas(&order);
    let flow_order = r.order_flows(&order);
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
}

/// A statement's flow before resolution.
enum PendingBody {
    Query { query: Box<Query>, append: bool },
    AutoCdc(Box<AutoCdc>),
}

fn ident_list(idents: &[Ident]) -> Vec<&str> {
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

    fn position(&self, file: FileId, span: Span) -> String {
        let l = self.locate(file, span, "");
        format!("{}:{}:{}", l.path, l.span.start.line, l.span.start.column)
    }

    // ---- files -------------------------------------------------------------------

    fn read_libraries(
        &mut self,
        config: &PipelineConfig,
        config_text: &Arc<str>,
        conf: &BTreeMap<String, String>,
    ) {
        let storage = self.root.join(&config.storage);
        let mut paths = Vec::new();
        for pattern in &config.libraries {
            let full = self.root.join(pattern);
            let found: Vec<_> = match glob::glob(&full.to_string_lossy()) {
                Ok(g) => g.filter_map(Result::ok).filter(|p| p.is_file()).collect(),
                Err(e) => {
                    self.config_error(
                        config_text,
                        pattern,
                        format!("invalid library glob `{pattern}`: {e}"),
                    );
                    continue;
                }
            };
            let found: Vec<_> = found
                .into_iter()
                .filter(|p| !p.starts_with(&storage))
                .collect();
            if found.is_empty() {
                self.config_error(
                    config_text,
                    pattern,
                    format!("library `{pattern}` matches no file"),
                );
            }
            paths.extend(found);
        }
        paths.sort();
        paths.dedup();
        for path in paths {
            let rel = path
                .strip_prefix(self.root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    self.diags.push(Diagnostic::error(
                        "cdcflow::io",
                        format!("cannot read {rel}: {e}"),
                    ));
                    continue;
                }
            };
            let pre = if text.contains("${") {
                substitute(&text, |k| conf.get(k).cloned())
            } else {
                Preprocessed::verbatim(&text)
            };
            self.files.push(SourceFile {
                path: rel,
                text: text.into(),
                pre,
            });
        }
        if self.files.is_empty() && !config.libraries.is_empty() {
            self.diags.push(Diagnostic::warning(
                "cdcflow::empty_pipeline",
                "the pipeline has no SQL files",
            ));
        }
    }

    fn config_error(&mut self, text: &Arc<str>, needle: &str, message: String) {
        let mut d = Diagnostic::error("cdcflow::config", message);
        if let Some((line_idx, line)) = text.lines().enumerate().find(|(_, l)| l.contains(needle)) {
            let col = line[..line.find(needle).unwrap_or(0)].chars().count() as u64 + 1;
            let line_no = line_idx as u64 + 1;
            d = d.at(Located {
                path: CONFIG_FILE.into(),
                text: Arc::clone(text),
                span: Span::new(
                    Location::new(line_no, col),
                    Location::new(line_no, col + needle.chars().count() as u64),
                ),
                label: "this glob".into(),
            });
        }
        self.diags.push(d);
    }

    // ---- collection ----------------------------------------------------------------

    fn collect(&mut self) {
        let mut pending: Vec<(String, Span, String, DatasetName, bool, PendingBody, FileId)> =
            Vec::new();
        for file in 0..self.files.len() {
            let parsed = parse_statements(&self.files[file].pre.text);
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
                        if let Some(q) = &def.query {
                            pending.push((
                                def.name.name().to_string(),
                                def.name.span,
                                def.name.name().to_string(),
                                def.name.clone(),
                                false,
                                PendingBody::Query {
                                    query: q.clone(),
                                    append: false,
                                },
                                file,
                            ));
                        }
                        self.add_dataset(def, file);
                    }
                    Statement::CreateFlow(f) => {
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
                        pending.push((
                            f.name.value.clone(),
                            f.name.span,
                            target.name().to_string(),
                            target,
                            once,
                            body,
                            file,
                        ));
                    }
                    Statement::ApplyChanges(a) => {
                        let base = a.target.name().to_string();
                        let mut name = base.clone();
                        let mut n = 1;
                        while pending.iter().any(|p| p.0.eq_ignore_ascii_case(&name)) {
                            n += 1;
                            name = format!("{base}_{n}");
                        }
                        pending.push((
                            name,
                            a.target.span,
                            base,
                            a.target.clone(),
                            false,
                            PendingBody::AutoCdc(a),
                            file,
                        ));
                    }
                }
            }
        }
        for (name, name_span, target, target_name, once, body, file) in pending {
            if let Some(first) = self
                .flows
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(&name))
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
            self.add_flow(name, name_span, target, &target_name, once, body, file);
        }
    }

    fn add_dataset(&mut self, def: CreateDataset, file: FileId) {
        let name = def.name.name().to_string();
        if let Some(first) = self
            .datasets
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(&name))
        {
            let at = self.position(first.file, first.def.name.span);
            self.error(
                file,
                def.name.span,
                "cdcflow::duplicate_dataset",
                format!("dataset `{name}` is defined twice"),
                "second definition",
                Some(format!("`{name}` is first defined at {at}; a dataset has one definition (add more inputs with CREATE FLOW … INSERT INTO)")),
            );
            return;
        }
        self.check_qualifier(&def.name, file);
        let properties = def
            .properties
            .iter()
            .map(|p| (p.key.clone(), p.value.clone()))
            .collect();
        self.datasets.push(Dataset {
            name,
            kind: def.kind,
            def,
            file,
            schema: None,
            properties,
        });
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

    fn dataset_index(&self, name: &str) -> Option<usize> {
        self.datasets
            .iter()
            .position(|d| d.name.eq_ignore_ascii_case(name))
    }

    fn unknown_dataset(&mut self, file: FileId, span: Span, parts: &[String]) {
        let written = parts.join(".");
        let known: Vec<&str> = self.datasets.iter().map(|d| d.name.as_str()).collect();
        let help = if parts.len() > 1 && !parts[0].eq_ignore_ascii_case("live") {
            format!(
                "`{written}` names a table outside this pipeline; cdcflow reads only the pipeline's own datasets and files (read_files)"
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

    #[allow(clippy::too_many_arguments)]
    fn add_flow(
        &mut self,
        name: String,
        span: Span,
        target: String,
        target_name: &DatasetName,
        once: bool,
        body: PendingBody,
        file: FileId,
    ) {
        let explicit = !self
            .datasets
            .iter()
            .any(|d| d.file == file && d.def.name.span == target_name.span);
        if explicit {
            match self.dataset_index(&target) {
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
        let target = self
            .dataset_index(&target)
            .map_or(target, |i| self.datasets[i].name.clone());
        match body {
            PendingBody::Query { mut query, append } => {
                let errors = self.diags.len();
                let inputs = self.resolve_query(&mut query, file, &name);
                if self.diags[errors..].iter().any(Diagnostic::is_error) {
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
                });
            }
            PendingBody::AutoCdc(cdc) => {
                let src = &cdc.source.name;
                let inputs = match self.dataset_index(src.name()) {
                    Some(i) if src.qualifier().len() <= 2 => vec![Input::Dataset {
                        name: self.datasets[i].name.clone(),
                        streaming: cdc.source.streaming,
                    }],
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
                        })
                        .unwrap_or_default(),
                    streaming: cdc.source.streaming,
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
                };
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
                });
            }
        }
    }
}

impl Resolver<'_> {
    // ---- query relations -----------------------------------------------------------

    fn resolve_query(&mut self, query: &mut Query, file: FileId, flow: &str) -> Vec<Input> {
        let mut found = Vec::new();
        let mut counter = 0usize;
        let names: Vec<String> = self.datasets.iter().map(|d| d.name.clone()).collect();
        rewrite_relations(query, &mut |rel| match &rel {
            Relation::Dataset { parts, .. } => {
                let last = parts.last().cloned().unwrap_or_default();
                let known = names
                    .iter()
                    .find(|n| n.eq_ignore_ascii_case(&last))
                    .cloned();
                let qualifier_ok = parts.len() <= 3
                    && (parts.len() == 1
                        || parts[0].eq_ignore_ascii_case("live")
                        || known.is_some());
                let name = if qualifier_ok { known } else { None };
                found.push((rel, name.clone()));
                name
            }
            Relation::Files(_) => {
                counter += 1;
                let table = format!("__files_{flow}_{counter}");
                found.push((rel, Some(table.clone())));
                Some(table)
            }
        });
        let mut inputs = Vec::new();
        for (rel, name) in found {
            match (rel, name) {
                (Relation::Dataset { streaming, .. }, Some(name)) => {
                    inputs.push(Input::Dataset { name, streaming })
                }
                (Relation::Dataset { parts, span, .. }, None) => {
                    self.unknown_dataset(file, span, &parts)
                }
                (Relation::Files(call), Some(table)) => {
                    if let Some(rf) = self.read_files(&call, table, file) {
                        inputs.push(Input::Files(rf));
                    }
                }
                (Relation::Files(_), None) => {}
            }
        }
        inputs
    }

    fn read_files(&mut self, call: &FilesCall, table: String, file: FileId) -> Option<ReadFiles> {
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
        let path = self.root.join(&path_text);
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
                    self.error(file, span, "cdcflow::read_files", format!("unsupported format `{f}`"), "format", Some("cdcflow reads format => 'json' (newline-delimited), 'csv' and 'parquet'".into()));
                    return None;
                }
            },
            None => match ReadFiles::detect_format(&path) {
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
        Some(ReadFiles {
            table,
            path_text,
            path,
            format,
            declared_schema,
            options,
            streaming: call.streaming,
            span: call.span,
        })
    }

    // ---- rules that need no schema -------------------------------------------------

    fn check_cdc_clauses(&mut self, cdc: &AutoCdc, file: FileId) {
        let scd = cdc.scd_type();
        if let Some(s) = &cdc.stored_as
            && !(s.node == 1 || s.node == 2)
        {
            self.error(
                file,
                s.span,
                "cdcflow::scd_type",
                format!("SCD type {} does not exist", s.node),
                "unsupported SCD type",
                Some("use STORED AS SCD TYPE 1 (current state) or SCD TYPE 2 (history)".into()),
            );
        }
        if scd == 2
            && let Some(t) = &cdc.apply_as_truncate
        {
            self.error(
                file,
                t.span,
                "cdcflow::truncate_scd2",
                "APPLY AS TRUNCATE is not supported with SCD TYPE 2".into(),
                "TRUNCATE with SCD TYPE 2",
                Some("a truncate would erase history; it is only allowed for SCD TYPE 1".into()),
            );
        }
        if scd == 1
            && let Some(t) = &cdc.track_history
        {
            self.error(
                file,
                t.span,
                "cdcflow::track_history_scd1",
                "TRACK HISTORY needs STORED AS SCD TYPE 2".into(),
                "TRACK HISTORY with SCD TYPE 1",
                Some(
                    "SCD TYPE 1 keeps no history; add STORED AS SCD TYPE 2 or remove TRACK HISTORY"
                        .into(),
                ),
            );
        }
    }

    /// Checks rules about which flows may write into a dataset.
    fn check_targets(&mut self) {
        for d in 0..self.datasets.len() {
            let name = self.datasets[d].name.clone();
            let flows: Vec<usize> = (0..self.flows.len())
                .filter(|&f| self.flows[f].target.eq_ignore_ascii_case(&name))
                .collect();
            let cdc: Vec<usize> = flows
                .iter()
                .copied()
                .filter(|&f| self.flows[f].auto_cdc().is_some())
                .collect();
            if cdc.is_empty() {
                continue;
            }
            let first_cdc = self.position(self.flows[cdc[0]].file, self.flows[cdc[0]].span);
            for &f in flows.iter().filter(|f| !cdc.contains(f)) {
                let (file, span, fname) = (
                    self.flows[f].file,
                    self.flows[f].span,
                    self.flows[f].name.clone(),
                );
                self.error(file, span, "cdcflow::mixed_target", format!("flow `{fname}` appends into `{name}`, which is an AUTO CDC target"), "non-CDC flow", Some(format!("`{name}` is maintained by AUTO CDC (flow at {first_cdc}); its rows are keyed, so write changes through another AUTO CDC flow or into another table")));
            }
        }
    }

    // ---- graph ---------------------------------------------------------------------

    /// Datasets in dependency order; reports cycles (their datasets are left out).
    fn order_datasets(&mut self) -> Vec<usize> {
        let n = self.datasets.len();
        let mut deps: Vec<Vec<usize>> = vec![vec![]; n];
        for f in &self.flows {
            let Some(t) = self.dataset_index(&f.target) else {
                continue;
            };
            for i in &f.inputs {
                if let Input::Dataset { name, .. } = i
                    && let Some(s) = self.dataset_index(name)
                {
                    deps[t].push(s);
                }
            }
        }
        // Iterative DFS with colours, to find a cycle path to report.
        let mut state = vec![0u8; n]; // 0 new, 1 on stack, 2 done
        let mut order = Vec::new();
        let mut in_cycle = vec![false; n];
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                if *next < deps[node].len() {
                    let dep = deps[node][*next];
                    *next += 1;
                    match state[dep] {
                        0 => {
                            state[dep] = 1;
                            stack.push((dep, 0));
                        }
                        1 => {
                            let pos = stack.iter().position(|(x, _)| *x == dep).unwrap_or(0);
                            let cycle: Vec<usize> = stack[pos..].iter().map(|(x, _)| *x).collect();
                            if cycle.iter().any(|&c| in_cycle[c]) {
                                continue;
                            }
                            for &c in &cycle {
                                in_cycle[c] = true;
                            }
                            self.report_cycle(&cycle);
                        }
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    order.push(node);
                    stack.pop();
                }
            }
        }
        order.retain(|&d| !in_cycle[d]);
        order
    }

    fn report_cycle(&mut self, cycle: &[usize]) {
        let mut names: Vec<String> = cycle
            .iter()
            .map(|&d| self.datasets[d].name.clone())
            .collect();
        names.push(names[0].clone());
        let last = *cycle.last().unwrap_or(&cycle[0]);
        let reader = self.datasets[last].name.clone();
        let first = self.datasets[cycle[0]].name.clone();
        // Point at the flow of `reader` that reads `first`… which closes the cycle.
        let flow = self
            .flows
            .iter()
            .find(|f| f.target.eq_ignore_ascii_case(&first) && f.inputs.iter().any(|i| matches!(i, Input::Dataset { name, .. } if name.eq_ignore_ascii_case(&reader))));
        let (file, span) = flow.map_or(
            (
                self.datasets[cycle[0]].file,
                self.datasets[cycle[0]].def.name.span,
            ),
            |f| (f.file, f.span),
        );
        names.reverse();
        self.error(
            file,
            span,
            "cdcflow::cycle",
            format!(
                "datasets depend on each other in a cycle: {}",
                names.join(" → ")
            ),
            "closes the cycle",
            Some("a dataset cannot read itself, directly or through other datasets".into()),
        );
    }

    fn order_flows(&self, datasets: &[usize]) -> Vec<usize> {
        let mut order = Vec::new();
        for &d in datasets {
            let name = &self.datasets[d].name;
            order.extend(
                (0..self.flows.len()).filter(|&f| self.flows[f].target.eq_ignore_ascii_case(name)),
            );
        }
        order
    }

    // ---- schemas and plans ---------------------------------------------------------

    fn derive_schemas(&mut self, order: &[usize]) {
        for &d in order {
            let declared = self.declared_schema(d);
            let name = self.datasets[d].name.clone();
            let flows: Vec<usize> = (0..self.flows.len())
                .filter(|&f| self.flows[f].target.eq_ignore_ascii_case(&name))
                .collect();
            let mut derived = None;
            for f in flows {
                if let Some(schema) = self.plan_flow(f)
                    && derived.is_none()
                {
                    derived = Some(schema);
                }
            }
            let schema = declared.or(derived);
            if let Some(s) = &schema {
                self.planner.register_schema(&name, Arc::clone(s));
            }
            self.datasets[d].schema = schema;
        }
    }

    fn declared_schema(&mut self, d: usize) -> Option<SchemaRef> {
        let def = &self.datasets[d].def;
        if def.columns.is_empty() {
            return None;
        }
        let file = self.datasets[d].file;
        let mut fields = Vec::new();
        let mut errors = Vec::new();
        for c in &def.columns {
            match arrow_type(&c.data_type) {
                Ok(t) => fields.push(Field::new(&c.name.value, t, !c.not_null)),
                Err(e) => errors.push((c.span, e)),
            }
        }
        for (span, e) in errors {
            self.error(file, span, "cdcflow::type", e, "type", Some("supported: STRING, BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, BOOLEAN, DATE, TIMESTAMP, TIMESTAMP_NTZ, DECIMAL(p,s), BINARY, ARRAY<…>, STRUCT<…>, MAP<…>".into()));
        }
        Some(Arc::new(Schema::new(fields)))
    }

    fn input_schema(&mut self, input: &Input) -> Result<SchemaRef, String> {
        match input {
            Input::Dataset { name, .. } => {
                let d = self.dataset_index(name).ok_or_else(|| name.clone())?;
                self.datasets[d]
                    .schema
                    .clone()
                    .ok_or_else(|| format!("the schema of `{name}` is not known"))
            }
            Input::Files(rf) => {
                if let Some(s) = self.file_schemas.get(&rf.table) {
                    return s
                        .clone()
                        .ok_or_else(|| format!("no schema for {}", rf.path_text));
                }
                let s = match rf.schema() {
                    Ok(s) => s,
                    Err(e) => {
                        return Err(format!("cannot infer the schema of {}: {e}", rf.path_text));
                    }
                };
                self.file_schemas.insert(rf.table.clone(), s.clone());
                if let Some(s) = &s {
                    self.planner.register_schema(&rf.table, Arc::clone(s));
                }
                s.ok_or_else(|| {
                    format!(
                        "`{}` has no schema => and no landing files yet",
                        rf.path_text
                    )
                })
            }
        }
    }

    /// Plans flow `f`; returns its output schema when every input schema is known.
    fn plan_flow(&mut self, f: usize) -> Option<SchemaRef> {
        if self.unresolved.contains(&f) {
            return None;
        }
        let inputs = self.flows[f].inputs.clone();
        for i in &inputs {
            if let Err(why) = self.input_schema(i) {
                let (file, span, name) = (
                    self.flows[f].file,
                    self.flows[f].span,
                    self.flows[f].name.clone(),
                );
                let d = Diagnostic::note("cdcflow::schema_unknown", format!("flow `{name}` was not planned: {why}"))
                    .at(self.locate(file, span, "not planned"))
                    .help("checks that need column names are skipped; declare a schema (schema => '…' or a column list) to have them");
                self.diags.push(d);
                return None;
            }
        }
        let plan = match &self.flows[f].kind {
            FlowKind::Query { query, .. } => {
                let query = query.clone();
                match self.planner.plan_query(&query) {
                    Ok(p) => p,
                    Err(e) => {
                        let file = self.flows[f].file;
                        self.datafusion_error(file, &e, query.span());
                        return None;
                    }
                }
            }
            FlowKind::AutoCdc(_) => self.plan_cdc(f)?,
        };
        let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
        self.flows[f].plan = Some(plan);
        Some(schema)
    }

    fn datafusion_error(&mut self, file: FileId, err: &DataFusionError, fallback: Span) {
        let (message, span) = match err.diagnostic() {
            Some(d) => (
                d.message.clone(),
                d.span.map(|s| {
                    Span::new(
                        Location::new(s.start.line, s.start.column),
                        Location::new(s.end.line, s.end.column),
                    )
                }),
            ),
            None => (err.strip_backtrace(), None),
        };
        let message = message
            .trim_start_matches("Error during planning: ")
            .trim_start_matches("Schema error: ")
            .to_string();
        let span = span.filter(|s| *s != Span::empty()).unwrap_or(fallback);
        self.error(file, span, "cdcflow::plan", message, "here", None);
    }

    fn column_error(&mut self, file: FileId, ident: &Ident, clause: &str, available: &[String]) {
        self.error(
            file,
            ident.span,
            "cdcflow::unknown_column",
            format!("unknown column `{}` in {clause}", ident.value),
            "not a column of the source",
            Some(format!("the source has: {}", available.join(", "))),
        );
    }

    /// Resolves `idents` against `available` (ignoring case); reports the unknown ones.
    fn resolve_columns(
        &mut self,
        file: FileId,
        idents: &[Ident],
        clause: &str,
        available: &[String],
    ) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut ok = true;
        for i in idents {
            match available.iter().find(|a| a.eq_ignore_ascii_case(&i.value)) {
                Some(a) => out.push(a.clone()),
                None => {
                    self.column_error(file, i, clause, available);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    fn selection(
        &mut self,
        file: FileId,
        sel: &ColumnSelection,
        clause: &str,
        available: &[String],
    ) -> Option<Vec<String>> {
        self.resolve_columns(file, sel.named(), clause, available)?;
        Some(
            sel.select(available.iter().map(String::as_str))
                .into_iter()
                .map(str::to_string)
                .collect(),
        )
    }

    fn plan_condition(
        &mut self,
        file: FileId,
        e: &Spanned<SqlExpr>,
        clause: &str,
        schema: &DFSchema,
        available: &[String],
    ) -> Option<datafusion::logical_expr::Expr> {
        if !self.check_identifiers(file, &e.node, clause, available) {
            return None;
        }
        let expr = match self.planner.plan_expr(&e.node, schema) {
            Ok(x) => x,
            Err(err) => {
                self.datafusion_error(file, &err, e.node.span());
                return None;
            }
        };
        match expr.get_type(schema) {
            Ok(DataType::Boolean) | Ok(DataType::Null) => Some(expr),
            Ok(t) => {
                let span = e.node.span();
                self.error(
                    file,
                    if span == Span::empty() { e.span } else { span },
                    "cdcflow::not_boolean",
                    format!("the {clause} condition is {t}, not BOOLEAN"),
                    "not a boolean",
                    Some("write a condition, e.g. operation = 'DELETE'".into()),
                );
                None
            }
            Err(err) => {
                self.datafusion_error(file, &err, e.span);
                None
            }
        }
    }

    /// Reports plain column names in `expr` that the source lacks.
    fn check_identifiers(
        &mut self,
        file: FileId,
        expr: &SqlExpr,
        clause: &str,
        available: &[String],
    ) -> bool {
        let mut unknown = Vec::new();
        let _ = cdcflow_sql::sqlparser::ast::visit_expressions(expr, |e| {
            if let SqlExpr::Identifier(i) = e
                && i.quote_style.is_some_and(|q| q == '`') | i.quote_style.is_none()
                && !available.iter().any(|a| a.eq_ignore_ascii_case(&i.value))
                && !matches!(i.value.to_ascii_lowercase().as_str(), "true" | "false")
            {
                unknown.push(i.clone());
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        for i in &unknown {
            self.column_error(file, i, clause, available);
        }
        unknown.is_empty()
    }

    fn sequence_fields(
        &mut self,
        file: FileId,
        seq: &Spanned<SqlExpr>,
        schema: &DFSchema,
        available: &[String],
    ) -> Option<Vec<SequenceField>> {
        if !self.check_identifiers(file, &seq.node, "SEQUENCE BY", available) {
            return None;
        }
        let items: Vec<SqlExpr> = match &seq.node {
            SqlExpr::Tuple(items) => items.clone(),
            SqlExpr::Struct { values, .. } => values.clone(),
            SqlExpr::Function(f)
                if f.name.to_string().eq_ignore_ascii_case("struct")
                    || f.name.to_string().eq_ignore_ascii_case("named_struct") =>
            {
                match &f.args {
                    cdcflow_sql::sqlparser::ast::FunctionArguments::List(l) => l
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            cdcflow_sql::sqlparser::ast::FunctionArg::Unnamed(
                                cdcflow_sql::sqlparser::ast::FunctionArgExpr::Expr(e),
                            ) => Some(e.clone()),
                            _ => None,
                        })
                        .collect(),
                    _ => vec![seq.node.clone()],
                }
            }
            SqlExpr::Nested(inner) => vec![(**inner).clone()],
            other => vec![other.clone()],
        };
        let mut fields = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let (item, alias) = match item {
                SqlExpr::Named { expr, name } => ((**expr).clone(), Some(name.value.clone())),
                other => (other.clone(), None),
            };
            let expr = match self.planner.plan_expr(&item, schema) {
                Ok(e) => e,
                Err(err) => {
                    self.datafusion_error(file, &err, item.span());
                    return None;
                }
            };
            let data_type = match expr.get_type(schema) {
                Ok(t) => t,
                Err(err) => {
                    self.datafusion_error(file, &err, item.span());
                    return None;
                }
            };
            if !orderable(&data_type) {
                self.error(
                    file,
                    item.span(),
                    "cdcflow::sequence_type",
                    format!("SEQUENCE BY values of type {data_type} cannot be ordered"),
                    "not orderable",
                    Some(
                        "sequence by a number, timestamp, date, string or a STRUCT of those".into(),
                    ),
                );
                return None;
            }
            let name = alias.unwrap_or_else(|| match &item {
                SqlExpr::Identifier(id) => available
                    .iter()
                    .find(|a| a.eq_ignore_ascii_case(&id.value))
                    .cloned()
                    .unwrap_or(id.value.clone()),
                _ => format!("seq{i}"),
            });
            fields.push(SequenceField {
                name,
                expr,
                data_type,
            });
        }
        Some(fields)
    }

    fn plan_cdc(&mut self, f: usize) -> Option<LogicalPlan> {
        let cdc = self
            .pending_cdc
            .iter()
            .find(|(i, _)| *i == f)
            .map(|(_, c)| c.clone())?;
        let FlowKind::AutoCdc(spec) = &self.flows[f].kind else {
            return None;
        };
        let mut spec = (**spec).clone();
        let file = self.flows[f].file;
        let source_input = self.flows[f].inputs.first()?.clone();
        let source_schema = self.input_schema(&source_input).ok()?;
        let available: Vec<String> = source_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let df_schema =
            DFSchema::try_from_qualified_schema(spec.source.as_str(), &source_schema).ok()?;
        let errors_before = self.diags.iter().filter(|d| d.is_error()).count();

        for field in source_schema.fields() {
            if field.name().starts_with(RESERVED_PREFIX) {
                self.error(
                    file,
                    cdc.source.name.span,
                    "cdcflow::reserved_column",
                    format!(
                        "the source has column `{}`; the prefix {RESERVED_PREFIX} is reserved",
                        field.name()
                    ),
                    "source",
                    Some("rename the column in a view".into()),
                );
            }
        }
        let keys = self.resolve_columns(file, &cdc.keys.node, "KEYS", &available);
        let columns = match &cdc.columns {
            Some(c) => self.selection(file, &c.node, "COLUMNS", &available),
            None => Some(available.clone()),
        };
        if let (Some(keys), Some(columns)) = (&keys, &columns) {
            for (k, ident) in keys.iter().zip(&cdc.keys.node) {
                if !columns.contains(k) {
                    self.error(
                        file,
                        ident.span,
                        "cdcflow::key_not_selected",
                        format!("key `{k}` is not among the COLUMNS written to the target"),
                        "key",
                        Some("the target is keyed by KEYS; keep the key columns in COLUMNS".into()),
                    );
                }
            }
            let reserved: Vec<&String> = columns
                .iter()
                .filter(|c| c.eq_ignore_ascii_case(START_AT) || c.eq_ignore_ascii_case(END_AT))
                .collect();
            if !reserved.is_empty() {
                let names: Vec<&str> = reserved.iter().map(|s| s.as_str()).collect();
                self.error(file, cdc.source.name.span, "cdcflow::reserved_column", format!("the source carries the reserved column(s) {}", names.join(", ")), "source", Some("__START_AT and __END_AT are written by SCD TYPE 2; exclude them with COLUMNS * EXCEPT (__START_AT, __END_AT) or rename them in a view".into()));
            }
        }
        let sequence = self.sequence_fields(file, &cdc.sequence_by, &df_schema, &available);
        let delete_when = cdc.apply_as_delete.as_ref().and_then(|e| {
            self.plan_condition(file, e, "APPLY AS DELETE WHEN", &df_schema, &available)
        });
        let truncate_when = cdc.apply_as_truncate.as_ref().and_then(|e| {
            self.plan_condition(file, e, "APPLY AS TRUNCATE WHEN", &df_schema, &available)
        });
        let filter = cdc
            .filter
            .as_ref()
            .and_then(|e| self.plan_condition(file, e, "WHERE", &df_schema, &available));
        let out_columns = columns.clone().unwrap_or_default();
        let track_history = match &cdc.track_history {
            Some(t) => self
                .selection(file, &t.node, "TRACK HISTORY", &available)
                .map(|c| c.into_iter().filter(|c| out_columns.contains(c)).collect()),
            None => Some(out_columns.clone()),
        };
        let ignore_null_updates = match &cdc.ignore_null_updates {
            Some(Spanned {
                node: Some(sel), ..
            }) => self.selection(file, sel, "IGNORE NULL UPDATES", &available),
            Some(Spanned { node: None, .. }) => Some(out_columns.clone()),
            None => Some(vec![]),
        };
        if self.diags.iter().filter(|d| d.is_error()).count() > errors_before {
            return None;
        }
        let keys = keys?;
        spec.track_history = track_history?
            .into_iter()
            .filter(|c| !keys.contains(c))
            .collect();
        spec.ignore_null_updates = ignore_null_updates?
            .into_iter()
            .filter(|c| !keys.contains(c))
            .collect();
        spec.keys = keys;
        spec.columns = out_columns;
        spec.sequence = sequence?;
        spec.delete_when = delete_when;
        spec.truncate_when = truncate_when;
        spec.filter = filter;
        let spec = Arc::new(spec);
        self.flows[f].kind = FlowKind::AutoCdc(Arc::clone(&spec));

        let scan = self.source_scan(&spec.source, &source_schema)?;
        let input = match &spec.filter {
            Some(w) => LogicalPlanBuilder::from(scan)
                .filter(w.clone())
                .and_then(|b| b.build())
                .ok()?,
            None => scan,
        };
        let node = match AutoCdcNode::try_new(input, spec) {
            Ok(n) => n,
            Err(e) => {
                self.datafusion_error(file, &e, self.flows[f].span);
                return None;
            }
        };
        Some(LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        }))
    }

    fn source_scan(&self, name: &str, schema: &SchemaRef) -> Option<LogicalPlan> {
        let source = datafusion::datasource::provider_as_source(Arc::new(
            datafusion::datasource::empty::EmptyTable::new(Arc::clone(schema)),
        ));
        LogicalPlanBuilder::scan(name, source, None)
            .and_then(|b| b.build())
            .ok()
    }
}

fn orderable(t: &DataType) -> bool {
    t.is_numeric()
        || t.is_temporal()
        || matches!(
            t,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Boolean
                | DataType::Decimal128(..)
                | DataType::Decimal256(..)
        )
        || matches!(t, DataType::Struct(fields) if fields.iter().all(|f| orderable(f.data_type())))
}
