//! `GET /metrics` on `--metrics-address`: what `ipam-delegated metrics`
//! prints, of every database watched (`ipam_delegated_database_ok` labelled
//! by `database`), and the agent's own counters, in Prometheus' text format. A plain std server in a thread of its own: one
//! scrape at a time is all a Prometheus asks of it.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::operator::metrics;

/// What the passes count, read by the scrapes.
#[derive(Debug, Default)]
pub struct Counters {
    pub passes: AtomicU64,
    pub released: AtomicU64,
    pub errors: AtomicU64,
    /// Unix seconds of the last pass that ended without an error; 0: none yet.
    pub last_success: AtomicI64,
}

/// The agent's families: (name, type, help, value).
fn own_families(counters: &Counters) -> [(&'static str, &'static str, &'static str, String); 4] {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed).to_string();
    [
        ("ipam_delegated_agent_passes_total", "counter", "Passes the agent has made.", load(&counters.passes)),
        (
            "ipam_delegated_agent_released_total",
            "counter",
            "Attachments of pods gone from this node that the agent released with the stack's DEL.",
            load(&counters.released),
        ),
        (
            "ipam_delegated_agent_errors_total",
            "counter",
            "Passes or releases that failed (API server unreachable, a database or a DEL failing); a pass that fails \
             to list the pods releases nothing.",
            load(&counters.errors),
        ),
        (
            "ipam_delegated_agent_last_success_timestamp_seconds",
            "gauge",
            "Unix time of the last pass that ended without an error; 0 before the first.",
            counters.last_success.load(Ordering::Relaxed).to_string(),
        ),
    ]
}

/// The whole exposition.
pub fn exposition(databases: &[PathBuf], counters: &Counters) -> String {
    let mut text = match databases {
        [] => String::new(),
        databases => metrics::of_databases(databases),
    };
    for (name, kind, help, value) in own_families(counters) {
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    text
}

/// Binds `address` (so that a bad one fails the start) and serves from a thread.
pub fn start(address: &str, databases: Vec<PathBuf>, counters: Arc<Counters>) -> std::io::Result<()> {
    let listener = TcpListener::bind(address)?;
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for stream in listener.incoming().flatten() {
            if let Err(e) = answer(stream, &databases, &counters) {
                tracing::debug!("a metrics request was not answered: {e}");
            }
        }
    })?;
    Ok(())
}

fn answer(stream: TcpStream, databases: &[PathBuf], counters: &Counters) -> std::io::Result<()> {
    // A client that connects and says nothing must not hold the thread.
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The headers, up to the blank line.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut parts = request_line.split_whitespace();
    let (status, body) = match (parts.next(), parts.next().map(|p| p.split('?').next().unwrap_or(p))) {
        (Some("GET"), Some("/metrics")) => ("200 OK", exposition(databases, counters)),
        (Some("GET"), _) => ("404 Not Found", "only /metrics is served\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET /metrics is served\n".to_string()),
    };
    let mut out = &stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn metrics_are_served_with_the_agents_counters_and_anything_else_is_refused() {
        let counters = Arc::new(Counters::default());
        counters.passes.store(3, Ordering::Relaxed);
        counters.released.store(2, Ordering::Relaxed);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        start(&address.to_string(), Vec::new(), Arc::clone(&counters)).unwrap();
        let get = |path: &str| {
            let mut stream = TcpStream::connect(address).unwrap();
            write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            text
        };
        let text = get("/metrics");
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        for line in [
            "ipam_delegated_agent_passes_total 3",
            "ipam_delegated_agent_released_total 2",
            "ipam_delegated_agent_errors_total 0",
            "# TYPE ipam_delegated_agent_passes_total counter",
            "ipam_delegated_agent_last_success_timestamp_seconds 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        assert!(get("/other").starts_with("HTTP/1.1 404"));
    }
}
