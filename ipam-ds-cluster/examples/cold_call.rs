//! A cold call's cost on each datastore, as a CNI call pays it: a new
//! process reads its settings, connects (TLS handshake included) and makes
//! one read. Time it from outside, the whole process, e.g.
//! `/usr/bin/time -v target/release/examples/cold_call kube FILE`.
//!
//!   cold_call kube KUBECONFIG          one GET of an object, by the kube client
//!   cold_call etcd SETTINGS.json       one linearizable range, by the etcd client
//!   cold_call read-kubeconfig FILE N   reads and checks FILE N times; the time of one
//!   cold_call serve-etcd SETTINGS.json starts a TLS test etcd (client certificates
//!                                      required), writes the settings that reach it,
//!                                      and runs until its standard input ends
//!
//! Built with `--features testing` (the test etcd).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipam_ds_cluster::{etcd, kube};

const PROBES: kube::Resource = kube::Resource { group: "client-test.ipam.example", version: "v1", plural: "probes" };

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let timeout = Duration::from_secs(5);
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["kube", kubeconfig] => {
            let kubeconfig = kube::Kubeconfig::read(Path::new(kubeconfig)).map_err(|e| e.to_string())?;
            let settings = kube::Settings { kubeconfig: kubeconfig.into(), timeout };
            let client = kube::Client::new(&settings).map_err(|e| e.to_string())?;
            client.get(&PROBES, "cold").map_err(|e| e.to_string())?;
        }
        ["etcd", file] => {
            let (endpoint, ca, cert, key) = read_settings(file)?;
            let tls = etcd::TlsFiles { ca: Some(ca), cert: Some(cert), key: Some(key) };
            let settings = etcd::Settings { endpoints: vec![endpoint], timeout, username: None, password: None, tls };
            let client = etcd::Client::new(settings).map_err(|e| e.to_string())?;
            client.range(&etcd::RangeRequest::key("/cold")).map_err(|e| e.to_string())?;
        }
        ["read-kubeconfig", file, times] => {
            let times: u32 = times.parse().map_err(|_| format!("{times:?} is not a count"))?;
            let started = std::time::Instant::now();
            for _ in 0..times {
                kube::Kubeconfig::read(Path::new(file)).map_err(|e| e.to_string())?;
            }
            println!("{:?} per read", started.elapsed() / times);
        }
        ["serve-etcd", file] => {
            let etcd = etcd::testing::TestEtcd::start_tls();
            let tls = etcd.tls_files();
            let path = |p: Option<PathBuf>| p.map(|p| p.display().to_string()).unwrap_or_default();
            let settings = [etcd.endpoint(), path(tls.ca), path(tls.cert), path(tls.key)].join("\n");
            std::fs::write(file, settings).map_err(|e| format!("{file}: {e}"))?;
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
        _ => return Err("usage: cold_call kube KUBECONFIG | etcd SETTINGS | serve-etcd SETTINGS".into()),
    }
    Ok(())
}

fn read_settings(file: &str) -> Result<(String, PathBuf, PathBuf, PathBuf), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    match text.lines().collect::<Vec<_>>().as_slice() {
        [endpoint, ca, cert, key] => Ok((endpoint.to_string(), ca.into(), cert.into(), key.into())),
        _ => Err(format!("{file}: not what serve-etcd writes")),
    }
}
