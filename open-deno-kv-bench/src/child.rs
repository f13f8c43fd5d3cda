//! open-deno-kv-bench's children: its own engines through [`open_deno_kv_bench_harness::child::run_backend`], and
//! the raw floors. The command line, the report and the workload driver are the harness's (see
//! [`open_deno_kv_bench_harness::child`]), shared with the denokv anchor's binary.

use std::path::Path;
use std::sync::Arc;

use open_deno_kv_bench_harness::child::{
    ChildSpec, ReadSet, Stores, report, run_backend, w4_warmup,
};
use open_deno_kv_memory::MemoryBackend;
use open_deno_kv_postgres::testing::schema_for_path;
use open_deno_kv_postgres::{PostgresBackend, PostgresOptions};
use open_deno_kv_redb::{RedbBackend, RedbOptions};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};
use serde_json::Value;

use crate::data::{KeyTable, Probes, Result, warmup_len};
use crate::raw::{RawRedb, RawSqlite};
use crate::spec::{Counts, Durability, Target, Workload};
use crate::stats::Measured;
use crate::sysinfo::storage_write_bytes;
use crate::workloads::Kv;

/// Runs a child's workloads on a backend of this binary or a raw floor; returns its report.
pub fn run(spec: &ChildSpec) -> Result<Value> {
    open_deno_kv_bench_harness::child::run(spec, |spec| {
        if spec.target.is_raw() {
            run_raw(spec)
        } else if spec.target.in_anchor() {
            Err(format!(
                "{} runs in open-deno-kv-bench-anchor, not in open-deno-kv-bench",
                spec.target
            )
            .into())
        } else {
            run_backend(spec, &Engines)
        }
    })
}

/// The stores of open-deno-kv-bench's own backends.
struct Engines;

impl Stores for Engines {
    async fn open(&self, spec: &ChildSpec, dir: &Path, durability: Durability) -> Result<Kv> {
        let target = spec.target;
        Ok(match target {
            Target::Memory => Arc::new(MemoryBackend::new()),
            Target::Sqlite => Arc::new(SqliteBackend::open_with(
                dir.join("kv.sqlite3"),
                SqliteOptions {
                    durability: match durability {
                        Durability::Full => open_deno_kv_sqlite::Durability::Full,
                        Durability::Process => open_deno_kv_sqlite::Durability::Process,
                    },
                    ..Default::default()
                },
            )?),
            Target::Redb => Arc::new(RedbBackend::open_with(
                dir.join("kv.redb"),
                RedbOptions {
                    durability: match durability {
                        Durability::Full => open_deno_kv_redb::Durability::Immediate,
                        Durability::Process => open_deno_kv_redb::Durability::Deferred,
                    },
                    ..Default::default()
                },
            )?),
            Target::Postgres | Target::PostgresReplica => {
                let url = spec
                    .postgres_url
                    .as_deref()
                    .ok_or("the postgres targets need --postgres-url")?;
                let replica_urls = match (target, &spec.postgres_replica_url) {
                    (Target::PostgresReplica, Some(url)) => vec![url.clone()],
                    (Target::PostgresReplica, None) => {
                        return Err("postgres-replica needs --postgres-replica-url".into());
                    }
                    _ => Vec::new(),
                };
                let options = PostgresOptions {
                    schema: schema_for_path(dir),
                    replica_urls,
                    ..PostgresOptions::default()
                };
                Arc::new(PostgresBackend::open_with(url, options).await?)
            }
            Target::RawSqlite | Target::RawRedb | Target::Denokv => {
                return Err(format!("{target} is not a backend").into());
            }
        })
    }
}

fn run_raw(spec: &ChildSpec) -> Result<Vec<Value>> {
    let counts = Counts::new(spec.scale, spec.keys);
    let sqlite = spec.target == Target::RawSqlite;
    let mut results = Vec::new();
    let mut reads: Option<(Floor, ReadSet)> = None;
    for &workload in &spec.workloads {
        let written_before = storage_write_bytes();
        let measured: Measured = match workload {
            Workload::W1 => {
                let keys = KeyTable::bench(counts.w1_sets)?;
                let floor = Floor::create(sqlite, &spec.dir.join("W1"), spec.durability)?;
                floor.sets(&keys)?
            }
            Workload::W3 | Workload::W4 => {
                if reads.is_none() {
                    let set = ReadSet::new(&counts)?;
                    let path = spec.dir.join("reads");
                    let mut floor = Floor::create(sqlite, &path, spec.durability)?;
                    floor.preload(&set.keys)?;
                    drop(floor);
                    // Reopen and warm up, as the backends do.
                    let floor = Floor::create(sqlite, &path, spec.durability)?;
                    floor.warm_up(&set.keys)?;
                    reads = Some((floor, set));
                }
                let (floor, set) = reads.as_ref().ok_or("the read data set was not loaded")?;
                if workload == Workload::W3 {
                    floor.gets(&set.probes, warmup_len(set.probes.len()))?
                } else {
                    floor.scans(
                        &set.keys,
                        &set.starts,
                        counts.scan_len(),
                        &set.end,
                        w4_warmup(set.starts.len()),
                    )?
                }
            }
            other => return Err(format!("{} has no {other} floor", spec.target).into()),
        };
        results.push(report(workload, measured.into(), written_before));
    }
    Ok(results)
}

/// Either raw floor, behind one set of calls.
enum Floor {
    Sqlite(RawSqlite),
    Redb(RawRedb),
}

impl Floor {
    fn create(sqlite: bool, path: &Path, durability: Durability) -> Result<Self> {
        Ok(if sqlite {
            Floor::Sqlite(RawSqlite::create(
                &path.with_extension("sqlite3"),
                durability,
            )?)
        } else {
            Floor::Redb(RawRedb::create(&path.with_extension("redb"), durability)?)
        })
    }

    fn preload(&mut self, keys: &KeyTable) -> Result<()> {
        match self {
            Floor::Sqlite(db) => db.preload(keys),
            Floor::Redb(db) => db.preload(keys),
        }
    }

    fn warm_up(&self, keys: &KeyTable) -> Result<()> {
        match self {
            Floor::Sqlite(db) => db.warm_up(keys),
            Floor::Redb(db) => db.warm_up(keys),
        }
    }

    fn sets(&self, keys: &KeyTable) -> Result<Measured> {
        match self {
            Floor::Sqlite(db) => db.sets(keys),
            Floor::Redb(db) => db.sets(keys),
        }
    }

    fn gets(&self, probes: &Probes, warmup: usize) -> Result<Measured> {
        match self {
            Floor::Sqlite(db) => db.gets(probes, warmup),
            Floor::Redb(db) => db.gets(probes, warmup),
        }
    }

    fn scans(
        &self,
        keys: &KeyTable,
        starts: &[usize],
        scan_len: usize,
        end: &[u8],
        warmup: usize,
    ) -> Result<Measured> {
        match self {
            Floor::Sqlite(db) => db.scans(keys, starts, scan_len, end, warmup),
            Floor::Redb(db) => db.scans(keys, starts, scan_len, end, warmup),
        }
    }
}
