//! TLS to the server, for both connections a source opens: `sslmode:`,
//! `sslrootcert:` and the client certificate (`sslcert:`, `sslkey:`,
//! [`crate::client_cert`]) of the connection in pipeline.yaml, with libpq's meanings. The SQL
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

use crate::client_cert::ClientCert;
use crate::error::PgError;

/// Makes rustls' `ring` provider the process's default, for drivers that build their
/// rustls configuration with it (mysql_async): without one, rustls would have to pick
/// among the providers the build has. Harmless when one is set already.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// How a connection uses TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub mode: SslMode,
    /// PEM file of the CAs that verify the server (else Mozilla's, from webpki-roots).
    pub root_cert: Option<PathBuf>,
    /// The certificate the client authenticates with, when the server asks for one.
    pub client_cert: Option<ClientCert>,
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
        let config = match self.mode {
            SslMode::Disable => return pgwire_replication::TlsConfig::disabled(),
            SslMode::Prefer => pgwire_replication::TlsConfig {
                mode: pgwire_replication::SslMode::Prefer,
                ..pgwire_replication::TlsConfig::require()
            },
            SslMode::Require => pgwire_replication::TlsConfig::require(),
            SslMode::VerifyCa => pgwire_replication::TlsConfig::verify_ca(root),
            SslMode::VerifyFull => pgwire_replication::TlsConfig::verify_full(root),
        };
        match &self.client_cert {
            Some(c) => config.with_client_cert(c.cert.path(), c.key.path()),
            None => config,
        }
    }

    /// A rustls configuration with the client certificate when there is one.
    fn with_client_auth(
        &self,
        builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    ) -> Result<ClientConfig, PgError> {
        let Some(cert) = &self.client_cert else {
            return Ok(builder.with_no_client_auth());
        };
        let (chain, key) = cert.load().map_err(|e| self.client_error(e))?;
        builder.with_client_auth_cert(chain, key).map_err(|e| {
            self.client_error(format!(
                "the client certificate and key cannot be used together: {e}"
            ))
        })
    }

    fn client_error(&self, message: String) -> PgError {
        PgError::NotReady {
            message,
            help: "`sslcert:`/`sslcert_env:` give the client's certificate and `sslkey:`/`sslkey_env:` its private key, both in PEM".into(),
        }
    }

    fn client_config(&self) -> Result<ClientConfig, PgError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| self.error(format!("TLS cannot be set up: {e}")))?;
        let algorithms = provider.signature_verification_algorithms;
        let config = match self.mode {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => self.with_client_auth(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(Unverified(algorithms))),
            )?,
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let verifier =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(self.roots()?), provider)
                        .build()
                        .map_err(|e| self.error(format!("the trusted CAs cannot be used: {e}")))?;
                self.with_client_auth(builder.dangerous().with_custom_certificate_verifier(
                    Arc::new(Verified {
                        inner: verifier,
                        host_name: self.mode == SslMode::VerifyFull,
                    }),
                ))?
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
                ..Tls::default()
            }
            .client_config()
            .expect("config");
        }
        let missing = Tls {
            mode: SslMode::VerifyFull,
            root_cert: Some("/nonexistent/ca.pem".into()),
            client_cert: None,
        };
        let e = missing.client_config().expect_err("an error");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let client = Tls {
            mode: SslMode::Require,
            root_cert: None,
            client_cert: Some(ClientCert {
                cert: crate::client_cert::Pem::File("/nonexistent/client.pem".into()),
                key: crate::client_cert::Pem::File("/nonexistent/client.key".into()),
            }),
        };
        let e = client.client_config().expect_err("an error");
        assert!(e.to_string().contains("/nonexistent/client.pem"), "{e}");
        assert!(
            client
                .replication_config()
                .client_key_pem_path
                .is_some_and(|p| p.ends_with("client.key"))
        );
    }
}
