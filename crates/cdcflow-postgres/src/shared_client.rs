//! One SQL connection per server and login for the reads of a run: the catalog
//! queries each read makes (the WAL position, the table's columns, its publication and
//! slot) go through it instead of a connection of their own, so that a pipeline of
//! fifty tables polled every half second costs the server one connection, not fifty a
//! poll. A read that copies a chunk of a table opens its own, since the copy holds a
//! transaction in an exported snapshot. A connection that broke (a restart of the
//! server) is replaced at the next read.

use std::sync::Arc;

use tokio_postgres::Client;

use crate::connection::PgConnection;
use crate::error::PgError;

/// A server and login, and the connection kept for it.
type Kept = Vec<(PgConnection, Arc<Client>)>;

/// The run's shared SQL connections, by server and login.
#[derive(Clone, Default)]
pub struct SharedClients(Arc<tokio::sync::Mutex<Kept>>);

impl std::fmt::Debug for SharedClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedClients")
    }
}

impl SharedClients {
    /// The connection kept for `connection`, made when there is none or it broke.
    pub async fn get(&self, connection: &PgConnection) -> Result<Arc<Client>, PgError> {
        let mut kept = self.0.lock().await;
        kept.retain(|(_, client)| !client.is_closed());
        if let Some((_, client)) = kept.iter().find(|(k, _)| k == connection) {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(connection.connect().await?);
        kept.push((connection.clone(), Arc::clone(&client)));
        Ok(client)
    }

    /// Lets go of the connection kept for `connection` (its server went away): the
    /// next read makes a new one.
    pub async fn forget(&self, connection: &PgConnection) {
        self.0.lock().await.retain(|(k, _)| k != connection);
    }
}
