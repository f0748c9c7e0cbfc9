//! The connection (TCP, rustls with ring, a deadline on every read and
//! write), the requests of each operation, and what each answer's status
//! means for it.

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::{json, Value};

use super::wire::{self, Request, Response};
use super::{
    percent_encoded, Answer, Collection, Counts, Created, Deleted, Error, Kubeconfig, List, Object, Preconditions,
    Replaced, Selectors, Settings,
};

type Connection = BufReader<StreamOwned<ClientConnection, DeadlineStream>>;

pub struct Client {
    kubeconfig: Arc<Kubeconfig>,
    /// `host:port` as the Host header says it.
    host: String,
    tls: Arc<ClientConfig>,
    timeout: Duration,
    /// Kept for the next request; `None` until the first and after a failure.
    connection: Mutex<Option<Connection>>,
    counts: Mutex<Counts>,
}

impl Client {
    /// Makes the TLS configuration of the kubeconfig read: every problem
    /// with them is reported here, as a setting, before any request.
    pub fn new(settings: &Settings) -> Result<Client, Error> {
        if settings.timeout.is_zero() {
            return Err(Error::Settings {
                kubeconfig: settings.kubeconfig.path.clone(),
                message: "the timeout must be more than 0".into(),
            });
        }
        let kubeconfig = settings.kubeconfig.clone();
        let tls = tls_config(&kubeconfig)?;
        let server = &kubeconfig.server;
        let host = if server.host.contains(':') {
            format!("[{}]:{}", server.host, server.port)
        } else {
            format!("{}:{}", server.host, server.port)
        };
        Ok(Client {
            kubeconfig,
            host,
            tls,
            timeout: settings.timeout,
            connection: Mutex::new(None),
            counts: Mutex::new(Counts::default()),
        })
    }

    /// What this client cost the server so far.
    pub fn counts(&self) -> Counts {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, resource: &impl Collection, name: &str) -> Result<Answer<Option<Object>>, Error> {
        let (response, date) = self.send("GET", &resource.object_path(name), None)?;
        let outcome = match response.status {
            200 => Some(object(&response)?),
            404 => {
                missing_object(resource, name, &response)?;
                None
            }
            _ => return Err(self.refusal("get", resource, &response)),
        };
        Ok(Answer { outcome, date })
    }

    pub fn list(&self, resource: &impl Collection, selectors: &Selectors) -> Result<Answer<List>, Error> {
        let mut query = Vec::new();
        if let Some(labels) = selectors.labels {
            query.push(format!("labelSelector={}", percent_encoded(labels)));
        }
        if let Some(fields) = selectors.fields {
            query.push(format!("fieldSelector={}", percent_encoded(fields)));
        }
        if selectors.from_cache {
            query.push("resourceVersion=0".to_string());
        }
        let mut path = resource.collection_path();
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let (response, date) = self.send("GET", &path, None)?;
        if response.status != 200 {
            return Err(self.refusal("list", resource, &response));
        }
        let Object(mut list) = object(&response)?;
        let resource_version = list["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        let items = match list.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items.into_iter().map(Object).collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(other) => return Err(Error::Protocol(format!("a list whose items are {other}"))),
        };
        Ok(Answer { outcome: List { items, resource_version }, date })
    }

    /// Creates `object` unless one of its name exists.
    pub fn create(&self, resource: &impl Collection, object: &Value) -> Result<Answer<Created>, Error> {
        let body = serde_json::to_vec(object).map_err(|e| Error::Protocol(e.to_string()))?;
        let (response, date) = self.send("POST", &resource.collection_path(), Some(&body))?;
        let outcome = match response.status {
            200..=202 => Created::Created(self::object(&response)?),
            409 => Created::AlreadyExists,
            _ => return Err(self.refusal("create", resource, &response)),
        };
        Ok(Answer { outcome, date })
    }

