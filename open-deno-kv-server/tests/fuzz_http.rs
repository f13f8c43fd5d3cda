//! Random and mutated request bodies sent to the running server's data path (the range
//! extensions' `atomic_write` field and `range/count` included): every answer is
//! 200 or a 4xx with a plain-text reason — never a 5xx, a panic or a dropped connection — and the
//! server still answers `/health` afterwards.
//!
//! Run: `cargo test -p open-deno-kv-server --test fuzz_http`.

// Test helpers outside #[test] functions may unwrap: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::OnceLock;

use common::*;
use open_deno_kv_connect::ext::{AtomicWriteExt, RangeDeleteExt, RangeRequest};
use open_deno_kv_connect::pb;
use open_deno_kv_connect::prost::Message;
use proptest::prelude::*;

struct Fixture {
    runtime: tokio::runtime::Runtime,
    running: Running,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = runtime.block_on(start());
        Fixture { runtime, running }
    })
}

fn post(path: &str, body: Vec<u8>) -> Reply {
    let f = fixture();
    let url = format!("http://{}{}", f.running.addr, path);
    f.runtime
        .block_on(async { send(&http1_client(), "POST", url, &data_headers(), body).await })
}

fn valid_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let key = vec![2, b'k', 0];
    let write = pb::AtomicWrite {
        checks: vec![pb::Check {
            key: key.clone(),
            versionstamp: vec![],
        }],
        mutations: vec![
            pb::Mutation {
                key: key.clone(),
                value: Some(pb::KvValue {
                    data: 5u64.to_le_bytes().to_vec(),
                    encoding: 2,
                }),
                mutation_type: pb::MutationType::MSum as i32,
                ..Default::default()
            },
            pb::Mutation {
                key: vec![2, b'v', 0],
                value: Some(pb::KvValue {
                    data: vec![0xff, 0x10, 0x49, 0x0a],
                    encoding: 1,
                }),
                mutation_type: pb::MutationType::MSum as i32,
                sum_min: vec![0xff, 0x10, 0x49, 0x00],
                ..Default::default()
            },
            pb::Mutation {
                key: vec![2, b'l', 0],
                value: Some(pb::KvValue {
                    data: vec![1],
                    encoding: 3,
                }),
                mutation_type: pb::MutationType::MSetSuffixVersionstampedKey as i32,
                expire_at_ms: 4_000_000_000_000,
                ..Default::default()
            },
        ],
        enqueues: vec![],
    };
    let read = pb::SnapshotRead {
        ranges: vec![pb::ReadRange {
            start: vec![0],
            end: vec![0xff],
            limit: 10,
            reverse: true,
        }],
    };
    // `range-delete/1`: a range delete placeholder and the field giving its end.
    let mut range_delete = pb::AtomicWrite {
        mutations: vec![pb::Mutation {
            key: vec![2, b'r', 0],
            mutation_type: open_deno_kv_connect::ext::RANGE_DELETE_MUTATION_TYPE,
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let extension = AtomicWriteExt {
        enqueues_without_retries: vec![],
        range_deletes: vec![RangeDeleteExt {
            mutation: 0,
            end: vec![2, b's', 0],
        }],
    };
    range_delete.extend_from_slice(&extension.encode_to_vec());
    let count = RangeRequest {
        start: vec![0],
        end: vec![0xff],
    };
    vec![
        ("/v2/atomic_write", write.encode_to_vec()),
        ("/v2/snapshot_read", read.encode_to_vec()),
        ("/v2/atomic_write", range_delete),
        ("/v2/range/count", count.encode_to_vec()),
    ]
}

fn assert_acceptable(reply: &Reply) -> Result<(), TestCaseError> {
    let code = reply.status.as_u16();
    prop_assert!(
        code == 200 || (400..500).contains(&code),
        "status {code}: {}",
        reply.text()
    );
    if code != 200 {
        prop_assert!(!reply.body.is_empty(), "a 4xx needs a reason");
        prop_assert_eq!(
            reply.headers["content-type"].as_bytes(),
            b"text/plain; charset=utf-8"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_bodies_get_200_or_4xx(
        body in prop::collection::vec(any::<u8>(), 0..200),
        path in prop::sample::select(vec!["/v2/atomic_write", "/v2/snapshot_read", "/v2/range/count"]),
    ) {
        assert_acceptable(&post(path, body))?;
    }

    #[test]
    fn mutated_bodies_get_200_or_4xx(
        which in 0usize..4,
        flips in prop::collection::vec((any::<usize>(), 1u8..=255), 0..4),
        cut in any::<usize>(),
        truncate in any::<bool>(),
    ) {
        let (path, mut body) = valid_bodies().swap_remove(which);
        for (at, mask) in flips {
            let i = at % body.len();
            body[i] ^= mask;
        }
        if truncate {
            body.truncate(cut % (body.len() + 1));
        }
        assert_acceptable(&post(path, body))?;
    }

    /// An LE64 operand of any length but 8: 400, for every mutation type that takes a value.
    #[test]
    fn le64_of_wrong_length_gets_400(len in 0usize..40, kind in prop::sample::select(vec![1, 3, 4, 5, 9])) {
        prop_assume!(len != 8);
        let body = pb::AtomicWrite {
            mutations: vec![pb::Mutation {
                key: vec![2, b'k', 0],
                value: Some(pb::KvValue { data: vec![1; len], encoding: 2 }),
                mutation_type: kind,
                ..Default::default()
            }],
            ..Default::default()
        }.encode_to_vec();
        let reply = post("/v2/atomic_write", body);
        prop_assert_eq!(reply.status.as_u16(), 400);
        prop_assert_eq!(reply.text(), format!("Invalid LE64 value: expected 8 bytes, got {len}."));
    }
}

#[test]
fn still_healthy_after_fuzzing() {
    let f = fixture();
    let url = format!("http://{}/health", f.running.addr);
    let reply = f
        .runtime
        .block_on(async { send(&http1_client(), "GET", url, &[], vec![]).await });
    assert_eq!(reply.status.as_u16(), 200);
}
