//! Records in a bucket, through the object store deltalake opens for the same URL
//! (its S3, GCS or Azure client, with credentials and settings from the environment:
//! `AWS_*`, `GOOGLE_*`, `AZURE_*`). A put is atomic per object on all three; creating
//! only if absent is the store's conditional put (`If-None-Match: *` on S3 and Azure,
//! `ifGenerationMatch=0` on GCS), which object_store sends for [`PutMode::Create`], and
//! a swap is conditional on the ETag or generation ([`PutMode::Update`]). A store that
//! cannot do it (`AWS_CONDITIONAL_PUT=disabled`) is refused with the reason rather
//! than written without the guarantee.

use std::path::PathBuf;

use datafusion::object_store::{
    self, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion, path::Path as StorePath,
};
use deltalake::logstore::ObjectStoreRef;
use futures::TryStreamExt;
use url::Url;

use super::{Entry, Key};
use crate::RunError;

/// The version of a record as the store tags it (its ETag), for a compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    e_tag: Option<String>,
    version: Option<String>,
}

/// What a compare-and-swap did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swap {
    /// Written; the record's new version.
    Done(Tag),
    /// Not written: the record was not at the expected version (or was there already).
    Conflict,
}

/// A bucket prefix as a pipeline's storage.
#[derive(Clone)]
pub struct Remote {
    url: Url,
    /// Rooted at the prefix: keys are paths in it.
    store: ObjectStoreRef,
    /// What it was opened with besides the environment (tests pass a server's address).
    options: Vec<(String, String)>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({})", self.url)
    }
}

impl Remote {
    /// The storage at `url` (`s3://bucket/prefix`), configured by the environment and
    /// `options` (object_store's keys, e.g. `aws_endpoint`; a pipeline passes none).
    pub fn open(url: &Url, options: &[(&str, &str)]) -> Result<Self, RunError> {
        crate::delta::remote::register_stores();
        let store = deltalake::logstore::store_for(url, options.iter().copied()).map_err(|e| {
            RunError::File {
                path: PathBuf::from(url.as_str()),
                message: format!("cannot open the storage: {e}"),
            }
        })?;
        Ok(Self {
            url: url.clone(),
            store,
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    /// The same storage through a client of its own (the lease's renewer, which runs
    /// on a thread of its own, uses one).
    pub(super) fn reopen(&self) -> Result<Self, RunError> {
        let options: Vec<(&str, &str)> = self
            .options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Self::open(&self.url, &options)
    }

    /// [`Self::open`] of the URL `url`.
    pub fn parse(url: &str, options: &[(&str, &str)]) -> Result<Self, RunError> {
        let parsed = Url::parse(url).map_err(|e| RunError::File {
            path: PathBuf::from(url),
            message: format!("not a storage URL: {e}"),
        })?;
        Self::open(&parsed, options)
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    pub fn describe(&self, key: &Key) -> String {
        format!("{}/{key}", self.url.as_str().trim_end_matches('/'))
    }

    fn error(&self, key: &Key, e: object_store::Error) -> RunError {
        let message = match e {
            object_store::Error::NotImplemented { .. } => format!(
                "{e}: the store does not do conditional writes, which cdcflow needs to keep its records safe (unset AWS_CONDITIONAL_PUT or set it to etag)"
            ),
            e => e.to_string(),
        };
        RunError::File {
            path: PathBuf::from(self.describe(key)),
            message,
        }
    }

    fn path(key: &Key) -> StorePath {
        StorePath::from(key.as_str())
    }

    pub(super) async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>, RunError> {
        match self.store.get(&Self::path(key)).await {
            Ok(found) => {
                let bytes = found.bytes().await.map_err(|e| self.error(key, e))?;
                Ok(Some(bytes.to_vec()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(key, e)),
        }
    }

    pub(super) async fn put(&self, key: &Key, bytes: &[u8]) -> Result<(), RunError> {
        super::lease::fence(self.url.as_str())?;
        let payload = PutPayload::from(bytes.to_vec());
        self.store
            .put(&Self::path(key), payload)
            .await
            .map(|_| ())
            .map_err(|e| self.error(key, e))
    }

    pub(super) async fn put_new(&self, key: &Key, bytes: &[u8]) -> Result<bool, RunError> {
        super::lease::fence(self.url.as_str())?;
        let payload = PutPayload::from(bytes.to_vec());
        let options = PutOptions::from(PutMode::Create);
        match self
            .store
            .put_opts(&Self::path(key), payload, options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            // A retried create whose first attempt landed: ours or another's, the
            // record is there.
            Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.error(key, e)),
        }
    }

    /// The record at `key` with its version tag, for a later [`Self::put_if`].
    pub(super) async fn get_tagged(&self, key: &Key) -> Result<Option<(Vec<u8>, Tag)>, RunError> {
        match self.store.get(&Self::path(key)).await {
            Ok(found) => {
                let tag = Tag {
                    e_tag: found.meta.e_tag.clone(),
                    version: found.meta.version.clone(),
                };
                let bytes = found.bytes().await.map_err(|e| self.error(key, e))?;
                Ok(Some((bytes.to_vec(), tag)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(key, e)),
        }
    }

    /// Writes the record at `key` if it is still at version `expected` (`None`: if there
    /// is none): a compare-and-swap, S3's `If-Match` (`If-None-Match: *` to create).
    pub(super) async fn put_if(
        &self,
        key: &Key,
        bytes: &[u8],
        expected: Option<&Tag>,
    ) -> Result<Swap, RunError> {
        let mode = match expected {
            None => PutMode::Create,
            Some(tag) => PutMode::Update(UpdateVersion {
                e_tag: tag.e_tag.clone(),
                version: tag.version.clone(),
            }),
        };
        let payload = PutPayload::from(bytes.to_vec());
        match self
            .store
            .put_opts(&Self::path(key), payload, PutOptions::from(mode))
            .await
        {
            Ok(put) => Ok(Swap::Done(Tag {
                e_tag: put.e_tag,
                version: put.version,
            })),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(Swap::Conflict),
            Err(e) => Err(self.error(key, e)),
        }
    }

    pub(super) async fn list(&self, prefix: &Key) -> Result<Vec<Entry>, RunError> {
        let listed: Vec<_> = self
            .store
            .list(Some(&Self::path(prefix)))
            .try_collect()
            .await
            .map_err(|e| self.error(prefix, e))?;
        let mut found: Vec<Entry> = listed
            .into_iter()
            .filter_map(|meta| {
                let key = Key::parse(meta.location.as_ref()).ok()?;
                Some(Entry {
                    key,
                    size: meta.size,
                })
            })
            .collect();
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    pub(super) async fn delete(&self, key: &Key) -> Result<(), RunError> {
        super::lease::fence(self.url.as_str())?;
        match self.store.delete(&Self::path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(key, e)),
        }
    }

    pub(super) async fn delete_all(&self, prefix: &Key) -> Result<(), RunError> {
        if prefix.as_str().is_empty() {
            return Err(RunError::internal("refusing to delete the whole storage"));
        }
        for entry in self.list(prefix).await? {
            self.delete(&entry.key).await?;
        }
        Ok(())
    }
}
