//! One gRPC exchange with one endpoint, and what its failure means: whether
//! the next endpoint may do better (`Unavailable`) or no endpoint will.
//!
//! etcd-client's async clients run on a current-thread tokio runtime made at
//! the first request, each request driven to its end by `block_on`: no thread
//! is started (a host name's lookup aside), and nothing runs between requests.
//! Each endpoint gets its own channel, connected at its first request and kept
//! for the next ones, over a service of ours that sends the auth token the
//! caller chose (etcd-client would authenticate at each connection instead).

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use etcd_client::{AuthClient, KvClient, LeaseClient};
use http::{HeaderValue, Request, Response, Uri};
use tonic::body::Body;
use tonic::transport::{self, Endpoint};
use tonic::{Code, Status};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service};

use super::{tls, Error};

/// A large prefix listing is still far below this; past it something is wrong.
/// (tonic's default, 4 MiB, is a few tens of thousands of address records.)
const MAX_MESSAGE: usize = 256 << 20;

/// The metadata etcd reads the auth token from.
const TOKEN_HEADER: &str = "token";

/// Metadata asking etcd to refuse the request at once ("etcdserver: no
/// leader", gRPC Unavailable) when the member has no leader, as etcd's own
/// client does with `WithRequireLeader`, rather than leave it waiting for a
/// quorum it cannot reach until the timeout.
const REQUIRE_LEADER: (&str, &str) = ("hasleader", "true");

/// The clients of one endpoint, sharing its connection.
#[derive(Clone)]
pub(super) struct Conn {
    pub(super) kv: KvClient,
    pub(super) lease: LeaseClient,
    pub(super) auth: AuthClient,
}

pub(super) struct Transport {
    endpoints: Vec<Uri>,
    timeout: Duration,
    tls: Option<tls::Material>,
    /// Made at the first request.
    runtime: Option<tokio::runtime::Runtime>,
    /// Per endpoint, once connected; dropped when it fails.
    conns: Vec<Option<Conn>>,
    /// What every channel sends as the token (read by `TokenChannel`).
    token: Arc<Mutex<Option<HeaderValue>>>,
}

impl Transport {
    /// Costs nothing: no runtime, no connection, no file read.
    pub(super) fn new(endpoints: Vec<Uri>, timeout: Duration, tls: Option<tls::Material>) -> Transport {
        let conns = vec![None; endpoints.len()];
        Transport { endpoints, timeout, tls, runtime: None, conns, token: Arc::default() }
    }

    /// `op` on endpoint `i`, with `token` (or none), connecting first if need
    /// be: all of it within the timeout.
    pub(super) fn attempt<T, F, Fut>(&mut self, i: usize, token: Option<&str>, op: &F) -> Result<T, Error>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        // A token that cannot be a header (a damaged cache) is sent as none:
        // etcd refuses the request, and the caller authenticates again.
        *self.token.lock().unwrap_or_else(PoisonError::into_inner) = token.and_then(|t| HeaderValue::from_str(t).ok());
        let runtime = match &mut self.runtime {
            Some(runtime) => runtime,
            slot => slot.insert(
                tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                    .map_err(|e| Error::Unavailable(format!("cannot make the I/O runtime: {e}")))?,
            ),
        };
        let conn = match &self.conns[i] {
            Some(conn) => conn.clone(),
            None => {
                let conn = connect(runtime, &self.endpoints[i], self.timeout, self.tls.as_ref(), &self.token)?;
                self.conns[i] = Some(conn.clone());
                conn
            }
        };
        let timeout = self.timeout;
        let result = match runtime.block_on(async { tokio::time::timeout(timeout, op(conn)).await }) {
            Ok(answer) => answer.map_err(error),
            Err(_) => Err(Error::Unavailable(format!("no answer within {timeout:?}"))),
        };
        let result = match result {
            Err(Error::Unavailable(why)) => {
                Err(certificate_refused(&why, i, &self.endpoints[i], self.tls.as_ref())
                    .unwrap_or(Error::Unavailable(why)))
            }
            result => result,
        };
        // A connection that failed (or hangs) is not tried again: the next
        // request on this endpoint makes a new one.
        if let Err(Error::Unavailable(_)) = result {
            self.conns[i] = None;
        }
        result
    }
}

