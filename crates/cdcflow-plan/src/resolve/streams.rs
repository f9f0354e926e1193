//! Flows that read streams incrementally, checked for operators that would need state
//! across batches (`crate::stateful`). A streaming table's query and an append flow run
//! over each batch's new rows; so does the query of a view they (or an AUTO CDC flow)
//! read with `STREAM(view)`. A materialized view is recomputed from its whole inputs
//! and may aggregate anything.

use std::collections::HashSet;

use super::*;
use crate::stateful::{Stateful, first_stateful, locate};

impl Resolver<'_> {
    pub(super) fn check_stateful_streams(&mut self) {
        let mut views_checked = HashSet::new();
        for f in 0..self.flows.len() {
            let target_kind = self
                .dataset_index(&self.flows[f].target)
                .map(|d| self.datasets[d].kind);
            if target_kind != Some(DatasetKind::StreamingTable) {
                continue;
            }
            if matches!(self.flows[f].kind, FlowKind::Query { .. }) {
                self.check_stream_query(f, None);
            }
            self.check_views_read_as_streams(f, &mut views_checked);
        }
    }

    /// The names under which flow `f`'s query scans what it reads as a stream.
    fn stream_names(&self, f: usize) -> Vec<String> {
        self.flows[f]
            .inputs
            .iter()
            .filter_map(|i| match i {
                Input::Dataset {
                    name,
                    streaming: true,
                } => {
                    let kind = self.dataset_index(name).map(|d| self.datasets[d].kind);
                    // The runtime reads STREAM(materialized view) whole (`inputs.rs`).
                    (kind != Some(DatasetKind::MaterializedView)).then(|| name.clone())
                }
                Input::Files(rf) if rf.streaming => Some(rf.table.clone()),
                Input::Delta(d) if d.streaming => Some(d.table.clone()),
                Input::Postgres(rp) => Some(rp.table.clone()),
                Input::Query(rq) => Some(rq.table.clone()),
                Input::Kafka(rk) => Some(rk.table.clone()),
                _ => None,
            })
            .collect()
    }

    /// The views flow `f` reads with STREAM(view), and theirs, checked as streams.
    fn check_views_read_as_streams(&mut self, f: usize, checked: &mut HashSet<usize>) {
        for name in self.stream_names(f) {
            let Some(d) = self.dataset_index(&name) else {
                continue;
            };
            if self.datasets[d].kind != DatasetKind::View || !checked.insert(d) {
                continue;
            }
            let view = self.datasets[d].name.clone();
            let Some(vf) = (0..self.flows.len()).find(|&v| self.flows[v].target == view) else {
                continue;
            };
            let reader = self.flows[f].name.clone();
            self.check_stream_query(vf, Some(&reader));
            self.check_views_read_as_streams(vf, checked);
        }
    }

    /// Reports the first stateful operator of query flow `f` over its streams; `reader`
    /// names the flow that reads `f`'s view as a stream.
    fn check_stream_query(&mut self, f: usize, reader: Option<&str>) {
        let streams = self.stream_names(f);
        let flow = &self.flows[f];
        let (Some(plan), FlowKind::Query { query, .. }) = (&flow.plan, &flow.kind) else {
            return;
        };
        let is_stream = |t: &str| streams.iter().any(|s| s.eq_ignore_ascii_case(t));
        let Some(op) = first_stateful(plan, &is_stream) else {
            return;
        };
        let span = locate(query, &op, &streams).unwrap_or_else(|| query.span());
        let (file, target) = (flow.file, flow.target.clone());
        let source_of = self
            .dataset_index(&target)
            .and_then(|d| self.datasets[d].source_of.as_deref());
        let in_source = source_of.is_some();
        let what = match (reader, source_of) {
            (None, _) => format!("streaming table `{target}`"),
            (Some(_), Some(cdc)) => format!("the FROM query of AUTO CDC flow `{cdc}`"),
            (Some(r), None) => format!("view `{target}` (read as a stream by `{r}`)"),
        };
        self.error(
            file,
            span,
            "cdcflow::stateful_stream",
            format!("{what} {}", op.consequence()),
            "needs state across batches",
            Some(help(&op, &target, reader.is_some(), in_source)),
        );
    }
}

fn help(op: &Stateful, target: &str, view: bool, cdc_source: bool) -> String {
    const WHY: &str = "cdcflow keeps no state across the batches of a stream (Databricks asks for a watermark here)";
    match op {
        Stateful::StreamJoin if cdc_source => format!(
            "{WHY}: read one side whole, without STREAM(…), to join each batch with all of it"
        ),
        Stateful::StreamJoin => format!(
            "{WHY}: read one side whole, without STREAM(…), to join each batch with all of it, or define `{target}` as a MATERIALIZED VIEW"
        ),
        _ if cdc_source => format!(
            "{WHY}: AUTO CDC already keeps, per key, the change last in SEQUENCE BY order, so a dedup by window or DISTINCT is not needed; anything else, compute in a MATERIALIZED VIEW the flow reads"
        ),
        _ if view => format!(
            "{WHY}: compute this in a MATERIALIZED VIEW, recomputed from its whole input, rather than in a view read as a stream"
        ),
        _ => format!(
            "{WHY}: define `{target}` as a MATERIALIZED VIEW, recomputed from its whole input"
        ),
    }
}
