//! Vacuum: removing the files of a pipeline's Delta tables that no version within
//! their retention needs. A batch that rewrites a table leaves the files of the
//! version before it behind (time travel and readers under way may still want them),
//! and a crashed batch leaves the files it staged but never committed; vacuum is what
//! takes them away.
//!
//! Which files go is decided by delta-rs's `VacuumBuilder` in `Full` mode, asked for a
//! dry run: files removed from the table longer ago than the retention, and files in
//! the table folder no version refers to (staged by a crashed batch, superseded
//! deletion vectors) older than the retention. `Lite` mode would miss the latter.
//! The deleting is done here, not by delta-rs, for three reasons:
//! - delta-rs lists the folder through `object_store`, which follows links: a link to
//!   a folder elsewhere would have the files under it listed, and deleted, as the
//!   table's. Here a file reached through a link is never deleted (a link itself is
//!   only a name in the table folder, and deleting it leaves what it names alone).
//! - the bytes freed are measured file by file (delta-rs reports names only);
//! - the crash-safety tests stop a vacuum between its steps (failpoints
//!   `vacuum-started:<table>`, `vacuum-deleting:<table>`, `vacuum-ended:<table>`).
//!
//! A vacuum writes the two commits Delta's own writes (`VACUUM START` with the files
//! and bytes to delete, then `VACUUM END`), with no data actions: every version's
//! rows and every application transaction (a flow's exactly-once marker) stay as they
//! were, and a vacuum stopped anywhere leaves a table that reads the same.
//!
//! Besides the retention, files a streaming reader of the table has yet to read (added
//! by commits after the version its checkpoint records) are kept whatever the
//! retention: a flow behind its source reads them by name from the log.
//!
//! Two callers: `cdcflow vacuum` ([`vacuum`], under the run lock, each published
//! table with its `delta.deletedFileRetentionDuration`), and every run, which vacuums
//! the internal AUTO CDC state tables its batches changed (`state`) once they hold
//! more unreferenced bytes than live ones. One table folder's vacuum is `folder`.

mod folder;
mod state;

use cdcflow_plan::DatasetKind;
use cdcflow_plan::location::Location;
use cdcflow_plan::{Dataset, FlowKind, Input, Pipeline};
use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::delta::Table;
use crate::pipeline_lock::PipelineLock;
use crate::storage::Storage;
use crate::{RunError, layout};

use folder::table_retention;
pub use folder::{FolderVacuum, TableVacuumOptions, vacuum_table};
pub(crate) use state::vacuum_changed_state;
pub use state::{Occupancy, occupancy};

/// What `cdcflow vacuum` does.
#[derive(Debug, Clone, Default)]
pub struct VacuumOptions {
    /// These tables (all materialized tables when empty); an AUTO CDC target's
    /// internal state table goes with it.
    pub tables: Vec<String>,
    /// Keep the files a version of the last this many hours needs; each table's
    /// `delta.deletedFileRetentionDuration` when `None`.
    pub retain_hours: Option<f64>,
    /// Go ahead with a retention shorter than a table's own.
    pub force: bool,
    /// Only say what would be removed.
    pub dry_run: bool,
}

/// What vacuum did to one table (or, for a dry run, would do).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableVacuum {
    /// The dataset, as declared.
    pub table: String,
    /// The dataset's internal AUTO CDC state table rather than the dataset's own.
    pub internal_state: bool,
    /// Files removed no earlier than this many hours ago were kept.
    pub retention_hours: f64,
    pub dry_run: bool,
    /// Files removed (a dry run: that would be).
    pub files_removed: u64,
    /// Their bytes.
    pub bytes_freed: u64,
    /// Their paths, relative to the table folder.
    pub files: Vec<String>,
    /// Files kept although the retention let them go: a streaming reader of the
    /// table has not read them yet.
    pub kept_for_readers: u64,
    /// Files not removed because they are reached through a link to a folder: the
    /// file is not the table's, whatever its name.
    pub through_links: Vec<String>,
    /// Why nothing was done (the table is not created yet).
    pub note: Option<String>,
    /// How long the vacuum of this table took, listing, commits and deletes.
    pub millis: u64,
}

