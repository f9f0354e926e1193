//! Which flows of a run wait for which. A flow waits for every flow of the run that
//! writes a dataset it reads (through the views it reads: a view is not run, its query
//! reads what its own inputs hold), for the flows before it into its own target (a
//! table takes one commit at a time, in the pipeline's order), and for the flows before
//! it that read the same PostgreSQL connection (its tables share one replication slot,
//! which the first of them creates and each acknowledges in turn). Flows that wait for
//! none of each other run at the same time (docs/runtime.md, "Flows").

use std::collections::{BTreeSet, HashMap, HashSet};

use cdcflow_plan::DatasetKind;
use cdcflow_plan::{Input, Pipeline};

/// The variable that bounds how many flows run at once (the cores by default; 1 runs
/// them one after another).
pub const PARALLEL_FLOWS_VAR: &str = "CDCFLOW_PARALLEL_FLOWS";

/// How many flows run at once: `CDCFLOW_PARALLEL_FLOWS`, else one per core.
pub(crate) fn parallel_flows() -> usize {
    std::env::var(PARALLEL_FLOWS_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(crate::par::cores)
}

/// For each flow of `run` (indexes into `pipeline.flows`, in dependency order), the
/// positions in `run` of the flows it waits for: always earlier ones, so a run that
/// starts every flow whose waits are over never stalls.
pub fn waits(pipeline: &Pipeline, run: &[usize]) -> Vec<Vec<usize>> {
    let position: HashMap<usize, usize> = run.iter().enumerate().map(|(i, &f)| (f, i)).collect();
    run.iter()
        .enumerate()
        .map(|(i, &f)| {
            let flow = &pipeline.flows[f];
            let mut writers = BTreeSet::new();
            let mut seen = HashSet::new();
            for input in &flow.inputs {
                if let Input::Dataset { name, .. } = input {
                    writers_of(pipeline, name, &mut seen, &mut writers);
                }
            }
            let slots = postgres_connections(&flow.inputs);
            for &g in &run[..i] {
                let other = &pipeline.flows[g];
                if other.target.eq_ignore_ascii_case(&flow.target)
                    || !postgres_connections(&other.inputs).is_disjoint(&slots)
                {
                    writers.insert(g);
                }
            }
            writers
                .into_iter()
                .filter_map(|g| position.get(&g).copied())
                .filter(|&j| j < i)
                .collect()
        })
        .collect()
}

/// The flows (indexes) whose commits `dataset` shows: its own writers, or for a view,
/// the writers of what its flows read.
fn writers_of(
    pipeline: &Pipeline,
    dataset: &str,
    seen: &mut HashSet<String>,
    out: &mut BTreeSet<usize>,
) {
    if !seen.insert(dataset.to_lowercase()) {
        return;
    }
    let view = pipeline
        .dataset(dataset)
        .is_some_and(|d| d.kind == DatasetKind::View);
    for (g, flow) in pipeline.flows.iter().enumerate() {
        if !flow.target.eq_ignore_ascii_case(dataset) {
            continue;
        }
        if !view {
            out.insert(g);
            continue;
        }
        for input in &flow.inputs {
            if let Input::Dataset { name, .. } = input {
                writers_of(pipeline, name, seen, out);
            }
        }
    }
}

/// The PostgreSQL connections `inputs` read by logical replication, lower-cased.
fn postgres_connections(inputs: &[Input]) -> BTreeSet<String> {
    inputs
        .iter()
        .filter_map(|input| match input {
            Input::Postgres(rp) => Some(rp.connection.to_lowercase()),
            _ => None,
        })
        .collect()
}
