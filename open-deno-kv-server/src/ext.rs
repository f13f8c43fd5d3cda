//! Protocol extensions spoken by this server and the `open-deno-kv-remote` client only: the wire shapes
//! and names live in [`open_deno_kv_connect::ext`] (shared with the client); this module adds what the
//! server needs to apply them.

pub use open_deno_kv_connect::ext::*;

/// Whether the request's [`EXT_HEADER`] asks for `name`.
pub fn requested(headers: &hyper::HeaderMap, name: &str) -> bool {
    headers
        .get_all(EXT_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim() == name)
}