impl TableVacuum {
    /// The table as people name it: the dataset, or its internal state.
    pub fn shown_name(&self) -> String {
        match self.internal_state {
            true => format!("{} (internal state)", self.table),
            false => self.table.clone(),
        }
    }

    fn untouched(table: &str, internal_state: bool, note: &str) -> Self {
        Self {
            table: table.to_string(),
            internal_state,
            retention_hours: 0.0,
            dry_run: false,
            files_removed: 0,
            bytes_freed: 0,
            files: vec![],
            kept_for_readers: 0,
            through_links: vec![],
            note: Some(note.to_string()),
            millis: 0,
        }
    }
}

/// The internal state is vacuumed without waiting: only cdcflow reads it, under the
/// run lock, and only its current version.
pub(crate) const STATE_RETENTION: chrono::Duration = chrono::Duration::zero();

/// Vacuums the tables `options` names (all when none), holding the pipeline's run
/// lock throughout, so no run stages or commits files meanwhile. A retention shorter
/// than a table's own is refused, before anything is deleted, unless forced.
pub async fn vacuum(
    pipeline: &Pipeline,
    options: &VacuumOptions,
) -> Result<Vec<TableVacuum>, RunError> {
    let storage = pipeline.storage();
    let lock = PipelineLock::acquire(pipeline).await?;
    let done = vacuum_locked(pipeline, &storage, options).await;
    lock.release().await?;
    done
}

/// [`vacuum`], the run lock held.
async fn vacuum_locked(
    pipeline: &Pipeline,
    storage: &Location,
    options: &VacuumOptions,
) -> Result<Vec<TableVacuum>, RunError> {
    let datasets = selected(pipeline, &options.tables)?;
    let retention = options.retain_hours.map(hours).transpose()?;
    // Every table's retention is checked before any file is deleted.
    if !options.force
        && let Some(wanted) = retention
    {
        for d in &datasets {
            let table = Table::open(&layout::table_dir(storage, d)?).await?;
            if let Some(t) = &table.table {
                refuse_short_retention(d, wanted, table_retention(t))?;
            }
        }
    }
    let mut out = Vec::new();
    for d in datasets {
        let dir = layout::table_dir(storage, d)?;
        let how = TableVacuumOptions {
            retention,
            retention_checked: !options.force,
            keep_added_after: oldest_unread_version(pipeline, storage, d).await?,
            dry_run: options.dry_run,
            name: d.name.clone(),
        };
        out.push(
            vacuum_table(&dir, &how)
                .await?
                .map(|v| v.named(&d.name, false))
                .unwrap_or_else(|| TableVacuum::untouched(&d.name, false, "not created yet")),
        );
        if pipeline.flows_into(&d.name).any(|f| f.auto_cdc().is_some()) {
            let how = TableVacuumOptions {
                retention: Some(STATE_RETENTION),
                retention_checked: false,
                keep_added_after: None,
                dry_run: options.dry_run,
                name: format!("{}__state", d.name),
            };
            let state = layout::state_dir(storage, &d.name)?;
            if let Some(v) = vacuum_table(&state, &how).await? {
                out.push(v.named(&d.name, true));
            }
        }
    }
    Ok(out)
}

