//! The TLS settings, read from PEM files once per client, and only when an
//! endpoint is https: a plain-http cluster never touches the files.

use std::path::Path;
use std::sync::Arc;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};

use super::{Error, TlsFiles};

/// Debian's (and most distributions') bundle of the system's trusted CAs.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub(super) fn config(files: &TlsFiles) -> Result<TlsConfig, Error> {
    let ca = files.ca.as_deref().unwrap_or(Path::new(SYSTEM_CA_BUNDLE));
    let roots = certificates("tls.ca", ca)?;
    let client = match (&files.cert, &files.key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            Some(ClientCert::new_with_certs(&certificates("tls.cert", cert)?, private_key(key)?))
        }
        (Some(_), None) => return Err(Error::settings("tls.key", "tls.cert is set but tls.key is not")),
        (None, Some(_)) => return Err(Error::settings("tls.cert", "tls.key is set but tls.cert is not")),
    };
    Ok(TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::Specific(Arc::new(roots)))
        .client_cert(client)
        .build())
}

fn pem_items(field: &str, path: &Path) -> Result<Vec<PemItem<'static>>, Error> {
    let bad = |m: String| Error::settings(field, format!("{}: {m}", path.display()));
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    ureq::tls::parse_pem(&pem).collect::<Result<_, _>>().map_err(|e| bad(format!("invalid PEM: {e}")))
}

fn certificates(field: &str, path: &Path) -> Result<Vec<Certificate<'static>>, Error> {
    let certs: Vec<_> = pem_items(field, path)?
        .into_iter()
        .filter_map(|item| match item {
            PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(Error::settings(field, format!("{}: no PEM certificate in it", path.display())));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKey<'static>, Error> {
    pem_items("tls.key", path)?
        .into_iter()
        .find_map(|item| match item {
            PemItem::PrivateKey(k) => Some(k),
            _ => None,
        })
        .ok_or_else(|| Error::settings("tls.key", format!("{}: no PEM private key in it", path.display())))
}
