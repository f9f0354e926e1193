//! The certificate a connection authenticates itself with (TLS client authentication,
//! libpq's `sslcert` / `sslkey`): each of the certificate and its private key from a
//! PEM file, or as PEM text from an environment variable (a key that must never be
//! written in a file). The SQL connection is given the parsed certificate and key; the
//! replication connection (pgwire-replication) reads PEM files only, so PEM text is
//! handed to it as an in-memory file (`memfd_create`, Linux), read through
//! `/proc/self/fd/…`: the key never reaches a disk.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Where one PEM text is.
#[derive(Clone, PartialEq, Eq)]
pub enum Pem {
    /// A file.
    File(PathBuf),
    /// Read from the environment variable `var`; `path` names an in-memory file that
    /// holds the same text, for the replication connection.
    Text {
        var: String,
        text: String,
        path: PathBuf,
    },
}

impl std::fmt::Debug for Pem {
    // The text may be a private key: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "File({})", path.display()),
            Self::Text { var, .. } => write!(f, "Env({var})"),
        }
    }
}

impl Pem {
    /// The PEM text of the environment variable `var`, holding `text`.
    pub fn from_text(var: &str, text: String) -> Result<Self, String> {
        let path = memory_file(var, &text)?;
        Ok(Self::Text {
            var: var.into(),
            text,
            path,
        })
    }

    /// What the errors call it.
    fn describe(&self) -> String {
        match self {
            Self::File(path) => format!("`{}`", path.display()),
            Self::Text { var, .. } => format!("the environment variable `{var}`"),
        }
    }

    /// A path that reads as the PEM text.
    pub fn path(&self) -> &Path {
        match self {
            Self::File(path) | Self::Text { path, .. } => path,
        }
    }
}

/// A client certificate (with its chain) and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert: Pem,
    pub key: Pem,
}

impl ClientCert {
    /// The certificate chain and the key, parsed; an error names the file or variable.
    pub fn load(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let certs: Result<Vec<_>, _> = match &self.cert {
            Pem::File(path) => CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("{} cannot be read: {e}", self.cert.describe()))?
                .collect(),
            Pem::Text { text, .. } => CertificateDer::pem_slice_iter(text.as_bytes()).collect(),
        };
        let certs = certs.map_err(|e| {
            format!(
                "{} is not a PEM file of certificates: {e}",
                self.cert.describe()
            )
        })?;
        if certs.is_empty() {
            return Err(format!(
                "{} holds no certificate (`-----BEGIN CERTIFICATE-----`)",
                self.cert.describe()
            ));
        }
        let key = match &self.key {
            Pem::File(path) => PrivateKeyDer::from_pem_file(path),
            Pem::Text { text, .. } => PrivateKeyDer::from_pem_slice(text.as_bytes()),
        }
        .map_err(|e| {
            format!(
                "{} holds no private key in PEM (PKCS#8, PKCS#1 or SEC1): {e}",
                self.key.describe()
            )
        })?;
        Ok((certs, key))
    }
}

/// An in-memory file holding `text`, open for the rest of the process, and the path
/// that reads it.
#[cfg(target_os = "linux")]
fn memory_file(var: &str, text: &str) -> Result<PathBuf, String> {
    use std::collections::HashMap;
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::{Mutex, OnceLock};

    // One file per variable and text, kept open: a connection may be made at any time.
    static FILES: OnceLock<Mutex<HashMap<(String, String), std::fs::File>>> = OnceLock::new();
    let mut files = FILES
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| "the in-memory PEM files are poisoned".to_string())?;
    let entry = (var.to_string(), text.to_string());
    if let Some(file) = files.get(&entry) {
        return Ok(PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())));
    }
    // SAFETY: memfd_create takes a NUL-terminated name and flags, and returns a new
    // descriptor (owned by the File from here on) or -1.
    let fd = unsafe { libc::memfd_create(c"cdcflow-pem".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "the PEM of `{var}` cannot be held in memory: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(text.as_bytes())
        .map_err(|e| format!("the PEM of `{var}` cannot be held in memory: {e}"))?;
    let path = PathBuf::from(format!("/proc/self/fd/{fd}"));
    files.insert(entry, file);
    Ok(path)
}

#[cfg(not(target_os = "linux"))]
fn memory_file(var: &str, _: &str) -> Result<PathBuf, String> {
    Err(format!(
        "a PEM in an environment variable (`{var}`) needs Linux here (the replication connection reads it as an in-memory file): name a PEM file with `sslcert:` / `sslkey:` instead"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_text_reads_back_through_its_path_and_is_never_printed() {
        let text = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n";
        let pem = Pem::from_text("TEST_KEY", text.into()).unwrap();
        assert_eq!(std::fs::read_to_string(pem.path()).unwrap(), text);
        // Read twice: each open starts at the beginning.
        assert_eq!(std::fs::read_to_string(pem.path()).unwrap(), text);
        assert_eq!(format!("{pem:?}"), "Env(TEST_KEY)");
        let again = Pem::from_text("TEST_KEY", text.into()).unwrap();
        assert_eq!(again.path(), pem.path());
    }

    #[test]
    fn bad_pem_is_an_error_naming_its_place() {
        let cert = ClientCert {
            cert: Pem::File("/nonexistent/client.pem".into()),
            key: Pem::File("/nonexistent/client.key".into()),
        };
        let e = cert.load().unwrap_err();
        assert!(e.contains("/nonexistent/client.pem"), "{e}");
        let empty = ClientCert {
            cert: Pem::from_text("TEST_CERT", "no pem here".into()).unwrap(),
            key: Pem::from_text("TEST_KEY2", "no pem here".into()).unwrap(),
        };
        let e = empty.load().unwrap_err();
        assert!(e.contains("`TEST_CERT` holds no certificate"), "{e}");
    }
}
