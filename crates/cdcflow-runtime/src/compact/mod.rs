//! Compaction: a table's small files and files with many deleted rows rewritten into
//! right-sized ones, in a commit that changes no data (docs/runtime.md, "Compaction").
//! Automatic after a run's batches for the tables they wrote ([`after_run`]), on
//! demand with `cdcflow optimize` ([`optimize`]).
//!
//! Always under the pipeline's run lock: delta-rs's conflict check ignores removes that
//! change no data, so a batch committed on a snapshot taken before a compaction would
//! keep the compacted files live beside their rewrite, and double their rows.

mod choose;
mod table;

use cdcflow_plan::DatasetKind;
use cdcflow_plan::location::Location;
use cdcflow_plan::{Dataset, FlowKind, Pipeline};

pub use choose::Policy;
use table::Target;

use crate::pipeline_lock::PipelineLock;
pub use crate::report::TableCompaction;
use crate::report::{FlowOutcome, RunReport};
use crate::{RunError, layout};

/// The automatic compaction after a run's flows: the tables that a committed batch
/// wrote (AUTO CDC targets and their state, streaming tables), where
/// [`Policy::AUTOMATIC`] finds files worth rewriting. What it did goes into the report
/// (a note per table, and [`RunReport::compactions`]); a compaction that fails changes
/// nothing and is a note, not a failed run. The caller holds the run lock.
pub(crate) async fn after_run(pipeline: &Pipeline, storage: &Location, report: &mut RunReport) {
    let mut written: Vec<&Dataset> = Vec::new();
    for f in &report.flows {
        if !matches!(f.outcome, FlowOutcome::Committed { .. }) {
            continue;
        }
        let Some(d) = pipeline.dataset(&f.target) else {
            continue;
        };
        if d.kind == DatasetKind::StreamingTable && !written.iter().any(|w| w.name == d.name) {
            written.push(d);
        }
    }
    for d in written {
        let targets = match targets_of(pipeline, storage, d) {
            Ok(t) => t,
            Err(e) => {
                report
                    .notes
                    .push(format!("`{}` was not compacted: {e}", d.name));
                continue;
            }
        };
        for target in targets {
            match target.compact(Policy::AUTOMATIC).await {
                Ok(done) if done.compacted() => {
                    tracing::info!(table = %done.table, state = done.state, files_removed = done.files_removed, files_added = done.files_added, rows = done.rows, "compacted");
                    report.notes.push(format!("compacted {}", done.summary()));
                    report.compactions.push(done);
                }
                Ok(_) => {}
                Err(e) => report.notes.push(format!(
                    "{} was not compacted (it is unchanged): {}",
                    target.outcome().shown(),
                    e.with_help_inline()
                )),
            }
        }
    }
}

/// `cdcflow optimize`: compacts the tables named (every table when none is) and the
/// AUTO CDC state of those that have one, with [`Policy::ON_DEMAND`]. Takes the run
/// lock, so it refuses while a run holds it.
pub async fn optimize(
    pipeline: &Pipeline,
    tables: &[String],
) -> Result<Vec<TableCompaction>, RunError> {
    let storage = pipeline.storage();
    let mut chosen: Vec<&Dataset> = Vec::new();
    for name in tables {
        let d = pipeline.dataset(name).ok_or_else(|| {
            let known: Vec<&str> = stored(pipeline).map(|d| d.name.as_str()).collect();
            RunError::input(format!("cdcflow optimize: no table named `{name}`"))
                .with_help(format!("tables of this pipeline: {}", known.join(", ")))
        })?;
        if d.kind == DatasetKind::View {
            return Err(RunError::input(format!(
                "cdcflow optimize: `{}` is a view; it has no files to compact",
                d.name
            ))
            .with_help("name a streaming table or a materialized view"));
        }
        chosen.push(d);
    }
    if tables.is_empty() {
        chosen = stored(pipeline).collect();
    }
    let lock = PipelineLock::acquire(pipeline).await?;
    let done = compact_all(pipeline, &storage, &chosen).await;
    lock.release().await?;
    done
}

/// Compacts the tables of `chosen` on demand; the caller holds the run lock.
async fn compact_all(
    pipeline: &Pipeline,
    storage: &Location,
    chosen: &[&Dataset],
) -> Result<Vec<TableCompaction>, RunError> {
    let mut out = Vec::new();
    for d in chosen {
        for target in targets_of(pipeline, storage, d)? {
            out.push(target.compact(Policy::ON_DEMAND).await?);
        }
    }
    Ok(out)
}

/// The datasets stored as tables.
fn stored(pipeline: &Pipeline) -> impl Iterator<Item = &Dataset> {
    pipeline
        .datasets
        .iter()
        .filter(|d| d.kind != DatasetKind::View)
}

/// The tables of dataset `d`: its own, and its AUTO CDC state, both sorted by the
/// flow's KEYS (the first AUTO CDC flow's, when several write it).
fn targets_of(
    pipeline: &Pipeline,
    storage: &Location,
    d: &Dataset,
) -> Result<Vec<Target>, RunError> {
    let keys = pipeline.flows_into(&d.name).find_map(|f| match &f.kind {
        FlowKind::AutoCdc(spec) => Some(spec.keys.clone()),
        FlowKind::Query { .. } => None,
    });
    // A clustered table is sorted by its clustering columns instead.
    let published_order = match d.cluster_columns.is_empty() {
        true => keys.clone().unwrap_or_default(),
        false => d.cluster_columns.clone(),
    };
    let mut out = vec![Target {
        dir: layout::table_dir(storage, d)?,
        dataset: d.name.clone(),
        state: false,
        keys: published_order,
    }];
    if let Some(keys) = keys {
        out.push(Target {
            dir: layout::state_dir(storage, &d.name)?,
            dataset: d.name.clone(),
            state: true,
            keys,
        });
    }
    Ok(out)
}
