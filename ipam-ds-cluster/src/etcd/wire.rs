//! The JSON the gateway speaks: proto3's JSON mapping of etcdserverpb. Bytes
//! are base64, int64 are strings (so lease ids beyond 2^53 survive), and a
//! field holding its default value (0, false, "", []) is left out, so every
//! field read here defaults.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::{Cmp, Compare, Error, Kv, Op, OpResponse, RangeRequest, RangeResponse, Txn, TxnResponse};

struct B64<'a>(&'a [u8]);

impl Serialize for B64<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(self.0))
    }
}

struct I64(i64);

impl Serialize for I64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

fn nonzero(n: i64) -> Option<I64> {
    (n != 0).then_some(I64(n))
}

#[derive(Serialize)]
struct RangeBody<'a> {
    key: B64<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    range_end: Option<B64<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<I64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    keys_only: bool,
}

impl<'a> From<&'a RangeRequest> for RangeBody<'a> {
    fn from(r: &'a RangeRequest) -> Self {
        RangeBody {
            key: B64(&r.key),
            range_end: r.range_end.as_deref().map(B64),
            limit: nonzero(r.limit),
            keys_only: r.keys_only,
        }
    }
}

#[derive(Serialize)]
struct PutBody<'a> {
    key: B64<'a>,
    value: B64<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<I64>,
}

#[derive(Serialize)]
struct DeleteBody<'a> {
    key: B64<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    range_end: Option<B64<'a>>,
}

#[derive(Serialize)]
enum OpBody<'a> {
    #[serde(rename = "request_range")]
    Range(RangeBody<'a>),
    #[serde(rename = "request_put")]
    Put(PutBody<'a>),
    #[serde(rename = "request_delete_range")]
    Delete(DeleteBody<'a>),
}

impl<'a> From<&'a Op> for OpBody<'a> {
    fn from(op: &'a Op) -> Self {
        match op {
            Op::Range(r) => OpBody::Range(r.into()),
            Op::Put { key, value, lease } => {
                OpBody::Put(PutBody { key: B64(key), value: B64(value), lease: nonzero(*lease) })
            }
            Op::Delete { key, range_end } => {
                OpBody::Delete(DeleteBody { key: B64(key), range_end: range_end.as_deref().map(B64) })
            }
        }
    }
}

/// The target's value goes in the field named after the target (a oneof), and
/// is always sent, 0 included: without it etcd would compare nothing.
#[derive(Serialize)]
struct CompareBody<'a> {
    result: &'static str,
    target: &'static str,
    key: B64<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    create_revision: Option<I64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mod_revision: Option<I64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<B64<'a>>,
}

impl<'a> From<&'a Compare> for CompareBody<'a> {
    fn from(c: &'a Compare) -> Self {
        let (cmp, target, key) = match c {
            Compare::CreateRevision { key, cmp, .. } => (cmp, "CREATE", key),
            Compare::ModRevision { key, cmp, .. } => (cmp, "MOD", key),
            Compare::Value { key, cmp, .. } => (cmp, "VALUE", key),
        };
        let result = match cmp {
            Cmp::Equal => "EQUAL",
            Cmp::NotEqual => "NOT_EQUAL",
            Cmp::Greater => "GREATER",
            Cmp::Less => "LESS",
        };
        let mut body =
            CompareBody { result, target, key: B64(key), create_revision: None, mod_revision: None, value: None };
        match c {
            Compare::CreateRevision { revision, .. } => body.create_revision = Some(I64(*revision)),
            Compare::ModRevision { revision, .. } => body.mod_revision = Some(I64(*revision)),
            Compare::Value { value, .. } => body.value = Some(B64(value)),
        }
        body
    }
}

#[derive(Serialize)]
struct TxnBody<'a> {
    compare: Vec<CompareBody<'a>>,
    success: Vec<OpBody<'a>>,
    failure: Vec<OpBody<'a>>,
}

