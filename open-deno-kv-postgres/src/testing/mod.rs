//! Throwaway PostgreSQL clusters for tests (cargo feature `testing`).
//!
//! [`TestCluster::start`] runs `initdb` in a fresh temporary directory, starts a server that
//! listens on 127.0.0.1 only, on a free port, with its sockets inside that directory and `trust`
//! authentication for loopback connections only, and optionally a streaming replica made with
//! `pg_basebackup -R` (a synchronous standby with [`ClusterOptions::synchronous_replica`], which
//! [`TestCluster::kill_primary`] and [`TestCluster::promote_replica`] fail over to). Dropping the cluster stops the servers (`pg_ctl -m fast`, then `-m
//! immediate` if that fails) and removes the directory. Fault tests restart the primary with
//! [`TestCluster::restart_primary`]; [`SilentCutProxy`] kills connections without telling their
//! clients, or at a `COMMIT` ([`CommitCut`]). [`PatroniCluster`] starts etcd and three PostgreSQL
//! nodes under Patroni in synchronous mode, for failover tests. [`TestPgBouncer`] starts a
//! PgBouncer (Debian's `pgbouncer`, found in `PGBOUNCER_BIN` or `/usr/sbin`) in front of a
//! cluster, in session or transaction pool mode, on a free loopback port, with its own
//! configuration in a temporary directory.
//!
//! The server binaries are found in `PG_BIN` when it is set, else in `/usr/lib/postgresql/*/bin` (newest
//! first), then `pg_config --bindir`. When run as root, the servers run as the unprivileged OS
//! user `postgres` (through `runuser`), since PostgreSQL refuses to run as root.
//!
//! Without PostgreSQL, tests must not pass silently: [`TestCluster::start_or_skip`] fails with
//! instructions, unless `KV_POSTGRES_TESTS=skip` is set, in which case it says loudly that the
//! test is skipped and returns `None`.
//!
//! ```no_run
//! use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};
//!
//! let Some(cluster) = TestCluster::start_or_skip(ClusterOptions::default()) else {
//!     return; // KV_POSTGRES_TESTS=skip, and it said so
//! };
//! println!("connect to {}", cluster.url());
//! ```

mod binaries;
mod cluster;
mod patroni;
mod pgbouncer;
mod proxy;

pub use binaries::{SKIP_VARIABLE, ServerBinaries};
pub use cluster::{ClusterOptions, STORE_ROLE, Shutdown, TestCluster};
pub use patroni::{PatroniCluster, PatroniSettings};
pub use pgbouncer::{PoolMode, TestPgBouncer};
pub use proxy::{CommitCut, SilentCutProxy};

/// How long a handle keeps listening for other processes' commits after its last watch or
/// waiting dequeue ends (tests wait past it to see a handle that stopped).
pub const LISTEN_LINGER: std::time::Duration = crate::listener::LINGER;

/// A PostgreSQL schema name of `path`'s own (`store_` and a 64-bit FNV-1a hash of the path),
/// for harnesses that give every store a directory (the crash harness, open-deno-kv-bench): each
/// directory gets a store of its own in one database.
pub fn schema_for_path(path: &std::path::Path) -> String {
    let hash = path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("store_{hash:016x}")
}
