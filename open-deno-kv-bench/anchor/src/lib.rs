//! # open-deno-kv-bench-anchor — denokv_sqlite behind open-deno-kv-engine-kit's [`Engine`] trait
//!
//! The anchor open-deno-kv-bench measures every engine against: [`denokv_sqlite::Sqlite`] 0.14, the SQLite
//! engine inside Deno (`Deno.openKv(path)`) and the denokv server, opened as Deno opens it and
//! left at its own settings. [`Denokv`] translates open-deno-kv-engine-kit's requests into denokv_proto's and
//! back, and sits under open-deno-kv-engine-kit's [`Checked`] layer like every engine of the workspace, so
//! the workloads reach it through the same `Arc<dyn Backend>` and pay the same validation
//! (Deno validates the same limits before a request reaches denokv_sqlite).
//!
//! What it translates: snapshot reads (ranges, limits, direction, consistency), atomic writes
//! (checks; set, delete, sum, min, max and versionstamped-key sets, each with its expiry;
//! enqueues with ready time, dead-letter keys and backoff schedule), dequeue and finish, and
//! the queue listing (read from denokv's `queue` and `queue_running` tables, which denokv has
//! no call for). Watch and the integrity check are not offered ([`Checked`] refuses them):
//! the workloads use neither.
//!
//! Two things are denokv's, not the adapter's, and show in what it returns: entries carry no
//! expiry time (denokv_sqlite's entries have none), and a dequeue cancelled after denokv took
//! the message leaves it "running" until denokv's own cleanup (every 60 s) puts it back.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use denokv_proto as dk;
use denokv_sqlite::{Connection, Sqlite, SqliteConfig, SqliteMessageHandle, SqliteNotifier};
use open_deno_kv_engine_kit::chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::{
    AtomicWrite, Capabilities, Checked, CommitResult, Consistency, Engine, KvEntry, KvError,
    KvValue, Limits, MutationKind, QueueMessageHandle, QueuedMessage, ReadRange, ReadRangeOutput,
    SystemClock, ValidatedRead, ValidatedWrite, Versionstamp, async_trait,
};
use rand::SeedableRng;

/// The SQLite file name inside a store's directory.
pub const FILE_NAME: &str = "kv.sqlite3";

/// A denokv_sqlite database as an open-deno-kv-engine-kit engine (hand it out as `Checked<Denokv>`, an
/// `Arc<dyn open_deno_kv_engine_kit::Backend>`).
pub struct Denokv {
    db: Sqlite,
    path: PathBuf,
}

impl std::fmt::Debug for Denokv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Denokv({})", self.path.display())
    }
}

/// How denokv_sqlite left a database: what open-deno-kv-bench reports next to the anchor's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `select sqlite_version()` of the SQLite denokv_sqlite links.
    pub sqlite_version: String,
    /// `pragma journal_mode` (denokv_sqlite switches a file to `wal`).
    pub journal_mode: String,
    /// `pragma synchronous` of a connection opened as denokv's is: 2 is FULL (a WAL commit is
    /// fsynced), 1 NORMAL.
    pub synchronous: i64,
}

