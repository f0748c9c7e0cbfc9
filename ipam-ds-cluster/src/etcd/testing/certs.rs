//! Certificates for a TLS test etcd, made with the openssl CLI: nothing to
//! ship, nothing that expires between runs.

use std::path::Path;
use std::process::{Command, Stdio};

use super::find_in_path;

/// Extensions as a verifier checks them (webpki is strict): a CA that is one,
/// leaves that are not, and the IP the test etcd listens on.
const CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = ipam-test-ca
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
";

/// P-256 keys: generated in milliseconds, unlike RSA.
const NEW_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

/// ca.crt, server.{crt,key} and client.{crt,key} in `dir`. The server's may
/// also act as a client: etcd 3.4's gateway presents it when it calls etcd's
/// own gRPC server, which requires client certificates here.
pub(super) fn make(dir: &Path) {
    let openssl =
        find_in_path("openssl").unwrap_or_else(|| panic!("openssl not found in PATH: install Debian's openssl"));
    std::fs::write(dir.join("openssl.cnf"), CONFIG).expect("write openssl.cnf");
    let run = |args: String| {
        let out = Command::new(&openssl)
            .current_dir(dir)
            .args(args.split_whitespace())
            .stdin(Stdio::null())
            .output()
            .expect("openssl runs");
        assert!(out.status.success(), "openssl {args}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(format!("req -x509 -config openssl.cnf -extensions ca -days 7 {NEW_KEY} -keyout ca.key -out ca.crt"));
    for (name, serial) in [("server", 2), ("client", 3)] {
        run(format!(
            "req -new -config openssl.cnf -subj /CN=ipam-test-{name} {NEW_KEY} -keyout {name}.key -out {name}.csr"
        ));
        run(format!(
            "x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -set_serial {serial} -days 7 \
             -extfile openssl.cnf -extensions {name} -out {name}.crt"
        ));
    }
}
