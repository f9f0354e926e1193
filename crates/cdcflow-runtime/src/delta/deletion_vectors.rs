//! Delta deletion vectors (protocol feature `deletionVectors`): which rows of a data file
//! are deleted, kept as a bitmap of row positions beside the file instead of rewriting
//! it. Read for every file cdcflow reads, and written by the merge-on-write apply
//! (`delta/merge.rs`).
//!
//! The format is the protocol's ("Deletion Vector Format"): a file
//! `deletion_vector_<uuid>.bin` holding a version byte `1` and then, per vector, its size
//! (u32 big-endian), the portable Roaring magic (u32 little-endian), the 64-bit portable
//! Roaring bitmap, and a CRC-32 of magic and bitmap (big-endian). A descriptor of storage
//! type `u` names the file by the Z85 encoding of its uuid (after an optional folder
//! prefix) and the vector by its offset; type `i` holds the vector inline. deltalake 1.1
//! reads these but writes none, so the writing half is ours; its tests read our vectors
//! back with deltalake's own scan.

use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crc::{CRC_32_ISO_HDLC, Crc};
use datafusion::object_store::{PutMode, PutOptions, PutPayload};
use deltalake::kernel::{DeletionVectorDescriptor, StorageType};
use roaring::RoaringTreemap;

use super::remote::Fetched;
use crate::RunError;

/// The magic of a portable 64-bit Roaring bitmap, the only one Delta accepts.
const PORTABLE_MAGIC: u32 = 1_681_511_377;
/// The format version byte that starts a deletion vector file.
const FILE_VERSION: u8 = 1;
const CHECKSUM: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);
/// Characters of a Z85-encoded uuid, at the end of a `u` descriptor's path.
const ENCODED_UUID_LEN: usize = 20;

/// The deleted row positions of the file at `table_dir` that `descriptor` belongs to.
pub(crate) fn load(
    table_dir: &Path,
    descriptor: &DeletionVectorDescriptor,
) -> Result<RoaringTreemap, RunError> {
    load_with(table_dir, descriptor, |path| {
        File::open(path).map_err(|e| RunError::io(path, e))
    })
}

/// As [`load`], for a remote table (`url`) whose vector files were fetched.
pub(crate) fn load_fetched(
    url: &Path,
    fetched: &Fetched,
    descriptor: &DeletionVectorDescriptor,
) -> Result<RoaringTreemap, RunError> {
    load_with(url, descriptor, |path| {
        let relative = path
            .strip_prefix(url)
            .map_err(|_| damaged(path, "a vector file outside the table"))?;
        Ok(Cursor::new(fetched.bytes(&relative.to_string_lossy())?))
    })
}

/// The vector file a `u` descriptor names, relative to its table; none for an inline
/// vector. An error says what is wrong with the descriptor.
pub(crate) fn stored_file(descriptor: &DeletionVectorDescriptor) -> Result<Option<String>, String> {
    match descriptor.storage_type {
        StorageType::UuidRelativePath => relative_name(&descriptor.path_or_inline_dv).map(Some),
        StorageType::Inline | StorageType::AbsolutePath => Ok(None),
    }
}

fn load_with<R: Read + Seek>(
    table_dir: &Path,
    descriptor: &DeletionVectorDescriptor,
    open: impl FnOnce(&Path) -> Result<R, RunError>,
) -> Result<RoaringTreemap, RunError> {
    let bitmap = match descriptor.storage_type {
        StorageType::Inline => {
            let bytes = z85::decode(&descriptor.path_or_inline_dv)
                .map_err(|_| damaged(table_dir, "an inline deletion vector is not Z85"))?;
            let Some((magic, bitmap)) = bytes.split_at_checked(4) else {
                return Err(damaged(table_dir, "an inline deletion vector is too short"));
            };
            check_magic(table_dir, magic)?;
            deserialize(table_dir, bitmap)?
        }
        StorageType::UuidRelativePath => {
            let name = relative_name(&descriptor.path_or_inline_dv)
                .map_err(|why| damaged(table_dir, &why))?;
            let path = table_dir.join(name);
            let offset = descriptor.offset.unwrap_or(1);
            read_stored(&path, open(&path)?, offset, descriptor.size_in_bytes)?
        }
        StorageType::AbsolutePath => {
            return Err(RunError::File {
                path: table_dir.to_path_buf(),
                message: format!(
                    "a deletion vector at the absolute path {} is not read: cdcflow reads only files inside the table",
                    descriptor.path_or_inline_dv
                ),
            });
        }
    };
    let cardinality = u64::try_from(descriptor.cardinality).unwrap_or(u64::MAX);
    if bitmap.len() != cardinality {
        return Err(damaged(
            table_dir,
            &format!(
                "a deletion vector holds {} rows where its descriptor says {cardinality}",
                bitmap.len()
            ),
        ));
    }
    Ok(bitmap)
}

