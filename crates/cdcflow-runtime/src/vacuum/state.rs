//! The automatic vacuum of the internal AUTO CDC state, after a run's batches
//! committed: only cdcflow reads a state table, under the run lock, and only its
//! current version, so it is vacuumed with no retention once it holds more unreferenced
//! bytes than live ones.

use std::collections::BTreeSet;
use std::path::Path;

use cdcflow_plan::Pipeline;
use cdcflow_plan::location::Location;
use deltalake::DeltaTable;

use super::{STATE_RETENTION, TableVacuum, TableVacuumOptions, vacuum_table};
use crate::delta::Table;
use crate::report::{FlowOutcome, RunReport};
use crate::{RunError, layout};

/// After a run's batches committed: vacuums the internal state of each AUTO CDC target
/// a batch changed, once its folder holds more unreferenced data bytes than live ones
/// (so the folder stays under about twice the live state, and a vacuum, with its
/// listing and two commits, comes at most every other batch even when every batch
/// rewrites the state). What it freed goes into the report; a failure is a note,
/// never a failed run: the batches are committed.
pub(crate) async fn vacuum_changed_state(
    pipeline: &Pipeline,
    storage: &Location,
    report: &mut RunReport,
) {
    let targets: BTreeSet<String> = report
        .flows
        .iter()
        .filter(|f| matches!(f.outcome, FlowOutcome::Committed { .. }))
        .filter(|f| {
            pipeline
                .flow(&f.flow)
                .is_some_and(|flow| flow.auto_cdc().is_some())
        })
        .filter_map(|f| pipeline.dataset(&f.target).map(|d| d.name.clone()))
        .collect();
    for target in targets {
        match vacuum_state_if_due(storage, &target).await {
            Ok(Some(v)) => report.vacuumed.push(v),
            Ok(None) => {}
            Err(e) => report.notes.push(format!(
                "the internal state of `{target}` was not vacuumed: {}",
                e.with_help_inline()
            )),
        }
    }
}

async fn vacuum_state_if_due(
    storage: &Location,
    target: &str,
) -> Result<Option<TableVacuum>, RunError> {
    let dir = layout::state_dir(storage, target)?;
    let table = Table::open(&dir).await?;
    let Some(t) = &table.table else {
        return Ok(None);
    };
    let occupied = match &dir {
        Location::Local(folder) => occupancy(t, folder)?,
        Location::Remote(_) => bucket_occupancy(t, &table.dir).await?,
    };
    if !occupied.vacuum_due() {
        return Ok(None);
    }
    let how = TableVacuumOptions {
        retention: Some(STATE_RETENTION),
        retention_checked: false,
        keep_added_after: None,
        dry_run: false,
        name: format!("{target}__state"),
    };
    Ok(vacuum_table(&dir, &how)
        .await?
        .map(|v| v.named(target, true)))
}

/// The data (Parquet) files of a table folder: on disk, and in its current version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub live_files: u64,
    pub live_bytes: u64,
    pub disk_files: u64,
    pub disk_bytes: u64,
}

impl Occupancy {
    /// Bytes on disk no current file accounts for.
    pub fn unreferenced_bytes(&self) -> u64 {
        self.disk_bytes.saturating_sub(self.live_bytes)
    }

    /// The rule of the automatic state vacuum: more unreferenced bytes than live ones.
    pub fn vacuum_due(&self) -> bool {
        self.unreferenced_bytes() > self.live_bytes
    }
}

/// [`occupancy`] of a table in a bucket: one listing of its prefix, with the same
/// entries left out.
async fn bucket_occupancy(table: &DeltaTable, shown: &Path) -> Result<Occupancy, RunError> {
    let mut o = live(table, shown)?;
    for meta in super::folder::objects(table, shown).await? {
        let hidden = meta
            .location
            .parts()
            .any(|p| p.as_ref().starts_with('_') || p.as_ref().starts_with('.'));
        if !hidden && meta.location.as_ref().ends_with(".parquet") {
            o.disk_files += 1;
            o.disk_bytes += meta.size;
        }
    }
    Ok(o)
}

/// The files of the current version of `table`, counted, nothing on disk yet.
fn live(table: &DeltaTable, shown: &Path) -> Result<Occupancy, RunError> {
    let mut o = Occupancy::default();
    let snapshot = table.snapshot().map_err(|e| RunError::delta(shown, e))?;
    for f in snapshot.log_data().iter() {
        o.live_files += 1;
        o.live_bytes += f.size().max(0) as u64;
    }
    Ok(o)
}

/// Counts the Parquet files of the table at `dir`: those of its current version, and
/// those in its folder (links not followed, Delta's hidden `_`/`.` entries left out).
/// A listing of one folder and no reads: cheap beside the batch that changed it.
pub fn occupancy(table: &DeltaTable, dir: &Path) -> Result<Occupancy, RunError> {
    let mut o = live(table, dir)?;
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = std::fs::read_dir(&folder).map_err(|e| RunError::io(&folder, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RunError::io(&folder, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            let kind = entry
                .file_type()
                .map_err(|e| RunError::io(entry.path(), e))?;
            if kind.is_dir() {
                folders.push(entry.path());
            } else if kind.is_file() && name.ends_with(".parquet") {
                o.disk_files += 1;
                o.disk_bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_due_for_a_vacuum_once_unreferenced_bytes_exceed_live_ones() {
        let o = |live_bytes, disk_bytes| Occupancy {
            live_files: 1,
            live_bytes,
            disk_files: 2,
            disk_bytes,
        };
        assert!(!o(100, 100).vacuum_due());
        assert!(!o(100, 200).vacuum_due());
        assert!(o(100, 201).vacuum_due());
        assert!(o(0, 1).vacuum_due());
        assert!(!o(0, 0).vacuum_due());
    }
}
