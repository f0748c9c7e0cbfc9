//! One HTTP exchange with one endpoint, and what its failure means: whether
//! the next endpoint may do better (`Unavailable`) or no endpoint will.

use std::time::Duration;

use ureq::tls::TlsConfig;
use ureq::Agent;

use super::{wire, Error};

/// A large prefix listing is still far below this; past it something is wrong.
const MAX_BODY: u64 = 256 << 20;

pub(super) struct Transport {
    /// Keeps the connection to the endpoint in use between requests.
    agent: Agent,
    timeout: Duration,
}

impl Transport {
    pub(super) fn new(timeout: Duration, tls: Option<TlsConfig>) -> Transport {
        let mut config = Agent::config_builder()
            // The whole exchange, connecting included, so a stopped etcd that
            // still accepts connections costs `timeout` and no more.
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // etcd is on the cluster network: a proxy from the environment
            // would be a surprise, and a CNI plugin's environment is the runtime's.
            .proxy(None)
            .user_agent("ipam-ds-cluster");
        if let Some(tls) = tls {
            config = config.tls_config(tls);
        }
        Transport { agent: config.build().into(), timeout }
    }

    /// POSTs `body` to `endpoint` + `path`; the body of a 2xx answer, else the
    /// error the gateway's status and error body stand for.
    pub(super) fn post(&self, endpoint: &str, path: &str, token: Option<&str>, body: &[u8]) -> Result<Vec<u8>, Error> {
        let mut request = self.agent.post(format!("{endpoint}{path}")).header("content-type", "application/json");
        if let Some(token) = token {
            request = request.header("authorization", token);
        }
        let response = request.send(body).map_err(|e| self.transport_error(e))?;
        self.answer(response)
    }

    #[cfg(any(test, feature = "testing"))]
    pub(super) fn get(&self, endpoint: &str, path: &str) -> Result<Vec<u8>, Error> {
        let response = self.agent.get(format!("{endpoint}{path}")).call().map_err(|e| self.transport_error(e))?;
        self.answer(response)
    }

    fn answer(&self, mut response: ureq::http::Response<ureq::Body>) -> Result<Vec<u8>, Error> {
        let status = response.status().as_u16();
        let body =
            response.body_mut().with_config().limit(MAX_BODY).read_to_vec().map_err(|e| self.transport_error(e))?;
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(gateway_error(status, &body))
        }
    }

    fn transport_error(&self, e: ureq::Error) -> Error {
        match e {
            ureq::Error::Timeout(_) => Error::Unavailable(format!("no answer within {:?}", self.timeout)),
            ureq::Error::Io(e) => Error::Unavailable(e.to_string()),
            ureq::Error::BodyExceedsLimit(n) => Error::Protocol(format!("response larger than {n} bytes")),
            ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::LargeResponseHeader(..) => {
                Error::Protocol(e.to_string())
            }
            // Refused, reset, TLS handshake, garbage instead of HTTP: another
            // endpoint may well answer.
            e => Error::Unavailable(e.to_string()),
        }
    }
}

/// gRPC codes that mean "not now": Unavailable (no leader, request timed
/// out), DeadlineExceeded, ResourceExhausted (too many requests).
const RETRYABLE_CODES: [i64; 3] = [14, 4, 8];

pub(super) fn gateway_error(status: u16, body: &[u8]) -> Error {
    match wire::error_body(body) {
        Some(e) => {
            let message = if e.message.is_empty() { e.error } else { e.message };
            if RETRYABLE_CODES.contains(&e.code) {
                Error::Unavailable(format!("{message} (gRPC code {})", e.code))
            } else {
                Error::Refused { code: e.code, message }
            }
        }
        None => {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_string();
            let text = if text.is_empty() { String::new() } else { format!(": {text}") };
            if status >= 500 {
                Error::Unavailable(format!("HTTP {status}{text}"))
            } else {
                Error::Protocol(format!("HTTP {status}{text}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_errors() {
        let body = |code: i64, m: &str| format!(r#"{{"error":"{m}","message":"{m}","code":{code}}}"#).into_bytes();
        for code in [14, 4, 8] {
            assert!(
                matches!(gateway_error(503, &body(code, "etcdserver: no leader")), Error::Unavailable(m) if m.contains("no leader"))
            );
        }
        assert_eq!(
            gateway_error(400, &body(3, "etcdserver: authentication failed, invalid user ID or password")),
            Error::Refused {
                code: 3,
                message: "etcdserver: authentication failed, invalid user ID or password".into()
            }
        );
        assert!(matches!(
            gateway_error(403, &body(7, "etcdserver: permission denied")),
            Error::Refused { code: 7, .. }
        ));
        assert!(matches!(
            gateway_error(401, &body(16, "etcdserver: invalid auth token")),
            Error::Refused { code: 16, .. }
        ));
        assert!(matches!(gateway_error(502, b""), Error::Unavailable(m) if m == "HTTP 502"));
        assert!(matches!(gateway_error(404, b"Not Found\n"), Error::Protocol(m) if m == "HTTP 404: Not Found"));
    }
}
