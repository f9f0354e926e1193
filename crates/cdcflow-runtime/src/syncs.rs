//! The tables of `syncs:` (pipeline.yaml): asked of their servers before each run, and
//! kept in the storage (`_syncs.json`) as the last run found them, so that `tables`,
//! `status` and `explain` list the same flows without a server, and a table gone from
//! the server since is reported rather than forgotten.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cdcflow_plan::Pipeline;
use cdcflow_plan::syncs::{SourceTable, SyncedTable};
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::sources::Sources;

/// What the storage keeps of the syncs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncRecord {
    /// The tables each sync's server had at the last run, by sync.
    pub tables: BTreeMap<String, Vec<SourceTable>>,
    /// Tables synced once that the server no longer had at a later run.
    #[serde(default)]
    pub gone: Vec<GoneTable>,
}

/// A synced table the server no longer has (dropped or renamed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoneTable {
    pub sync: String,
    pub table: SourceTable,
    /// The pipeline's tables it fed, kept as they were.
    pub datasets: Vec<String>,
    /// When a run first found it gone, µs since the epoch.
    pub since_micros: i64,
}

impl SyncRecord {
    /// The gone tables, by sync.
    pub fn gone_by_sync(&self) -> BTreeMap<String, Vec<SourceTable>> {
        let mut out: BTreeMap<String, Vec<SourceTable>> = BTreeMap::new();
        for g in &self.gone {
            out.entry(g.sync.clone()).or_default().push(g.table.clone());
        }
        out
    }
}

fn record_path(storage: &Path) -> PathBuf {
    storage.join("_syncs.json")
}

/// The record of the last run (empty before the first, or when unreadable: it is only
/// a listing, never a position).
pub fn read_record(storage: &Path) -> SyncRecord {
    std::fs::read(record_path(storage))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The tables every sync's server has in the schemas the sync names.
pub async fn ask_tables(
    pipeline: &Pipeline,
    sources: &Sources,
) -> Result<BTreeMap<String, Vec<SourceTable>>, RunError> {
    let mut found = BTreeMap::new();
    for sync in &pipeline.syncs {
        let Some(asked) = sources.0.sync_tables(pipeline, sync) else {
            return Err(RunError::input(format!(
                "this run cannot list the tables of sync `{}`: no source for {} connections was given",
                sync.name,
                sync.kind.as_str()
            ))
            .with_help("run the pipeline with the cdcflow binary, which has every source kind"));
        };
        found.insert(sync.name.clone(), asked.await?);
    }
    Ok(found)
}

/// The tables synced once that `found` no longer has, by sync: those the record kept
/// as gone and those it listed that are gone since, less those back.
pub fn gone_since(
    before: &SyncRecord,
    found: &BTreeMap<String, Vec<SourceTable>>,
) -> BTreeMap<String, Vec<SourceTable>> {
    let has = |sync: &str, t: &SourceTable| {
        found
            .get(sync)
            .is_some_and(|now| now.iter().any(|n| n.schema == t.schema && n.name == t.name))
    };
    let mut out: BTreeMap<String, Vec<SourceTable>> = BTreeMap::new();
    let listed = before
        .tables
        .iter()
        .filter(|(sync, _)| found.contains_key(*sync))
        .flat_map(|(sync, tables)| tables.iter().map(move |t| (sync, t)));
    let kept = before.gone.iter().map(|g| (&g.sync, &g.table));
    for (sync, table) in kept.chain(listed) {
        let entry = out.entry(sync.clone()).or_default();
        if !has(sync, table) && !entry.contains(table) {
            entry.push(table.clone());
        }
    }
    out.retain(|_, v| !v.is_empty());
    out
}

/// Records what this run's expansion found; what the last record synced and this
/// expansion no longer has is kept as gone, each said once in the returned notes.
pub fn record(
    pipeline: &Pipeline,
    found: &BTreeMap<String, Vec<SourceTable>>,
    now_micros: i64,
) -> Result<Vec<String>, RunError> {
    let storage = pipeline.storage_dir();
    let before = read_record(&storage);
    let mut record = SyncRecord {
        tables: found.clone(),
        gone: before.gone.clone(),
    };
    let mut notes = vec![];
    for (sync, tables) in &before.tables {
        // A sync removed from pipeline.yaml is the user's doing, not the server's.
        let Some(now) = found.get(sync) else {
            continue;
        };
        for table in tables {
            let still = now
                .iter()
                .any(|t| t.schema == table.schema && t.name == table.name);
            let known = record.gone.iter().any(|g| {
                &g.sync == sync && g.table.schema == table.schema && g.table.name == table.name
            });
            if still || known {
                continue;
            }
            let datasets = datasets_of(pipeline, sync, table);
            notes.push(format!(
                "sync `{sync}`: table {table} is no longer on the server (dropped or renamed){}; `cdcflow status` lists it until it is back",
                match datasets.is_empty() {
                    true => String::new(),
                    false => format!(": {} kept as they were, no longer updated", datasets.join(", ")),
                }
            ));
            record.gone.push(GoneTable {
                sync: sync.clone(),
                table: table.clone(),
                datasets,
                since_micros: now_micros,
            });
        }
    }
    // A table back on the server is synced again.
    record.gone.retain(|g| {
        !found.get(&g.sync).is_some_and(|now| {
            now.iter()
                .any(|t| t.schema == g.table.schema && t.name == g.table.name)
        })
    });
    if record != before {
        std::fs::create_dir_all(&storage).map_err(|e| RunError::io(&storage, e))?;
        let text = serde_json::to_string_pretty(&record).map_err(|e| RunError::File {
            path: record_path(&storage),
            message: e.to_string(),
        })?;
        crate::checkpoint::write_atomic(&record_path(&storage), text.as_bytes())?;
    }
    Ok(notes)
}

/// The pipeline's tables a sync's table fed that the storage holds.
fn datasets_of(pipeline: &Pipeline, sync: &str, table: &SourceTable) -> Vec<String> {
    match pipeline.config.syncs.get(sync) {
        Some(config) => {
            cdcflow_plan::syncs::stored_names(&pipeline.storage_dir(), sync, config, table)
        }
        None => vec![],
    }
}

/// The synced tables of a pipeline, for listings.
pub fn synced_tables(pipeline: &Pipeline) -> impl Iterator<Item = (&str, &SyncedTable)> {
    pipeline
        .syncs
        .iter()
        .flat_map(|s| s.tables.iter().flatten().map(move |t| (s.name.as_str(), t)))
}