/// The file a `u` descriptor's path names, relative to the table: a plain folder
/// prefix (never one that leaves the table) and the uuid.
fn relative_name(encoded: &str) -> Result<String, String> {
    let Some(split) = encoded.len().checked_sub(ENCODED_UUID_LEN) else {
        return Err("a deletion vector path is too short".into());
    };
    let (prefix, uuid) = encoded
        .split_at_checked(split)
        .ok_or("a deletion vector path is not ASCII")?;
    if !prefix.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "a deletion vector folder prefix `{prefix}` is not a plain folder name"
        ));
    }
    let bytes = z85::decode(uuid).map_err(|_| "a deletion vector uuid is not Z85")?;
    let uuid =
        uuid::Uuid::from_slice(&bytes).map_err(|_| "a deletion vector uuid is not 16 bytes")?;
    let name = file_name(&uuid);
    Ok(match prefix.is_empty() {
        true => name,
        false => format!("{prefix}/{name}"),
    })
}

fn file_name(uuid: &uuid::Uuid) -> String {
    format!("deletion_vector_{uuid}.bin")
}

/// One vector of a deletion vector file: its size at `offset`, then magic, bitmap and
/// checksum.
fn read_stored(
    path: &Path,
    mut file: impl Read + Seek,
    offset: i32,
    size: i32,
) -> Result<RoaringTreemap, RunError> {
    let io = |e| RunError::io(path, e);
    let offset = u64::try_from(offset).map_err(|_| damaged(path, "negative offset"))?;
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut word = [0u8; 4];
    file.read_exact(&mut word).map_err(io)?;
    let stored_size = u32::from_be_bytes(word);
    if i64::from(stored_size) != i64::from(size) {
        return Err(damaged(
            path,
            &format!("a vector of {stored_size} bytes where the log says {size}"),
        ));
    }
    let mut body = vec![0u8; stored_size as usize];
    file.read_exact(&mut body).map_err(io)?;
    file.read_exact(&mut word).map_err(io)?;
    if CHECKSUM.checksum(&body) != u32::from_be_bytes(word) {
        return Err(damaged(path, "its checksum does not match"));
    }
    let (magic, bitmap) = body.split_at(4.min(body.len()));
    check_magic(path, magic)?;
    deserialize(path, bitmap)
}

fn check_magic(path: &Path, magic: &[u8]) -> Result<(), RunError> {
    match magic.try_into().map(u32::from_le_bytes) {
        Ok(PORTABLE_MAGIC) => Ok(()),
        _ => Err(damaged(path, "not a portable Roaring bitmap")),
    }
}

fn deserialize(path: &Path, bitmap: &[u8]) -> Result<RoaringTreemap, RunError> {
    RoaringTreemap::deserialize_from(bitmap).map_err(|e| damaged(path, &e.to_string()))
}

fn damaged(path: &Path, why: &str) -> RunError {
    RunError::File {
        path: path.to_path_buf(),
        message: format!("damaged deletion vector: {why}"),
    }
}

/// A deletion vector file being filled: vectors are added one after another and the
/// file is written whole before the commit that names it (a crash leaves it
/// unreferenced, for vacuum).
pub(crate) struct VectorFile {
    uuid: uuid::Uuid,
    bytes: Vec<u8>,
}

impl VectorFile {
    pub(crate) fn new() -> Self {
        Self {
            uuid: uuid::Uuid::new_v4(),
            bytes: vec![FILE_VERSION],
        }
    }

