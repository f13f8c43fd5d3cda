//! The request decoders against random and mutated bodies: they never panic, and whatever they
//! refuse comes back as a plain-text [`ProtocolError`] (which a server answers with 400).
//! Valid encodings are mutated the ways a broken or hostile client would: flipped bytes,
//! truncation, appended garbage, wrong wire types, LE64 values of the wrong length.

use open_deno_kv_connect::{ProtocolError, convert, pb};
use open_deno_kv_model::KvValue;
use proptest::prelude::*;
use prost::Message;

fn valid_write() -> pb::AtomicWrite {
    pb::AtomicWrite {
        checks: vec![pb::Check {
            key: vec![2, b'a', 0],
            versionstamp: vec![0; 10],
        }],
        mutations: vec![
            pb::Mutation {
                key: vec![2, b'a', 0],
                value: Some(convert::value_to_pb(&KvValue::V8(
                    vec![0xff, 0x10, 0x49, 0x02].into(),
                ))),
                mutation_type: pb::MutationType::MSet as i32,
                expire_at_ms: 1_700_000_000_000,
                ..Default::default()
            },
            pb::Mutation {
                key: vec![2, b'n', 0],
                value: Some(convert::value_to_pb(&KvValue::U64(5))),
                mutation_type: pb::MutationType::MSum as i32,
                ..Default::default()
            },
            pb::Mutation {
                key: vec![2, b'd', 0],
                value: Some(pb::KvValue {
                    data: vec![],
                    encoding: pb::ValueEncoding::VeBytes as i32,
                }),
                mutation_type: pb::MutationType::MDelete as i32,
                ..Default::default()
            },
        ],
        enqueues: vec![],
    }
}

fn valid_read() -> pb::SnapshotRead {
    pb::SnapshotRead {
        ranges: vec![pb::ReadRange {
            start: vec![2, b'a', 0],
            end: vec![2, b'a', 0, 0],
            limit: 1,
            reverse: false,
        }],
    }
}

fn error_is_plain(err: &ProtocolError) -> bool {
    !err.message.is_empty() && !err.message.contains('\n')
}

/// Every decoder on `body`: no panic; errors are plain text.
fn decode_all(body: &[u8]) -> Result<(), TestCaseError> {
    if let Err(e) = convert::decode_atomic_write(body) {
        prop_assert!(error_is_plain(&e), "{e:?}");
    }
    if let Err(e) = convert::decode_snapshot_read(body) {
        prop_assert!(error_is_plain(&e), "{e:?}");
    }
    if let Err(e) = convert::decode_watch(body) {
        prop_assert!(error_is_plain(&e), "{e:?}");
    }
    // Client-side decoders take untrusted server bytes too.
    let _ = convert::decode_snapshot_read_output(body);
    let _ = convert::decode_atomic_write_output(body);
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutate {
    Flip(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
    Insert(usize, Vec<u8>),
}

fn mutate(mut body: Vec<u8>, how: &Mutate) -> Vec<u8> {
    match how {
        Mutate::Flip(at, mask) => {
            if !body.is_empty() {
                let i = at % body.len();
                body[i] ^= mask | 1;
            }
        }
        Mutate::Truncate(at) => body.truncate(at % (body.len() + 1)),
        Mutate::Append(extra) => body.extend_from_slice(extra),
        Mutate::Insert(at, extra) => {
            let i = at % (body.len() + 1);
            body.splice(i..i, extra.iter().copied());
        }
    }
    body
}

fn mutation_strategy() -> impl Strategy<Value = Mutate> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, m)| Mutate::Flip(a, m)),
        any::<usize>().prop_map(Mutate::Truncate),
        prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutate::Append),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(a, b)| Mutate::Insert(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..256)) {
        decode_all(&body)?;
    }

    #[test]
    fn mutated_writes_never_panic(hows in prop::collection::vec(mutation_strategy(), 1..4)) {
        let mut body = valid_write().encode_to_vec();
        for how in &hows {
            body = mutate(body, how);
        }
        decode_all(&body)?;
    }

    #[test]
    fn mutated_reads_never_panic(hows in prop::collection::vec(mutation_strategy(), 1..4)) {
        let mut body = valid_read().encode_to_vec();
        for how in &hows {
            body = mutate(body, how);
        }
        decode_all(&body)?;
    }

    /// An LE64 value of any length but 8 is refused with a reason, whatever the mutation type.
    #[test]
    fn le64_of_wrong_length_is_an_error(len in 0usize..64, kind in prop::sample::select(vec![1, 3, 4, 5, 9])) {
        prop_assume!(len != 8);
        let write = pb::AtomicWrite {
            mutations: vec![pb::Mutation {
                key: vec![2, b'k', 0],
                value: Some(pb::KvValue { data: vec![7; len], encoding: pb::ValueEncoding::VeLe64 as i32 }),
                mutation_type: kind,
                ..Default::default()
            }],
            ..Default::default()
        };
        let err = convert::decode_atomic_write(&write.encode_to_vec()).unwrap_err();
        prop_assert_eq!(err.message, format!("Invalid LE64 value: expected 8 bytes, got {len}."));
    }

    /// Unknown encodings and mutation types are refused, not stored.
    #[test]
    fn unknown_encodings_and_types_are_errors(encoding in 4i32..1000, kind in prop_oneof![Just(0i32), 6i32..9, 10i32..100]) {
        let body = |encoding: i32, kind: i32| pb::AtomicWrite {
            mutations: vec![pb::Mutation {
                key: vec![2, b'k', 0],
                value: Some(pb::KvValue { data: vec![1], encoding }),
                mutation_type: kind,
                ..Default::default()
            }],
            ..Default::default()
        }.encode_to_vec();
        prop_assert!(convert::decode_atomic_write(&body(encoding, 1)).is_err());
        prop_assert_eq!(
            convert::decode_atomic_write(&body(1, kind)).unwrap_err().message,
            convert::TEXT_BAD_MUTATION
        );
    }
}