/// A TLS handshake that failed on a certificate, as a setting to fix: it
/// fails the same way at every try, and taken for an outage it would let ADD
/// go on offline from blocks confirmed within offlineGrace, with an etcd
/// (or someone in its place) that the node cannot trust. rustls's own
/// words are matched, as tonic hands the failure over only as text.
fn certificate_refused(why: &str, i: usize, uri: &Uri, tls: Option<&tls::Material>) -> Option<Error> {
    if why.contains("invalid peer certificate") {
        if why.contains("NotValidForName") {
            return Some(Error::settings(
                format!("endpoints[{i}]"),
                format!("{uri}: the etcd server's certificate does not name this host: {why}"),
            ));
        }
        return Some(Error::settings(
            "tls.ca",
            format!("{uri}: the etcd server's certificate does not verify against tls.ca: {why}"),
        ));
    }
    const CLIENT_CERTIFICATE_ALERTS: [&str; 8] = [
        "BadCertificate",
        "UnsupportedCertificate",
        "CertificateRevoked",
        "CertificateExpired",
        "CertificateUnknown",
        "UnknownCA",
        "CertificateRequired",
        "AccessDenied",
    ];
    if why.contains("received fatal alert") && CLIENT_CERTIFICATE_ALERTS.iter().any(|a| why.contains(a)) {
        let message = match tls.is_some_and(tls::Material::has_identity) {
            true => format!("{uri}: etcd refused this node's client certificate: {why}"),
            false => format!("{uri}: etcd requires a client certificate (set tls.cert and tls.key): {why}"),
        };
        return Some(Error::settings("tls.cert", message));
    }
    None
}

/// A channel that connects at its first request (within that request's timeout).
fn connect(
    runtime: &tokio::runtime::Runtime,
    uri: &Uri,
    timeout: Duration,
    tls: Option<&tls::Material>,
    token: &Arc<Mutex<Option<HeaderValue>>>,
) -> Result<Conn, Error> {
    let mut endpoint = Endpoint::from(uri.clone()).connect_timeout(timeout);
    if uri.scheme_str() == Some("https") {
        let tls = tls.expect("TLS files are read when an endpoint is https");
        // The PEM files were checked in Client::new: what fails here is a
        // key that does not go with its certificate, or is of a kind rustls
        // cannot use.
        endpoint = endpoint.tls_config(tls.config()).map_err(|e| {
            Error::settings("tls.key", format!("with tls.cert, no usable client identity: {}", chain(&e)))
        })?;
    }
    // The channel's tasks are spawned on this runtime (and run in block_on).
    let channel = {
        let _in_runtime = runtime.enter();
        endpoint.connect_lazy()
    };
    let channel = TokenChannel { inner: channel, token: token.clone(), failed: None };
    let channel = etcd_client::Channel::Custom(BoxCloneSyncService::new(channel));
    // Without credentials in its options, this does no I/O.
    let client = runtime.block_on(etcd_client::Client::from_channel(channel, None)).map_err(error)?;
    Ok(Conn {
        kv: client.kv_client().max_decoding_message_size(MAX_MESSAGE),
        lease: client.lease_client(),
        auth: client.auth_client(),
    })
}

/// tonic's channel with the token added to each request, and every failure
/// to exchange with etcd made an `Unreachable`, told apart from etcd's own
/// answers by `error`.
#[derive(Clone)]
struct TokenChannel {
    inner: transport::Channel,
    token: Arc<Mutex<Option<HeaderValue>>>,
    /// A failure of `poll_ready`, handed to the next `call`: tonic's generated
    /// clients would turn it into a bare "Service was not ready" status.
    failed: Option<Unreachable>,
}

type Exchange = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

impl Service<Request<Body>> for TokenChannel {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Exchange;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self.inner.poll_ready(cx) {
            Poll::Ready(Err(e)) => {
                self.failed = Some(Unreachable::from(e));
                Poll::Ready(Ok(()))
            }
            ready => ready.map_err(Into::into),
        }
    }

    fn call(&mut self, mut request: Request<Body>) -> Exchange {
        if let Some(failed) = self.failed.take() {
            return Box::pin(std::future::ready(Err(failed.into())));
        }
        if let Some(token) = self.token.lock().unwrap_or_else(PoisonError::into_inner).clone() {
            request.headers_mut().insert(TOKEN_HEADER, token);
        }
        request.headers_mut().insert(REQUIRE_LEADER.0, HeaderValue::from_static(REQUIRE_LEADER.1));
        let exchange = self.inner.call(request);
        Box::pin(async move { exchange.await.map_err(|e| Unreachable::from(e).into()) })
    }
}

/// No answer from etcd: not connected, connection lost, TLS refused, … The
/// text is the whole chain of causes (tonic's own says "transport error").
#[derive(Debug, Clone)]
struct Unreachable(String);

