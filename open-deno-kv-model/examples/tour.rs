//! A short tour of open-deno-kv-model: typed keys, their Deno-compatible bytes and order, versionstamps, a
//! V8 sum computed as Deno's engine does, and a write refused with Deno's text.
//!
//! Run: `cargo run -p open-deno-kv-model --example tour` (pass keys' string parts as arguments to see them
//! encoded too: `cargo run -p open-deno-kv-model --example tour -- users alice`).

use open_deno_kv_model::rules::{SumBounds, apply_sum, v8_number};
use open_deno_kv_model::{
    AtomicWrite, Key, KeyPart, KvValue, Limits, Mutation, Versionstamp, decode_key, encode_key, key,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut keys = vec![
        key!["users", 42.0],        // JavaScript: ["users", 42]
        key!["users", 42],          // JavaScript: ["users", 42n]
        key!["users", "alice"],     // strings sort before integers
        key!["users", b"\x00\x01"], // bytes sort first
        key!["users", true],        // booleans last
        key!["users"],              // a prefix sorts before its children
    ];
    let from_args: Key = std::env::args().skip(1).map(KeyPart::from).collect();
    if !from_args.is_empty() {
        keys.push(from_args);
    }
    keys.sort();
    println!("Keys in Deno KV order, with their stored bytes:");
    for key in &keys {
        let bytes = encode_key(key)?;
        assert_eq!(&decode_key(&bytes)?, key);
        println!("  {:<28} {}", key.to_string(), hex::encode(&bytes));
    }

    let stamp = Versionstamp::from_version(120, 0);
    println!("\nCommit version 120 has versionstamp {stamp}");

    let stored = KvValue::V8(v8_number(1.5).into());
    let sum = apply_sum(
        Some(&stored),
        &KvValue::V8(v8_number(2.0).into()),
        &SumBounds::default(),
    )?;
    if let KvValue::V8(bytes) = sum {
        println!(
            "V8 sum 1.5 + 2 is stored as {} (the bytes Deno's engine writes)",
            hex::encode(bytes)
        );
    }

    let too_big = Mutation::set(
        encode_key(&key!["big"])?,
        KvValue::Bytes(vec![0; 70_000].into()),
    );
    let write = AtomicWrite {
        mutations: vec![too_big],
        ..Default::default()
    };
    match Limits::deno().validate_atomic_write(&write, chrono::Utc::now()) {
        Err(refused) => println!("A 70 000-byte value is refused: {refused}"),
        Ok(()) => return Err("a 70 000-byte value should have been refused".into()),
    }
    Ok(())
}
