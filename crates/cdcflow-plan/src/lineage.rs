//! The pipeline as a graph, for people: what each table is made from (`cdcflow graph`).
//! Nodes are the sources (landing folders, server tables, external tables), the
//! datasets and the named flows (`CREATE FLOW`); edges go the way data does. A
//! dataset's own defining query is no node of its own: its inputs point at the dataset.
//! The private view made of an AUTO CDC flow's `FROM (query)` is part of that flow, so
//! its inputs point at the flow.

use std::collections::BTreeMap;

use crate::pipeline::{Flow, FlowKind, Input, Pipeline};
use crate::read_kafka::Subscription;
use cdcflow_sql::ast::DatasetKind;

/// What a node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeKind {
    /// Files, a server table or an external table: read, never written.
    Source,
    StreamingTable,
    MaterializedView,
    View,
    /// A named flow writing into a dataset.
    Flow,
}

impl NodeKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::StreamingTable => "streaming_table",
            Self::MaterializedView => "materialized_view",
            Self::View => "view",
            Self::Flow => "flow",
        }
    }
}

/// A node: a stable `id` (`source:…`, `table:…`, `flow:…`), what it is and where it is
/// defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: String,
    pub label: String,
    pub kind: NodeKind,
    /// What kind of source or flow, e.g. `read_files json`, `AUTO CDC SCD type 2`.
    pub detail: String,
    /// `file:line` of the definition (sources: of the first reader).
    pub defined_at: Option<String>,
}

/// The pipeline's graph: nodes in a stable order (sources, datasets, flows; each by
/// name) and edges from what is read to what reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lineage {
    pub nodes: Vec<Node>,
    /// `(from, to)` node ids, sorted, each once.
    pub edges: Vec<(String, String)>,
}

impl Lineage {
    /// The graph as JSON (`cdcflow graph --format json`, `cdcflow ui`): the pipeline's
    /// name, each node's id, label, kind, detail and `file:line`, and the edges.
    pub fn to_json(&self, pipeline: &str) -> serde_json::Value {
        let nodes: Vec<_> = self
            .nodes
            .iter()
            .map(|n| {
                serde_json::json!({
                    "id": n.id,
                    "label": n.label,
                    "kind": n.kind.name(),
                    "detail": n.detail,
                    "defined_at": n.defined_at,
                })
            })
            .collect();
        let edges: Vec<_> = self
            .edges
            .iter()
            .map(|(from, to)| serde_json::json!({ "from": from, "to": to }))
            .collect();
        serde_json::json!({ "pipeline": pipeline, "nodes": nodes, "edges": edges })
    }

    pub fn of(pipeline: &Pipeline) -> Self {
        let mut nodes: BTreeMap<(NodeKind, String), Node> = BTreeMap::new();
        let mut edges = std::collections::BTreeSet::new();
        let place = |file: crate::FileId, span| {
            pipeline
                .files
                .get(file)
                .map(|f| f.locate(span, ""))
                .map(|l| format!("{}:{}", l.path, l.span.start.line))
        };
        for d in pipeline.datasets.iter().filter(|d| d.source_of.is_none()) {
            let kind = match d.kind {
                DatasetKind::StreamingTable => NodeKind::StreamingTable,
                DatasetKind::MaterializedView => NodeKind::MaterializedView,
                DatasetKind::View => NodeKind::View,
            };
            let detail = match d.def.private {
                true => format!("{} (private)", d.kind.sql()),
                false => d.kind.sql().to_string(),
            };
            let node = Node {
                id: table_id(&d.name),
                label: d.name.clone(),
                kind,
                detail,
                defined_at: place(d.file, d.def.span),
            };
            nodes.insert((kind, node.id.clone()), node);
        }
        for flow in &pipeline.flows {
            let Some(into) = pipeline.dataset(&flow.target) else {
                continue;
            };
            if into.source_of.is_some() {
                continue; // drawn as part of the flow it belongs to
            }
            let writer = match is_named(flow) {
                true => {
                    let node = Node {
                        id: flow_id(&flow.name),
                        label: flow.name.clone(),
                        kind: NodeKind::Flow,
                        detail: flow_detail(flow),
                        defined_at: place(flow.file, flow.span),
                    };
                    edges.insert((node.id.clone(), table_id(&into.name)));
                    let id = node.id.clone();
                    nodes.insert((NodeKind::Flow, id.clone()), node);
                    id
                }
                false => table_id(&into.name),
            };
            for input in inputs_of(pipeline, flow) {
                let from = match input {
                    Input::Dataset { name, .. } => match pipeline.dataset(name) {
                        Some(d) => table_id(&d.name),
                        None => continue,
                    },
                    source => {
                        let (label, detail) = describe(source);
                        let id = format!("source:{label}");
                        nodes
                            .entry((NodeKind::Source, id.clone()))
                            .or_insert_with(|| Node {
                                id: id.clone(),
                                label,
                                kind: NodeKind::Source,
                                detail,
                                defined_at: place(flow.file, flow.span),
                            });
                        id
                    }
                };
                edges.insert((from, writer.clone()));
            }
        }
        Self {
            nodes: nodes.into_values().collect(),
            edges: edges.into_iter().collect(),
        }
    }
}

