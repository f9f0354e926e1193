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

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::checkpoint::write_atomic;

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
    /// The folder the storage was in when the id was made (or last moved to).
    path: PathBuf,
}

fn read_stored(storage: &Path) -> Result<Option<Stored>, RunError> {
    let file = storage.join(FILE);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RunError::io(&file, e)),
    };
    let stored: Stored = serde_json::from_str(&text).map_err(|e| {
        RunError::input(format!("{} cannot be read: {e}", file.display())).with_help(
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
            "{} holds no identity (`{}`)",
            file.display(),
            stored.id
        ))),
    }
}

fn write_stored(storage: &Path, stored: &Stored) -> Result<(), RunError> {
    let text =
        serde_json::to_string_pretty(stored).map_err(|e| RunError::internal(e.to_string()))?;
    write_atomic(&storage.join(FILE), text.as_bytes())
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The identity of the storage at `storage` as it is, without making one (`status`).
pub fn read(storage: &Path) -> Result<Option<StorageId>, RunError> {
    Ok(read_stored(storage)?.map(|s| StorageId(s.id)))
}

/// What [`ensure`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    pub id: StorageId,
    /// This storage is a copy of the one in this folder, and took an id of its own now.
    pub copied_from: Option<PathBuf>,
}

/// The identity of the storage at `storage`, made when it has none, and made anew when
/// the storage is a copy of one still in the folder it names.
pub fn ensure(storage: &Path) -> Result<Ensured, RunError> {
    std::fs::create_dir_all(storage).map_err(|e| RunError::io(storage, e))?;
    let here = std::fs::canonicalize(storage).map_err(|e| RunError::io(storage, e))?;
    let Some(stored) = read_stored(storage)? else {
        let stored = Stored {
            id: new_id(),
            path: here,
        };
        write_stored(storage, &stored)?;
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
    let original = read_stored(&stored.path).ok().flatten();
    let copied = original.is_some_and(|o| o.id == stored.id);
    let renewed = Stored {
        id: match copied {
            true => new_id(),
            false => stored.id,
        },
        path: here,
    };
    write_stored(storage, &renewed)?;
    Ok(Ensured {
        id: StorageId(renewed.id),
        copied_from: copied.then_some(stored.path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_keeps_its_id_moved_and_takes_a_new_one_copied() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        let first = ensure(&a).unwrap();
        assert_eq!(first.copied_from, None);
        assert_eq!(first.id.as_str().len(), 32);
        assert_eq!(ensure(&a).unwrap(), first);
        assert_eq!(read(&a).unwrap(), Some(first.id.clone()));

        // Copied: the original still holds the id, so the copy takes another.
        let b = root.path().join("b");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::copy(a.join(FILE), b.join(FILE)).unwrap();
        let copy = ensure(&b).unwrap();
        assert_ne!(copy.id, first.id);
        assert_eq!(copy.copied_from, Some(std::fs::canonicalize(&a).unwrap()));
        assert_eq!(
            ensure(&a).unwrap().id,
            first.id,
            "the original keeps its id"
        );

        // Moved: the folder it names is gone, so it keeps its id.
        let c = root.path().join("c");
        std::fs::rename(&a, &c).unwrap();
        let moved = ensure(&c).unwrap();
        assert_eq!((moved.id, moved.copied_from), (first.id, None));
    }

    #[test]
    fn a_damaged_identity_is_an_error_naming_the_file() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(FILE), "{\"id\": \"x\", \"path\": \"/\"}").unwrap();
        let e = ensure(root.path()).unwrap_err().to_string();
        assert!(e.contains(FILE), "{e}");
    }
}
