//! The raw floors: the same sets, gets and scans done with rusqlite and redb directly, on the
//! same key and value bytes, at the same durability. They are what each engine can do with no
//! Deno KV layer on top, so a backend's figure divided by its floor's is the layer's cost.
//!
//! - **raw SQLite**: Deno's `kv` table (`k blob primary key, v, v_encoding, version, seq,
//!   expiration_ms`, `without rowid`), WAL, `synchronous = FULL` (or `NORMAL`), one prepared
//!   statement per operation kind on one connection, each set its own autocommit transaction.
//! - **raw redb**: one table from encoded key to a record shaped like open-deno-kv-redb's (a 20-byte header
//!   of encoding, versionstamp and expiry, then the value), one write transaction and commit
//!   per set at `Durability::Immediate` (or `None`); each get or scan its own read transaction.

use std::path::Path;

use open_deno_kv_engine_kit::PageBuilder;
use open_deno_kv_model::{KvEntry, KvValue, Versionstamp};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::data::{KeyTable, Probes, Result, check_value, value_bytes};
use crate::spec::Durability;
use crate::stats::{Chain, Measured};

/// Keys per preload transaction of the raw floors: the same as the backends' preload commits, so
/// the files are built alike (a B-tree filled in 500-key commits is laid out differently from one
/// filled in one big transaction, and reads see it).
const PRELOAD_BATCH: usize = crate::workloads::PRELOAD_BATCH;

/// SQLite's `kv` table exactly as Deno 2.9 (and open-deno-kv-sqlite) lays it out.
const SQLITE_SCHEMA: &str = "create table if not exists kv (
  k blob primary key,
  v blob not null,
  v_encoding integer not null,
  version integer not null,
  seq integer not null default 0,
  expiration_ms integer not null default -1
) without rowid;";
const SQLITE_SET: &str = "insert or replace into kv (k, v, v_encoding, version, seq, expiration_ms)
    values (?1, ?2, 3, ?3, 0, -1)";
const SQLITE_GET: &str = "select v, v_encoding, version from kv where k = ?1";
const SQLITE_SCAN: &str = "select k, v, v_encoding, version from kv
    where k >= ?1 and k < ?2 order by k limit ?3";

/// A raw rusqlite database.
pub struct RawSqlite {
    conn: Connection,
}

