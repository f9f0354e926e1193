//! The server objects a table's change stream depends on, and the checks that they are
//! still the ones the checkpoint's position was read from. The stream publishes a
//! table's changes only while the publication holds it, with the options that publish
//! every kind of change; and it names the table by its OID. An operator who takes the
//! table out of the publication (and maybe puts it back), drops the publication, or
//! drops the table and creates another under its name leaves a gap no later read can
//! fill: each read compares what it finds with what the position recorded and stops,
//! naming the table and the full refresh that recovers, before it touches anything.
//!
//! The same look also refuses a table the publication would break: without a replica
//! identity (no primary key under `REPLICA IDENTITY DEFAULT`, or `NOTHING`), PostgreSQL
//! refuses the application's UPDATE and DELETE on a table that a publication publishes
//! them for.

use tokio_postgres::Client;

use crate::error::{PgError, Refresh};
use crate::source::TableSource;

/// The identities of the objects a table's stream depends on, as a read found them
/// (PostgreSQL OIDs: an object dropped and created again under its name has another).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The table.
    pub relid: u32,
    /// The publication.
    pub publication: u32,
    /// The table's membership of the publication (its `pg_publication_rel` row; 0 for
    /// a publication of all tables): taken out and put back, it is another.
    pub member: u32,
}

/// What a read finds of the table and its publication.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Found {
    pub relid: u32,
    /// `pg_class.relreplident`: `d` (the primary key), `n` (nothing), `f` (full), `i`
    /// (an index).
    pub replica_identity: String,
    pub primary_key: bool,
    pub publication: Option<Publication>,
}

/// The publication as found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Publication {
    pub oid: u32,
    /// The kinds of change it publishes (`publish = '…'`).
    pub publishes: Vec<&'static str>,
    pub all_tables: bool,
    /// The table's membership row, when it holds the table.
    pub member: Option<u32>,
    /// The membership has a row filter or a column list (PostgreSQL 15).
    pub narrowed: bool,
}

/// Every kind of change a table's stream needs published.
const KINDS: [&str; 4] = ["insert", "update", "delete", "truncate"];

impl Found {
    /// The identity a read records, once the publication holds the table.
    pub fn identity(&self) -> Option<Identity> {
        let p = self.publication.as_ref()?;
        let member = match p.all_tables {
            true => 0,
            false => p.member?,
        };
        Some(Identity {
            relid: self.relid,
            publication: p.oid,
            member,
        })
    }

    /// Whether the publication holds the table.
    pub fn published(&self) -> bool {
        self.publication
            .as_ref()
            .is_some_and(|p| p.all_tables || p.member.is_some())
    }
}

