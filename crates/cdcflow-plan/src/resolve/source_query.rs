//! An AUTO CDC flow reading `FROM (query)`: the query becomes a view of the flow's own,
//! and the flow reads the view, so the query is resolved, planned, checked for
//! stateful operators over streams and run exactly as a view's query is. The view is
//! read as a stream when the query reads one (`STREAM(…)`, a streaming `read_files`):
//! each batch runs the query over what its streams appended since the flow's last
//! batch and over the whole of what it reads without `STREAM`, as Databricks runs a
//! streaming query with stream-static joins. An AUTO CDC flow reading an external table
//! (`external.rs`) reads it the same way, through `SELECT * FROM [STREAM](name)`.

use cdcflow_sql::ast::SourceRef;

use crate::namespace::Identity;

use super::*;

impl Resolver<'_> {
    /// `flow` with a `FROM (query)` source turned into a view it reads (the view and
    /// its query's flow are added here); any other flow unchanged.
    pub(super) fn with_source_view(&mut self, mut flow: PendingFlow) -> PendingFlow {
        let PendingBody::AutoCdc(cdc) = &flow.body else {
            return flow;
        };
        let (query, span) = match &cdc.source {
            CdcSource::Query(query) => (query.node.clone(), query.span),
            CdcSource::Snapshot(snapshot) => {
                let snapshot = (**snapshot).clone();
                let source = self.snapshot_views(&flow, snapshot);
                if let PendingBody::AutoCdc(cdc) = &mut flow.body {
                    cdc.source = source;
                }
                return flow;
            }
            CdcSource::Dataset(source) => {
                match self.external_source_query(source, &flow.namespace) {
                    Some(query) => (query, source.name.span),
                    None => return flow,
                }
            }
        };
        let (view_name, streaming) = self.private_view(&flow, "source", query, span);
        let PendingBody::AutoCdc(cdc) = &mut flow.body else {
            return flow;
        };
        cdc.source = CdcSource::Dataset(SourceRef {
            name: view_name,
            streaming,
        });
        flow
    }

    /// Adds the private view `<flow>__<suffix>` defined by `query` (written at `span`)
    /// for `flow` to read; returns its name and whether it reads a stream.
    pub(super) fn private_view(
        &mut self,
        flow: &PendingFlow,
        suffix: &str,
        query: Box<Query>,
        span: Span,
    ) -> (DatasetName, bool) {
        let name = self.free_name(&format!("{}__{suffix}", flow.name));
        let view_name = DatasetName {
            parts: vec![Ident::with_span(span, name.clone())],
            span,
        };
        let def = CreateDataset {
            kind: DatasetKind::View,
            or_refresh: false,
            private: true,
            name: view_name.clone(),
            columns: vec![],
            expectations: vec![],
            table_constraints: vec![],
            comment: None,
            partitioned_by: vec![],
            cluster_by: vec![],
            properties: vec![],
            location: None,
            query: Some(query.clone()),
            span,
        };
        self.by_name
            .insert(name.to_ascii_lowercase(), self.datasets.len());
        self.datasets.push(Dataset {
            name: name.clone(),
            identity: Identity {
                name: name.clone(),
                ..Identity::default()
            },
            kind: DatasetKind::View,
            def,
            file: flow.file,
            schema: None,
            properties: BTreeMap::new(),
            partition_columns: vec![],
            cluster_columns: vec![],
            source_of: Some(flow.name.clone()),
        });
        let view_flow = self.flows.len();
        self.add_flow(PendingFlow {
            name: name.clone(),
            name_span: span,
            target: view_name.clone(),
            once: false,
            implicit: Some(self.datasets.len() - 1),
            body: PendingBody::Query {
                query,
                append: false,
            },
            file: flow.file,
            namespace: flow.namespace.clone(),
        });
        let streaming = self.flows.get(view_flow).is_some_and(|f| {
            f.inputs.iter().any(|i| match i {
                Input::Dataset { streaming, .. } => *streaming,
                Input::Files(rf) => rf.streaming,
                Input::Delta(d) => d.streaming,
                // A change source is read as a stream only.
                Input::Postgres(_) | Input::Mysql(_) | Input::Query(_) | Input::Kafka(_) => true,
            })
        });
        (view_name, streaming)
    }

    /// The AUTO CDC flow whose `FROM (query)` the dataset `name` is, if it is one.
    pub(super) fn source_of(&self, name: &str) -> Option<String> {
        self.dataset_index(name)
            .and_then(|d| self.datasets[d].source_of.clone())
    }

    /// `wanted`, or `wanted_2`, `wanted_3`, … : a name no dataset or flow has.
    fn free_name(&self, wanted: &str) -> String {
        let taken = |n: &str| {
            self.dataset_index(n).is_some()
                || self.flows.iter().any(|f| f.name.eq_ignore_ascii_case(n))
        };
        let mut name = wanted.to_string();
        let mut n = 1;
        while taken(&name) {
            n += 1;
            name = format!("{wanted}_{n}");
        }
        name
    }
}
