//! The whole conformance suite through the network: open-deno-kv-remote → open-deno-kv-server (h2c on 127.0.0.1) →
//! open-deno-kv-memory, in one process; see `support/conformance_server.rs` (`conformance_tls.rs` runs
//! the same over TLS).

#[path = "support/conformance_server.rs"]
mod conformance_server;

open_deno_kv_conformance::conformance_main!(factory = conformance_server::factory(None));
