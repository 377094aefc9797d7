//! TLS for the gateway port with rustls: certificate files from
//! `gateway.tls`, or (unless `autoGenerate` is false) a self-signed certificate generated once and kept in the
//! data dir. The SHA-256 fingerprint is what clients pin.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tokio_rustls::TlsAcceptor;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("gateway.tls: cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("gateway.tls: {path} holds no {what}")]
    Empty { path: PathBuf, what: &'static str },
    #[error("gateway.tls: certPath and keyPath must be given together")]
    HalfConfigured,
    #[error("gateway.tls: certPath and keyPath are not set and autoGenerate is false")]
    NoCertificate,
    #[error("gateway.tls: could not generate a self-signed certificate: {0}")]
    Generate(String),
    #[error("gateway.tls: certificate and key do not fit: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A ready acceptor and the leaf certificate's fingerprint.
pub struct TlsSetup {
    pub acceptor: TlsAcceptor,
    pub fingerprint_sha256: String,
}

/// `AA:BB:…` over the DER certificate.
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn load_pair(
    cert_path: &Path,
    key_path: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let cert_pem = read(cert_path)?;
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: cert_path.to_path_buf(),
            what: "PEM certificate",
        });
    }
    let key_pem = read(key_path)?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .ok()
        .flatten()
        .ok_or_else(|| TlsError::Empty {
            path: key_path.to_path_buf(),
            what: "PEM private key",
        })?;
    Ok((certs, key))
}

/// Generates (once) a self-signed certificate for this host under `dir`.
pub fn ensure_self_signed(dir: &Path, host: &str) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert_path = dir.join("gateway-cert.pem");
    let key_path = dir.join("gateway-key.pem");
    if cert_path.exists() && key_path.exists() {
        return Ok((cert_path, key_path));
    }
    let names = vec![
        host.to_string(),
        format!("{host}.local"),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ];
    let certified =
        rcgen::generate_simple_self_signed(names).map_err(|e| TlsError::Generate(e.to_string()))?;
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let write = |path: &Path, text: String, mode: u32| -> Result<(), TlsError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(mode)
            .open(path)
            .map_err(|source| TlsError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        file.write_all(text.as_bytes())
            .and_then(|_| file.sync_all())
            .map_err(|source| TlsError::Read {
                path: path.to_path_buf(),
                source,
            })
    };
    write(&key_path, certified.key_pair.serialize_pem(), 0o600)?;
    write(&cert_path, certified.cert.pem(), 0o644)?;
    Ok((cert_path, key_path))
}

/// Builds the acceptor from files (or the generated pair).
pub fn setup(
    cert_path: Option<&Path>,
    key_path: Option<&Path>,
    auto_generate: bool,
    data_dir: &Path,
    host: &str,
) -> Result<TlsSetup, TlsError> {
    let (cert_path, key_path) = match (cert_path, key_path) {
        (Some(c), Some(k)) => (c.to_path_buf(), k.to_path_buf()),
        (None, None) if auto_generate => ensure_self_signed(&data_dir.join("tls"), host)?,
        (None, None) => return Err(TlsError::NoCertificate),
        _ => return Err(TlsError::HalfConfigured),
    };
    let (certs, key) = load_pair(&cert_path, &key_path)?;
    let fingerprint_sha256 = fingerprint(certs[0].as_ref());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsSetup {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        fingerprint_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_auto_generate_missing_files_are_an_error_not_a_new_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = setup(None, None, false, dir.path(), "pincer")
            .err()
            .expect("no certificate generated");
        assert!(err.to_string().contains("autoGenerate"), "{err}");
        assert!(!dir.path().join("tls").exists(), "nothing written");
    }

    #[test]
    fn self_signed_certificate_is_generated_once_and_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = setup(None, None, true, dir.path(), "pincer").expect("generated");
        let second = setup(None, None, true, dir.path(), "pincer").expect("reloaded");
        assert_eq!(
            first.fingerprint_sha256, second.fingerprint_sha256,
            "kept, not regenerated"
        );
        assert_eq!(first.fingerprint_sha256.len(), 32 * 3 - 1);
    }

    #[test]
    fn half_configured_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = setup(Some(Path::new("/x.pem")), None, true, dir.path(), "h")
            .err()
            .expect("refused");
        assert!(matches!(err, TlsError::HalfConfigured));
    }
}
