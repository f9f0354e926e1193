//! Delta tables at an object-store URL (`s3://`, `gs://`, `az://`, `abfss://`), read and never written:
//! external tables another tool exports. deltalake reads the log through the store.
//! cdcflow's Parquet reading (`read.rs`) is synchronous, so the files a read needs
//! (data files and deletion vector files) are fetched whole, concurrently, before it
//! runs ([`Fetched`]), and it decodes them from memory. A read so holds the files it
//! reads (compressed) for its length; docs/storage.md says so.
//!
//! Credentials and endpoints come from the environment, as each cloud's tools read them
//! (`AWS_ACCESS_KEY_ID`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP` for a server
//! on plain HTTP; `GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_APPLICATION_CREDENTIALS`;
//! `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_USE_EMULATOR`);
//! never from pipeline.yaml.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::sync::{Arc, Mutex, Once};

use bytes::Bytes;
use datafusion::object_store::ObjectStoreExt;
use datafusion::parquet::errors::Result as ParquetResult;
use datafusion::parquet::file::reader::{ChunkReader, Length};
use deltalake::logstore::ObjectStoreRef;
use futures::{StreamExt, TryStreamExt};

use crate::RunError;

/// Object-store requests in flight while fetching a read's files.
const FETCHES_IN_FLIGHT: usize = 8;

/// Makes deltalake open `s3://`, `gs://` and Azure's URLs (once per process).
pub(crate) fn register_stores() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        deltalake::aws::register_handlers(None);
        deltalake::gcp::register_handlers(None);
        deltalake::azure::register_handlers(None);
    });
}

/// The files of one remote table fetched so far, by their path relative to the table.
pub(crate) struct Fetched {
    store: ObjectStoreRef,
    /// For messages: the table's URL.
    url: String,
    files: Mutex<HashMap<String, Bytes>>,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fetched({})", self.url)
    }
}

impl Fetched {
    /// `store` is rooted at the table (deltalake's table object store).
    pub(crate) fn new(store: ObjectStoreRef, url: String) -> Self {
        Self {
            store,
            url,
            files: Mutex::new(HashMap::new()),
        }
    }

    /// Fetches the files at `relative` paths not fetched yet.
    pub(crate) async fn fetch(&self, relative: Vec<String>) -> Result<(), RunError> {
        let missing: Vec<String> = {
            let have = self.lock()?;
            let mut missing: Vec<String> = relative
                .into_iter()
                .filter(|r| !have.contains_key(r))
                .collect();
            missing.sort();
            missing.dedup();
            missing
        };
        let fetched: Vec<(String, Bytes)> = futures::stream::iter(missing)
            .map(|relative| async move {
                let location =
                    deltalake::Path::parse(&relative).map_err(|e| self.error(&relative, e))?;
                let bytes = self
                    .store
                    .get(&location)
                    .await
                    .map_err(|e| self.error(&relative, e))?
                    .bytes()
                    .await
                    .map_err(|e| self.error(&relative, e))?;
                Ok::<_, RunError>((relative, bytes))
            })
            .buffer_unordered(FETCHES_IN_FLIGHT)
            .try_collect()
            .await?;
        self.lock()?.extend(fetched);
        Ok(())
    }

    /// Lets go of the fetched files at `relative` (a read done with them).
    pub(crate) fn forget(&self, relative: &[String]) -> Result<(), RunError> {
        let mut files = self.lock()?;
        for r in relative {
            files.remove(r);
        }
        Ok(())
    }

    /// The bytes of the file at `relative`, fetched before.
    pub(crate) fn bytes(&self, relative: &str) -> Result<Bytes, RunError> {
        self.lock()?.get(relative).cloned().ok_or_else(|| {
            RunError::internal(format!(
                "{}{relative} was read before it was fetched",
                self.url
            ))
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Bytes>>, RunError> {
        self.files
            .lock()
            .map_err(|_| RunError::internal("a remote table's fetched files were poisoned"))
    }

    fn error(&self, relative: &str, e: impl std::fmt::Display) -> RunError {
        RunError::File {
            path: format!("{}{relative}", self.url).into(),
            message: e.to_string(),
        }
    }
}

/// A data file of a remote table: where it is, and the fetched files it is read from.
#[derive(Debug, Clone)]
pub(crate) struct RemoteFile {
    pub fetched: Arc<Fetched>,
    /// Relative to the table.
    pub relative: String,
}

/// A Parquet file to decode: on the local disk, or fetched into memory.
pub(crate) enum Source {
    File(File),
    Bytes(Bytes),
}

impl Length for Source {
    fn len(&self) -> u64 {
        match self {
            Self::File(f) => f.len(),
            Self::Bytes(b) => b.len() as u64,
        }
    }
}

impl ChunkReader for Source {
    type T = Box<dyn Read + Send>;

    fn get_read(&self, start: u64) -> ParquetResult<Self::T> {
        Ok(match self {
            Self::File(f) => Box::new(f.get_read(start)?),
            Self::Bytes(b) => Box::new(b.get_read(start)?),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> ParquetResult<Bytes> {
        match self {
            Self::File(f) => f.get_bytes(start, length),
            Self::Bytes(b) => b.get_bytes(start, length),
        }
    }
}