impl Denokv {
    /// Opens (creating if needed) the database file at `path` as `Deno.openKv(path)` does: one
    /// SQLite connection on denokv_sqlite's one worker thread, no write batching, and
    /// denokv_sqlite's own settings (it switches the file to WAL and leaves `synchronous` at
    /// SQLite's default), with Deno's limits in the [`Checked`] layer above.
    pub fn open(path: &Path) -> Result<Checked<Denokv>, KvError> {
        let file = path.to_path_buf();
        let conn_gen = move || {
            let conn = Connection::open(&file)
                .map_err(|e| deno_error::JsErrorBox::generic(e.to_string()))?;
            let rng: Box<dyn rand::RngCore + Send> = Box::new(rand::rngs::StdRng::from_entropy());
            Ok((conn, rng))
        };
        let config = SqliteConfig {
            num_workers: 1,
            batch_timeout: None,
        };
        let db = Sqlite::new(conn_gen, SqliteNotifier::default(), config).map_err(storage)?;
        let engine = Denokv {
            db,
            path: path.to_path_buf(),
        };
        Ok(Checked::new(engine, Limits::deno(), Arc::new(SystemClock)))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads how the file and a connection like denokv's are set up (a connection of its own).
    pub fn settings(&self) -> Result<Settings, KvError> {
        let conn = Connection::open(&self.path).map_err(storage)?;
        let text = |sql: &str| conn.query_row(sql, [], |row| row.get::<_, String>(0));
        Ok(Settings {
            sqlite_version: text("select sqlite_version()").map_err(storage)?,
            journal_mode: text("pragma journal_mode").map_err(storage)?,
            synchronous: conn
                .query_row("pragma synchronous", [], |row| row.get(0))
                .map_err(storage)?,
        })
    }
}

/// A failure of denokv or of SQLite under it, kept whole as the source of a
/// [`KvError::Storage`].
fn storage(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> KvError {
    KvError::Storage {
        source: Arc::from(err.into()),
    }
}

/// denokv's error as ours: a closed database is [`KvError::Closed`], the rest storage errors.
fn from_denokv(err: denokv_sqlite::SqliteBackendError) -> KvError {
    match err {
        denokv_sqlite::SqliteBackendError::DatabaseClosed => KvError::Closed,
        other => storage(other),
    }
}

fn value_to_denokv(value: KvValue) -> dk::KvValue {
    match value {
        KvValue::V8(bytes) => dk::KvValue::V8(bytes.into()),
        KvValue::Bytes(bytes) => dk::KvValue::Bytes(bytes.into()),
        KvValue::U64(n) => dk::KvValue::U64(n),
    }
}

fn value_from_denokv(value: dk::KvValue) -> KvValue {
    match value {
        dk::KvValue::V8(bytes) => KvValue::V8(bytes.into()),
        dk::KvValue::Bytes(bytes) => KvValue::Bytes(bytes.into()),
        dk::KvValue::U64(n) => KvValue::U64(n),
    }
}

fn range_to_denokv(range: &ReadRange) -> Result<dk::ReadRange, KvError> {
    Ok(dk::ReadRange {
        start: range.start.clone(),
        end: range.end.clone(),
        limit: NonZeroU32::new(range.limit)
            .ok_or_else(|| KvError::invalid_argument("a read range's limit must be positive"))?,
        reverse: range.reverse,
    })
}

fn entry_from_denokv(entry: dk::KvEntry) -> KvEntry {
    KvEntry {
        key: entry.key.into(),
        value: value_from_denokv(entry.value),
        versionstamp: Versionstamp::from_bytes(entry.versionstamp),
        // denokv_sqlite's entries do not carry their expiry.
        expires_at: None,
    }
}

/// denokv's mutation for ours. A range delete has none (Deno KV has no such mutation); the
/// `Checked` layer refuses it before it gets here, since this engine does not offer
/// `range_delete`.
fn kind_to_denokv(kind: MutationKind) -> Result<dk::MutationKind, KvError> {
    Ok(match kind {
        MutationKind::Set(v) => dk::MutationKind::Set(value_to_denokv(v)),
        MutationKind::Delete => dk::MutationKind::Delete,
        MutationKind::Sum {
            value,
            min_v8,
            max_v8,
            clamp,
        } => dk::MutationKind::Sum {
            value: value_to_denokv(value),
            min_v8,
            max_v8,
            clamp,
        },
        MutationKind::Min(v) => dk::MutationKind::Min(value_to_denokv(v)),
        MutationKind::Max(v) => dk::MutationKind::Max(value_to_denokv(v)),
        MutationKind::SetSuffixVersionstampedKey(v) => {
            dk::MutationKind::SetSuffixVersionstampedKey(value_to_denokv(v))
        }
        MutationKind::DeleteRange { .. } => {
            return Err(KvError::Unsupported {
                feature: "range deletes",
            });
        }
    })
}

fn write_to_denokv(write: AtomicWrite) -> Result<dk::AtomicWrite, KvError> {
    Ok(dk::AtomicWrite {
        checks: write
            .checks
            .into_iter()
            .map(|check| dk::Check {
                key: check.key,
                versionstamp: check.versionstamp.map(|v| *v.as_bytes()),
            })
            .collect(),
        mutations: write
            .mutations
            .into_iter()
            .map(|m| {
                Ok(dk::Mutation {
                    key: m.key,
                    kind: kind_to_denokv(m.kind)?,
                    expire_at: m.expire_at,
                })
            })
            .collect::<Result<_, KvError>>()?,
        enqueues: write
            .enqueues
            .into_iter()
            .map(|e| dk::Enqueue {
                payload: e.payload,
                // denokv's "deadline" is the time the message becomes due.
                deadline: e.ready_at,
                keys_if_undelivered: e.keys_if_undelivered,
                backoff_schedule: e.backoff_schedule,
            })
            .collect(),
    })
}

impl Engine for Denokv {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_durable(true)
            .with_queues(true)
            .with_queue_inspection(true)
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let read = read.into_inner();
        let ranges = read
            .ranges
            .iter()
            .map(range_to_denokv)
            .collect::<Result<Vec<_>, _>>()?;
        let options = dk::SnapshotReadOptions {
            consistency: match read.consistency {
                Consistency::Strong => dk::Consistency::Strong,
                Consistency::Eventual => dk::Consistency::Eventual,
            },
        };
        let outputs = self
            .db
            .snapshot_read(ranges, options)
            .await
            .map_err(from_denokv)?;
        Ok(outputs
            .into_iter()
            .map(|out| ReadRangeOutput {
                entries: out.entries.into_iter().map(entry_from_denokv).collect(),
            })
            .collect())
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        let outcome = self
            .db
            .atomic_write(write_to_denokv(write.into_inner())?)
            .await
            .map_err(from_denokv)?;
        Ok(match outcome {
            dk::AtomicWriteOutcome::Committed(commit) => Some(CommitResult {
                versionstamp: Versionstamp::from_bytes(commit.versionstamp),
            }),
            dk::AtomicWriteOutcome::CheckFailed { .. } => None,
        })
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        let Some(mut handle) = self.db.dequeue_next_message().await.map_err(from_denokv)? else {
            return Ok(None);
        };
        let payload = handle.take_payload().await.map_err(from_denokv)?;
        Ok(Some(Box::new(Message(handle, payload))))
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || read_queue(&path))
            .await
            .map_err(storage)?
    }

