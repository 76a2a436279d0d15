//! Opening a PostgreSQL connection, with TLS when the configuration's
//! `sslmode` asks for it (`prefer`, the client's default, or `require`),
//! as libpq does. It owns the choice of connector and how the server's
//! certificate is checked; it must never weaken what the user asked for
//! (a `require` never falls back to plain text) and never put the
//! connection string, which may hold a password, into a message.
//!
//! The connector is rustls (`tokio-postgres-rustls`, maintained beside
//! rustls' own releases) with the `ring` provider: pure Rust and a small
//! C/asm core that builds with `cc`, so the feature needs neither the
//! system's OpenSSL headers (as `postgres-native-tls` would) nor cmake
//! (as rustls' default `aws-lc-rs` provider would).
//!
//! What is checked, following libpq's rules for the modes the client's
//! URL parser knows (`disable`, `prefer`, `require`; it refuses
//! `verify-ca`, `verify-full` and `sslrootcert=`, so the root certificate
//! comes from `PGSSLROOTCERT`, libpq's variable for it):
//!
//! - no root certificate (`PGSSLROOTCERT` unset and no
//!   `~/.postgresql/root.crt`): the connection is encrypted and the server
//!   must hold the private key of the certificate it shows, but that
//!   certificate is not checked (libpq's `require`): this protects against
//!   someone listening, not against someone in the middle;
//! - `PGSSLROOTCERT=<file>` (or `~/.postgresql/root.crt`): the server's
//!   certificate must chain to a certificate in that PEM file; its name is
//!   not checked (libpq's `require` with a root file, i.e. `verify-ca`);
//! - `PGSSLROOTCERT=system`: the certificate must chain to the system's
//!   roots and name the host connected to (libpq 16's `sslrootcert=system`,
//!   i.e. `verify-full`).
//!
//! A Unix socket never carries TLS (PostgreSQL does not offer it there,
//! and libpq does not ask), whatever the mode.

use std::path::PathBuf;
use std::sync::Arc;

use inbox_engine::StoreError;
use postgres::config::{Host, SslMode};
use postgres::{Client, Config, NoTls};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::pg_error;

/// Opens a connection as `config` says; `location` names the database in
/// messages (see [`super::describe`]).
pub(super) fn connect(config: &Config, location: &str) -> Result<Client, StoreError> {
    let connected = if config.get_ssl_mode() == SslMode::Disable {
        config.connect(NoTls)
    } else if only_sockets(config) {
        // No TLS request at all: it would cost a round trip for a "no".
        let mut plain = config.clone();
        plain.ssl_mode(SslMode::Disable);
        plain.connect(NoTls)
    } else {
        config.connect(connector(location)?)
    };
    connected.map_err(|e| failed(e, location))
}

/// A failed connection's error. The server's own errors (a wrong
/// password, a server starting up) keep [`pg_error`]'s wording; the
/// client's say their cause too, which the client's error does not print
/// by itself ("error performing TLS handshake: server does not support
/// TLS", "invalid configuration: password missing"). No cause holds the
/// password: they are the system's, rustls' and the client's own words.
fn failed(error: postgres::Error, location: &str) -> StoreError {
    if error.as_db_error().is_some() || error.is_closed() {
        return pg_error(error, location);
    }
    StoreError::other(format!("{location}: {}", with_causes(&error)))
}

/// The error for a URL the client cannot parse, with its cause (the
/// option and what is wrong with it; the parser never quotes the URL, so
/// no password), and what this client takes for TLS when that is what
/// it refused.
pub(super) fn invalid_url(error: &postgres::Error) -> StoreError {
    let text = with_causes(error);
    let hint = if text.contains("ssl") {
        "; sslmode takes disable, prefer or require, and the root certificate to verify \
         the server with comes from PGSSLROOTCERT (a file, or `system`)"
    } else {
        ""
    };
    StoreError::other(format!(
        "the database URL is not a valid PostgreSQL connection string ({text}){hint}"
    ))
}

/// An error and its causes, `: `-separated: the client's errors print
/// only their kind ("error performing TLS handshake") by themselves.
fn with_causes(error: &postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// Whether every host is a Unix socket folder.
fn only_sockets(config: &Config) -> bool {
    let hosts = config.get_hosts();
    !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_)))
}

/// Where the trusted roots come from (see the module's list).
enum Roots {
    /// None given: encrypt, do not check the certificate.
    None,
    /// A PEM file's certificates: check the chain, not the name.
    File(RootCertStore),
    /// The system's roots: check the chain and the name.
    System(RootCertStore),
}

fn connector(location: &str) -> Result<MakeRustlsConnect, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::other(format!("{location}: cannot set up TLS ({e})")))?;
    let config = match roots(location)? {
        Roots::System(store) => builder.with_root_certificates(store),
        Roots::File(store) => {
            let verifier = ChainOnly(
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                    .build()
                    .map_err(|e| {
                        StoreError::other(format!("{location}: cannot use PGSSLROOTCERT ({e})"))
                    })?,
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
        }
        Roots::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(
                provider.signature_verification_algorithms,
            ))),
    };
    Ok(MakeRustlsConnect::new(config.with_no_client_auth()))
}

/// The roots `PGSSLROOTCERT` (else `~/.postgresql/root.crt`, if present)
/// names, as libpq finds them.
fn roots(location: &str) -> Result<Roots, StoreError> {
    let named = std::env::var_os("PGSSLROOTCERT").filter(|v| !v.is_empty());
    if named.as_deref() == Some("system".as_ref()) {
        return system_roots(location).map(Roots::System);
    }
    let file = match named {
        Some(file) => PathBuf::from(file),
        None => match std::env::var_os("HOME") {
            Some(home) if PathBuf::from(&home).join(".postgresql/root.crt").is_file() => {
                PathBuf::from(home).join(".postgresql/root.crt")
            }
            _ => return Ok(Roots::None),
        },
    };
    let unusable = |what: String| {
        StoreError::other(format!(
            "{location}: the root certificate file {} {what}",
            file.display()
        ))
    };
    let mut store = RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(&file)
        .map_err(|e| unusable(format!("cannot be read ({e})")))?;
    for certificate in certificates {
        let certificate = certificate.map_err(|e| unusable(format!("is not PEM ({e})")))?;
        store
            .add(certificate)
            .map_err(|e| unusable(format!("holds a bad certificate ({e})")))?;
    }
    if store.is_empty() {
        return Err(unusable("holds no certificate".to_owned()));
    }
    Ok(Roots::File(store))
}

/// The operating system's trusted roots (`PGSSLROOTCERT=system`).
fn system_roots(location: &str) -> Result<RootCertStore, StoreError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(StoreError::other(format!(
            "{location}: PGSSLROOTCERT=system, but no system root certificate was found"
        )));
    }
    Ok(store)
}

/// libpq's `require` without a root file: the handshake's signatures are
/// checked (the server holds the key of the certificate it shows, so the
/// channel is bound to it), the certificate itself is not.
#[derive(Debug)]
struct EncryptOnly(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
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

/// libpq's `verify-ca`: the chain must reach a trusted root; a
/// certificate for another name is accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let checked =
            self.0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match checked {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
