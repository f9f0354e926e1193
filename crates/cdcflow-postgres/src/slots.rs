//! The replication slots a pipeline storage reads, so that none keeps WAL on a server
//! after the pipeline stops needing it. A slot retains every WAL segment after its
//! confirmed position for as long as it exists: a slot no flow reads any more fills
//! the server's disk without a word.
//!
//! - Each read records its slot in the storage (`_storage/_postgres/<slot>.json`: the
//!   connection's name and server, never a secret), and its publication carries a
//!   comment naming the storage's identity and folder.
//! - A run of the whole pipeline drops, with its publication, every recorded slot no
//!   flow reads any more (its connection is read by no flow, or every table of the
//!   connection moved to another slot), and says so.
//! - `cdcflow status` lists the cdcflow slots on the pipeline's servers that no
//!   pipeline folder on this machine claims, with the WAL they retain.
//! - `cdcflow vacuum --drop-slot NAME` drops one by name.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};

use cdcflow_plan::{Input, Pipeline};
use cdcflow_runtime::RunError;
use cdcflow_runtime::sizes::bytes;
use cdcflow_runtime::sources::StrayCursor;
use cdcflow_runtime::storage::{Key, Storage};
use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use crate::connection::{PgConnection, quote_ident};
use crate::error::PgError;

/// Where a storage records its slots: `_postgres/`.
fn folder() -> Result<Key, RunError> {
    Key::of(&["_postgres"])
}

/// A slot a storage reads, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub slot: String,
    /// The identity of the storage that recorded it: a copied storage holds the
    /// original's records, which are not its own.
    pub storage_id: String,
    /// The connection's name in pipeline.yaml.
    pub connection: String,
    pub host: String,
    pub port: u16,
    pub database: String,
}

impl Recorded {
    pub fn server(&self) -> String {
        format!("{}:{}/{}", self.host, self.port, self.database)
    }
}

/// Records that the storage reads `slot` through `connection`, once.
pub async fn record(
    storage: &Storage,
    slot: &str,
    connection: &str,
    server: &PgConnection,
) -> Result<(), RunError> {
    let Some(id) = cdcflow_runtime::storage_id::read(storage).await? else {
        return Ok(());
    };
    if recorded(storage)
        .await?
        .iter()
        .any(|r| r.slot == slot && r.storage_id == id.as_str())
    {
        return Ok(());
    }
    let entry = Recorded {
        slot: slot.to_string(),
        storage_id: id.as_str().to_string(),
        connection: connection.to_string(),
        host: server.host.clone(),
        port: server.port,
        database: server.database.clone(),
    };
    let text =
        serde_json::to_string_pretty(&entry).map_err(|e| RunError::internal(e.to_string()))?;
    storage
        .put(&folder()?.join(&format!("{slot}.json"))?, text.as_bytes())
        .await
}

/// The slots this storage recorded (not those of a storage it was copied from), by
/// name.
pub async fn own_recorded(storage: &Storage) -> Result<Vec<Recorded>, RunError> {
    let Some(id) = cdcflow_runtime::storage_id::read(storage).await? else {
        return Ok(vec![]);
    };
    Ok(recorded(storage)
        .await?
        .into_iter()
        .filter(|r| r.storage_id == id.as_str())
        .collect())
}

/// Every slot record in the storage, by name.
async fn recorded(storage: &Storage) -> Result<Vec<Recorded>, RunError> {
    let mut out = vec![];
    for entry in storage.list(&folder()?).await? {
        if !entry.key.name().ends_with(".json") {
            continue;
        }
        let shown = storage.describe(&entry.key);
        let bytes = storage.get(&entry.key).await?.unwrap_or_default();
        let recorded: Recorded = serde_json::from_slice(&bytes)
            .map_err(|e| RunError::input(format!("{shown} cannot be read: {e}")))?;
        out.push(recorded);
    }
    out.sort_by(|a, b| a.slot.cmp(&b.slot));
    Ok(out)
}

async fn forget(storage: &Storage, slot: &str) -> Result<(), RunError> {
    storage
        .delete(&folder()?.join(&format!("{slot}.json"))?)
        .await
}

/// The comment a publication carries: which storage reads it, and where (its folder,
/// or its bucket prefix's URL: `storage_id::place`).
pub fn claim(id: &str, place: &Path) -> String {
    format!("cdcflow storage {id} {}", place.display())
}

/// The storage a publication's comment names, when it is still there (a folder of
/// this machine, or a bucket prefix this machine can read) and holds the identity the
/// comment names.
pub async fn claimed_by(comment: Option<&str>) -> Option<PathBuf> {
    let rest = comment?.strip_prefix("cdcflow storage ")?;
    let (id, path) = rest.split_once(' ')?;
    let path = PathBuf::from(path);
    let storage = cdcflow_runtime::storage_id::at_place(&path).ok()?;
    let holds = cdcflow_runtime::storage_id::read(&storage)
        .await
        .ok()
        .flatten()
        .is_some_and(|found| found.as_str() == id);
    holds.then_some(path)
}

