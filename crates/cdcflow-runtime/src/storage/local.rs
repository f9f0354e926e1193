//! Records in a local folder, with `std::fs`: a write goes through a synced temporary
//! file, then a rename (replace) or a hard link (create, which fails when the name is
//! taken), so a reader sees a record whole or not at all. object_store's own local
//! store is not used: it does not sync what it writes and follows links when listing.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use super::{Entry, Key};
use crate::RunError;

pub(super) fn path(root: &Path, key: &Key) -> PathBuf {
    key.as_str()
        .split('/')
        .fold(root.to_path_buf(), |p, n| p.join(n))
}

pub(super) fn get(root: &Path, key: &Key) -> Result<Option<Vec<u8>>, RunError> {
    let path = path(root, key);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RunError::io(&path, e)),
    }
}

pub(super) fn put(root: &Path, key: &Key, bytes: &[u8]) -> Result<(), RunError> {
    write_whole(&path(root, key), bytes)
}

/// Writes `path` whole: a synced temporary file renamed over it.
pub(crate) fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let tmp = staged(path, bytes)?;
    fs::rename(&tmp, path).map_err(|e| RunError::io(path, e))
}

pub(super) fn put_new(root: &Path, key: &Key, bytes: &[u8]) -> Result<bool, RunError> {
    let path = path(root, key);
    let tmp = staged(&path, bytes)?;
    let linked = fs::hard_link(&tmp, &path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(RunError::io(&path, e)),
    }
}

/// `bytes` written and synced beside `path`, under a name no other writer uses.
fn staged(path: &Path, bytes: &[u8]) -> Result<PathBuf, RunError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| RunError::io(parent, e))?;
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let tmp = path.with_file_name(name);
    let mut f = fs::File::create(&tmp).map_err(|e| RunError::io(&tmp, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| RunError::io(&tmp, e))?;
    Ok(tmp)
}

pub(super) fn list(root: &Path, prefix: &Key) -> Result<Vec<Entry>, RunError> {
    let mut found = Vec::new();
    walk(&path(root, prefix), prefix, &mut found)?;
    found.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(found)
}

/// The files under `dir` (key `key`), links neither followed nor listed.
fn walk(dir: &Path, key: &Key, found: &mut Vec<Entry>) -> Result<(), RunError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(());
        }
        Err(e) => return Err(RunError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| RunError::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Ok(child) = key.join(&name) else {
            continue;
        };
        let kind = entry
            .file_type()
            .map_err(|e| RunError::io(entry.path(), e))?;
        if kind.is_dir() {
            walk(&entry.path(), &child, found)?;
        } else if kind.is_file() {
            let size = entry
                .metadata()
                .map_err(|e| RunError::io(entry.path(), e))?
                .len();
            found.push(Entry { key: child, size });
        }
    }
    Ok(())
}

pub(super) fn delete(root: &Path, key: &Key) -> Result<(), RunError> {
    let path = path(root, key);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RunError::io(&path, e)),
    }
}

pub(super) fn delete_all(root: &Path, prefix: &Key) -> Result<(), RunError> {
    let dir = path(root, prefix);
    crate::layout::ensure_within(root, &dir)?;
    match fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RunError::io(&dir, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Storage;
    use super::*;

    #[tokio::test]
    async fn records_are_written_whole_created_once_listed_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path());
        let offsets = Key::of(&["checkpoints", "f", "offsets"]).unwrap();
        let one = offsets.join("1.json").unwrap();
        assert_eq!(storage.get(&one).await.unwrap(), None);
        storage.put(&one, b"first").await.unwrap();
        storage.put(&one, b"second").await.unwrap();
        assert_eq!(
            storage.get(&one).await.unwrap().as_deref(),
            Some(&b"second"[..])
        );
        let two = offsets.join("2.json").unwrap();
        assert!(storage.put_new(&two, b"mine").await.unwrap());
        assert!(!storage.put_new(&two, b"theirs").await.unwrap());
        assert_eq!(
            storage.get(&two).await.unwrap().as_deref(),
            Some(&b"mine"[..])
        );
        let nested = offsets.join("deeper").unwrap().join("3.json").unwrap();
        storage.put(&nested, b"x").await.unwrap();
        let listed = storage.list(&offsets).await.unwrap();
        let keys: Vec<&str> = listed.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "checkpoints/f/offsets/1.json",
                "checkpoints/f/offsets/2.json",
                "checkpoints/f/offsets/deeper/3.json"
            ],
            "no temporary file is left behind"
        );
        assert_eq!(listed[0].size, 6);
        storage.delete(&one).await.unwrap();
        storage.delete(&one).await.unwrap();
        assert_eq!(storage.list(&offsets).await.unwrap().len(), 2);
        storage
            .delete_all(&Key::of(&["checkpoints", "f"]).unwrap())
            .await
            .unwrap();
        assert!(storage.list(&offsets).await.unwrap().is_empty());
        assert!(
            storage
                .list(&Key::of(&["nothing"]).unwrap())
                .await
                .unwrap()
                .is_empty()
        );
    }
}
