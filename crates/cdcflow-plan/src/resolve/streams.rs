//! Flows that read streams incrementally, checked for operators that would need state
//! across batches (`crate::stateful`). A streaming table's query and an append flow run
//! over each batch's new rows; so does the query of a view they (or an AUTO CDC flow)
//! read with `STREAM(view)`. A materialized view is recomputed from its whole inputs
//! and may aggregate anything.

use std::collections::HashSet;

use super::*;
use crate::stateful::{Stateful, first_stateful, locate};
use crate::stream_aggregate;

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
        self.flows[f].stream_names(|name| self.dataset_index(name).map(|d| self.datasets[d].kind))
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

    /// Reports the first stateful operator of query flow `f` over its streams that
    /// cannot run; `reader` names the flow that reads `f`'s view as a stream. A
    /// streaming table's own query (or an append flow) may aggregate a watermarked
    /// stream (`crate::stream_aggregate`); a view read as a stream may not.
    fn check_stream_query(&mut self, f: usize, reader: Option<&str>) {
        let streams = self.stream_names(f);
        let flow = &self.flows[f];
        let (Some(plan), FlowKind::Query { query, .. }) = (&flow.plan, &flow.kind) else {
            return;
        };
        let is_stream = |t: &str| streams.iter().any(|s| s.eq_ignore_ascii_case(t));
        let (file, target) = (flow.file, flow.target.clone());
        let source_of = self
            .dataset_index(&target)
            .and_then(|d| self.datasets[d].source_of.as_deref());
        let in_source = source_of.is_some();
        let mut found = Vec::new();
        for w in &flow.watermarks {
            match stream_aggregate::event_time_type(plan, w) {
                Some(DataType::Timestamp(..)) => {}
                Some(other) => found.push((
                    w.column_span,
                    "cdcflow::watermark",
                    format!(
                        "[EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE] The event time `{}` has the invalid type {}, but expected \"TIMESTAMP\"",
                        w.column,
                        crate::types::sql_type_name(&other)
                    ),
                    "not a TIMESTAMP",
                    format!(
                        "compute a timestamp and name it: WATERMARK to_timestamp({0}) AS {0}_ts DELAY OF {1}",
                        w.column, w.delay_text
                    ),
                )),
                None => found.push((
                    w.column_span,
                    "cdcflow::watermark",
                    format!("the watermark's event time `{}` is not a column of `{}`", w.column, w.alias),
                    "no such column",
                    "name a TIMESTAMP column of the from item the WATERMARK clause follows".to_string(),
                )),
            }
        }
        let stateful_runs = reader.is_none() && !in_source;
        let refusal = match stateful_runs {
            true => match stream_aggregate::analyze(plan, &flow.watermarks, &is_stream) {
                Ok(_) => None,
                Err(r) => {
                    let message = r.describe(&format!("streaming table `{target}`"));
                    Some((r.at, "cdcflow::stateful_stream", message, r.help))
                }
            },
            false => first_stateful(plan, &is_stream).map(|op| {
                let what = match (reader, source_of) {
                    (None, _) => format!("streaming table `{target}`"),
                    (Some(_), Some(cdc)) => format!("the FROM query of AUTO CDC flow `{cdc}`"),
                    (Some(r), None) => format!("view `{target}` (read as a stream by `{r}`)"),
                };
                let message = format!("{what} {}", op.consequence());
                let help = help(&op, &target, reader.is_some(), in_source);
                (op, "cdcflow::stateful_stream", message, help)
            }),
        };
        if let Some((op, code, message, help)) = refusal {
            let span = locate(query, &op, &streams).unwrap_or_else(|| query.span());
            found.push((span, code, message, "needs state across batches", help));
        }
        for (span, code, message, label, help) in found {
            self.error(file, span, code, message, label, Some(help));
        }
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
