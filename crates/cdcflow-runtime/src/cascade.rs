//! What a full refresh of some tables does to the tables that read them as a stream.
//!
//! A full refresh rewrites a table (its old rows removed); a flow that reads it as a
//! stream (`STREAM(t)`, an AUTO CDC source, or a view over `STREAM(t)` read as a stream)
//! then finds a commit that removed rows it had read, and fails until its own table is
//! refreshed too, as Databricks' pipelines do. Materialized views recompute from the
//! rewritten table and need nothing. `--cascade` refreshes those readers in the same
//! run, and the readers' readers after them.

use cdcflow_plan::DatasetKind;
use cdcflow_plan::{Flow, Input, Pipeline};

/// The tables, outside `refreshed`, that fail after a full refresh of the tables in
/// `refreshed` until they are refreshed too (an empty `refreshed` is every table: no
/// reader is left out). Tables a full refresh leaves alone
/// (`pipelines.reset.allowed = false`) are not rewritten and fail no reader.
pub fn broken_readers(pipeline: &Pipeline, refreshed: &[String]) -> Vec<String> {
    if refreshed.is_empty() {
        return vec![];
    }
    let rewritten: Vec<&str> = refreshed
        .iter()
        .filter_map(|t| pipeline.dataset(t))
        .filter(|d| reset_allowed(d))
        .map(|d| d.name.as_str())
        .collect();
    let mut out: Vec<String> = Vec::new();
    for flow in &pipeline.flows {
        let Some(target) = pipeline.dataset(&flow.target) else {
            continue;
        };
        if target.kind == DatasetKind::View
            || refreshed
                .iter()
                .any(|t| t.eq_ignore_ascii_case(&target.name))
            || out.contains(&target.name)
        {
            continue;
        }
        let streamed = streamed_tables(pipeline, flow, 0);
        if streamed
            .iter()
            .any(|s| rewritten.iter().any(|r| r.eq_ignore_ascii_case(s)))
        {
            out.push(target.name.clone());
        }
    }
    out
}

/// `tables` and, until none is left, every table a full refresh of them would break.
pub fn with_broken_readers(pipeline: &Pipeline, tables: &[String]) -> Vec<String> {
    let mut all = tables.to_vec();
    loop {
        let more = broken_readers(pipeline, &all);
        if more.is_empty() {
            return all;
        }
        all.extend(more);
    }
}

/// The stored tables `flow` reads as a stream, directly or through views it reads as a
/// stream. `depth` bounds the walk (view chains are at most 100 deep, and cycles are
/// refused before a run).
fn streamed_tables(pipeline: &Pipeline, flow: &Flow, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    for input in &flow.inputs {
        let Input::Dataset {
            name,
            streaming: true,
        } = input
        else {
            continue;
        };
        let Some(d) = pipeline.dataset(name) else {
            continue;
        };
        if d.kind != DatasetKind::View {
            out.push(d.name.clone());
        } else if depth < 128 {
            for inner in pipeline.flows_into(&d.name) {
                out.extend(streamed_tables(pipeline, inner, depth + 1));
            }
        }
    }
    out
}

/// Whether `TBLPROPERTIES (pipelines.reset.allowed = false)` leaves `d` out of a full
/// refresh.
pub(crate) fn reset_allowed(d: &cdcflow_plan::Dataset) -> bool {
    !d.properties.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case(cdcflow_plan::table_properties::RESET_ALLOWED)
            && v.eq_ignore_ascii_case("false")
    })
}
