//! The TLS settings, read from PEM files once per client, and only when an
//! endpoint is https: a plain-http cluster never touches the files. They are
//! checked in `Client::new`, so that a bad file is reported as a setting; the
//! rustls configuration is made from them only at the first connection.

use std::path::Path;

use rustls_pki_types::pem::{PemObject as _, SectionKind};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::{Error, TlsFiles};

/// Debian's (and most distributions') bundle of the system's trusted CAs.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The PEM files' contents, each known to hold what it must.
#[derive(Clone)]
pub(super) struct Material {
    ca: Vec<u8>,
    /// Certificate chain and private key.
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Material {
    pub(super) fn read(files: &TlsFiles) -> Result<Material, Error> {
        let ca = files.ca.as_deref().unwrap_or(Path::new(SYSTEM_CA_BUNDLE));
        let ca = pem_file("tls.ca", ca, &[SectionKind::Certificate], "certificate")?;
        let client = match (&files.cert, &files.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((
                pem_file("tls.cert", cert, &[SectionKind::Certificate], "certificate")?,
                pem_file(
                    "tls.key",
                    key,
                    &[SectionKind::PrivateKey, SectionKind::RsaPrivateKey, SectionKind::EcPrivateKey],
                    "private key",
                )?,
            )),
            (Some(_), None) => return Err(Error::settings("tls.key", "tls.cert is set but tls.key is not")),
            (None, Some(_)) => return Err(Error::settings("tls.cert", "tls.key is set but tls.cert is not")),
        };
        Ok(Material { ca, client })
    }

    /// Whether a client certificate is configured.
    pub(super) fn has_identity(&self) -> bool {
        self.client.is_some()
    }

    /// What tonic makes its rustls client configuration from (with ring,
    /// HTTP/2 by ALPN, the server name from the endpoint's host).
    pub(super) fn config(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca));
        match &self.client {
            Some((cert, key)) => config.identity(Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// The file's bytes, once it is known to be PEM with a section of one of `kinds`.
fn pem_file(field: &str, path: &Path, kinds: &[SectionKind], what: &str) -> Result<Vec<u8>, Error> {
    let bad = |m: String| Error::settings(field, format!("{}: {m}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut found = false;
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(&bytes) {
        match section {
            Ok((kind, _)) => found |= kinds.contains(&kind),
            Err(e) => return Err(bad(format!("invalid PEM: {e}"))),
        }
    }
    if !found {
        return Err(bad(format!("no PEM {what} in it")));
    }
    Ok(bytes)
}