    /// Replaces the object `name` with `object` if its version is still
    /// `resource_version` (which is set in `object`'s metadata).
    pub fn replace(
        &self,
        resource: &impl Collection,
        name: &str,
        resource_version: &str,
        object: &Value,
    ) -> Result<Answer<Replaced>, Error> {
        let mut object = object.clone();
        match object.get_mut("metadata").and_then(Value::as_object_mut) {
            Some(metadata) => drop(metadata.insert("resourceVersion".into(), resource_version.into())),
            None => object["metadata"] = json!({"name": name, "resourceVersion": resource_version}),
        }
        let body = serde_json::to_vec(&object).map_err(|e| Error::Protocol(e.to_string()))?;
        let (response, date) = self.send("PUT", &resource.object_path(name), Some(&body))?;
        let outcome = match response.status {
            200 | 201 => Replaced::Replaced(self::object(&response)?),
            409 => Replaced::Conflict,
            404 => {
                missing_object(resource, name, &response)?;
                Replaced::NotFound
            }
            _ => return Err(self.refusal("update", resource, &response)),
        };
        Ok(Answer { outcome, date })
    }

    /// Deletes the object `name` if it is still the one `preconditions` names.
    pub fn delete(
        &self,
        resource: &impl Collection,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Answer<Deleted>, Error> {
        let mut conditions = serde_json::Map::new();
        if let Some(uid) = preconditions.uid {
            conditions.insert("uid".into(), uid.into());
        }
        if let Some(version) = preconditions.resource_version {
            conditions.insert("resourceVersion".into(), version.into());
        }
        let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": conditions});
        let body = serde_json::to_vec(&options).map_err(|e| Error::Protocol(e.to_string()))?;
        let (response, date) = self.send("DELETE", &resource.object_path(name), Some(&body))?;
        let outcome = match response.status {
            200 | 202 => Deleted::Deleted,
            409 => Deleted::Conflict,
            404 => {
                missing_object(resource, name, &response)?;
                Deleted::NotFound
            }
            _ => return Err(self.refusal("delete", resource, &response)),
        };
        Ok(Answer { outcome, date })
    }

    /// One request within the timeout, on the kept connection or a new one;
    /// the answer and the server's clock when it gave it.
    fn send(&self, method: &'static str, path: &str, body: Option<&[u8]>) -> Result<(Response, SystemTime), Error> {
        let deadline = Instant::now() + self.timeout;
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).requests += 1;
        let mut kept = self.connection.lock().unwrap_or_else(PoisonError::into_inner);
        let path = format!("{}{path}", self.kubeconfig.server.base_path);
        let request = Request { method, path: &path, host: &self.host, token: self.kubeconfig.token.as_deref(), body };
        let answered = (|| {
            let connection = match kept.as_mut() {
                Some(connection) => {
                    connection.get_mut().sock.deadline = deadline;
                    connection
                }
                None => {
                    self.counts.lock().unwrap_or_else(PoisonError::into_inner).connections += 1;
                    kept.insert(self.connect(deadline)?)
                }
            };
            request.write_to(connection.get_mut())?;
            wire::read_response(connection)
        })();
        let response = match answered {
            Ok(response) => response,
            Err(e) => {
                // Whatever state the connection is in, it is not reused.
                *kept = None;
                return Err(self.failure(method, &path, e));
            }
        };
        if response.closes {
            *kept = None;
        }
        let date =
            response.date.as_deref().ok_or_else(|| Error::Protocol(format!("{method} {path}: no Date header")))?;
        let date = httpdate::parse_http_date(date)
            .map_err(|_| Error::Protocol(format!("{method} {path}: a Date header {date:?}")))?;
        Ok((response, date))
    }

