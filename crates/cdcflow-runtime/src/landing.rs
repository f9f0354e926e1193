//! Landing files as the runtime keeps track of them, between listing and reading:
//! a file's name exactly as the OS gives it (bytes, never a lossy conversion), what the
//! file was when a batch read it (size, modification time, a content fingerprint), and
//! whether it is complete enough to read (non-empty, unchanged for a settle period).
//!
//! Checkpoints hold a [`ReadRecord`] per file read; comparing it with the file as it
//! is now tells a file rewritten after it was read from one left alone.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cdcflow_plan::read_files::ReadFiles;
use serde::{Deserialize, Serialize};

/// A landing file's path relative to its folder, as the OS gives it: two different
/// names on disk are two different `FileName`s, whatever their bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FileName(Vec<u8>);

impl FileName {
    /// The name of `path`, a file listed under the landing folder of `source`.
    pub fn of(source: &ReadFiles, path: &Path) -> Self {
        match path.strip_prefix(&source.path) {
            Ok(rel) if !rel.as_os_str().is_empty() => Self(os_bytes(rel.as_os_str())),
            _ => Self(path.file_name().map(os_bytes).unwrap_or_default()),
        }
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Where the file is: under the landing folder, or the folder itself when the
    /// source names a single file.
    pub fn path_in(&self, source: &ReadFiles) -> PathBuf {
        if source.path.is_file() {
            return source.path.clone();
        }
        source.path.join(os_path(&self.0))
    }

    /// `path_text/name` as bytes: the file as the user wrote its folder.
    pub fn bytes_under(&self, source: &ReadFiles) -> Vec<u8> {
        let mut out = source.path_text.trim_end_matches('/').as_bytes().to_vec();
        out.push(b'/');
        out.extend_from_slice(&self.0);
        out
    }

    /// `path_text/name` for messages.
    pub fn shown_under(&self, source: &ReadFiles) -> String {
        format!("{}/{self}", source.path_text.trim_end_matches('/'))
    }
}

/// Readable: valid UTF-8 as it is, every other byte as `\xNN`.
impl fmt::Display for FileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&readable(&self.0))
    }
}

/// `bytes` as text, each byte that is not part of valid UTF-8 written `\xNN`.
pub fn readable(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(unix)]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(unix)]
fn os_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

// Elsewhere names are Unicode apart from unpaired surrogates, which are rare enough
// that the lossy form is kept.
#[cfg(not(unix))]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    s.to_string_lossy().into_owned().into_bytes()
}

#[cfg(not(unix))]
fn os_path(bytes: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
}

/// A file's size and modification time (µs since the epoch).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Stamp {
    pub size: u64,
    pub modified_micros: Option<i64>,
}

impl Stamp {
    /// The file at `path` now (following a symbolic link, as reading does).
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        Ok(Self {
            size: meta.len(),
            modified_micros: cdcflow_plan::file_metadata::modified_micros(&meta),
        })
    }

    /// How long ago the file was last written; `None` for a time in the future (a
    /// clock ahead of ours) or unknown.
    fn age(&self) -> Option<Duration> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?
            .as_micros();
        let at = u128::try_from(self.modified_micros?).ok()?;
        now.checked_sub(at)
            .map(|d| Duration::from_micros(u64::try_from(d).unwrap_or(u64::MAX)))
    }
}

/// A content fingerprint: 64-bit FNV-1a, stable across versions and platforms (unlike
/// the standard library's hasher), which is all a "did it change" check needs.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What a batch read of one landing file: checkpoints hold one per file.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(try_from = "StoredRecord", into = "StoredRecord")]
pub struct ReadRecord {
    pub name: FileName,
    /// `None` in checkpoints written before files were recorded by identity.
    pub stamp: Option<Stamp>,
    /// Of text files, read whole anyway.
    pub fingerprint: Option<u64>,
}

impl ReadRecord {
    /// How the file at `path` differs from what was read, in words; `None` when it is
    /// the same (or nothing is known to compare with).
    pub fn change(&self, path: &Path) -> Option<String> {
        let was = self.stamp?;
        let Ok(now) = Stamp::of(path) else {
            return Some("gone".into());
        };
        if now.size != was.size {
            return Some(format!("{} bytes when read, {} now", was.size, now.size));
        }
        if now.modified_micros == was.modified_micros {
            return None;
        }
        // Rewritten with the same size: the content decides (a `touch` is no change).
        match (self.fingerprint, std::fs::read(path)) {
            (Some(f), Ok(bytes)) if fingerprint(&bytes) == f => None,
            (Some(_), Ok(_)) => Some(format!("rewritten ({} bytes, other content)", now.size)),
            _ => Some("rewritten since it was read (modification time changed)".into()),
        }
    }
}

/// A [`ReadRecord`] as checkpoints store it: the name as a string when it is valid
/// UTF-8, otherwise its bytes in hex under another key, so no two names collide; a
/// plain string is the name alone (checkpoints of earlier versions).
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum StoredRecord {
    Plain(String),
    Full {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name_hex: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        modified_micros: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fnv64: Option<String>,
    },
}

