//! This module's requests as etcd-client's, and etcd's protobuf answers (read
//! through their public fields, moved rather than copied) as this module's.

use etcd_client::proto::{PbKeyValue, PbRangeResponse, PbTxnOpResponse};
use etcd_client::{CompareOp, DeleteOptions, GetOptions, PutOptions, TxnOp};

use super::{Cmp, Compare, Error, Kv, Op, OpResponse, RangeRequest, RangeResponse, Txn, TxnResponse};

pub(super) fn get_options(r: &RangeRequest) -> GetOptions {
    let mut options = GetOptions::new();
    if let Some(end) = &r.range_end {
        options = options.with_range(end.clone());
    }
    if r.keys_only {
        options = options.with_keys_only();
    }
    if r.limit != 0 {
        options = options.with_limit(r.limit);
    }
    options
}

fn compare(c: &Compare) -> etcd_client::Compare {
    let op = |cmp: &Cmp| match cmp {
        Cmp::Equal => CompareOp::Equal,
        Cmp::NotEqual => CompareOp::NotEqual,
        Cmp::Greater => CompareOp::Greater,
        Cmp::Less => CompareOp::Less,
    };
    match c {
        Compare::CreateRevision { key, cmp, revision } => {
            etcd_client::Compare::create_revision(key.clone(), op(cmp), *revision)
        }
        Compare::ModRevision { key, cmp, revision } => {
            etcd_client::Compare::mod_revision(key.clone(), op(cmp), *revision)
        }
        Compare::Value { key, cmp, value } => etcd_client::Compare::value(key.clone(), op(cmp), value.clone()),
        Compare::UnchangedSince { prefix, revision } => {
            etcd_client::Compare::mod_revision(prefix.clone(), CompareOp::Less, revision.saturating_add(1))
                .with_range(super::prefix_end(prefix))
        }
    }
}

fn txn_op(op: &Op) -> TxnOp {
    match op {
        Op::Range(r) => TxnOp::get(r.key.clone(), Some(get_options(r))),
        Op::Put { key, value, lease } => {
            let options = (*lease != 0).then(|| PutOptions::new().with_lease(*lease));
            TxnOp::put(key.clone(), value.clone(), options)
        }
        Op::Delete { key, range_end } => {
            TxnOp::delete(key.clone(), range_end.as_ref().map(|end| DeleteOptions::new().with_range(end.clone())))
        }
    }
}

pub(super) fn txn_request(t: &Txn) -> etcd_client::Txn {
    etcd_client::Txn::new()
        .when(t.compare.iter().map(compare).collect::<Vec<_>>())
        .and_then(t.success.iter().map(txn_op).collect::<Vec<_>>())
        .or_else(t.failure.iter().map(txn_op).collect::<Vec<_>>())
}

pub(super) fn range_response(r: PbRangeResponse) -> RangeResponse {
    let kv = |kv: PbKeyValue| Kv {
        key: kv.key,
        value: kv.value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    };
    RangeResponse {
        revision: r.header.map_or(0, |h| h.revision),
        kvs: r.kvs.into_iter().map(kv).collect(),
        count: r.count,
        more: r.more,
    }
}

/// The responses must match the ops of the branch etcd took, one for one.
pub(super) fn txn_response(r: etcd_client::TxnResponse, txn: &Txn) -> Result<TxnResponse, Error> {
    let r = r.0;
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
        .map(|(resp, op)| match (resp.response, op) {
            (Some(PbTxnOpResponse::ResponseRange(r)), Op::Range(_)) => Ok(OpResponse::Range(range_response(r))),
            (Some(PbTxnOpResponse::ResponsePut(_)), Op::Put { .. }) => Ok(OpResponse::Put),
            (Some(PbTxnOpResponse::ResponseDeleteRange(d)), Op::Delete { .. }) => {
                Ok(OpResponse::Delete { deleted: d.deleted })
            }
            _ => Err(Error::Protocol(format!("txn response: no matching response for {op:?}"))),
        })
        .collect::<Result<_, _>>()?;
    Ok(TxnResponse { succeeded: r.succeeded, revision: r.header.map_or(0, |h| h.revision), responses })
}

pub(super) fn lease_grant_response(r: &etcd_client::LeaseGrantResponse) -> Result<i64, Error> {
    if !r.error().is_empty() {
        return Err(Error::Refused { code: 0, message: r.error().to_string() });
    }
    if r.id() == 0 {
        return Err(Error::Protocol("lease grant response: no lease id".into()));
    }
    Ok(r.id())
}

pub(super) fn auth_response(r: &etcd_client::AuthenticateResponse) -> Result<String, Error> {
    if r.token().is_empty() {
        return Err(Error::Protocol("authenticate response: no token (is auth enabled on etcd?)".into()));
    }
    Ok(r.token().to_string())
}

#[cfg(test)]
mod tests {
    use etcd_client::proto::{
        PbDeleteResponse, PbPutResponse, PbResponseHeader, PbResponseOp, PbTxnRequest, PbTxnResponse,
    };

    use super::*;

    fn header(revision: i64) -> Option<PbResponseHeader> {
        Some(PbResponseHeader { revision, ..PbResponseHeader::default() })
    }

    fn put(k: &str) -> Op {
        Op::Put { key: k.into(), value: b"v".to_vec(), lease: 0 }
    }

