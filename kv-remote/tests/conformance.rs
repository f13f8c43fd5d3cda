//! The whole conformance suite through the network: kv-remote → kv-server (h2c on 127.0.0.1) →
//! kv-memory, in one process; see `support/conformance_server.rs` (`conformance_tls.rs` runs
//! the same over TLS).

#[path = "support/conformance_server.rs"]
mod conformance_server;

kv_conformance::conformance_main!(factory = conformance_server::factory(None));
