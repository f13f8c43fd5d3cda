//! The client side of open-deno-kv-server's protocol extensions: the wire shapes and names are
//! [`open_deno_kv_connect::ext`], shared with the server. This client asks for every extension it speaks
//! in the metadata exchange (the `x-kv-extensions` header) and uses one only when the server
//! lists it in its answer (see [`Extensions::from_metadata`]), so it works unchanged against
//! denokv, which ignores the header.

pub use open_deno_kv_connect::ext::*;
