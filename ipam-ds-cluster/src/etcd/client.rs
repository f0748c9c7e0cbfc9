//! Failover across the endpoints, authentication with a token the caller can
//! keep between processes, and the counts the benchmark reads.

use std::future::Future;
use std::net::Ipv6Addr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use http::Uri;

use super::grpc::{Conn, Transport};
use super::{
    tls, wire, Error, Op, OpResponse, RangeRequest, RangeResponse, RequestCount, Settings, Txn, TxnResponse,
    MAX_TXN_OPS,
};

pub struct Client {
    /// Validated, without a trailing slash.
    endpoints: Vec<String>,
    credentials: Option<(String, String)>,
    /// Held for a whole request (failing over included): one at a time.
    transport: Mutex<Transport>,
    /// What requests learn; behind a lock only so that a Client can be shared.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The endpoint that answered last: the next request starts there.
    in_use: Option<usize>,
    token: Option<String>,
    count: RequestCount,
    /// The lowest and highest revisions etcd answered at.
    revisions: Option<(i64, i64)>,
}

#[derive(Clone, Copy)]
enum Kind {
    Range,
    Txn { writes: bool },
    Other(&'static str),
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Range => "range",
            Kind::Txn { .. } => "txn",
            Kind::Other(name) => name,
        }
    }
}

impl RequestCount {
    fn add(&mut self, kind: Kind) {
        match kind {
            Kind::Range => self.ranges += 1,
            Kind::Txn { writes } => {
                self.txns += 1;
                self.writing_txns += u64::from(writes);
            }
            Kind::Other(_) => self.other += 1,
        }
    }
}

