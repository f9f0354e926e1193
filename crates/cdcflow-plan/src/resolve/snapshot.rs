//! `AUTO CDC … FROM SNAPSHOT` in resolution (`crate::snapshot`). The snapshot query
//! becomes the private view `<flow>__snapshot`, the WITH VERSION query the private
//! view `<flow>__version`, so both are resolved, planned and read as views are. The
//! version view is planned with `last_snapshot_version()` bound to a relation of its
//! own output's name and type, and the snapshot view, after it, with
//! `current_snapshot_version()` bound to one of the same shape.

use cdcflow_sql::ast::{SnapshotSource, SourceRef};
use cdcflow_sql::sqlparser::ast::{SelectItem, SetExpr};

use super::*;
use crate::snapshot::{self, SnapshotSpec};

/// The views of one snapshot flow.
#[derive(Debug, Clone)]
pub(super) struct SnapshotViews {
    pub view: String,
    pub version_view: Option<String>,
}

/// What a private view of a snapshot flow is planned as.
enum Role {
    /// The WITH VERSION query.
    Version,
    /// The snapshot query of a flow with the WITH VERSION query `version_view`.
    Versioned { version_view: String },
}

impl Resolver<'_> {
    /// Adds the views of a snapshot flow and returns the source its flow reads.
    pub(super) fn snapshot_views(
        &mut self,
        flow: &PendingFlow,
        snapshot: SnapshotSource,
    ) -> CdcSource {
        let version_view = snapshot.version.map(|v| {
            let (name, streaming) = self.private_view(flow, "version", v.node, v.span);
            if streaming {
                self.reads_stream(flow, v.span, "WITH VERSION");
            }
            name.name().to_string()
        });
        let span = snapshot.query.span;
        let (view, streaming) = self.private_view(flow, "snapshot", snapshot.query.node, span);
        if streaming {
            self.reads_stream(flow, span, "FROM SNAPSHOT");
        }
        self.snapshots.insert(
            flow.name.to_ascii_lowercase(),
            SnapshotViews {
                view: view.name().to_string(),
                version_view,
            },
        );
        CdcSource::Dataset(SourceRef {
            name: view,
            streaming: false,
        })
    }

    fn reads_stream(&mut self, flow: &PendingFlow, span: Span, clause: &str) {
        self.error(
            flow.file,
            span,
            "cdcflow::snapshot_stream",
            format!(
                "the {clause} query of flow `{}` reads a stream",
                flow.name
            ),
            "reads a stream",
            Some("a snapshot is a table's whole content: read tables without STREAM (a streaming read gives only the rows appended since the last run)".into()),
        );
    }

    /// The views of snapshot flow `flow`, when it is one.
    pub(super) fn snapshot_of(&self, flow: &str) -> Option<&SnapshotViews> {
        self.snapshots.get(&flow.to_ascii_lowercase())
    }

    /// Datasets a snapshot view is planned after, beside its inputs: the version view
    /// of its flow, whose output `current_snapshot_version()` gives.
    pub(super) fn planned_after(&self, dataset: &str) -> Option<&str> {
        self.snapshots
            .values()
            .find(|s| s.view.eq_ignore_ascii_case(dataset))
            .and_then(|s| s.version_view.as_deref())
    }

    fn role(&self, dataset: &str) -> Option<Role> {
        self.snapshots.values().find_map(|s| {
            if s.version_view
                .as_deref()
                .is_some_and(|v| v.eq_ignore_ascii_case(dataset))
            {
                return Some(Role::Version);
            }
            let version_view = s.version_view.clone()?;
            s.view
                .eq_ignore_ascii_case(dataset)
                .then_some(Role::Versioned { version_view })
        })
    }

    /// Whether flow `f` is a snapshot query whose flow's version query gave no schema.
    pub(super) fn waits_for_version(&self, f: usize) -> bool {
        match self.role(&self.flows[f].target) {
            Some(Role::Versioned { version_view }) => self
                .dataset_index(&version_view)
                .is_none_or(|d| self.datasets[d].schema.is_none()),
            _ => false,
        }
    }

    /// Plans the query of flow `f` with the snapshot functions its place allows bound.
    pub(super) fn plan_flow_query(
        &mut self,
        f: usize,
        query: &Query,
    ) -> Result<LogicalPlan, DataFusionError> {
        match self.role(&self.flows[f].target) {
            None => self.planner.plan_query(query),
            Some(Role::Version) => {
                let result = self.plan_version_query(query);
                self.planner.unbind(snapshot::LAST_VERSION);
                result
            }
            Some(Role::Versioned { version_view }) => {
                let schema = self
                    .dataset_index(&version_view)
                    .and_then(|d| self.datasets[d].schema.clone())
                    .ok_or_else(|| {
                        DataFusionError::Plan("the WITH VERSION query was not planned".into())
                    })?;
                self.planner
                    .bind(snapshot::CURRENT_VERSION, snapshot::empty(schema));
                let result = self.planner.plan_query(query);
                self.planner.unbind(snapshot::CURRENT_VERSION);
                result
            }
        }
    }

    /// The version query gives `last_snapshot_version()`'s shape: it is planned once
    /// with that relation's column untyped, then again with the type it gave.
    fn plan_version_query(&mut self, query: &Query) -> Result<LogicalPlan, DataFusionError> {
        let name = output_name(query).unwrap_or_else(|| "version".to_string());
        let untyped = Schema::new(vec![Field::new(name, DataType::Null, true)]);
        self.planner
            .bind(snapshot::LAST_VERSION, snapshot::empty(Arc::new(untyped)));
        let first = self.planner.plan_query(query)?;
        let fields = first.schema().fields();
        let [version] = fields.as_ref() else {
            return Err(DataFusionError::Plan(format!(
                "the WITH VERSION query gives {} columns; it gives one, the version (e.g. SELECT max(day) AS version FROM …)",
                fields.len()
            )));
        };
        let typed = Schema::new(vec![version.as_ref().clone().with_nullable(true)]);
        self.planner
            .bind(snapshot::LAST_VERSION, snapshot::empty(Arc::new(typed)));
        self.planner.plan_query(query)
    }

    /// Completes the spec of snapshot flow `f` from its snapshot view's schema.
    pub(super) fn plan_snapshot_cdc(
        &mut self,
        f: usize,
        cdc: &AutoCdc,
        views: &SnapshotViews,
        mut spec: AutoCdcSpec,
        source_schema: &SchemaRef,
    ) -> Option<LogicalPlan> {
        let file = self.flows[f].file;
        let available: Vec<String> = source_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let errors_before = self.diags.iter().filter(|d| d.is_error()).count();
        let reserved: Vec<&String> = available
            .iter()
            .filter(|c| {
                c.starts_with(RESERVED_PREFIX)
                    || c.eq_ignore_ascii_case(START_AT)
                    || c.eq_ignore_ascii_case(END_AT)
            })
            .collect();
        if !reserved.is_empty() {
            let names: Vec<&str> = reserved.iter().map(|s| s.as_str()).collect();
            self.error(
                file,
                cdc.source.span(),
                "cdcflow::reserved_column",
                format!("the snapshot has the reserved column(s) {}", names.join(", ")),
                "snapshot",
                Some(format!("__START_AT and __END_AT are written by SCD TYPE 2 and the prefix {RESERVED_PREFIX} is cdcflow's: leave them out of the snapshot query or rename them")),
            );
        }
        let keys = self.resolve_columns(file, &cdc.keys.node, "KEYS", &available);
        let track_history = match &cdc.track_history {
            Some(t) => self.selection(file, &t.node, "TRACK HISTORY", &available, &available),
            None => Some(available.clone()),
        };
        let version = match &views.version_view {
            None => Some(SnapshotSpec::periodic()),
            Some(view) => self.version_of(view),
        };
        if self.diags.iter().filter(|d| d.is_error()).count() > errors_before {
            return None;
        }
        let (keys, version) = (keys?, version?);
        spec.track_history = track_history?
            .into_iter()
            .filter(|c| !keys.contains(c))
            .collect();
        spec.columns = available.clone();
        spec.sequence = vec![SequenceField {
            name: version.version.name().clone(),
            expr: datafusion::logical_expr::col(snapshot::VERSION_COLUMN),
            data_type: version.version.data_type().clone(),
        }];
        spec.delete_when = Some(datafusion::logical_expr::col(snapshot::DELETED_COLUMN));
        let events = snapshot::event_schema(source_schema, &keys, &version.version);
        spec.keys = keys;
        spec.snapshot = Some(version);
        let spec = Arc::new(spec);
        self.flows[f].kind = FlowKind::AutoCdc(Arc::clone(&spec));
        match AutoCdcNode::plan(spec, snapshot::empty(events)) {
            Ok(plan) => Some(plan),
            Err(e) => {
                self.datafusion_error(file, &e, self.flows[f].span);
                None
            }
        }
    }

    /// The version of flow `f`'s WITH VERSION view: its one column, of a type that
    /// orders.
    fn version_of(&mut self, view: &str) -> Option<SnapshotSpec> {
        let d = self.dataset_index(view)?;
        let schema = self.datasets[d].schema.clone()?;
        let field = schema.fields().first()?.as_ref().clone();
        if !cdc::orderable(field.data_type()) || !exact_version(field.data_type()) {
            let (file, span) = (self.datasets[d].file, self.datasets[d].def.span);
            self.error(
                file,
                span,
                "cdcflow::snapshot_version_type",
                format!(
                    "the WITH VERSION query gives a version of type {}, which cannot be a snapshot version",
                    field.data_type()
                ),
                "version",
                Some("give an integer, decimal, timestamp, date, string or a STRUCT of those: snapshots are applied in version order, and the last one is kept exactly".into()),
            );
            return None;
        }
        Some(SnapshotSpec {
            version_view: Some(view.to_string()),
            version: field.with_nullable(false),
        })
    }

    /// A snapshot flow is its target's only flow: its deletes are the keys missing from
    /// the snapshot, which another flow's keys would be.
    pub(super) fn check_snapshot_targets(&mut self) {
        for f in 0..self.flows.len() {
            if self.snapshot_of(&self.flows[f].name).is_none() {
                continue;
            }
            let target = self.flows[f].target.clone();
            let others: Vec<usize> = self
                .flows_into(&target)
                .into_iter()
                .filter(|&o| o != f)
                .collect();
            for o in others {
                let at = self.position(self.flows[f].file, self.flows[f].span);
                let (file, span, name) = (
                    self.flows[o].file,
                    self.flows[o].span,
                    self.flows[o].name.clone(),
                );
                self.error(
                    file,
                    span,
                    "cdcflow::snapshot_target_shared",
                    format!("flow `{name}` writes into `{target}`, which an AUTO CDC FROM SNAPSHOT flow keeps"),
                    "second flow",
                    Some(format!("a snapshot flow (at {at}) deletes every key its snapshot lacks, so it must be the target's only flow; write into another table")),
                );
            }
        }
    }
}

/// Whether versions of type `t` compare exactly: no floating point numbers, durations
/// or intervals (which order ambiguously or not at all).
fn exact_version(t: &DataType) -> bool {
    match t {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => false,
        DataType::Duration(_) | DataType::Interval(_) => false,
        DataType::Struct(fields) => fields.iter().all(|f| exact_version(f.data_type())),
        _ => true,
    }
}

/// The name of a query's one output column, when it is written as a name or alias.
fn output_name(query: &Query) -> Option<String> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    match select.projection.as_slice() {
        [SelectItem::ExprWithAlias { alias, .. }] => Some(alias.value.clone()),
        [SelectItem::UnnamedExpr(SqlExpr::Identifier(i))] => Some(i.value.clone()),
        [SelectItem::UnnamedExpr(SqlExpr::CompoundIdentifier(parts))] => {
            parts.last().map(|i| i.value.clone())
        }
        _ => None,
    }
}