/// Wrong wire types for known fields: a varint where bytes are expected, and the reverse.
#[test]
fn wrong_wire_types_are_errors() {
    // field 1 (ranges, LEN) sent as a varint.
    let err = convert::decode_snapshot_read(&[0x08, 0x01]).unwrap_err();
    assert!(
        err.message.starts_with("Request protobuf is invalid: "),
        "{err}"
    );
    // ReadRange.limit (field 3, varint) sent as LEN.
    let err = convert::decode_snapshot_read(&[0x0a, 0x03, 0x1a, 0x01, 0x00]).unwrap_err();
    assert!(
        err.message.starts_with("Request protobuf is invalid: "),
        "{err}"
    );
    // Mutation.mutation_type (field 3) sent as fixed64.
    let body = [0x12, 0x09, 0x19, 1, 0, 0, 0, 0, 0, 0, 0];
    assert!(convert::decode_atomic_write(&body).is_err());
}

#[test]
fn read_limits_and_versionstamps_are_checked() {
    let mut read = valid_read();
    read.ranges[0].limit = 0;
    assert_eq!(
        convert::decode_snapshot_read(&read.encode_to_vec())
            .unwrap_err()
            .message,
        convert::TEXT_BAD_READ_LIMIT
    );
    read.ranges[0].limit = -5;
    assert!(convert::decode_snapshot_read(&read.encode_to_vec()).is_err());

    let mut write = valid_write();
    write.checks[0].versionstamp = vec![0; 9];
    assert_eq!(
        convert::decode_atomic_write(&write.encode_to_vec())
            .unwrap_err()
            .message,
        convert::TEXT_BAD_VERSIONSTAMP
    );
    let mut write = valid_write();
    write.mutations[0].expire_at_ms = -2;
    assert_eq!(
        convert::decode_atomic_write(&write.encode_to_vec())
            .unwrap_err()
            .message,
        convert::TEXT_BAD_EXPIRE_AT
    );
    let mut write = valid_write();
    write.mutations[0].value = None;
    assert_eq!(
        convert::decode_atomic_write(&write.encode_to_vec())
            .unwrap_err()
            .message,
        convert::TEXT_BAD_MUTATION
    );
}

/// The captured `kv.set(["users","alice"], {name:"Alice", age:30})` request of the fact sheet.
#[test]
fn decodes_the_captured_deno_set() {
    let body = hex_bytes(
        "12310a0e0275736572730002616c6963650012 1d0a19ff106f22046e616d652205416c69636522036167 65493c7b0210011801",
    );
    let write = convert::decode_atomic_write(&body).unwrap();
    assert_eq!(write.mutations.len(), 1);
    let m = &write.mutations[0];
    assert_eq!(m.key, hex_bytes("0275736572730002616c69636500"));
    assert!(
        matches!(&m.kind, open_deno_kv_model::MutationKind::Set(KvValue::V8(v)) if v.len() == 25)
    );
    assert_eq!(m.expire_at, None);
    // And our encoder gives back the same bytes.
    assert_eq!(convert::encode_atomic_write(&write).encode_to_vec(), body);
}

/// The captured check failure answer: `08 02 22 01 00`.
#[test]
fn encodes_check_failure_like_denokv() {
    let out = convert::atomic_write_output(None, vec![0]);
    assert_eq!(out.encode_to_vec(), vec![0x08, 0x02, 0x22, 0x01, 0x00]);
}

fn hex_bytes(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).expect("ascii"), 16).expect("hex"))
        .collect()
}