impl Client {
    /// Validates everything that can be checked without the network, so that a
    /// bad setting is reported as such rather than as an unreachable etcd.
    pub fn new(settings: Settings) -> Result<Client, Error> {
        if settings.endpoints.is_empty() {
            return Err(Error::settings("endpoints", "no endpoint"));
        }
        let (endpoints, uris): (Vec<String>, Vec<Uri>) = settings
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| endpoint(i, e))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        if settings.timeout.is_zero() {
            return Err(Error::settings("timeout", "must be more than 0"));
        }
        let credentials = match (settings.username, settings.password) {
            (Some(user), Some(password)) => Some((user, password)),
            (None, None) => None,
            (Some(_), None) => return Err(Error::settings("passwordFile", "a username is set but no password")),
            (None, Some(_)) => return Err(Error::settings("username", "a password is set but no username")),
        };
        let tls = match endpoints.iter().any(|e| e.starts_with("https://")) {
            true => Some(tls::Material::read(&settings.tls)?),
            false => None,
        };
        let transport = Mutex::new(Transport::new(uris, settings.timeout, tls));
        Ok(Client { endpoints, credentials, transport, state: Mutex::default() })
    }

    /// Authenticating costs etcd a bcrypt hash, a good part of a whole call:
    /// a token cached from an earlier process spares it while it is valid.
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.state.get_mut().unwrap_or_else(PoisonError::into_inner).token = token;
        self
    }

    /// For the caller to cache once this client has authenticated.
    pub fn token(&self) -> Option<String> {
        self.state().token.clone()
    }

    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, Error> {
        let options = wire::get_options(req);
        let answer = self.call(Kind::Range, |mut c: Conn| {
            let (key, options) = (req.key.clone(), options.clone());
            async move { c.kv.get(key, Some(options)).await }
        })?;
        let answer = wire::range_response(answer.0);
        self.saw(answer.revision);
        Ok(answer)
    }

    pub fn txn(&self, txn: &Txn) -> Result<TxnResponse, Error> {
        let request = wire::txn_request(txn);
        let answer = self.call(Kind::Txn { writes: txn.writes() }, |mut c: Conn| {
            let request = request.clone();
            async move { c.kv.txn(request).await }
        })?;
        let answer = wire::txn_response(answer, txn)?;
        self.saw(answer.revision);
        Ok(answer)
    }

    fn saw(&self, revision: i64) {
        // 0: an answer without a header (no revision to go by).
        if revision <= 0 {
            return;
        }
        let mut state = self.state();
        state.revisions = Some(match state.revisions {
            Some((low, high)) => (low.min(revision), high.max(revision)),
            None => (revision, revision),
        });
    }

    /// The lowest and highest store revisions etcd's answers carried: a
    /// linearizable answer is never behind one given earlier, so a revision
    /// lower than one seen before means etcd lost history (restored from
    /// an older backup, or its data wiped).
    pub fn revisions(&self) -> Option<(i64, i64)> {
        self.state().revisions
    }

    /// Forgets the revisions seen so far: what [`Client::revisions`] says
    /// from now on is about answers given after this call.
    pub fn forget_revisions(&self) {
        self.state().revisions = None;
    }

    /// Reads `groups` of range operations in as few transactions as etcd
    /// takes (one when they fit, so the common case stays one request),
    /// each group in one transaction, so that what one group reads is read
    /// at one revision; the responses in order. None: no request.
    pub fn read_in_txns(&self, groups: Vec<Vec<Op>>) -> Result<Vec<OpResponse>, Error> {
        let mut responses = Vec::new();
        let mut txn = Txn::default();
        for group in groups {
            if !txn.success.is_empty() && txn.success.len() + group.len() > MAX_TXN_OPS {
                responses.extend(self.txn(&std::mem::take(&mut txn))?.responses);
            }
            // A group larger than a transaction (none is) is split rather than refused.
            for op in group {
                if txn.success.len() == MAX_TXN_OPS {
                    responses.extend(self.txn(&std::mem::take(&mut txn))?.responses);
                }
                txn.success.push(op);
            }
        }
        if !txn.success.is_empty() {
            responses.extend(self.txn(&txn)?.responses);
        }
        Ok(responses)
    }

    /// The lease id.
    pub fn lease_grant(&self, ttl_seconds: i64) -> Result<i64, Error> {
        let answer =
            self.call(Kind::Other("lease grant"), |mut c: Conn| async move { c.lease.grant(ttl_seconds, None).await })?;
        wire::lease_grant_response(&answer)
    }

    /// Requests an endpoint answered; attempts that failed over are not counted.
    pub fn requests(&self) -> RequestCount {
        self.state().count
    }

    pub fn endpoint_in_use(&self) -> Option<String> {
        self.state().in_use.map(|i| self.endpoints[i].clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn call<T, F, Fut>(&self, kind: Kind, op: F) -> Result<T, Error>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let Some((user, password)) = &self.credentials else {
            return self.send(kind, self.token().as_deref(), &op);
        };
        let (token, fresh) = match self.token() {
            Some(token) => (token, false),
            None => (self.authenticate(user, password)?, true),
        };
        match self.send(kind, Some(&token), &op) {
            // A cached token expires (etcd's --auth-token-ttl) or is lost with
            // a restart: worth one new one, not more.
            Err(e) if !fresh && stale_token(&e) => {
                tracing::debug!("etcd token no longer valid ({e}): authenticating again");
                let token = self.authenticate(user, password)?;
                self.send(kind, Some(&token), &op)
            }
            result => result,
        }
    }

    fn authenticate(&self, user: &str, password: &str) -> Result<String, Error> {
        let answer = self.send(Kind::Other("authenticate"), None, &|mut c: Conn| {
            let (user, password) = (user.to_string(), password.to_string());
            async move { c.auth.authenticate(user, password).await }
        })?;
        let token = wire::auth_response(&answer)?;
        self.state().token = Some(token.clone());
        Ok(token)
    }

    /// One request, tried on each endpoint in turn from the one that answered
    /// last, until one answers with anything but "unavailable".
    fn send<T, F, Fut>(&self, kind: Kind, token: Option<&str>, op: &F) -> Result<T, Error>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut transport = self.transport.lock().unwrap_or_else(PoisonError::into_inner);
        let first = self.state().in_use.unwrap_or(0);
        let n = self.endpoints.len();
        let mut failures = Vec::new();
        // A member whose certificate this node refuses is passed over while
        // another answers; with none that answers, that is what to fix.
        let mut refused = None;
        for i in (0..n).map(|k| (first + k) % n) {
            let endpoint = &self.endpoints[i];
            let start = Instant::now();
            let result = transport.attempt(i, token, op);
            let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
            match result {
                Err(Error::Unavailable(why)) => {
                    tracing::debug!(endpoint, op = kind.name(), elapsed_ms, "etcd request failed: {why}");
                    failures.push(format!("{endpoint}: {why}"));
                }
                Err(e @ Error::Settings { .. }) => {
                    tracing::warn!(endpoint, op = kind.name(), "etcd endpoint passed over: {e}");
                    refused.get_or_insert(e);
                }
                result => {
                    tracing::debug!(endpoint, op = kind.name(), elapsed_ms, ok = result.is_ok(), "etcd request");
                    let mut state = self.state();
                    state.in_use = Some(i);
                    state.count.add(kind);
                    return result;
                }
            }
        }
        Err(refused.unwrap_or_else(|| Error::Unavailable(failures.join("; "))))
    }
}