impl From<transport::Error> for Unreachable {
    fn from(e: transport::Error) -> Self {
        Unreachable(chain(&e))
    }
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Unreachable {}

/// "a: b: c" from an error and its sources, without the repeats some error
/// types make by printing their source in their own text.
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text = if text == "transport error" { part } else { format!("{text}: {part}") };
        }
        source = s.source();
    }
    text
}

/// gRPC codes that mean "not now": Unavailable (no leader, request timed
/// out), DeadlineExceeded, ResourceExhausted (too many requests).
const RETRYABLE_CODES: [Code; 3] = [Code::Unavailable, Code::DeadlineExceeded, Code::ResourceExhausted];

fn error(e: etcd_client::Error) -> Error {
    match e {
        etcd_client::Error::GRpcStatus(status) => status_error(&status),
        etcd_client::Error::TransportError(e) => Error::Unavailable(chain(&e)),
        e => Error::Protocol(e.to_string()),
    }
}

fn status_error(status: &Status) -> Error {
    let code = status.code();
    let message = status.message();
    match status.source() {
        Some(source) => match source.downcast_ref::<Unreachable>() {
            Some(Unreachable(why)) => Error::Unavailable(why.clone()),
            // Made on this side from a failure of the exchange once begun
            // (a stream reset, a connection lost mid-answer): etcd said nothing.
            None => Error::Unavailable(format!("{message}: {}", chain(source))),
        },
        None if RETRYABLE_CODES.contains(&code) => Error::Unavailable(format!("{message} (gRPC code {})", code as i32)),
        None => Error::Refused { code: i64::from(code as i32), message: message.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        for code in RETRYABLE_CODES {
            assert!(
                matches!(status_error(&Status::new(code, "etcdserver: no leader")), Error::Unavailable(m) if m.contains("no leader"))
            );
        }
        assert_eq!(
            status_error(&Status::invalid_argument("etcdserver: authentication failed, invalid user ID or password")),
            Error::Refused {
                code: 3,
                message: "etcdserver: authentication failed, invalid user ID or password".into()
            }
        );
        assert!(matches!(
            status_error(&Status::permission_denied("etcdserver: permission denied")),
            Error::Refused { code: 7, .. }
        ));
        assert!(matches!(
            status_error(&Status::unauthenticated("etcdserver: invalid auth token")),
            Error::Refused { code: 16, .. }
        ));
        assert!(matches!(
            status_error(&Status::not_found("etcdserver: requested lease not found")),
            Error::Refused { code: 5, .. }
        ));
    }

    #[test]
    fn refused_certificates_are_settings() {
        let uri: Uri = "https://10.0.0.1:2379".parse().unwrap();
        let field = |why: &str| match certificate_refused(why, 2, &uri, None) {
            Some(Error::Settings { field, message }) => {
                assert!(message.contains(why) && message.contains("https://10.0.0.1:2379"), "{message}");
                Some(field)
            }
            other => other.map(|e| format!("{e:?}")),
        };
        assert_eq!(field("invalid peer certificate: UnknownIssuer").as_deref(), Some("tls.ca"));
        assert_eq!(field("invalid peer certificate: BadSignature").as_deref(), Some("tls.ca"));
        assert_eq!(field("invalid peer certificate: NotValidForName").as_deref(), Some("endpoints[2]"));
        assert_eq!(field("received fatal alert: CertificateRequired").as_deref(), Some("tls.cert"));
        assert_eq!(field("received fatal alert: UnknownCA").as_deref(), Some("tls.cert"));
        assert_eq!(field("received fatal alert: HandshakeFailure"), None);
        assert_eq!(field("tcp connect error: Connection refused"), None);
        assert_eq!(field("operation was canceled: connection closed"), None);
    }

    #[test]
    fn failures_of_the_exchange_are_unavailable() {
        let unreachable: BoxError = Box::new(Unreachable("tcp connect error: Connection refused".into()));
        let e = status_error(&Status::from_error(unreachable));
        assert_eq!(e, Error::Unavailable("tcp connect error: Connection refused".into()));
        let io: BoxError = Box::new(std::io::Error::other("connection reset"));
        assert!(
            matches!(status_error(&Status::from_error(io)), Error::Unavailable(m) if m.contains("connection reset"))
        );
    }

    #[test]
    fn chains_skip_repeats() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "tcp connect error")
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::from_raw_os_error(111));
        assert_eq!(chain(&e), format!("tcp connect error: {}", std::io::Error::from_raw_os_error(111)));
    }
}
