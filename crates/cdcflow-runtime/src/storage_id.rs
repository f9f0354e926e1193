//! Which pipeline storage this is. Objects a pipeline keeps on a server (a
//! PostgreSQL replication slot and its publication) are named from this identity, not
//! from the pipeline's name: two pipelines whose names differ only in punctuation
//! (`x-coll`, `x_coll`), or one pipeline copied into two folders, must never read one
//! slot, since each would acknowledge what the other has not read.
//!
//! The identity is a random id kept in `_storage/_identity.json` with the folder it
//! was made in. A storage found in another folder was moved or copied: when the folder
//! it names still holds the same id, this one is a copy and takes an id of its own (its
//! checkpoints then name the other's slot, which its sources refuse); otherwise it was
//! moved and keeps its id.

use std::path::PathBuf;

use cdcflow_plan::location::Location;
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::storage::{Key, Storage};

const FILE: &str = "_identity.json";

/// A storage's identity: 32 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageId(String);

impl StorageId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short form for names on a server (12 hex digits, 48 bits).
    pub fn short(&self) -> &str {
        self.0.get(..12).unwrap_or(&self.0)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    id: String,
    /// Where the storage was when the id was made (or last moved to): its folder, or
    /// its bucket prefix's URL.
    path: PathBuf,
}

fn key() -> Result<Key, RunError> {
    Key::of(&[FILE])
}

async fn read_stored(storage: &Storage) -> Result<Option<Stored>, RunError> {
    let key = key()?;
    let Some(bytes) = storage.get(&key).await? else {
        return Ok(None);
    };
    let file = storage.describe(&key);
    let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| {
        RunError::input(format!("{file} cannot be read: {e}")).with_help(
            "it names this pipeline storage; delete it only for a storage no server object was made for",
        )
    })?;
    let well_formed = stored.id.len() == 32
        && stored
            .id
            .chars()
            .all(|c| matches!(c, '0'..='9' | 'a'..='f'));
    match well_formed {
        true => Ok(Some(stored)),
        false => Err(RunError::input(format!(
            "{file} holds no identity (`{}`)",
            stored.id
        ))),
    }
}

async fn write_stored(storage: &Storage, stored: &Stored) -> Result<(), RunError> {
    let text =
        serde_json::to_string_pretty(stored).map_err(|e| RunError::internal(e.to_string()))?;
    storage.put(&key()?, text.as_bytes()).await
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Where `storage` is, as its identity records it and a publication's comment names
/// it: a folder's canonical path (made when missing), or a bucket prefix's URL.
pub fn place(storage: &Storage) -> Result<PathBuf, RunError> {
    match storage {
        Storage::Local(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| RunError::io(dir, e))?;
            std::fs::canonicalize(dir).map_err(|e| RunError::io(dir, e))
        }
        Storage::Remote(remote) => Ok(PathBuf::from(remote.url().as_str())),
    }
}

/// The storage at `place` (a folder, or a bucket prefix's URL), as [`place`] names it.
pub fn at_place(place: &std::path::Path) -> Result<Storage, RunError> {
    let text = place.to_string_lossy();
    match text.contains("://") {
        true => Location::parse(std::path::Path::new("/"), &text)
            .map_err(RunError::input)
            .and_then(|location| Storage::at(&location)),
        false => Ok(Storage::local(place)),
    }
}

/// The identity of `storage` as it is, without making one (`status`).
pub async fn read(storage: &Storage) -> Result<Option<StorageId>, RunError> {
    Ok(read_stored(storage).await?.map(|s| StorageId(s.id)))
}

/// What [`ensure`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    pub id: StorageId,
    /// This storage is a copy of the one at this place (a folder, or a bucket
    /// prefix's URL), and took an id of its own now.
    pub copied_from: Option<PathBuf>,
}

/// The identity of `storage`, made when it has none, and made anew when the storage
/// is a copy of one still at the place it names.
pub async fn ensure(storage: &Storage) -> Result<Ensured, RunError> {
    let here = place(storage)?;
    let Some(stored) = read_stored(storage).await? else {
        let stored = Stored {
            id: new_id(),
            path: here,
        };
        write_stored(storage, &stored).await?;
        return Ok(Ensured {
            id: StorageId(stored.id),
            copied_from: None,
        });
    };
    if stored.path == here {
        return Ok(Ensured {
            id: StorageId(stored.id),
            copied_from: None,
        });
    }
    // Only an original that is gone means a move: one that cannot be read (another
    // account's bucket, an endpoint not set) is an error, not taken for a move, since a
    // copy taken for a move would read the original's slot.
    let original = read_stored(&at_place(&stored.path)?).await.map_err(|e| {
        e.with_help(format!(
            "this storage's identity was made at {}, which cannot be read from here to tell a copy from a move; make it readable, or delete _identity.json if no server object was made for this storage",
            stored.path.display()
        ))
    })?;
    let copied = original.is_some_and(|o| o.id == stored.id);
    let renewed = Stored {
        id: match copied {
            true => new_id(),
            false => stored.id,
        },
        path: here,
    };
    write_stored(storage, &renewed).await?;
    Ok(Ensured {
        id: StorageId(renewed.id),
        copied_from: copied.then_some(stored.path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_storage_keeps_its_id_moved_and_takes_a_new_one_copied() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        let first = ensure(&Storage::local(&a)).await.unwrap();
        assert_eq!(first.copied_from, None);
        assert_eq!(first.id.as_str().len(), 32);
        assert_eq!(ensure(&Storage::local(&a)).await.unwrap(), first);
        assert_eq!(
            read(&Storage::local(&a)).await.unwrap(),
            Some(first.id.clone())
        );

        // Copied: the original still holds the id, so the copy takes another.
        let b = root.path().join("b");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::copy(a.join(FILE), b.join(FILE)).unwrap();
        let copy = ensure(&Storage::local(&b)).await.unwrap();
        assert_ne!(copy.id, first.id);
        assert_eq!(copy.copied_from, Some(std::fs::canonicalize(&a).unwrap()));
        assert_eq!(
            ensure(&Storage::local(&a)).await.unwrap().id,
            first.id,
            "the original keeps its id"
        );

        // Moved: the folder it names is gone, so it keeps its id.
        let c = root.path().join("c");
        std::fs::rename(&a, &c).unwrap();
        let moved = ensure(&Storage::local(&c)).await.unwrap();
        assert_eq!((moved.id, moved.copied_from), (first.id, None));
    }

    #[tokio::test]
    async fn a_damaged_identity_is_an_error_naming_the_file() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(FILE), "{\"id\": \"x\", \"path\": \"/\"}").unwrap();
        let e = ensure(&Storage::local(root.path()))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(FILE), "{e}");
    }
}
