//! The pipeline's storage as a place to keep records: the small files a run writes
//! beside its Delta tables (offsets, identity, listings), named by [`Key`]s relative to
//! the storage root. Every module that keeps such a file goes through [`Storage`], so
//! that the storage can later be a bucket as well as a folder
//! (docs/proposals/storage-anywhere.md).
//!
//! The operations are the ones an object store offers, with the guarantees both a
//! folder and a bucket give: a record is written whole or not at all ([`Storage::put`]),
//! created only if absent ([`Storage::put_new`]), listed by prefix and deleted. No
//! rename: what a folder does with a rename (a version made visible at once) is done
//! with names no other writer uses and a record written last.

pub mod lease;
mod local;
mod remote;

pub(crate) use local::write_whole;

pub use remote::{Remote, Swap, Tag};

use std::fmt;
use std::path::PathBuf;

use cdcflow_plan::location::Location;

use crate::RunError;

/// A record's name relative to the storage root: `/`-separated plain names, none empty,
/// none `.` or `..`, so no key names anything outside the storage.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(String);

impl Key {
    /// The key of `parts` joined; an internal error when a part is not one plain name.
    pub fn of(parts: &[&str]) -> Result<Self, RunError> {
        let mut key = Key(String::new());
        for part in parts {
            key = key.join(part)?;
        }
        Ok(key)
    }

    /// This key with `name` (one plain name) appended.
    pub fn join(&self, name: &str) -> Result<Self, RunError> {
        let plain =
            !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
        if !plain {
            return Err(RunError::internal(format!(
                "`{name}` is not one plain name under {}",
                self.display_or_root()
            )));
        }
        Ok(match self.0.is_empty() {
            true => Key(name.to_string()),
            false => Key(format!("{}/{name}", self.0)),
        })
    }

    /// This key with `relative` (plain names separated by `/`) appended.
    pub fn join_relative(&self, relative: &str) -> Result<Self, RunError> {
        relative
            .split('/')
            .try_fold(self.clone(), |key, name| key.join(name))
    }

    /// The key as written: names separated by `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its last name.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or_default()
    }

    /// The key below `prefix`, when it lies below it.
    pub fn strip_prefix(&self, prefix: &Key) -> Option<&str> {
        self.0
            .strip_prefix(prefix.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
    }

    fn display_or_root(&self) -> &str {
        match self.0.is_empty() {
            true => "the storage root",
            false => &self.0,
        }
    }

    /// The key from a stored name (`a/b/c`), checked part by part.
    fn parse(text: &str) -> Result<Self, RunError> {
        Key::of(&text.split('/').collect::<Vec<_>>())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A record found by [`Storage::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Key,
    pub size: u64,
}

/// Where a pipeline keeps its records.
#[derive(Debug, Clone)]
pub enum Storage {
    /// A folder on this machine.
    Local(PathBuf),
    /// A prefix in a bucket.
    Remote(Remote),
}

impl Storage {
    /// The storage folder at `root`.
    pub fn local(root: impl Into<PathBuf>) -> Self {
        Self::Local(root.into())
    }

    /// The storage of `pipeline`, as its pipeline.yaml names it.
    pub fn of(pipeline: &cdcflow_plan::Pipeline) -> Result<Self, RunError> {
        Self::at(&pipeline.storage())
    }

    /// The storage at `location`: a folder, or a bucket prefix configured by the
    /// environment.
    pub fn at(location: &Location) -> Result<Self, RunError> {
        match location {
            Location::Local(dir) => Ok(Self::local(dir)),
            Location::Remote(url) => Remote::open(url, &[]).map(Self::Remote),
        }
    }

    /// The storage at a bucket URL (`s3://bucket/prefix`), configured by the
    /// environment and `options` (object_store's keys; a pipeline passes none).
    pub fn remote(url: &str, options: &[(&str, &str)]) -> Result<Self, RunError> {
        Remote::parse(url, options).map(Self::Remote)
    }

    /// Where `key` is, as messages name it: a path, or a URL.
    pub fn describe(&self, key: &Key) -> String {
        match self {
            Self::Local(root) => local::path(root, key).display().to_string(),
            Self::Remote(remote) => remote.describe(key),
        }
    }

    /// The path of `key`: a local path, or the URL as a path (for errors and for
    /// what is kept on a disk only, until it goes through this type as well).
    pub fn path(&self, key: &Key) -> PathBuf {
        match self {
            Self::Local(root) => local::path(root, key),
            Self::Remote(remote) => PathBuf::from(remote.describe(key)),
        }
    }

    /// The record at `key`; `None` when there is none.
    pub async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>, RunError> {
        match self {
            Self::Local(root) => local::get(root, key),
            Self::Remote(remote) => remote.get(key).await,
        }
    }

    /// Writes the record at `key` whole, replacing one that is there: a reader sees
    /// the old record or the new one, never a part. Durable when this returns.
    pub async fn put(&self, key: &Key, bytes: &[u8]) -> Result<(), RunError> {
        match self {
            Self::Local(root) => local::put(root, key, bytes),
            Self::Remote(remote) => remote.put(key, bytes).await,
        }
    }

    /// Writes the record at `key` unless one is there already (whoever wrote it): true
    /// when this call created it. Two writers racing on one key: one of them creates it.
    pub async fn put_new(&self, key: &Key, bytes: &[u8]) -> Result<bool, RunError> {
        match self {
            Self::Local(root) => local::put_new(root, key, bytes),
            Self::Remote(remote) => remote.put_new(key, bytes).await,
        }
    }

    /// The records under `prefix`, at any depth, in key order (none when nothing is
    /// there).
    pub async fn list(&self, prefix: &Key) -> Result<Vec<Entry>, RunError> {
        match self {
            Self::Local(root) => local::list(root, prefix),
            Self::Remote(remote) => remote.list(prefix).await,
        }
    }

    /// Deletes the record at `key` (nothing when it is gone already).
    pub async fn delete(&self, key: &Key) -> Result<(), RunError> {
        match self {
            Self::Local(root) => local::delete(root, key),
            Self::Remote(remote) => remote.delete(key).await,
        }
    }

    /// Deletes every record under `prefix`.
    pub async fn delete_all(&self, prefix: &Key) -> Result<(), RunError> {
        match self {
            Self::Local(root) => local::delete_all(root, prefix),
            Self::Remote(remote) => remote.delete_all(prefix).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_plain_names_only() {
        let key = Key::of(&["checkpoints", "orders", "offsets"]).unwrap();
        assert_eq!(key.as_str(), "checkpoints/orders/offsets");
        assert_eq!(key.name(), "offsets");
        let file = key.join("00000000000000000001.json").unwrap();
        assert_eq!(file.strip_prefix(&key), Some("00000000000000000001.json"));
        assert_eq!(key.strip_prefix(&file), None);
        for bad in ["", ".", "..", "a/b", "a\\b", "nul\0"] {
            assert!(key.join(bad).is_err(), "{bad:?}");
        }
        assert!(Key::parse("a//b").is_err());
        assert_eq!(Key::parse("a/b").unwrap(), Key::of(&["a", "b"]).unwrap());
    }
}
