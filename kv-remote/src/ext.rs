//! The client side of kv-server's protocol extensions: the wire shapes and names are
//! [`kv_connect::ext`], shared with the server. This client uses an extension only when the
//! server lists it in its metadata (see [`Extensions::from_metadata`]), so it works unchanged
//! against denokv.

pub use kv_connect::ext::*;