/// What dropping a slot did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// Dropped, with its publication; it retained this many bytes of WAL.
    Done { retained: Option<i64> },
    /// The server has no such slot.
    Missing,
    /// A session is streaming it: not dropped.
    Active { pid: Option<i32> },
}

/// Drops slot `slot` and the publication of the same name in `client`'s database,
/// unless a session streams it.
pub async fn drop_slot(client: &Client, slot: &str) -> Result<Dropped, PgError> {
    let row = client
        .query_opt(
            "SELECT active_pid, (pg_current_wal_lsn() - restart_lsn)::bigint \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    let Some(row) = row else {
        client
            .batch_execute(&format!("DROP PUBLICATION IF EXISTS {}", quote_ident(slot)))
            .await?;
        return Ok(Dropped::Missing);
    };
    let pid: Option<i32> = row.get(0);
    if pid.is_some() {
        return Ok(Dropped::Active { pid });
    }
    let retained: Option<i64> = row.get(1);
    client
        .query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
            &[&slot],
        )
        .await?;
    client
        .batch_execute(&format!("DROP PUBLICATION IF EXISTS {}", quote_ident(slot)))
        .await?;
    Ok(Dropped::Done { retained })
}

/// The connections of the pipeline that some flow reads through `read_postgres`.
pub fn read_connections(pipeline: &Pipeline) -> Vec<String> {
    let mut out: Vec<String> = pipeline
        .flows
        .iter()
        .flat_map(|f| f.inputs.iter())
        .filter_map(|i| match i {
            Input::Postgres(rp) => Some(rp.connection.clone()),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Drops, with their publications, the slots `storage` recorded that no flow reads any
/// more: their connection is read by no flow (`in_use` has no entry for it), or its
/// tables read another slot now (`in_use` names that one). A connection whose tables
/// have committed nothing yet (`None`) keeps its slots. Returns what was done, for the
/// run's summary.
pub async fn retire(
    pipeline: &Pipeline,
    in_use: &std::collections::BTreeMap<String, Option<String>>,
) -> Result<Vec<String>, RunError> {
    let storage = Storage::of(pipeline)?;
    let mut notes = vec![];
    for entry in own_recorded(&storage).await? {
        let needed = match in_use.get(&entry.connection) {
            None => false,
            Some(None) => true,
            Some(Some(slot)) => *slot == entry.slot,
        };
        if needed {
            continue;
        }
        let Some(declared) = pipeline.config.connections.get(&entry.connection) else {
            notes.push(format!(
                "replication slot `{}` on {} is no longer read by this pipeline, but its connection `{}` is gone from pipeline.yaml: drop it there (SELECT pg_drop_replication_slot('{}'); DROP PUBLICATION {};) or it keeps WAL on the server",
                entry.slot,
                entry.server(),
                entry.connection,
                entry.slot,
                quote_ident(&entry.slot)
            ));
            continue;
        };
        let dropped = async {
            let connection = crate::runtime::resolve(&entry.connection, declared)?;
            let client = connection
                .connect()
                .await
                .map_err(|e| RunError::input(e.to_string()))?;
            drop_slot(&client, &entry.slot)
                .await
                .map_err(|e| RunError::input(e.to_string()))
        }
        .await;
        match dropped {
            Ok(Dropped::Done { retained }) => {
                forget(&storage, &entry.slot).await?;
                notes.push(format!(
                    "dropped replication slot `{}` and its publication on {}: no flow reads it any more{}",
                    entry.slot,
                    entry.server(),
                    retained
                        .map(|r| format!(" (it kept {} of WAL, which the server frees)", bytes(u64::try_from(r).unwrap_or(0))))
                        .unwrap_or_default()
                ));
            }
            Ok(Dropped::Missing) => forget(&storage, &entry.slot).await?,
            Ok(Dropped::Active { pid }) => notes.push(format!(
                "replication slot `{}` on {} is no longer read by this pipeline, but a session (pid {}) streams it: not dropped; the next run tries again",
                entry.slot,
                entry.server(),
                pid.map(|p| p.to_string()).unwrap_or_default()
            )),
            Err(e) => notes.push(format!(
                "replication slot `{}` on {} is no longer read by this pipeline and could not be dropped ({e}); the next run tries again",
                entry.slot,
                entry.server()
            )),
        }
    }
    Ok(notes)
}

/// The cdcflow slots in the databases of the pipeline's connections (those some flow
/// reads) that neither this storage reads nor any folder on this machine claims.
/// Servers that do not answer are left out.
pub async fn strays(pipeline: &Pipeline, own: &[String]) -> Vec<StrayCursor> {
    let mut out = vec![];
    for name in read_connections(pipeline) {
        let Some(declared) = pipeline.config.connections.get(&name) else {
            continue;
        };
        let Ok(connection) = crate::runtime::resolve(&name, declared) else {
            continue;
        };
        let Ok(client) = connection.connect().await else {
            continue;
        };
        let Ok(rows) = client
            .query(
                "SELECT s.slot_name::text, s.active, (pg_current_wal_lsn() - s.restart_lsn)::bigint, \
                 obj_description(p.oid, 'pg_publication') \
                 FROM pg_replication_slots s LEFT JOIN pg_publication p ON p.pubname = s.slot_name \
                 WHERE s.slot_name LIKE 'cdcflow\\_%' AND s.database = current_database() \
                 ORDER BY 1",
                &[],
            )
            .await
        else {
            continue;
        };
        for row in rows {
            let slot: String = row.get(0);
            let comment: Option<String> = row.get(3);
            if own.contains(&slot) || claimed_by(comment.as_deref()).await.is_some() {
                continue;
            }
            let server = format!(
                "{}:{}/{}",
                connection.host, connection.port, connection.database
            );
            if out
                .iter()
                .any(|s: &StrayCursor| s.name == slot && s.server == server)
            {
                continue;
            }
            out.push(StrayCursor {
                name: slot,
                server,
                retained_bytes: row.get(2),
                active: row.get(1),
                last_claimed_by: comment
                    .as_deref()
                    .and_then(|c| c.strip_prefix("cdcflow storage "))
                    .and_then(|c| c.split_once(' '))
                    .map(|(_, path)| path.to_string()),
            });
        }
    }
    out
}

/// `cdcflow vacuum --drop-slot NAME`: drops cdcflow slot `name` and its publication in
/// the database of one of the pipeline's connections. Refuses a name that is not a
/// cdcflow slot's, a slot this storage reads (`own`), and one a session streams.
pub async fn drop_named(
    pipeline: &Pipeline,
    name: &str,
    own: &[String],
) -> Result<String, RunError> {
    if !name.starts_with("cdcflow_") {
        return Err(RunError::input(format!(
            "`{name}` is not a cdcflow replication slot (their names start with cdcflow_): cdcflow drops only its own"
        )));
    }
    if own.iter().any(|o| o == name) {
        return Err(RunError::input(format!(
            "replication slot `{name}` is this pipeline's: its flows read it"
        ))
        .with_help("remove the read_postgres flows that read it: the next run drops it"));
    }
    let storage = Storage::of(pipeline)?;
    let mut servers = vec![];
    for connection in read_connections(pipeline) {
        let Some(declared) = pipeline.config.connections.get(&connection) else {
            continue;
        };
        let server = crate::runtime::resolve(&connection, declared)?;
        let at = format!("{}:{}/{}", server.host, server.port, server.database);
        let client = server
            .connect()
            .await
            .map_err(|e| RunError::input(format!("connection `{connection}`: {e}")))?;
        let here = client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()",
                &[&name],
            )
            .await
            .map_err(|e| RunError::input(format!("connection `{connection}`: {}", PgError::from(e))))?;
        if here.is_none() {
            servers.push(at);
            continue;
        }
        let dropped = drop_slot(&client, name)
            .await
            .map_err(|e| RunError::input(format!("connection `{connection}`: {e}")))?;
        return match dropped {
            Dropped::Done { retained } => {
                forget(&storage, name).await?;
                Ok(format!(
                    "dropped replication slot `{name}` and its publication on {at}{}",
                    retained
                        .map(|r| format!(
                            " (it kept {} of WAL)",
                            bytes(u64::try_from(r).unwrap_or(0))
                        ))
                        .unwrap_or_default()
                ))
            }
            Dropped::Missing => Ok(format!(
                "replication slot `{name}` on {at} was gone already"
            )),
            Dropped::Active { pid } => Err(RunError::input(format!(
                "replication slot `{name}` on {at} is streamed by a session (pid {}): not dropped",
                pid.map(|p| p.to_string()).unwrap_or_default()
            ))
            .with_help("stop the pipeline that reads it first")),
        };
    }
    Err(RunError::input(format!(
        "no replication slot `{name}` in the databases of this pipeline's connections ({})",
        servers.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_claim_holds_only_while_its_folder_holds_the_identity() {
        assert_eq!(claimed_by(None).await, None);
        assert_eq!(claimed_by(Some("made by hand")).await, None);
        let dir = std::env::temp_dir().join(format!("cdcflow-claim-{}", std::process::id()));
        let storage = Storage::local(&dir);
        let id = cdcflow_runtime::storage_id::ensure(&storage)
            .await
            .unwrap()
            .id;
        let here = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(
            claimed_by(Some(&claim(id.as_str(), &here))).await,
            Some(here.clone())
        );
        assert_eq!(claimed_by(Some(&claim("0123", &here))).await, None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(claimed_by(Some(&claim(id.as_str(), &here))).await, None);
    }
}