    async fn close(&self) -> Result<(), KvError> {
        // Stops denokv's worker thread and waits for it (it finishes the request in hand).
        self.db.close();
        Ok(())
    }
}

/// A message denokv handed out: denokv's handle to finish it with, and the payload.
struct Message(SqliteMessageHandle, Vec<u8>);

#[async_trait]
impl QueueMessageHandle for Message {
    async fn finish(self: Box<Self>, success: bool) -> Result<(), KvError> {
        self.0.finish(success).await.map_err(from_denokv)
    }

    fn payload(&self) -> &[u8] {
        &self.1
    }
}

/// Every queued message in denokv's tables: waiting ones (`queue`, due at `ts`) and those
/// being delivered (`queue_running`, counted as due now), ordered by due time.
fn read_queue(path: &Path) -> Result<Vec<QueuedMessage>, KvError> {
    let conn = Connection::open(path).map_err(storage)?;
    let now = Utc::now();
    let mut messages = Vec::new();
    for (sql, running) in [
        (
            "select ts, id, data, backoff_schedule, keys_if_undelivered from queue order by ts",
            false,
        ),
        (
            "select deadline, id, data, backoff_schedule, keys_if_undelivered from queue_running",
            true,
        ),
    ] {
        let mut statement = conn.prepare(sql).map_err(storage)?;
        let rows = statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Vec<u8>>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, String>(4)?,
                ))
            })
            .map_err(storage)?;
        for row in rows {
            let (ts, id, payload, backoff, keys) = row.map_err(storage)?;
            let corrupt = |what: &str| KvError::Corrupt {
                message: format!("denokv queue message {id}: {what}"),
            };
            let ready_at = if running {
                now
            } else {
                DateTime::from_timestamp_millis(ts).ok_or_else(|| corrupt("bad ready time"))?
            };
            let backoff_schedule = serde_json::from_str::<Option<Vec<u32>>>(&backoff)
                .map_err(|_| corrupt("bad backoff schedule"))?
                .unwrap_or_default();
            let keys_if_undelivered = serde_json::from_str::<Vec<Vec<u8>>>(&keys)
                .map_err(|_| corrupt("bad keys_if_undelivered"))?;
            messages.push(QueuedMessage {
                id: uuid::Uuid::parse_str(&id).map_err(|_| corrupt("id is not a UUID"))?,
                payload,
                ready_at,
                keys_if_undelivered,
                backoff_schedule,
            });
        }
    }
    messages.sort_by_key(|m| m.ready_at);
    Ok(messages)
}