    fn connect(&self, deadline: Instant) -> io::Result<Connection> {
        let server = &self.kubeconfig.server;
        let addresses = (server.host.as_str(), server.port).to_socket_addrs()?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{} has no address", server.host));
        for address in addresses {
            let left = remaining(deadline)?;
            match TcpStream::connect_timeout(&address, left) {
                Ok(tcp) => {
                    tcp.set_nodelay(true)?;
                    let tls = ClientConnection::new(self.tls.clone(), self.kubeconfig.server_name.clone())
                        .map_err(io::Error::other)?;
                    let mut stream = StreamOwned::new(tls, DeadlineStream { tcp, deadline });
                    // The handshake now, so that its failures are told apart.
                    while stream.conn.is_handshaking() {
                        stream.conn.complete_io(&mut stream.sock)?;
                    }
                    return Ok(BufReader::new(stream));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A request that got no answer: TLS refused for good, or unreachable.
    fn failure(&self, method: &str, path: &str, e: io::Error) -> Error {
        let server = format!("https://{}", self.host);
        if let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
            let setting = match tls {
                rustls::Error::InvalidCertificate(_) => self.kubeconfig.ca.setting.clone(),
                _ => format!("the TLS handshake with {server}"),
            };
            return Error::Tls { kubeconfig: self.kubeconfig.path.clone(), setting, reason: tls.to_string() };
        }
        if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) {
            return Error::Unavailable(format!("{server}: no answer to {method} {path} within {:?}", self.timeout));
        }
        Error::Unavailable(format!("{server}: {method} {path}: {e}"))
    }

    /// A status that is not one of the operation's outcomes.
    fn refusal(&self, verb: &'static str, resource: &impl Collection, response: &Response) -> Error {
        let message = status_message(response);
        match response.status {
            401 => Error::Unauthorized { kubeconfig: self.kubeconfig.path.clone(), message },
            403 => Error::Forbidden { verb, resource: resource.qualified(), message },
            429 | 500..=599 => {
                Error::Unavailable(format!("https://{} answered {}: {message}", self.host, response.status))
            }
            404 => Error::Refused {
                status: 404,
                message: format!(
                    "the server has no resource {} (is its CustomResourceDefinition applied?): {message}",
                    resource.qualified()
                ),
            },
            status => Error::Refused { status, message },
        }
    }
}

/// A 404 that is about the object, not its resource: a collection the
/// server does not know (no CRD) is a refusal, not "not found".
fn missing_object(resource: &impl Collection, name: &str, response: &Response) -> Result<(), Error> {
    let status: Value = serde_json::from_slice(&response.body).unwrap_or_default();
    if status["details"]["name"].as_str() == Some(name) {
        Ok(())
    } else {
        Err(Error::Refused {
            status: 404,
            message: format!(
                "the server has no resource {} (is its CustomResourceDefinition applied?): {}",
                resource.qualified(),
                status_message(response)
            ),
        })
    }
}

fn object(response: &Response) -> Result<Object, Error> {
    serde_json::from_slice(&response.body)
        .map(Object)
        .map_err(|e| Error::Protocol(format!("an answer ({}) that is not JSON: {e}", response.status)))
}

/// The message of the server's Status object, else the body as text.
fn status_message(response: &Response) -> String {
    let status: Value = serde_json::from_slice(&response.body).unwrap_or_default();
    match status["message"].as_str() {
        Some(message) => message.to_string(),
        None => String::from_utf8_lossy(&response.body[..response.body.len().min(500)]).trim().to_string(),
    }
}

fn tls_config(kubeconfig: &Kubeconfig) -> Result<Arc<ClientConfig>, Error> {
    let bad = |message: String| Error::Settings { kubeconfig: kubeconfig.path.clone(), message };
    let mut roots = RootCertStore::empty();
    let (_, refused) = roots.add_parsable_certificates(kubeconfig.ca.certificates.iter().cloned());
    if roots.is_empty() {
        return Err(bad(format!("{}: none of its {refused} certificates is usable as a CA", kubeconfig.ca.setting)));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match &kubeconfig.identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(|e| bad(format!("the client certificate and key: {e}")))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "the request's time is up"))
    } else {
        Ok(left)
    }
}

/// A TCP stream whose every read and write ends by the request's deadline.
struct DeadlineStream {
    tcp: TcpStream,
    deadline: Instant,
}

impl Read for DeadlineStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp.set_read_timeout(Some(remaining(self.deadline)?))?;
        self.tcp.read(buf)
    }
}

impl Write for DeadlineStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tcp.set_write_timeout(Some(remaining(self.deadline)?))?;
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}