/// What etcd answers to a token it no longer knows (expired, or lost with a
/// restart); etcd's own client authenticates again on the same three.
fn stale_token(e: &Error) -> bool {
    const STALE: [&str; 3] = ["invalid auth token", "revision of auth store is old", "user name is empty"];
    matches!(e, Error::Refused { message, .. } if STALE.iter().any(|s| message.contains(s)))
}

/// `http[s]://host[:port]` with no path; as written (less a trailing slash)
/// for messages, and as the URI to connect to.
fn endpoint(i: usize, raw: &str) -> Result<(String, Uri), Error> {
    let bad = |why: &str| Error::settings(format!("endpoints[{i}]"), format!("{raw:?}: {why}"));
    let (scheme, rest) = ["http://", "https://"]
        .into_iter()
        .find_map(|s| raw.strip_prefix(s).map(|rest| (s, rest)))
        .ok_or_else(|| bad("must start with http:// or https://"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '?', '#', '@']) || authority.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("must be scheme://host[:port], with no path, query or user"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (ip, after) = bracketed.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            ip.parse::<Ipv6Addr>().map_err(|_| bad("invalid IPv6 address"))?;
            match after {
                "" => (ip, None),
                _ => (ip, Some(after.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?)),
            }
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if let Some(port) = port {
        if !port.parse::<u16>().is_ok_and(|p| p != 0) {
            return Err(bad("invalid port"));
        }
    }
    let endpoint = format!("{scheme}{authority}");
    let uri = endpoint.parse::<Uri>().map_err(|e| bad(&e.to_string()))?;
    Ok((endpoint, uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_validated() {
        for ok in ["http://127.0.0.1:2379", "https://etcd.example:2379/", "http://[::1]:2379", "http://etcd"] {
            let (endpoint, uri) = endpoint(0, ok).unwrap();
            assert_eq!(endpoint, ok.trim_end_matches('/'), "{ok}");
            assert_eq!(format!("{}://{}", uri.scheme_str().unwrap(), uri.authority().unwrap()), endpoint);
        }
        for bad in [
            "127.0.0.1:2379",
            "unix:///run/etcd.sock",
            "http://",
            "http://:2379",
            "http://h:port",
            "http://h:0",
            "http://h:2379/v3",
            "http://u@h:2379",
            "http://[::1:2379",
            "http://[zz]:1",
            "http://a:1:2",
            "http://h :1",
        ] {
            let e = endpoint(3, bad).unwrap_err();
            assert!(matches!(&e, Error::Settings { field, .. } if field == "endpoints[3]"), "{bad}: {e:?}");
        }
    }

    #[test]
    fn stale_tokens() {
        let refused = |m: &str| Error::Refused { code: 16, message: m.into() };
        assert!(stale_token(&refused("etcdserver: invalid auth token")));
        assert!(!stale_token(&refused("etcdserver: permission denied")));
        assert!(!stale_token(&Error::Unavailable("invalid auth token".into())));
    }
}