/// The datasets named (every materialized one when none is), or an error naming the
/// first that is not a table of the pipeline.
fn selected<'p>(pipeline: &'p Pipeline, names: &[String]) -> Result<Vec<&'p Dataset>, RunError> {
    let tables: Vec<&Dataset> = pipeline
        .datasets
        .iter()
        .filter(|d| d.kind != DatasetKind::View)
        .collect();
    if names.is_empty() {
        return Ok(tables);
    }
    let known = || {
        let names: Vec<&str> = tables.iter().map(|d| d.name.as_str()).collect();
        format!("tables of this pipeline: {}", names.join(", "))
    };
    let mut out: Vec<&Dataset> = Vec::new();
    for name in names {
        match pipeline.dataset(name) {
            None => {
                return Err(
                    RunError::input(format!("vacuum: no table named `{name}`")).with_help(known())
                );
            }
            Some(d) if d.kind == DatasetKind::View => {
                return Err(RunError::input(format!(
                    "vacuum: `{}` is a view: it stores no files",
                    d.name
                ))
                .with_help(known()));
            }
            Some(d) if !out.iter().any(|o| o.name == d.name) => out.push(d),
            Some(_) => {}
        }
    }
    Ok(out)
}

fn hours(h: f64) -> Result<chrono::Duration, RunError> {
    if !h.is_finite() || h < 0.0 {
        return Err(
            RunError::input(format!("vacuum: --retain {h}: not a number of hours"))
                .with_help("give the hours as a number of 0 or more, e.g. --retain 168"),
        );
    }
    // A float's cast saturates: a retention beyond i64's milliseconds keeps everything.
    #[expect(clippy::cast_possible_truncation, reason = "the cast saturates")]
    let millis = (h * 3_600_000.0) as i64;
    Ok(chrono::Duration::milliseconds(millis))
}

pub(crate) fn in_hours(d: chrono::Duration) -> f64 {
    d.num_milliseconds() as f64 / 3_600_000.0
}

fn refuse_short_retention(
    d: &Dataset,
    wanted: chrono::Duration,
    own: chrono::Duration,
) -> Result<(), RunError> {
    if wanted >= own {
        return Ok(());
    }
    Err(RunError::input(format!(
        "vacuum: --retain {} hours is shorter than the retention of `{}` ({} hours, its delta.deletedFileRetentionDuration); nothing was deleted",
        in_hours(wanted),
        d.name,
        in_hours(own)
    ))
    .with_help(format!(
        "readers of older versions of the table (time travel, a query or another engine's job under way) may still need those files: use --retain {} or more, or add --force when no such reader exists (cdcflow's own runs are safe: vacuum holds the run lock)",
        in_hours(own)
    )))
}

/// The oldest version of streaming table `d` that a flow reading it as a stream has
/// read up to, when that is not the current one: the files added after it are still
/// to be read, by name, from the log.
async fn oldest_unread_version(
    pipeline: &Pipeline,
    storage: &Location,
    d: &Dataset,
) -> Result<Option<i64>, RunError> {
    if d.kind != DatasetKind::StreamingTable {
        return Ok(None);
    }
    let mut oldest: Option<i64> = None;
    let records = Storage::at(storage)?;
    for flow in &pipeline.flows {
        let streams_it = flow.inputs.iter().any(|i| {
            matches!(i, Input::Dataset { name, streaming: true } if name.eq_ignore_ascii_case(&d.name))
        }) || flow
            .auto_cdc()
            .is_some_and(|s| s.streaming && s.source.eq_ignore_ascii_case(&d.name));
        let Some(target) = pipeline.dataset(&flow.target).filter(|_| streams_it) else {
            continue;
        };
        // An AUTO CDC batch is done once its state commit landed (the published one
        // lands first): its progress is the state's.
        let progress_table = match flow.kind {
            FlowKind::AutoCdc(_) => layout::state_dir(storage, &target.name)?,
            FlowKind::Query { .. } => layout::table_dir(storage, target)?,
        };
        let table = Table::open(&progress_table).await?;
        let progress = Checkpoint::in_storage(&records, &flow.name)?
            .peek(&table, &layout::app_id(&flow.name))
            .await?;
        if let Some(v) = progress.source_version(&d.name) {
            oldest = Some(oldest.map_or(v, |o| o.min(v)));
        }
    }
    Ok(oldest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_are_hours_of_zero_or_more() {
        assert_eq!(hours(1.5).expect("hours").num_minutes(), 90);
        assert!(hours(-1.0).is_err());
        assert!(hours(f64::NAN).is_err());
    }
}
