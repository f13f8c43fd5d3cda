//! # open-deno-kv-bench-harness — the engine-free half of open-deno-kv-bench
//!
//! The workloads (W1–W7), the data they work on, the statistics, the child process's command
//! line and report, and the driver that runs workloads on any [`open_deno_kv_model::Backend`] in every
//! driving mode. It depends on no storage engine, so two binaries share it:
//!
//! - `open-deno-kv-bench` (the parent, open-deno-kv-memory, open-deno-kv-sqlite, open-deno-kv-redb, open-deno-kv-postgres and the raw floors);
//! - `open-deno-kv-bench-anchor` (`open-deno-kv-bench/anchor`, its own Cargo workspace), which measures
//!   denokv_sqlite — the SQLite engine inside Deno and the denokv server. denokv_sqlite links
//!   another rusqlite than the workspace's, and two `links = "sqlite3"` crates cannot share one
//!   dependency graph, so the anchor is a separate binary that runs the very same workload code.
//!
//! A child binary hands [`child::main`] its arguments and a function that opens its stores
//! ([`child::Stores`]); the parent reads the JSON line it prints.

pub mod child;
pub mod data;
pub mod spec;
pub mod stats;
pub mod sysinfo;
pub mod workloads;