    /// Adds `deleted` to the file; the descriptor that names it.
    pub(crate) fn push(
        &mut self,
        deleted: &RoaringTreemap,
    ) -> Result<DeletionVectorDescriptor, RunError> {
        let offset = self.bytes.len();
        let mut body = PORTABLE_MAGIC.to_le_bytes().to_vec();
        deleted
            .serialize_into(&mut body)
            .map_err(|e| RunError::internal(format!("serializing a deletion vector: {e}")))?;
        let too_big = || RunError::input("a deletion vector file over 2 GiB");
        let size = u32::try_from(body.len()).map_err(|_| too_big())?;
        self.bytes.extend_from_slice(&size.to_be_bytes());
        self.bytes.extend_from_slice(&body);
        self.bytes
            .extend_from_slice(&CHECKSUM.checksum(&body).to_be_bytes());
        Ok(DeletionVectorDescriptor {
            storage_type: StorageType::UuidRelativePath,
            path_or_inline_dv: z85::encode(self.uuid.as_bytes()),
            offset: Some(i32::try_from(offset).map_err(|_| too_big())?),
            size_in_bytes: i32::try_from(size).map_err(|_| too_big())?,
            cardinality: i64::try_from(deleted.len()).map_err(|_| too_big())?,
        })
    }

    /// Writes the file into `table`: created (never replaced) in its folder, synced, or
    /// created only if absent in its bucket (the uuid name never collides).
    pub(crate) async fn write_to(self, table: &super::Table) -> Result<(), RunError> {
        let Some(delta) = table.table.as_ref().filter(|_| table.at.is_remote()) else {
            return self.write(&table.dir);
        };
        crate::storage::lease::fence(&table.at.to_string())?;
        let name = file_name(&self.uuid);
        let path = table.dir.join(&name);
        let store = delta.log_store().object_store(None);
        let options = PutOptions::from(PutMode::Create);
        store
            .put_opts(
                &deltalake::Path::from(name),
                PutPayload::from(self.bytes),
                options,
            )
            .await
            .map(|_| ())
            .map_err(|e| RunError::File {
                path,
                message: e.to_string(),
            })
    }

    /// Writes the file into the table folder `table_dir`, synced.
    pub(crate) fn write(self, table_dir: &Path) -> Result<(), RunError> {
        let path = table_dir.join(file_name(&self.uuid));
        let io = |e| RunError::io(&path, e);
        let mut file = File::create_new(&path).map_err(io)?;
        file.write_all(&self.bytes).map_err(io)?;
        file.sync_all().map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_written_to_one_file_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first: RoaringTreemap = [1u64, 3, 8].into_iter().collect();
        let second: RoaringTreemap = (0..100_000u64).step_by(7).chain([1 << 40]).collect();
        let mut file = VectorFile::new();
        let a = file.push(&first).expect("first");
        let b = file.push(&second).expect("second");
        file.write(dir.path()).expect("write");
        assert_eq!(
            a.offset,
            Some(1),
            "the first vector follows the version byte"
        );
        assert_eq!(a.path_or_inline_dv.len(), ENCODED_UUID_LEN);
        assert_eq!(load(dir.path(), &a).expect("load a"), first);
        assert_eq!(load(dir.path(), &b).expect("load b"), second);
    }

    #[test]
    fn a_damaged_vector_or_a_path_out_of_the_table_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = VectorFile::new();
        let mut d = file.push(&[5u64].into_iter().collect()).expect("push");
        file.write(dir.path()).expect("write");
        let name = std::fs::read_dir(dir.path())
            .expect("list")
            .next()
            .expect("one file")
            .expect("entry")
            .path();
        let mut bytes = std::fs::read(&name).expect("read");
        let last = bytes.len() - 6;
        bytes[last] ^= 0xff;
        std::fs::write(&name, bytes).expect("write back");
        let e = load(dir.path(), &d).expect_err("checksum");
        assert!(e.to_string().contains("checksum"), "{e}");
        d.path_or_inline_dv = format!("..{}", d.path_or_inline_dv);
        let e = load(dir.path(), &d).expect_err("prefix");
        assert!(e.to_string().contains("not a plain folder name"), "{e}");
    }
}
