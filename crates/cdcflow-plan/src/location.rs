//! Where a table's files are: a folder of this machine, or a URL of an object store
//! (`s3://bucket/prefix`). Paths in pipeline.yaml are either; a relative path starts at
//! the pipeline folder. Credentials never come from a location: a URL with a user or
//! password is refused, and the object store's credentials come from the environment
//! (`AWS_ACCESS_KEY_ID`, …; docs/storage.md).

use std::fmt;
use std::path::{Path, PathBuf};

use url::Url;

/// The object stores a location may name.
pub const SCHEMES: &[&str] = &["s3", "s3a"];

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
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "`{scheme}://` URLs carry no credentials: they come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, …)"
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
        assert!(refused("gs://lake/crm").contains("not an object store cdcflow reads"));
        assert!(refused("s3://key:secret@lake/crm").contains("carry no credentials"));
        assert!(refused("s3:///crm").contains("names no bucket"));
        assert!(refused("s3://lake/crm?region=x").contains("no `?`"));
    }
}
