//! # kv-postgres — Deno KV on PostgreSQL
//!
//! (Work in progress: the backend lands in the next steps.)

mod error;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::PostgresError;