impl RawSqlite {
    /// Creates the database at `path`: WAL, the durability's `synchronous`, Deno's `kv` table.
    pub fn create(path: &Path, durability: Durability) -> Result<Self> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let mode: String = conn.query_row("pragma journal_mode = wal", [], |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("SQLite refused WAL mode (got {mode})").into());
        }
        let synchronous = match durability {
            Durability::Full => "full",
            Durability::Process => "normal",
        };
        conn.execute_batch(&format!("pragma synchronous = {synchronous};"))?;
        conn.execute_batch(SQLITE_SCHEMA)?;
        Ok(RawSqlite { conn })
    }

    /// Writes key `i` = value `i` (not timed), in transactions as large as the backends'.
    pub fn preload(&mut self, keys: &KeyTable) -> Result<()> {
        for first in (0..keys.len()).step_by(PRELOAD_BATCH) {
            let txn = self.conn.transaction()?;
            {
                let mut set = txn.prepare_cached(SQLITE_SET)?;
                for i in first..(first + PRELOAD_BATCH).min(keys.len()) {
                    set.execute(params![keys.get(i), value_bytes(i), i as i64])?;
                }
            }
            txn.commit()?;
        }
        Ok(())
    }

    /// Reads every row once, in key order (not timed), as the backends' warm-up does.
    pub fn warm_up(&self, keys: &KeyTable) -> Result<()> {
        let mut stmt = self
            .conn
            .prepare("select k, v, v_encoding, version from kv order by k")?;
        let mut rows = stmt.query([])?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            let _k: Vec<u8> = row.get(0)?;
            let _v: Vec<u8> = row.get(1)?;
            n += 1;
        }
        if n != keys.len() {
            return Err(format!("{} keys preloaded but {n} read back", keys.len()).into());
        }
        Ok(())
    }

    /// W1: one autocommit `insert or replace` per key (one WAL commit and sync each).
    pub fn sets(&self, keys: &KeyTable) -> Result<Measured> {
        let mut set = self.conn.prepare_cached(SQLITE_SET)?;
        let mut chain = Chain::start(keys.len());
        for (i, key) in keys.iter().enumerate() {
            set.execute(params![key, value_bytes(i), i as i64])?;
            chain.tick();
        }
        Ok(chain.finish())
    }

    fn get(&self, i: usize, key: &[u8]) -> Result<()> {
        let row = self
            .conn
            .prepare_cached(SQLITE_GET)?
            .query_row([key], |row| {
                let v: Vec<u8> = row.get(0)?;
                let _encoding: i64 = row.get(1)?;
                let _version: i64 = row.get(2)?;
                Ok(v)
            })
            .optional()?;
        check_value(&row.ok_or("a preloaded key is missing")?, i)
    }

    /// W3: point gets by primary key, after an untimed warm-up.
    pub fn gets(&self, probes: &Probes, warmup: usize) -> Result<Measured> {
        for (i, key) in probes.iter().take(warmup) {
            self.get(i, key)?;
        }
        let mut chain = Chain::start(probes.len());
        for (i, key) in probes.iter() {
            self.get(i, key)?;
            chain.tick();
        }
        Ok(chain.finish())
    }

    fn scan(&self, keys: &KeyTable, s: usize, scan_len: usize, end: &[u8]) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(SQLITE_SCAN)?;
        let mut rows = stmt.query(params![keys.get(s), end, scan_len as i64])?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            let k: Vec<u8> = row.get(0)?;
            let v: Vec<u8> = row.get(1)?;
            let _encoding: i64 = row.get(2)?;
            let _version: i64 = row.get(3)?;
            if keys.get(s + n) != k.as_slice() {
                return Err(format!("raw scan from {s}: entry {n} has the wrong key").into());
            }
            check_value(&v, s + n)?;
            n += 1;
        }
        if n != scan_len {
            return Err(format!("raw scan from {s} returned {n} rows, expected {scan_len}").into());
        }
        Ok(())
    }

    /// W4: range scans of `scan_len` rows, after an untimed warm-up.
    pub fn scans(
        &self,
        keys: &KeyTable,
        starts: &[usize],
        scan_len: usize,
        end: &[u8],
        warmup: usize,
    ) -> Result<Measured> {
        timed_scans(starts, warmup, |s| self.scan(keys, s, scan_len, end))
    }
}

/// The raw redb table: encoded key to record.
const REDB_TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
/// Bytes before the value in a record: encoding (1), versionstamp (10), expiry flag and time (9).
const RECORD_HEADER: usize = 20;

/// A record shaped like open-deno-kv-redb's entry: encoding 3 (bytes), a versionstamp, no expiry, value.
fn record(i: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_HEADER + crate::spec::VALUE_SIZE);
    out.push(3);
    out.extend_from_slice(&(i as u64).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&[0; 9]);
    out.extend_from_slice(&value_bytes(i));
    out
}

/// A record of [`record`]'s shape, split: its encoding id, versionstamp and value bytes.
fn split_record(record: &[u8]) -> Result<(i64, Versionstamp, &[u8])> {
    let (header, value) = record
        .split_first_chunk::<RECORD_HEADER>()
        .ok_or("a raw record is shorter than its header")?;
    let mut stamp = [0; 10];
    stamp.copy_from_slice(&header[1..11]);
    if header[11] != 0 {
        return Err("a raw record has an expiry".into());
    }
    Ok((i64::from(header[0]), Versionstamp::from_bytes(stamp), value))
}

/// The entry a record of [`record`]'s shape holds, decoded as a read returns it.
fn page_entry(key: &[u8], record: &[u8]) -> Result<KvEntry> {
    let (encoding, versionstamp, value) = split_record(record)?;
    Ok(KvEntry {
        key: key.to_vec().into(),
        value: KvValue::decode(value.to_vec(), encoding)?,
        versionstamp,
        expires_at: None,
    })
}