impl TableSource {
    /// The table and its publication as the server has them now.
    pub(crate) async fn find(&self, client: &Client) -> Result<Found, PgError> {
        let table = client
            .query_opt(
                "SELECT c.oid, c.relreplident::text, \
                 EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&self.table.schema, &self.table.name],
            )
            .await?
            .ok_or_else(|| self.missing_table())?;
        let relid: u32 = table.get(0);
        // The membership row as JSON, so that columns of newer servers (the row filter
        // and column list of PostgreSQL 15) read as absent on older ones.
        let publication = client
            .query_opt(
                "SELECT p.oid, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, p.puballtables, \
                 r.oid, coalesce(to_jsonb(r) ->> 'prqual', to_jsonb(r) ->> 'prattrs') IS NOT NULL \
                 FROM pg_publication p \
                 LEFT JOIN pg_publication_rel r ON r.prpubid = p.oid AND r.prrelid = $2 \
                 WHERE p.pubname = $1",
                &[&self.publication, &relid],
            )
            .await?
            .map(|row| Publication {
                oid: row.get(0),
                publishes: KINDS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| row.get::<_, bool>(i + 1))
                    .map(|(_, kind)| *kind)
                    .collect(),
                all_tables: row.get(5),
                member: row.get(6),
                narrowed: row.get(7),
            });
        Ok(Found {
            relid,
            replica_identity: table.get(1),
            primary_key: table.get(2),
            publication,
        })
    }

    pub(crate) fn missing_table(&self) -> PgError {
        PgError::NotReady {
            message: format!(
                "table `{}` does not exist in database `{}`",
                self.table, self.connection.database
            ),
            help: "check table => 'schema.table' in read_postgres and the connection's database"
                .into(),
        }
    }

    /// Refuses a table whose UPDATE and DELETE PostgreSQL would reject once a
    /// publication publishes them: one without a replica identity.
    pub(crate) fn check_replica_identity(&self, found: &Found) -> Result<(), PgError> {
        let usable = match found.replica_identity.as_str() {
            "f" | "i" => true,
            "d" => found.primary_key,
            _ => false,
        };
        if usable {
            return Ok(());
        }
        let why = match found.replica_identity.as_str() {
            "n" => "its REPLICA IDENTITY is NOTHING",
            _ => "it has no primary key and its REPLICA IDENTITY is DEFAULT",
        };
        Err(PgError::NotReady {
            message: format!(
                "table `{}` cannot be captured: {why}, so once a publication holds it PostgreSQL refuses the application's UPDATE and DELETE on it; cdcflow left the publication alone",
                self.table
            ),
            help: format!(
                "give the table a replica identity as its owner: ALTER TABLE {t} REPLICA IDENTITY FULL; (every old row is logged whole), or a unique index on NOT NULL columns as the identity: ALTER TABLE {t} REPLICA IDENTITY USING INDEX <index>;",
                t = crate::source::table_sql(&self.table)
            ),
        })
    }

    /// Checks, for a table whose position was committed (`recorded` when the position
    /// kept the identities), that the stream since then has every change of it.
    pub(crate) fn check_continuity(
        &self,
        found: &Found,
        recorded: Option<&Identity>,
    ) -> Result<(), PgError> {
        if let Some(recorded) = recorded
            && recorded.relid != found.relid
        {
            return Err(self.gap(
                Refresh::Table,
                format!(
                    "table `{}` was dropped and created again since the last run (it was OID {}, it is OID {}): the stream has not the old table's end nor the new one's rows",
                    self.table, recorded.relid, found.relid
                ),
            ));
        }
        let Some(p) = &found.publication else {
            return Err(self.gap(
                Refresh::Connection,
                format!(
                    "publication `{}` was dropped on the server since the last run: the replication slot cannot stream the changes since then (for this table and the others it holds)",
                    self.publication
                ),
            ));
        };
        if recorded.is_some_and(|r| r.publication != p.oid) {
            return Err(self.gap(
                Refresh::Connection,
                format!(
                    "publication `{}` was dropped and created again since the last run: the changes in between were not published",
                    self.publication
                ),
            ));
        }
        let member = match p.all_tables {
            true => Some(0),
            false => p.member,
        };
        match (member, recorded) {
            (None, _) => Err(self.gap(
                Refresh::Table,
                format!(
                    "table `{}` was taken out of publication `{}` since the last run: its changes since then were not published (cdcflow does not put it back, which would hide the gap)",
                    self.table, self.publication
                ),
            )),
            (Some(now), Some(r)) if now != r.member => Err(self.gap(
                Refresh::Table,
                format!(
                    "table `{}` was taken out of publication `{}` and put back since the last run: its changes in between were not published",
                    self.table, self.publication
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a publication that leaves out some of the table's changes: a `publish`
    /// setting without every kind, or a row filter or column list.
    pub(crate) fn check_publishes_everything(&self, found: &Found) -> Result<(), PgError> {
        let Some(p) = &found.publication else {
            return Ok(());
        };
        let missing: Vec<&str> = KINDS
            .iter()
            .filter(|k| !p.publishes.contains(k))
            .copied()
            .collect();
        let name = crate::connection::quote_ident(&self.publication);
        if !missing.is_empty() {
            return Err(PgError::Data {
                message: format!(
                    "publication `{}` does not publish {} (its publish setting is '{}'): those changes of `{}` would be lost",
                    self.publication,
                    missing.join(", "),
                    p.publishes.join(", "),
                    self.table
                ),
                help: format!(
                    "ALTER PUBLICATION {name} SET (publish = 'insert, update, delete, truncate'); then `cdcflow run --full-refresh <table>` takes a new snapshot if such changes were made meanwhile"
                ),
            });
        }
        if p.narrowed {
            return Err(PgError::Data {
                message: format!(
                    "publication `{}` holds `{}` with a row filter or a column list: the rows or columns it leaves out would be lost",
                    self.publication, self.table
                ),
                help: format!(
                    "ALTER PUBLICATION {name} SET TABLE … without WHERE or a column list for this table (cdcflow filters in the flow's query instead)"
                ),
            });
        }
        Ok(())
    }

    fn gap(&self, refresh: Refresh, message: String) -> PgError {
        PgError::Gap { message, refresh }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(member: Option<u32>) -> Found {
        Found {
            relid: 10,
            replica_identity: "d".into(),
            primary_key: true,
            publication: Some(Publication {
                oid: 20,
                publishes: KINDS.to_vec(),
                all_tables: false,
                member,
                narrowed: false,
            }),
        }
    }

    #[test]
    fn the_identity_is_known_once_the_publication_holds_the_table() {
        assert_eq!(found(None).identity(), None);
        assert_eq!(
            found(Some(30)).identity(),
            Some(Identity {
                relid: 10,
                publication: 20,
                member: 30
            })
        );
        assert!(found(Some(30)).published());
        assert!(!found(None).published());
    }
}