impl From<ReadRecord> for StoredRecord {
    fn from(r: ReadRecord) -> Self {
        let (name, name_hex) = match String::from_utf8(r.name.0) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(to_hex(e.as_bytes()))),
        };
        Self::Full {
            name,
            name_hex,
            size: r.stamp.map(|s| s.size),
            modified_micros: r.stamp.and_then(|s| s.modified_micros),
            fnv64: r.fingerprint.map(|f| format!("{f:016x}")),
        }
    }
}

impl TryFrom<StoredRecord> for ReadRecord {
    type Error = String;

    fn try_from(s: StoredRecord) -> Result<Self, String> {
        match s {
            StoredRecord::Plain(name) => Ok(Self {
                name: FileName(name.into_bytes()),
                stamp: None,
                fingerprint: None,
            }),
            StoredRecord::Full {
                name,
                name_hex,
                size,
                modified_micros,
                fnv64,
            } => {
                let name = match (name, name_hex) {
                    (Some(n), None) => n.into_bytes(),
                    (None, Some(h)) => from_hex(&h)?,
                    _ => return Err("a landing file needs one of `name` and `name_hex`".into()),
                };
                let fingerprint = fnv64
                    .map(|f| u64::from_str_radix(&f, 16).map_err(|e| format!("fnv64: {e}")))
                    .transpose()?;
                Ok(Self {
                    name: FileName(name),
                    stamp: size.map(|size| Stamp {
                        size,
                        modified_micros,
                    }),
                    fingerprint,
                })
            }
        }
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return Err(format!("`{text}` is not hex"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| format!("`{text}`: {e}")))
        .collect()
}

/// Whether a listed file can be read now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Readiness {
    /// Non-empty and unchanged for the settle period: read it as it is.
    Settled(Stamp),
    /// Empty: nothing to read yet, and nothing recorded, so its content is read once
    /// it is written.
    Empty,
    /// Written within the settle period: left for a later batch.
    Changing,
    /// Gone since it was listed.
    Gone,
}

/// Which of `paths` are complete. A file last written at least `settle` ago is; a
/// younger one is looked at again once it would be `settle` old (one wait for all,
/// at most `settle`) and is complete if it did not change meanwhile.
pub async fn settle(paths: &[PathBuf], settle: Duration) -> Vec<Readiness> {
    let first: Vec<Option<Stamp>> = paths.iter().map(|p| Stamp::of(p).ok()).collect();
    let young = |s: &Stamp| s.size > 0 && s.age().is_none_or(|a| a < settle);
    let wait = first
        .iter()
        .flatten()
        .filter(|s| young(s))
        .map(|s| settle.saturating_sub(s.age().unwrap_or_default()))
        .max();
    if let Some(wait) = wait {
        tokio::time::sleep(wait).await;
    }
    paths
        .iter()
        .zip(first)
        .map(|(path, was)| match was {
            None => Readiness::Gone,
            Some(s) if s.size == 0 => Readiness::Empty,
            Some(s) if !young(&s) => Readiness::Settled(s),
            Some(s) => match Stamp::of(path) {
                Ok(now) if now == s => Readiness::Settled(s),
                Ok(_) => Readiness::Changing,
                Err(_) => Readiness::Gone,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &[u8]) -> ReadRecord {
        ReadRecord {
            name: FileName(name.to_vec()),
            stamp: Some(Stamp {
                size: 3,
                modified_micros: Some(7),
            }),
            fingerprint: Some(fingerprint(b"abc")),
        }
    }

    #[test]
    fn names_that_a_lossy_conversion_merges_stay_apart_through_a_checkpoint() {
        let names: [&[u8]; 4] = [
            b"x\xff.json",
            b"x\xfe.json",
            "x\u{FFFD}.json".as_bytes(),
            b"x\\xff.json",
        ];
        let stored: Vec<String> = names
            .iter()
            .map(|n| serde_json::to_string(&record(n)).expect("json"))
            .collect();
        for (i, text) in stored.iter().enumerate() {
            let back: ReadRecord = serde_json::from_str(text).expect("parse");
            assert_eq!(back, record(names[i]));
            assert_eq!(stored.iter().filter(|s| *s == text).count(), 1);
        }
    }

    #[test]
    fn a_plain_name_is_an_earlier_checkpoint() {
        let r: ReadRecord = serde_json::from_str("\"a/b.json\"").expect("parse");
        assert_eq!(r.name.as_bytes(), b"a/b.json");
        assert_eq!(r.stamp, None);
    }

    #[test]
    fn names_are_shown_readably() {
        assert_eq!(FileName(b"x\xff.json".to_vec()).to_string(), "x\\xff.json");
        assert_eq!(FileName("é.json".as_bytes().to_vec()).to_string(), "é.json");
    }
}
