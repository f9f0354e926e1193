//! Where a table's files are: a folder of this machine, or a URL of an object store
//! (`s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`,
//! `abfss://container@account.dfs.core.windows.net/prefix`). Paths in pipeline.yaml
//! are either; a relative path starts at the pipeline folder. Credentials never come
//! from a location: a URL with a password (or, but for Azure's `container@account`, a
//! user) is refused, and the object store's credentials come from the environment
//! (`AWS_*`, `GOOGLE_*`, `AZURE_*`; docs/storage.md).

use std::fmt;
use std::path::{Path, PathBuf};

use url::Url;

/// The object stores a location may name.
pub const SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "abfs", "abfss"];

/// The environment variables that configure the store of `scheme`, for messages.
pub fn credentials_from(scheme: &str) -> &'static str {
    match scheme {
        "gs" => "GOOGLE_SERVICE_ACCOUNT, GOOGLE_APPLICATION_CREDENTIALS, …",
        "az" | "abfs" | "abfss" => "AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, …",
        _ => "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, …",
    }
}

/// Whether a URL's user part names a container rather than a credential (Azure's
/// `abfss://container@account.dfs.core.windows.net/`).
fn user_is_container(scheme: &str) -> bool {
    matches!(scheme, "abfs" | "abfss")
}

/// A table's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Absolute.
    Local(PathBuf),
    /// An object-store URL, ending in `/` (a table is a prefix).
    Remote(Url),
}