    #[test]
    fn range_responses() {
        assert_eq!(range_response(PbRangeResponse::default()), RangeResponse::default());
        let r = range_response(PbRangeResponse {
            header: header(9),
            kvs: vec![PbKeyValue {
                key: b"foo".to_vec(),
                create_revision: 2,
                mod_revision: 9,
                version: 3,
                value: b"bar".to_vec(),
                lease: 7587866432457419050,
            }],
            more: true,
            count: 5,
        });
        assert_eq!((r.revision, r.count, r.more), (9, 5, true));
        assert_eq!(
            r.kvs,
            [Kv {
                key: b"foo".to_vec(),
                value: b"bar".to_vec(),
                create_revision: 2,
                mod_revision: 9,
                version: 3,
                lease: 7587866432457419050
            }]
        );
    }

    fn op_response(r: PbTxnOpResponse) -> PbResponseOp {
        PbResponseOp { response: Some(r) }
    }

    #[test]
    fn txn_responses_follow_the_branch_taken() {
        let txn = Txn {
            compare: vec![Compare::absent("a")],
            success: vec![put("a")],
            failure: vec![Op::Range(RangeRequest::key("a")), Op::Delete { key: b"z".to_vec(), range_end: None }],
        };
        let failed = PbTxnResponse {
            header: header(2),
            succeeded: false,
            responses: vec![
                op_response(PbTxnOpResponse::ResponseRange(PbRangeResponse {
                    kvs: vec![PbKeyValue { key: b"a".to_vec(), value: b"v".to_vec(), ..PbKeyValue::default() }],
                    count: 1,
                    ..PbRangeResponse::default()
                })),
                op_response(PbTxnOpResponse::ResponseDeleteRange(PbDeleteResponse::default())),
            ],
        };
        let r = txn_response(etcd_client::TxnResponse(failed), &txn).unwrap();
        assert_eq!((r.succeeded, r.revision), (false, 2));
        let OpResponse::Range(range) = &r.responses[0] else { panic!("{:?}", r.responses) };
        assert_eq!(range.kvs[0].value, b"v");
        assert_eq!(r.responses[1], OpResponse::Delete { deleted: 0 });

        let ok = PbTxnResponse {
            succeeded: true,
            responses: vec![op_response(PbTxnOpResponse::ResponsePut(PbPutResponse::default()))],
            ..PbTxnResponse::default()
        };
        let r = txn_response(etcd_client::TxnResponse(ok), &txn).unwrap();
        assert_eq!((r.succeeded, r.responses), (true, vec![OpResponse::Put]));
    }

    #[test]
    fn txn_responses_not_matching_the_ops_are_protocol_errors() {
        let txn = Txn { success: vec![put("a")], ..Txn::default() };
        let none = PbTxnResponse { succeeded: true, ..PbTxnResponse::default() };
        let wrong = PbTxnResponse {
            succeeded: true,
            responses: vec![op_response(PbTxnOpResponse::ResponseRange(PbRangeResponse::default()))],
            ..PbTxnResponse::default()
        };
        let empty = PbTxnResponse {
            succeeded: true,
            responses: vec![PbResponseOp { response: None }],
            ..PbTxnResponse::default()
        };
        for r in [none, wrong, empty] {
            assert!(matches!(txn_response(etcd_client::TxnResponse(r), &txn), Err(Error::Protocol(_))));
        }
    }

    #[test]
    fn txn_requests() {
        use etcd_client::proto::{PbCompare, PbCompareTarget, PbTargetUnion, PbTxnOpRequest};
        let t = Txn {
            compare: vec![Compare::absent("a"), Compare::mod_revision_is("b", 5), Compare::value_is("c", "x")],
            success: vec![
                Op::Put { key: b"a".to_vec(), value: b"".to_vec(), lease: 12 },
                Op::Range(RangeRequest { limit: 3, ..RangeRequest::prefix("p").keys_only() }),
            ],
            failure: vec![Op::Delete { key: b"a".to_vec(), range_end: Some(b"b".to_vec()) }],
        };
        let pb = PbTxnRequest::from(txn_request(&t));
        let target = |c: &PbCompare| (c.key.clone(), c.target, c.result, c.target_union.clone());
        assert_eq!(
            pb.compare.iter().map(target).collect::<Vec<_>>(),
            [
                (b"a".to_vec(), PbCompareTarget::Create as i32, 0, Some(PbTargetUnion::CreateRevision(0))),
                (b"b".to_vec(), PbCompareTarget::Mod as i32, 0, Some(PbTargetUnion::ModRevision(5))),
                (b"c".to_vec(), PbCompareTarget::Value as i32, 0, Some(PbTargetUnion::Value(b"x".to_vec()))),
            ]
        );
        let Some(PbTxnOpRequest::RequestPut(p)) = &pb.success[0].request else { panic!("{:?}", pb.success) };
        assert_eq!((p.key.as_slice(), p.value.as_slice(), p.lease), (&b"a"[..], &b""[..], 12));
        let Some(PbTxnOpRequest::RequestRange(r)) = &pb.success[1].request else { panic!("{:?}", pb.success) };
        assert_eq!((r.key.as_slice(), r.range_end.as_slice(), r.limit, r.keys_only), (&b"p"[..], &b"q"[..], 3, true));
        let Some(PbTxnOpRequest::RequestDeleteRange(d)) = &pb.failure[0].request else { panic!("{:?}", pb.failure) };
        assert_eq!((d.key.as_slice(), d.range_end.as_slice()), (&b"a"[..], &b"b"[..]));
    }
}
