//! Protocol extensions spoken by this server and the `kv-remote` client only: the wire shapes
//! and names live in [`kv_connect::ext`] (shared with the client); this module adds what the
//! server needs to apply them.

use kv_proto::KvEntry;

pub use kv_connect::ext::*;

/// An entry's expiry as the extension carries it.
pub fn expiry_ms(entry: Option<&KvEntry>) -> i64 {
    entry
        .and_then(|e| e.expires_at)
        .map_or(0, |at| at.timestamp_millis())
}

/// Whether the request's [`EXT_HEADER`] asks for `name`.
pub fn requested(headers: &hyper::HeaderMap, name: &str) -> bool {
    headers
        .get_all(EXT_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim() == name)
}