impl Location {
    /// `text` as pipeline.yaml gives it, relative paths taken from `root`; an error
    /// saying what is wrong with a URL.
    pub fn parse(root: &Path, text: &str) -> Result<Self, String> {
        let Some((scheme, _)) = text.split_once("://") else {
            return Ok(Self::Local(root.join(text)));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme == "file" {
            return Url::parse(text)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .map(Self::Local)
                .ok_or_else(|| format!("`{text}` is not a file path"));
        }
        if !SCHEMES.contains(&scheme.as_str()) {
            return Err(format!(
                "`{scheme}://` is not an object store cdcflow reads; it reads {} and local paths",
                SCHEMES
                    .iter()
                    .map(|s| format!("`{s}://`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut url = Url::parse(text).map_err(|e| format!("`{text}` is not a URL: {e}"))?;
        if (!url.username().is_empty() && !user_is_container(&scheme)) || url.password().is_some() {
            return Err(format!(
                "`{scheme}://` URLs carry no credentials: they come from the environment ({})",
                credentials_from(&scheme)
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("`{text}` names no bucket"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("`{text}`: a location has no `?` or `#` part"));
        }
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        Ok(Self::Remote(url))
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Self::Remote(_))
    }

    /// The folder, when the location is one of this machine.
    pub fn local(&self) -> Option<&Path> {
        match self {
            Self::Local(path) => Some(path),
            Self::Remote(_) => None,
        }
    }

    /// The location of `name` (one folder name) inside this one.
    pub fn join(&self, name: &str) -> Self {
        match self {
            Self::Local(path) => Self::Local(path.join(name)),
            Self::Remote(url) => {
                let mut joined = url.clone();
                // One path segment, escaped as a URL escapes it; ends in `/` (a prefix).
                if let Ok(mut segments) = joined.path_segments_mut() {
                    segments.pop_if_empty().push(name).push("");
                }
                Self::Remote(joined)
            }
        }
    }

    /// Its last folder name (empty for a bucket's root).
    pub fn name(&self) -> String {
        match self {
            Self::Local(path) => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Self::Remote(url) => url
                .path_segments()
                .and_then(|mut s| s.rfind(|s| !s.is_empty()))
                .map(|s| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned()
                })
                .unwrap_or_default(),
        }
    }

    /// The location beside this one whose name is this one's with `suffix` appended.
    pub fn with_suffix(&self, suffix: &str) -> Self {
        let name = format!("{}{suffix}", self.name());
        match self {
            Self::Local(path) => Self::Local(path.with_file_name(name)),
            Self::Remote(url) => {
                let mut sibling = url.clone();
                if let Ok(mut segments) = sibling.path_segments_mut() {
                    segments.pop_if_empty().pop().push(&name).push("");
                }
                Self::Remote(sibling)
            }
        }
    }

    /// The location as messages show it, as a path: the folder, or the URL.
    pub fn shown(&self) -> PathBuf {
        match self {
            Self::Local(path) => path.clone(),
            Self::Remote(url) => PathBuf::from(url.as_str()),
        }
    }

    /// Whether `self` is `base` followed by one or more names.
    pub fn is_inside(&self, base: &Self) -> bool {
        match (self, base) {
            (Self::Local(path), Self::Local(base)) => path.strip_prefix(base).is_ok_and(|rest| {
                rest.components().next().is_some()
                    && rest
                        .components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)))
            }),
            (Self::Remote(url), Self::Remote(base)) => {
                url.scheme() == base.scheme()
                    && url.username() == base.username()
                    && url.host_str() == base.host_str()
                    && url.port() == base.port()
                    && url.path().len() > base.path().len()
                    && url.path().starts_with(base.path())
                    && url.path_segments().is_some_and(|s| {
                        s.filter(|s| !s.is_empty())
                            .all(|s| s != "." && s != ".." && !s.eq_ignore_ascii_case("%2e%2e"))
                    })
            }
            _ => false,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(path) => write!(f, "{}", path.display()),
            Self::Remote(url) => write!(f, "{url}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_object_store_urls_are_told_apart_and_urls_checked() {
        let root = Path::new("/p");
        assert_eq!(
            Location::parse(root, "exports/crm").unwrap(),
            Location::Local(PathBuf::from("/p/exports/crm"))
        );
        assert_eq!(
            Location::parse(root, "file:///data/crm").unwrap(),
            Location::Local(PathBuf::from("/data/crm"))
        );
        assert_eq!(
            Location::parse(root, "s3://lake/crm/export")
                .unwrap()
                .to_string(),
            "s3://lake/crm/export/"
        );
        let refused = |text: &str| Location::parse(root, text).unwrap_err();
        assert!(refused("hdfs://lake/crm").contains("not an object store cdcflow reads"));
        assert!(refused("s3://key:secret@lake/crm").contains("carry no credentials"));
        assert!(refused("gs://key@lake/crm").contains("GOOGLE_SERVICE_ACCOUNT"));
        assert!(refused("abfss://c:key@acct.dfs.core.windows.net/crm").contains("AZURE_STORAGE"));
        for url in [
            "gs://lake/crm/",
            "az://container/crm/",
            "abfss://container@acct.dfs.core.windows.net/crm/",
        ] {
            assert_eq!(Location::parse(root, url).unwrap().to_string(), url);
        }
        let azure = Location::parse(root, "abfss://c@acct.dfs.core.windows.net/p").unwrap();
        let other = Location::parse(root, "abfss://d@acct.dfs.core.windows.net/p/t").unwrap();
        assert!(azure.join("t").is_inside(&azure));
        assert!(!other.is_inside(&azure));
        assert!(refused("s3:///crm").contains("names no bucket"));
        assert!(refused("s3://lake/crm?region=x").contains("no `?`"));
    }

    #[test]
    fn names_join_and_sit_beside_one_another_in_a_folder_and_a_bucket() {
        let bucket = Location::parse(Path::new("/p"), "s3://lake/pipe").unwrap();
        let table = bucket.join("tables").join("silver orders");
        assert_eq!(table.to_string(), "s3://lake/pipe/tables/silver%20orders/");
        assert_eq!(table.name(), "silver orders");
        assert_eq!(
            table.with_suffix("__quarantine").to_string(),
            "s3://lake/pipe/tables/silver%20orders__quarantine/"
        );
        assert!(table.is_inside(&bucket));
        assert!(!bucket.is_inside(&bucket));
        assert!(!bucket.is_inside(&table));
        let other = Location::parse(Path::new("/p"), "s3://lake/pipeline").unwrap();
        assert!(!other.join("x").is_inside(&bucket));
        let folder = Location::parse(Path::new("/p"), "_storage").unwrap();
        let table = folder.join("tables").join("orders");
        assert_eq!(table.shown(), PathBuf::from("/p/_storage/tables/orders"));
        assert_eq!(table.with_suffix("__late").name(), "orders__late");
        assert!(table.is_inside(&folder));
        assert!(!table.is_inside(&bucket));
    }
}
