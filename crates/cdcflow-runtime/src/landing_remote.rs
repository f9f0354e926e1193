//! Landing folders at object-store URLs (`read_files('s3://lake/landing/orders')`, also
//! `gs://` and Azure's): before a batch reads such a folder, the objects under its
//! prefix it has to read are fetched into a scratch folder of this process (the
//! operating system's temporary folder, removed when the batch's reading ends), each
//! with its object's last-modified time as its modification time. The batch then reads
//! that folder as it reads a local landing folder, so names, checkpoints, the
//! allowOverwrites rule, quarantine and `_metadata` work alike; messages and
//! `_metadata.file_path` show the object's URL.
//!
//! A streaming read fetches only the objects it has not read as they are now (by size
//! and last-modified time); a whole read fetches every object. An object is visible
//! only once it is written whole, so no object is ever read half-written. Credentials
//! come from the environment, as for the storage (docs/storage.md).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cdcflow_plan::location::Location;
use cdcflow_plan::read_files::{ReadFiles, skipped};
use datafusion::object_store::{ObjectMeta, ObjectStoreExt};
use deltalake::logstore::ObjectStoreRef;
use futures::{StreamExt, TryStreamExt};

use crate::RunError;
use crate::landing::{FileName, ReadRecord, Stamp};

/// Object fetches in flight.
const FETCHES_IN_FLIGHT: usize = 8;

/// The landing folder of `rf` when it is an object-store URL.
pub(crate) fn url_of(rf: &ReadFiles) -> Option<url::Url> {
    match Location::parse(Path::new(""), &rf.path_text) {
        Ok(Location::Remote(url)) => Some(url),
        _ => None,
    }
}

/// The objects of one landing folder a batch reads, fetched into a scratch folder that
/// is removed when this is dropped.
pub(crate) struct Staged {
    dir: tempfile::TempDir,
}

impl Staged {
    /// `rf` reading the scratch folder: its messages still name the URL.
    pub(crate) fn source(&self, rf: &ReadFiles) -> ReadFiles {
        ReadFiles {
            path: self.dir.path().to_path_buf(),
            ..rf.clone()
        }
    }
}

/// Fetches the objects under `url` that `rf` reads now: every one for a whole read;
/// for a stream, those `seen` has no record of as they are now.
pub(crate) async fn stage(
    rf: &ReadFiles,
    url: &url::Url,
    seen: Option<&BTreeMap<FileName, ReadRecord>>,
) -> Result<Staged, RunError> {
    let store = open(url)?;
    let failed = |e: datafusion::object_store::Error| {
        RunError::input(format!("cannot list the landing folder {url}: {e}")).with_help(
            "credentials and endpoints come from the environment (docs/storage.md, \"Credentials\")",
        )
    };
    let listed: Vec<ObjectMeta> = store.list(None).try_collect().await.map_err(failed)?;
    let dir = tempfile::Builder::new()
        .prefix("cdcflow-landing-")
        .tempdir()
        .map_err(|e| RunError::io(std::env::temp_dir(), e))?;
    let wanted: Vec<(ObjectMeta, String)> = listed
        .iter()
        .filter_map(|meta| {
            let relative = relative_name(meta)?;
            let unchanged = rf.streaming
                && seen
                    .and_then(|s| s.get(&FileName::from_bytes(relative.clone().into_bytes())))
                    .and_then(|record| record.stamp)
                    .is_some_and(|was| was == stamp_of(meta));
            (!unchanged).then(|| (meta.clone(), relative))
        })
        .collect();
    let root = dir.path().to_path_buf();
    futures::stream::iter(wanted)
        .map(|(meta, relative)| fetch(&store, url, meta, root.join(&relative)))
        .buffer_unordered(FETCHES_IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(Staged { dir })
}

/// The object store rooted at the landing folder.
fn open(url: &url::Url) -> Result<ObjectStoreRef, RunError> {
    crate::delta::remote::register_stores();
    deltalake::logstore::store_for(url, std::iter::empty::<(&str, &str)>()).map_err(|e| {
        RunError::input(format!("cannot open the landing folder {url}: {e}"))
            .with_help("credentials and endpoints come from the environment (docs/storage.md)")
    })
}

/// The object's path below the folder, when a listing of a local folder would give it:
/// hidden, `_`-prefixed and `.tmp`/`.crc` names (and objects below such folders) are
/// left out, as they are from a folder.
fn relative_name(meta: &ObjectMeta) -> Option<String> {
    let parts: Vec<String> = meta
        .location
        .parts()
        .map(|p| {
            percent_encoding::percent_decode_str(p.as_ref())
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let plain = !parts.is_empty()
        && parts
            .iter()
            .all(|p| !p.is_empty() && p != "." && p != ".." && !skipped(p));
    plain.then(|| parts.join("/"))
}

/// The object as a landing file's stamp: its size and last-modified time.
fn stamp_of(meta: &ObjectMeta) -> Stamp {
    Stamp {
        size: meta.size,
        modified_micros: Some(meta.last_modified.timestamp_micros()),
    }
}

/// Fetches one object to `to`, with the object's last-modified time as the file's.
async fn fetch(
    store: &ObjectStoreRef,
    url: &url::Url,
    meta: ObjectMeta,
    to: PathBuf,
) -> Result<(), RunError> {
    let failed = |e: datafusion::object_store::Error| {
        RunError::input(format!(
            "cannot fetch landing file {}{}: {e}",
            url.as_str(),
            meta.location
        ))
    };
    let bytes = store
        .get(&meta.location)
        .await
        .map_err(failed)?
        .bytes()
        .await
        .map_err(failed)?;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| RunError::io(parent, e))?;
    }
    let micros = u64::try_from(meta.last_modified.timestamp_micros()).unwrap_or(0);
    let modified = SystemTime::UNIX_EPOCH + Duration::from_micros(micros);
    std::fs::File::create(&to)
        .and_then(|mut f| {
            f.write_all(&bytes)?;
            f.set_modified(modified)
        })
        .map_err(|e| RunError::io(&to, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::object_store::path::Path as StorePath;

    fn meta(path: &str) -> ObjectMeta {
        ObjectMeta {
            location: StorePath::from(path),
            last_modified: chrono::DateTime::from_timestamp_micros(1_700_000_000_123_456)
                .expect("a time"),
            size: 7,
            e_tag: None,
            version: None,
        }
    }

    #[test]
    fn objects_a_folder_listing_would_leave_out_are_left_out() {
        assert_eq!(
            relative_name(&meta("0001.json")).as_deref(),
            Some("0001.json")
        );
        assert_eq!(
            relative_name(&meta("2026/12/0001.json")).as_deref(),
            Some("2026/12/0001.json")
        );
        assert_eq!(
            relative_name(&meta("with space.json")).as_deref(),
            Some("with space.json")
        );
        for hidden in [
            "_SUCCESS",
            ".part.json",
            "x.json.tmp",
            "_tmp/0001.json",
            "a/.b/c.json",
        ] {
            assert_eq!(relative_name(&meta(hidden)), None, "{hidden}");
        }
        assert_eq!(
            stamp_of(&meta("x")),
            Stamp {
                size: 7,
                modified_micros: Some(1_700_000_000_123_456)
            }
        );
    }
}