#[derive(Serialize)]
struct LeaseGrantBody {
    #[serde(rename = "TTL")]
    ttl: I64,
}

#[derive(Serialize)]
struct AuthBody<'a> {
    name: &'a str,
    password: &'a str,
}

fn to_json(body: &impl Serialize) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(body).map_err(|e| Error::Protocol(format!("cannot encode a request: {e}")))
}

pub(super) fn range_request(r: &RangeRequest) -> Result<Vec<u8>, Error> {
    to_json(&RangeBody::from(r))
}

pub(super) fn txn_request(t: &Txn) -> Result<Vec<u8>, Error> {
    to_json(&TxnBody {
        compare: t.compare.iter().map(Into::into).collect(),
        success: t.success.iter().map(Into::into).collect(),
        failure: t.failure.iter().map(Into::into).collect(),
    })
}

pub(super) fn lease_grant_request(ttl_seconds: i64) -> Result<Vec<u8>, Error> {
    to_json(&LeaseGrantBody { ttl: I64(ttl_seconds) })
}

pub(super) fn auth_request(name: &str, password: &str) -> Result<Vec<u8>, Error> {
    to_json(&AuthBody { name, password })
}

/// An int64 as a string, or as a number from a gateway that writes them so.
#[derive(Default)]
struct Int(i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Int;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an int64 as a string or a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
                i64::try_from(v).map(Int).map_err(|_| E::custom(format!("{v} is out of int64 range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Int, E> {
                v.parse().map(Int).map_err(|_| E::custom(format!("{v:?} is not an int64")))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default)]
struct Bytes(Vec<u8>);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<str>>::deserialize(d)?;
        STANDARD.decode(s.as_bytes()).map(Bytes).map_err(|e| de::Error::custom(format!("invalid base64: {e}")))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Header {
    revision: Int,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct KvResp {
    key: Bytes,
    value: Bytes,
    create_revision: Int,
    mod_revision: Int,
    version: Int,
    lease: Int,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RangeResp {
    header: Header,
    kvs: Vec<KvResp>,
    count: Int,
    more: bool,
}

impl From<RangeResp> for RangeResponse {
    fn from(r: RangeResp) -> Self {
        let kvs = r
            .kvs
            .into_iter()
            .map(|kv| Kv {
                key: kv.key.0,
                value: kv.value.0,
                create_revision: kv.create_revision.0,
                mod_revision: kv.mod_revision.0,
                version: kv.version.0,
                lease: kv.lease.0,
            })
            .collect();
        RangeResponse { revision: r.header.revision.0, kvs, count: r.count.0, more: r.more }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DeleteResp {
    deleted: Int,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OpResp {
    response_range: Option<RangeResp>,
    response_put: Option<de::IgnoredAny>,
    response_delete_range: Option<DeleteResp>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TxnResp {
    header: Header,
    succeeded: bool,
    responses: Vec<OpResp>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LeaseGrantResp {
    #[serde(rename = "ID")]
    id: Int,
    error: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AuthResp {
    token: String,
}

/// What the gateway sends with a non-2xx status.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ErrorBody {
    pub error: String,
    pub message: String,
    pub code: i64,
}

fn parse<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| Error::Protocol(format!("{what} response: {e}")))
}

pub(super) fn range_response(body: &[u8]) -> Result<RangeResponse, Error> {
    parse::<RangeResp>("range", body).map(Into::into)
}

/// `taken` is the number of ops in the branch etcd should have run, which the
/// responses must match one for one.
pub(super) fn txn_response(body: &[u8], txn: &Txn) -> Result<TxnResponse, Error> {
    let r: TxnResp = parse("txn", body)?;
    let ops = if r.succeeded { &txn.success } else { &txn.failure };
    if r.responses.len() != ops.len() {
        return Err(Error::Protocol(format!(
            "txn response: {} responses for {} ops (succeeded: {})",
            r.responses.len(),
            ops.len(),
            r.succeeded
        )));
    }
    let responses = r
        .responses
        .into_iter()
        .zip(ops)
        .map(|(resp, op)| match (resp, op) {
            (OpResp { response_range: Some(r), .. }, Op::Range(_)) => Ok(OpResponse::Range(r.into())),
            (OpResp { response_put: Some(_), .. }, Op::Put { .. }) => Ok(OpResponse::Put),
            (OpResp { response_delete_range: Some(d), .. }, Op::Delete { .. }) => {
                Ok(OpResponse::Delete { deleted: d.deleted.0 })
            }
            _ => Err(Error::Protocol(format!("txn response: no matching response for {op:?}"))),
        })
        .collect::<Result<_, _>>()?;
    Ok(TxnResponse { succeeded: r.succeeded, revision: r.header.revision.0, responses })
}

pub(super) fn lease_grant_response(body: &[u8]) -> Result<i64, Error> {
    let r: LeaseGrantResp = parse("lease grant", body)?;
    if !r.error.is_empty() {
        return Err(Error::Refused { code: 0, message: r.error });
    }
    if r.id.0 == 0 {
        return Err(Error::Protocol("lease grant response: no lease id".into()));
    }
    Ok(r.id.0)
}

pub(super) fn auth_response(body: &[u8]) -> Result<String, Error> {
    let r: AuthResp = parse("authenticate", body)?;
    if r.token.is_empty() {
        return Err(Error::Protocol("authenticate response: no token (is auth enabled on etcd?)".into()));
    }
    Ok(r.token)
}

pub(super) fn error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice::<ErrorBody>(body).ok().filter(|e| e.code != 0 || !e.message.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_response_with_everything_omitted() {
        let r = range_response(br#"{"header":{"cluster_id":"1","revision":"7","raft_term":"2"}}"#).unwrap();
        assert_eq!(r, RangeResponse { revision: 7, kvs: vec![], count: 0, more: false });
        assert_eq!(range_response(b"{}").unwrap(), RangeResponse::default());
    }

    #[test]
    fn range_response_reads_string_int64_and_base64() {
        let body = br#"{"header":{"revision":"9"},"kvs":[
            {"key":"Zm9v","create_revision":"2","mod_revision":"9","version":"3","value":"YmFy","lease":"7587866432457419050"},
            {"key":"Zm9w","create_revision":4,"mod_revision":4}],"count":"5","more":true}"#;
        let r = range_response(body).unwrap();
        assert_eq!((r.revision, r.count, r.more), (9, 5, true));
        assert_eq!(
            r.kvs[0],
            Kv {
                key: b"foo".to_vec(),
                value: b"bar".to_vec(),
                create_revision: 2,
                mod_revision: 9,
                version: 3,
                lease: 7587866432457419050
            }
        );
        assert_eq!(
            r.kvs[1],
            Kv { key: b"fop".to_vec(), value: vec![], create_revision: 4, mod_revision: 4, version: 0, lease: 0 }
        );
    }

    #[test]
    fn bad_int64_and_base64_are_protocol_errors() {
        for body in
            [&br#"{"count":"x"}"#[..], br#"{"kvs":[{"key":"%%"}]}"#, br#"{"count":"9223372036854775808"}"#, b"["]
        {
            assert!(matches!(range_response(body), Err(Error::Protocol(_))), "{}", String::from_utf8_lossy(body));
        }
    }

    fn put(k: &str) -> Op {
        Op::Put { key: k.into(), value: b"v".to_vec(), lease: 0 }
    }

    #[test]
    fn txn_response_without_succeeded_is_a_failure() {
        let txn = Txn {
            compare: vec![Compare::absent("a")],
            success: vec![put("a")],
            failure: vec![Op::Range(RangeRequest::key("a")), Op::Delete { key: b"z".to_vec(), range_end: None }],
        };
        let body = br#"{"header":{"revision":"2"},"responses":[
            {"response_range":{"header":{"revision":"2"},"kvs":[{"key":"YQ==","create_revision":"2","mod_revision":"2","version":"1","value":"dg=="}],"count":"1"}},
            {"response_delete_range":{"header":{"revision":"2"}}}]}"#;
        let r = txn_response(body, &txn).unwrap();
        assert!(!r.succeeded);
        assert_eq!(r.revision, 2);
        let OpResponse::Range(range) = &r.responses[0] else { panic!("{:?}", r.responses) };
        assert_eq!(range.kvs[0].value, b"v");
        assert_eq!(r.responses[1], OpResponse::Delete { deleted: 0 });

        let ok = txn_response(br#"{"succeeded":true,"responses":[{"response_put":{"header":{}}}]}"#, &txn).unwrap();
        assert_eq!((ok.succeeded, ok.responses), (true, vec![OpResponse::Put]));
    }

    #[test]
    fn txn_response_not_matching_the_ops_is_a_protocol_error() {
        let txn = Txn { success: vec![put("a")], ..Txn::default() };
        for body in [&br#"{"succeeded":true}"#[..], br#"{"succeeded":true,"responses":[{"response_range":{}}]}"#] {
            assert!(matches!(txn_response(body, &txn), Err(Error::Protocol(_))));
        }
    }

    #[test]
    fn requests_encode_int64_as_strings_and_bytes_as_base64() {
        let r = RangeRequest { limit: 3, ..RangeRequest::prefix("a").keys_only() };
        assert_eq!(
            String::from_utf8(range_request(&r).unwrap()).unwrap(),
            r#"{"key":"YQ==","range_end":"Yg==","limit":"3","keys_only":true}"#
        );
        assert_eq!(String::from_utf8(range_request(&RangeRequest::key("a")).unwrap()).unwrap(), r#"{"key":"YQ=="}"#);
        let txn = Txn {
            compare: vec![Compare::absent("a"), Compare::mod_revision_is("b", 5), Compare::value_is("c", "x")],
            success: vec![Op::Put { key: b"a".to_vec(), value: b"".to_vec(), lease: 12 }],
            failure: vec![Op::Delete { key: b"a".to_vec(), range_end: Some(b"b".to_vec()) }],
        };
        let json: serde_json::Value = serde_json::from_slice(&txn_request(&txn).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "compare": [
                    {"result": "EQUAL", "target": "CREATE", "key": "YQ==", "create_revision": "0"},
                    {"result": "EQUAL", "target": "MOD", "key": "Yg==", "mod_revision": "5"},
                    {"result": "EQUAL", "target": "VALUE", "key": "Yw==", "value": "eA=="},
                ],
                "success": [{"request_put": {"key": "YQ==", "value": "", "lease": "12"}}],
                "failure": [{"request_delete_range": {"key": "YQ==", "range_end": "Yg=="}}],
            })
        );
        assert_eq!(String::from_utf8(lease_grant_request(60).unwrap()).unwrap(), r#"{"TTL":"60"}"#);
    }

    #[test]
    fn lease_and_auth_responses() {
        assert_eq!(
            lease_grant_response(br#"{"header":{},"ID":"7587866432457419050","TTL":"60"}"#).unwrap(),
            7587866432457419050
        );
        assert!(matches!(lease_grant_response(br#"{"TTL":"60"}"#), Err(Error::Protocol(_))));
        assert_eq!(auth_response(br#"{"header":{},"token":"abc.17"}"#).unwrap(), "abc.17");
        assert!(matches!(auth_response(b"{}"), Err(Error::Protocol(_))));
    }

    #[test]
    fn error_bodies() {
        let e = error_body(
            br#"{"error":"etcdserver: invalid auth token","message":"etcdserver: invalid auth token","code":16}"#,
        )
        .unwrap();
        assert_eq!((e.code, e.message.as_str()), (16, "etcdserver: invalid auth token"));
        assert!(error_body(b"Not Found\n").is_none());
        assert!(error_body(b"{}").is_none());
    }
}
