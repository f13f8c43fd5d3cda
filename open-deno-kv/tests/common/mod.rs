//! What the integration tests share: the Deno 2.9.6 fixtures committed in the repository.

use std::path::PathBuf;

use open_deno_kv::KvValue;
use serde_json::Value;

/// The folder of Deno's fixtures (`fixtures/deno-2.9.6`, or `KV_FIXTURES_DIR`).
pub fn fixtures_dir() -> PathBuf {
    let dir = match std::env::var_os("KV_FIXTURES_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/deno-2.9.6"),
    };
    assert!(
        dir.join("values.manifest.json").is_file(),
        "Deno fixtures not found at {} (they are committed under fixtures/deno-2.9.6; or set KV_FIXTURES_DIR)",
        dir.display()
    );
    dir
}

/// A fixture manifest (`values`, `keys`, `special`), parsed.
pub fn manifest(name: &str) -> Value {
    let path = fixtures_dir().join(format!("{name}.manifest.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// A manifest entry's stored value: its bytes decoded with its encoding id.
pub fn stored_value(entry: &Value, label: &str) -> KvValue {
    let hex_bytes = entry["value_hex"]
        .as_str()
        .unwrap_or_else(|| panic!("{label}: no value_hex"));
    let bytes = hex::decode(hex_bytes).unwrap_or_else(|e| panic!("{label}: value_hex: {e}"));
    let encoding = entry["v_encoding"]
        .as_i64()
        .unwrap_or_else(|| panic!("{label}: no v_encoding"));
    KvValue::decode(bytes, encoding).unwrap_or_else(|e| panic!("{label}: {e}"))
}

/// What Deno 2.9.6 stored for `kv.set(["v", name], …)` in `values.sqlite`.
#[allow(dead_code)] // Not every test file that includes this module asks for it.
pub fn deno_value(name: &str) -> KvValue {
    let manifest = manifest("values");
    let entries = manifest["entries"].as_array().expect("values: entries");
    let entry = entries
        .iter()
        .find(|entry| entry["key"] == serde_json::json!([{"string": "v"}, {"string": name}]))
        .unwrap_or_else(|| panic!("no fixture value [\"v\", {name:?}]"));
    stored_value(entry, name)
}
