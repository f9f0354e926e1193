//! The tables of `syncs:` (pipeline.yaml): asked of their servers before each run, and
//! kept in the storage (the record `_syncs.json`, in a folder or a bucket) as the last
//! run found them, so that `tables`, `status` and `explain` list the same flows without
//! a server, and a table gone from the server since is reported rather than forgotten.

use std::collections::{BTreeMap, BTreeSet};

use cdcflow_plan::Pipeline;
use cdcflow_plan::syncs::SourceTable;
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::sources::Sources;
use crate::storage::{Key, Storage};

/// What the storage keeps of the syncs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncRecord {
    /// The tables each sync synced at the last run, by sync.
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

fn record_key() -> Result<Key, RunError> {
    Key::of(&["_syncs.json"])
}

/// The record of the last run (empty before the first, or when unreadable: it is only
/// a listing, never a position).
pub async fn read_record(pipeline: &Pipeline) -> SyncRecord {
    let Ok((storage, key)) = Storage::of(pipeline).and_then(|s| Ok((s, record_key()?))) else {
        return SyncRecord::default();
    };
    storage
        .get(&key)
        .await
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Of the tables that the `gone` tables fed, those a bucket storage holds (the loader
/// looks in a folder itself: `None` there).
pub async fn stored_in_bucket(
    pipeline: &Pipeline,
    gone: &BTreeMap<String, Vec<SourceTable>>,
) -> Result<Option<BTreeSet<String>>, RunError> {
    if !pipeline.storage().is_remote() {
        return Ok(None);
    }
    let mut stored = BTreeSet::new();
    for (sync, tables) in gone {
        for table in tables {
            stored.extend(datasets_of(pipeline, sync, table).await?);
        }
    }
    Ok(Some(stored))
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

/// Whether a table sync `sync` synced has left its server: the server was asked for
/// the table's schema and did not list it. (A table outside the schemas asked now was
/// left by a change of `tables:`, the user's doing, not the server's.)
fn left_server(
    syncs: &[cdcflow_plan::Sync],
    found: &BTreeMap<String, Vec<SourceTable>>,
    sync: &str,
    table: &SourceTable,
) -> bool {
    let (Some(now), Some(s)) = (found.get(sync), syncs.iter().find(|s| s.name == sync)) else {
        return false;
    };
    let asked = s
        .schemas
        .as_ref()
        .is_none_or(|list| list.contains(&table.schema));
    asked
        && !now
            .iter()
            .any(|t| t.schema == table.schema && t.name == table.name)
}

/// The tables synced once that have left their servers, by sync: those the record kept
/// as gone and those it synced that are gone since, less those back.
pub fn gone_since(
    before: &SyncRecord,
    found: &BTreeMap<String, Vec<SourceTable>>,
    syncs: &[cdcflow_plan::Sync],
) -> BTreeMap<String, Vec<SourceTable>> {
    let mut out: BTreeMap<String, Vec<SourceTable>> = BTreeMap::new();
    let synced = before
        .tables
        .iter()
        .flat_map(|(sync, tables)| tables.iter().map(move |t| (sync, t)));
    let kept = before.gone.iter().map(|g| (&g.sync, &g.table));
    for (sync, table) in kept.chain(synced) {
        let entry = out.entry(sync.clone()).or_default();
        if left_server(syncs, found, sync, table) && !entry.contains(table) {
            entry.push(table.clone());
        }
    }
    out.retain(|_, v| !v.is_empty());
    out
}

/// Records the tables this run's expansion synced; those the last record synced that
/// have left the server since are kept as gone, each said once in the returned notes.
pub async fn record(
    pipeline: &Pipeline,
    found: &BTreeMap<String, Vec<SourceTable>>,
    now_micros: i64,
) -> Result<Vec<String>, RunError> {
    let before = read_record(pipeline).await;
    let synced: BTreeMap<String, Vec<SourceTable>> = pipeline
        .syncs
        .iter()
        .filter_map(|s| {
            let tables = s.tables.as_ref()?;
            Some((
                s.name.clone(),
                tables.iter().map(|t| t.source.clone()).collect(),
            ))
        })
        .collect();
    let mut record = SyncRecord {
        tables: synced,
        gone: before.gone.clone(),
    };
    let mut notes = vec![];
    for (sync, tables) in &before.tables {
        for table in tables {
            let known = record.gone.iter().any(|g| {
                &g.sync == sync && g.table.schema == table.schema && g.table.name == table.name
            });
            if known || !left_server(&pipeline.syncs, found, sync, table) {
                continue;
            }
            let datasets = datasets_of(pipeline, sync, table).await?;
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
    // A table back on the server is synced again; a sync's tables are no longer its
    // concern once the sync is gone from pipeline.yaml.
    record.gone.retain(|g| {
        pipeline.syncs.iter().any(|s| s.name == g.sync)
            && left_server(&pipeline.syncs, found, &g.sync, &g.table)
    });
    if record != before {
        let storage = Storage::of(pipeline)?;
        let key = record_key()?;
        let text = serde_json::to_string_pretty(&record).map_err(|e| RunError::File {
            path: storage.path(&key),
            message: e.to_string(),
        })?;
        storage.put(&key, text.as_bytes()).await?;
    }
    Ok(notes)
}

/// The names of the published tables a sync's table feeds by the sync's templates.
fn fed_names(pipeline: &Pipeline, sync: &str, table: &SourceTable) -> Vec<String> {
    let expanded = pipeline.syncs.iter().find(|s| s.name == sync);
    match (pipeline.config.syncs.get(sync), expanded) {
        (Some(config), Some(s)) => {
            cdcflow_plan::syncs::fed_names(sync, config, (s.kind, &s.default_schema), table)
        }
        _ => vec![],
    }
}

/// The pipeline's tables a sync's table fed that the storage holds.
async fn datasets_of(
    pipeline: &Pipeline,
    sync: &str,
    table: &SourceTable,
) -> Result<Vec<String>, RunError> {
    let storage = pipeline.storage();
    let mut held = vec![];
    for name in fed_names(pipeline, sync, table) {
        let at = crate::layout::published_dir(&storage, &name)?;
        if crate::catalog::exists(&at).await? {
            held.push(name);
        }
    }
    Ok(held)
}
