//! # open-deno-kv-connect — the KV Connect protocol
//!
//! KV Connect is how `Deno.openKv("http://host:port/...")` reaches a remote Deno KV: a JSON
//! metadata exchange at the database URL ([`metadata`]), then protobuf requests to
//! `<endpoint>/snapshot_read`, `<endpoint>/atomic_write` and `<endpoint>/watch` ([`pb`]), the last
//! answered by a stream of length-prefixed frames ([`frames`]). [`convert`] turns the wire
//! messages into open-deno-kv-model's requests and results and back, for a server and for a client.
//!
//! Field numbers, texts and behaviours follow denokv's published protocol description
//! (`proto/open-deno-kv-connect.md` in the denokv repository) as observed between Deno 2.9.6 and
//! denokv 0.14; where the two differ, what Deno 2.9.6 does wins.
//!
//! ```
//! use open_deno_kv_connect::{convert, pb};
//! use prost::Message;
//! // An LE64 value of the wrong length is an error, never a panic.
//! let write = pb::AtomicWrite {
//!     mutations: vec![pb::Mutation {
//!         key: vec![2, b'k', 0],
//!         value: Some(pb::KvValue { data: vec![1, 2, 3], encoding: pb::ValueEncoding::VeLe64 as i32 }),
//!         mutation_type: pb::MutationType::MSum as i32,
//!         ..Default::default()
//!     }],
//!     ..Default::default()
//! };
//! let err = convert::decode_atomic_write(&write.encode_to_vec()).unwrap_err();
//! assert_eq!(err.to_string(), "Invalid LE64 value: expected 8 bytes, got 3.");
//! ```

pub mod convert;
mod error;
pub mod ext;
pub mod frames;
mod framing;
pub mod metadata;
pub mod pb;
mod values;

pub use error::ProtocolError;
pub use prost;

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