fn table_id(name: &str) -> String {
    format!("table:{name}")
}

fn flow_id(name: &str) -> String {
    format!("flow:{name}")
}

/// A flow written as `CREATE FLOW name …`, not a dataset's own query.
fn is_named(flow: &Flow) -> bool {
    !flow.name.eq_ignore_ascii_case(&flow.target)
}

/// What `flow` reads, with the private view of its `FROM (query)` (and of its snapshot
/// and version queries) replaced by what that view reads.
fn inputs_of<'a>(pipeline: &'a Pipeline, flow: &'a Flow) -> Vec<&'a Input> {
    let mut out = Vec::new();
    let mut pending: Vec<&Input> = flow.inputs.iter().collect();
    let mut seen: Vec<&str> = Vec::new();
    while let Some(input) = pending.pop() {
        let own_view = match input {
            Input::Dataset { name, .. } => pipeline
                .dataset(name)
                .filter(|d| d.source_of.is_some())
                .map(|d| d.name.as_str()),
            _ => None,
        };
        match own_view {
            Some(view) if !seen.contains(&view) => {
                seen.push(view);
                for f in pipeline.flows_into(view) {
                    pending.extend(f.inputs.iter());
                }
            }
            Some(_) => {}
            None => out.push(input),
        }
    }
    out.reverse();
    out
}

fn flow_detail(flow: &Flow) -> String {
    match &flow.kind {
        FlowKind::AutoCdc(spec) => {
            let from = match spec.snapshot {
                Some(_) => " FROM SNAPSHOT",
                None => "",
            };
            format!("AUTO CDC{from}, SCD type {}", spec.scd_type)
        }
        FlowKind::Query { append: true, .. } => "append".to_string(),
        FlowKind::Query { .. } if flow.once => "once".to_string(),
        FlowKind::Query { .. } => "query".to_string(),
    }
}

/// A source input's label (its identity: the same source read twice is one node) and
/// what kind of source it is.
fn describe(input: &Input) -> (String, String) {
    match input {
        Input::Dataset { name, .. } => (name.clone(), "dataset".into()),
        Input::Files(rf) => (
            rf.path_text.clone(),
            format!("read_files {}", rf.format.as_str()),
        ),
        Input::Postgres(rp) => (
            format!("{}/{}", rp.connection, rp.source),
            "read_postgres".into(),
        ),
        Input::Mysql(rm) => (
            format!("{}/{}", rm.connection, rm.source),
            "read_mysql".into(),
        ),
        Input::Query(rq) => (
            format!("{}/{}", rq.connection, rq.table),
            "read_query".into(),
        ),
        Input::Delta(d) => (d.name.clone(), "external Delta table".into()),
        Input::Kafka(rk) => {
            let topics = match &rk.subscription {
                Subscription::Topics(t) => t.join(","),
                Subscription::Pattern(p) => format!("/{p}/"),
            };
            (format!("kafka/{topics}"), "read_kafka".into())
        }
    }
}
