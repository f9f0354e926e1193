//! TLS to the server, for both connections a source opens: `sslmode:` and
//! `sslrootcert:` of the connection in pipeline.yaml, with libpq's meanings. The SQL
//! connection goes through `tokio-postgres-rustls` with a rustls configuration built
//! here; the replication connection through pgwire-replication's own rustls support,
//! given the same mode and CA file. Both use rustls with the `ring` provider, already
//! in the build for the Delta object stores (docs/sources.md says why rustls).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cdcflow_plan::connections::SslMode;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::error::PgError;

/// How a connection uses TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub mode: SslMode,
    /// PEM file of the CAs that verify the server (else Mozilla's, from webpki-roots).
    pub root_cert: Option<PathBuf>,
}

impl Tls {
    /// tokio-postgres knows only disable, prefer and require; verification is the
    /// connector's.
    pub(crate) fn sql_mode(&self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Pg;
        match self.mode {
            SslMode::Disable => Pg::Disable,
            SslMode::Prefer => Pg::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Pg::Require,
        }
    }

    /// The rustls connector of the SQL connection.
    pub(crate) fn sql_connector(
        &self,
    ) -> Result<tokio_postgres_rustls::MakeRustlsConnect, PgError> {
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(
            self.client_config()?,
        ))
    }

    /// The same settings for pgwire-replication.
    pub(crate) fn replication_config(&self) -> pgwire_replication::TlsConfig {
        let root = self.root_cert.clone();
        match self.mode {
            SslMode::Disable => pgwire_replication::TlsConfig::disabled(),
            SslMode::Prefer => pgwire_replication::TlsConfig {
                mode: pgwire_replication::SslMode::Prefer,
                ..pgwire_replication::TlsConfig::require()
            },
            SslMode::Require => pgwire_replication::TlsConfig::require(),
            SslMode::VerifyCa => pgwire_replication::TlsConfig::verify_ca(root),
            SslMode::VerifyFull => pgwire_replication::TlsConfig::verify_full(root),
        }
    }

    fn client_config(&self) -> Result<ClientConfig, PgError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| self.error(format!("TLS cannot be set up: {e}")))?;
        let algorithms = provider.signature_verification_algorithms;
        let config = match self.mode {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(algorithms)))
                .with_no_client_auth(),
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let verifier =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(self.roots()?), provider)
                        .build()
                        .map_err(|e| self.error(format!("the trusted CAs cannot be used: {e}")))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(Verified {
                        inner: verifier,
                        host_name: self.mode == SslMode::VerifyFull,
                    }))
                    .with_no_client_auth()
            }
        };
        Ok(config)
    }

    /// The CAs of `root_cert`, else the system's.
    fn roots(&self) -> Result<RootCertStore, PgError> {
        let mut roots = RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                for cert in read_pem(path).map_err(|e| self.error(e))? {
                    roots
                        .add(cert)
                        .map_err(|e| self.error(format!("`{}`: {e}", path.display())))?;
                }
            }
            // Mozilla's CAs, as pgwire-replication takes for the replication
            // connection: both connections trust the same.
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        if roots.is_empty() {
            return Err(self.error("no trusted CA certificate was found".into()));
        }
        Ok(roots)
    }

    fn error(&self, message: String) -> PgError {
        PgError::NotReady {
            message,
            help: format!(
                "sslmode: {} needs the CAs that signed the server's certificate: name their PEM file with `sslrootcert:` in the connection",
                self.mode.as_str()
            ),
        }
    }
}

fn read_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("`{}` cannot be read: {e}", path.display()))?
        .collect();
    let certs = certs.map_err(|e| {
        format!(
            "`{}` is not a PEM file of certificates: {e}",
            path.display()
        )
    })?;
    match certs.is_empty() {
        true => Err(format!("`{}` holds no certificate", path.display())),
        false => Ok(certs),
    }
}

/// `prefer` and `require`: encrypted, the certificate taken as it is (libpq does the
/// same); the handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca` and `verify-full`: the chain must lead to a trusted CA; the host name
/// must match only for `verify-full`.
#[derive(Debug)]
struct Verified {
    inner: Arc<WebPkiServerVerifier>,
    host_name: bool,
}

impl ServerCertVerifier for Verified {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.host_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_builds_a_configuration() {
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            Tls {
                mode,
                root_cert: None,
            }
            .client_config()
            .expect("config");
        }
        let missing = Tls {
            mode: SslMode::VerifyFull,
            root_cert: Some("/nonexistent/ca.pem".into()),
        };
        let e = missing.client_config().expect_err("an error");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