/// Checks a raw page scanned from `s`: `scan_len` entries, each with its key and value.
fn check_page(page: &[KvEntry], keys: &KeyTable, s: usize, scan_len: usize) -> Result<()> {
    if page.len() != scan_len {
        return Err(format!(
            "raw scan from {s} returned {}, expected {scan_len}",
            page.len()
        )
        .into());
    }
    for (n, entry) in page.iter().enumerate() {
        match &entry.value {
            KvValue::Bytes(bytes) if entry.key == keys.get(s + n) => check_value(bytes, s + n)?,
            _ => return Err(format!("raw scan from {s}: entry {n} is wrong").into()),
        }
    }
    Ok(())
}

fn check_record(record: &[u8], i: usize) -> Result<()> {
    check_value(record.get(RECORD_HEADER..).unwrap_or_default(), i)
}

/// A raw redb database.
pub struct RawRedb {
    db: Database,
    durability: redb::Durability,
}

impl RawRedb {
    /// Creates the database at `path`; sets commit at `Immediate` (full) or `None` (process).
    pub fn create(path: &Path, durability: Durability) -> Result<Self> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(REDB_TABLE)?;
        txn.commit()?;
        Ok(RawRedb {
            db,
            durability: match durability {
                Durability::Full => redb::Durability::Immediate,
                Durability::Process => redb::Durability::None,
            },
        })
    }

    /// Writes key `i` = record `i` (not timed): non-durable commits, then one durable commit at
    /// the end, as open-deno-kv-redb's preload at `Deferred` does.
    pub fn preload(&self, keys: &KeyTable) -> Result<()> {
        for first in (0..keys.len()).step_by(PRELOAD_BATCH) {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(redb::Durability::None)?;
            {
                let mut table = txn.open_table(REDB_TABLE)?;
                for i in first..(first + PRELOAD_BATCH).min(keys.len()) {
                    table.insert(keys.get(i), record(i).as_slice())?;
                }
            }
            txn.commit()?;
        }
        let txn = self.db.begin_write()?;
        txn.commit()?;
        Ok(())
    }

    /// Reads every entry once, in key order (not timed), as the backends' warm-up does.
    pub fn warm_up(&self, keys: &KeyTable) -> Result<()> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(REDB_TABLE)?;
        let mut n = 0;
        for item in table.iter()? {
            let (k, v) = item?;
            std::hint::black_box((k.value().to_vec(), v.value().to_vec()));
            n += 1;
        }
        if n != keys.len() {
            return Err(format!("{} keys preloaded but {n} read back", keys.len()).into());
        }
        Ok(())
    }

    /// W1: one write transaction, insert and commit per key.
    pub fn sets(&self, keys: &KeyTable) -> Result<Measured> {
        let mut chain = Chain::start(keys.len());
        for (i, key) in keys.iter().enumerate() {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(self.durability)?;
            {
                let mut table = txn.open_table(REDB_TABLE)?;
                table.insert(key, record(i).as_slice())?;
            }
            txn.commit()?;
            chain.tick();
        }
        let measured = chain.finish();
        // Make `Durability::None` commits durable before the file is dropped (not timed).
        let txn = self.db.begin_write()?;
        txn.commit()?;
        Ok(measured)
    }

    fn get(&self, i: usize, key: &[u8]) -> Result<()> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(REDB_TABLE)?;
        let guard = table.get(key)?.ok_or("a preloaded key is missing")?;
        let value = guard.value().to_vec();
        check_record(&value, i)
    }

    /// W3: `begin_read` + `open_table` + `get` (value copied out) per get, after a warm-up.
    pub fn gets(&self, probes: &Probes, warmup: usize) -> Result<Measured> {
        for (i, key) in probes.iter().take(warmup) {
            self.get(i, key)?;
        }
        let mut chain = Chain::start(probes.len());
        for (i, key) in probes.iter() {
            self.get(i, key)?;
            chain.tick();
        }
        Ok(chain.finish())
    }

    fn scan(&self, keys: &KeyTable, s: usize, scan_len: usize, end: &[u8]) -> Result<()> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(REDB_TABLE)?;
        let mut n = 0;
        for item in table.range::<&[u8]>(keys.get(s)..end)?.take(scan_len) {
            let (k, v) = item?;
            let (k, v) = (k.value().to_vec(), v.value().to_vec());
            if keys.get(s + n) != k.as_slice() {
                return Err(format!("raw scan from {s}: entry {n} has the wrong key").into());
            }
            check_record(&v, s + n)?;
            n += 1;
        }
        if n != scan_len {
            return Err(format!("raw scan from {s} returned {n} rows, expected {scan_len}").into());
        }
        Ok(())
    }

    /// One scan as a Deno KV read must answer it: a page of owned [`KvEntry`]s (each key and
    /// value copied out, the record's header decoded into versionstamp and expiry), alive until
    /// the page is checked and dropped, as W4 checks a backend's. The floor's [`RawRedb::scan`]
    /// drops each key and value as soon as it is checked instead (see `diagnose-scans`).
    fn scan_page(&self, keys: &KeyTable, s: usize, scan_len: usize, end: &[u8]) -> Result<()> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(REDB_TABLE)?;
        let mut page = Vec::with_capacity(scan_len);
        for item in table.range::<&[u8]>(keys.get(s)..end)?.take(scan_len) {
            let (k, v) = item?;
            page.push(page_entry(k.value(), v.value())?);
        }
        check_page(&page, keys, s, scan_len)
    }

    /// [`RawRedb::scan_page`] with the page built as open-deno-kv-redb builds it: the keys and
    /// values copied into one buffer and handed out as slices of it (`PageBuilder`).
    fn scan_shared_page(
        &self,
        keys: &KeyTable,
        s: usize,
        scan_len: usize,
        end: &[u8],
    ) -> Result<()> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(REDB_TABLE)?;
        let mut page = PageBuilder::for_limit(scan_len);
        for item in table.range::<&[u8]>(keys.get(s)..end)?.take(scan_len) {
            let (k, v) = item?;
            let (encoding, versionstamp, value) = split_record(v.value())?;
            page.push(k.value(), value, encoding, versionstamp, None)?;
        }
        check_page(&page.finish(), keys, s, scan_len)
    }

    /// W4: a read transaction and a range of `scan_len` entries (copied out) per scan.
    pub fn scans(
        &self,
        keys: &KeyTable,
        starts: &[usize],
        scan_len: usize,
        end: &[u8],
        warmup: usize,
    ) -> Result<Measured> {
        self.scans_answering(RawScan::Floor, keys, starts, scan_len, end, warmup)
    }

    /// [`RawRedb::scans`] with each scan done the way `how` says (see `diagnose-scans`).
    pub fn scans_answering(
        &self,
        how: RawScan,
        keys: &KeyTable,
        starts: &[usize],
        scan_len: usize,
        end: &[u8],
        warmup: usize,
    ) -> Result<Measured> {
        timed_scans(starts, warmup, |s| match how {
            RawScan::Floor => self.scan(keys, s, scan_len, end),
            RawScan::OwnedPage => self.scan_page(keys, s, scan_len, end),
            RawScan::SharedPage => self.scan_shared_page(keys, s, scan_len, end),
        })
    }
}

/// What a raw redb scan hands back ([`RawRedb::scans_answering`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawScan {
    /// Each key and value copied out and dropped at once: the floor.
    Floor,
    /// A page of owned entries, each key and value its own allocation ([`RawRedb::scan_page`]).
    OwnedPage,
    /// A page built as the engines build theirs, from one buffer ([`RawRedb::scan_shared_page`]).
    SharedPage,
}

/// W4's timing for every raw floor: `scan` from each of the first `warmup` starts untimed, then
/// from every start, one tick per scan.
fn timed_scans(
    starts: &[usize],
    warmup: usize,
    mut scan: impl FnMut(usize) -> Result<()>,
) -> Result<Measured> {
    for &s in starts.iter().take(warmup) {
        scan(s)?;
    }
    let mut chain = Chain::start(starts.len());
    for &s in starts {
        scan(s)?;
        chain.tick();
    }
    Ok(chain.finish())
}
