//! What can be measured: the workloads, the targets (backends and raw floors), durability, and
//! how many operations each workload does at a given `--scale`.

use std::fmt;

use open_deno_kv_model::Consistency;

/// One benchmark workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// Sequential single-key sets from one task.
    W1,
    /// The same sets spread over 64 concurrent tasks.
    W2,
    /// Random point gets over preloaded keys, one task on a multi-thread runtime.
    W3,
    /// W3 on a current-thread runtime (one core): the open-deno-kv-memory target. Run for memory only.
    W3Core,
    /// Scans of 100 consecutive entries.
    W4,
    /// Check-and-set increments of one counter from 8 tasks.
    W5,
    /// u64 sums over 16 hot keys from 16 tasks.
    W6,
    /// Enqueue messages, then consume them all.
    W7,
}

impl Workload {
    /// The workloads a user selects with `--workloads` (W3-1core comes with W3 on memory).
    pub const SELECTABLE: [Workload; 7] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
        Workload::W6,
        Workload::W7,
    ];

    /// The short name used on the command line, in tables and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W3Core => "W3-1core",
            Workload::W4 => "W4",
            Workload::W5 => "W5",
            Workload::W6 => "W6",
            Workload::W7 => "W7",
        }
    }

    /// A few words on what the workload does.
    pub fn describe(self, counts: &Counts) -> String {
        match self {
            Workload::W1 => format!("{} sequential sets", counts.w1_sets),
            Workload::W2 => format!("{} sets, {} tasks", counts.w1_sets, counts.w2_tasks()),
            Workload::W3 => format!("{} random gets / {} keys", counts.w3_gets, counts.keys),
            Workload::W3Core => format!("W3 on a current-thread runtime ({} gets)", counts.w3_gets),
            Workload::W4 => format!(
                "{} scans of {} / {} keys",
                counts.w4_scans,
                counts.scan_len(),
                counts.keys
            ),
            Workload::W5 => format!(
                "{} tasks x {} check-and-set increments",
                counts.w5_tasks, counts.w5_per_task
            ),
            Workload::W6 => format!(
                "{} u64 sums, {} hot keys, {} tasks",
                counts.w6_sums,
                counts.w6_keys,
                counts.w6_tasks()
            ),
            Workload::W7 => format!("{} messages enqueued, then consumed", counts.w7_messages),
        }
    }

    /// Parses `W1`..`W7` (any case) or `W3-1core`.
    pub fn parse(text: &str) -> Option<Self> {
        let lower = text.trim().to_ascii_lowercase();
        Some(match lower.as_str() {
            "w1" => Workload::W1,
            "w2" => Workload::W2,
            "w3" => Workload::W3,
            "w3-1core" => Workload::W3Core,
            "w4" => Workload::W4,
            "w5" => Workload::W5,
            "w6" => Workload::W6,
            "w7" => Workload::W7,
            _ => return None,
        })
    }

    /// Whether raw floors run it (sets, gets and scans).
    pub fn has_floor(self) -> bool {
        matches!(self, Workload::W1 | Workload::W3 | Workload::W4)
    }

    /// Whether it reads a preloaded data set.
    pub fn reads_preloaded(self) -> bool {
        matches!(self, Workload::W3 | Workload::W3Core | Workload::W4)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a workload runs against: a backend through the `Backend` trait, or a raw floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// open-deno-kv-memory.
    Memory,
    /// open-deno-kv-sqlite.
    Sqlite,
    /// Raw rusqlite: the floor for open-deno-kv-sqlite.
    RawSqlite,
    /// open-deno-kv-redb.
    Redb,
    /// Raw redb: the floor for open-deno-kv-redb.
    RawRedb,
    /// open-deno-kv-postgres, every read on the primary.
    Postgres,
    /// open-deno-kv-postgres with a streaming replica, reads asking for eventual consistency (served by
    /// the replica): W3 and W4 only.
    PostgresReplica,
    /// The anchor: denokv_sqlite 0.14, the SQLite engine inside Deno and the denokv server, at
    /// its default durability. It runs in its own binary, `open-deno-kv-bench-anchor` (see
    /// `open-deno-kv-bench/anchor`).
    Denokv,
}

impl Target {
    /// The backends that run when `--backends` is not given (those that need no server; the
    /// anchor when its binary is found).
    pub const BACKENDS: [Target; 4] =
        [Target::Memory, Target::Sqlite, Target::Redb, Target::Denokv];

    /// Every backend a user can select with `--backends`.
    pub const SELECTABLE: [Target; 6] = [
        Target::Memory,
        Target::Sqlite,
        Target::Redb,
        Target::Postgres,
        Target::PostgresReplica,
        Target::Denokv,
    ];

    /// The name used on the command line, in tables and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Target::Memory => "memory",
            Target::Sqlite => "sqlite",
            Target::RawSqlite => "raw-sqlite",
            Target::Redb => "redb",
            Target::RawRedb => "raw-redb",
            Target::Postgres => "postgres",
            Target::PostgresReplica => "postgres-replica",
            Target::Denokv => "denokv",
        }
    }

    /// Parses a target name.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "memory" | "open-deno-kv-memory" => Target::Memory,
            "sqlite" | "open-deno-kv-sqlite" => Target::Sqlite,
            "raw-sqlite" => Target::RawSqlite,
            "redb" | "open-deno-kv-redb" => Target::Redb,
            "raw-redb" => Target::RawRedb,
            "postgres" | "open-deno-kv-postgres" => Target::Postgres,
            "postgres-replica" => Target::PostgresReplica,
            "denokv" | "denokv_sqlite" | "anchor" => Target::Denokv,
            _ => return None,
        })
    }

    /// The raw floor a backend is compared with.
    pub fn floor(self) -> Option<Target> {
        match self {
            Target::Sqlite => Some(Target::RawSqlite),
            Target::Redb => Some(Target::RawRedb),
            _ => None,
        }
    }

    /// Whether this is a raw floor rather than a backend.
    pub fn is_raw(self) -> bool {
        matches!(self, Target::RawSqlite | Target::RawRedb)
    }

    /// Whether this target runs `workload`.
    pub fn runs(self, workload: Workload) -> bool {
        match self {
            Target::RawSqlite | Target::RawRedb => workload.has_floor(),
            Target::Memory => true,
            Target::Sqlite | Target::Redb | Target::Postgres | Target::Denokv => {
                workload != Workload::W3Core
            }
            Target::PostgresReplica => matches!(workload, Workload::W3 | Workload::W4),
        }
    }

    /// Whether this target needs a PostgreSQL server.
    pub fn needs_postgres(self) -> bool {
        matches!(self, Target::Postgres | Target::PostgresReplica)
    }

    /// The consistency the read workloads (W3, W4) ask for on this target.
    pub fn read_consistency(self) -> Consistency {
        if self == Target::PostgresReplica {
            Consistency::Eventual
        } else {
            Consistency::Strong
        }
    }

    /// Whether the read data set is preloaded at process durability and then reopened at the
    /// durability under test (the file engines); the others keep the handle that preloaded it.
    pub fn reopens_after_preload(self) -> bool {
        matches!(self, Target::Sqlite | Target::Redb | Target::Denokv)
    }

    /// Whether this target runs in the anchor's binary (`open-deno-kv-bench-anchor`), not in open-deno-kv-bench's.
    pub fn in_anchor(self) -> bool {
        self == Target::Denokv
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the benchmark drives a store: which thread polls its futures. The same store can be
/// fast driven one way and slow another (a blocking engine that leads a commit on the polling
/// thread stalls every future that thread polls), so each run names its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Tasks spawned on a multi-thread runtime's workers, as a server's request handlers run.
    Multi,
    /// Tasks on a current-thread runtime, as in a Deno isolate, a `flavor = "current_thread"`
    /// program or a small server.
    Current,
    /// Futures joined on the thread that calls a multi-thread runtime's `block_on`, as
    /// `#[tokio::main] async fn main` joining 64 writes does: no task is spawned.
    Joined,
}

impl Mode {
    /// Every mode, in report order.
    pub const ALL: [Mode; 3] = [Mode::Multi, Mode::Current, Mode::Joined];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Multi => "multi",
            Mode::Current => "current",
            Mode::Joined => "joined",
        }
    }

    /// Parses `multi`, `current` or `joined`.
    pub fn parse(text: &str) -> Option<Self> {
        Mode::ALL
            .into_iter()
            .find(|mode| mode.name() == text.trim().to_ascii_lowercase())
    }

    /// What the mode means, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Multi => "tasks spawned on a multi-thread runtime's workers",
            Mode::Current => "tasks on a current-thread runtime",
            Mode::Joined => "futures joined on a multi-thread runtime's block_on thread",
        }
    }
}

/// How hard writes are pushed to disk, mapped onto each engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Survives a machine crash: open-deno-kv-sqlite `Full` and raw SQLite `synchronous=FULL`; open-deno-kv-redb
    /// `Immediate` and raw redb `Durability::Immediate`.
    Full,
    /// Survives a process crash: open-deno-kv-sqlite `Process` and raw SQLite `synchronous=NORMAL`;
    /// open-deno-kv-redb `Deferred` and raw redb `Durability::None`.
    Process,
}

impl Durability {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Full => "full",
            Durability::Process => "process",
        }
    }

    /// Parses `full` or `process`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "full" => Some(Durability::Full),
            "process" => Some(Durability::Process),
            _ => None,
        }
    }

    /// What each engine is set to, for the report.
    pub fn mapping(self) -> &'static str {
        match self {
            Durability::Full => {
                "open-deno-kv-sqlite Full / raw SQLite WAL + synchronous=FULL; open-deno-kv-redb Immediate / raw redb Immediate; open-deno-kv-postgres's own cluster fsync=on; denokv_sqlite its defaults (WAL, synchronous=FULL)"
            }
            Durability::Process => {
                "open-deno-kv-sqlite Process / raw SQLite WAL + synchronous=NORMAL; open-deno-kv-redb Deferred / raw redb Durability::None; open-deno-kv-postgres's own cluster fsync=off; denokv_sqlite still its defaults (WAL, synchronous=FULL: it has no other setting)"
            }
        }
    }
}

/// Size of every value written: a 100-byte `Bytes` value.
pub const VALUE_SIZE: usize = 100;

/// Parses a `--scale` value: a positive, finite number.
pub fn parse_scale(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| format!("--scale: not a positive number: {text}"))
}

/// How many operations each workload does, at a scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Counts {
    /// W1 and W2: sets.
    pub w1_sets: usize,
    /// W3: gets.
    pub w3_gets: usize,
    /// W3 and W4: preloaded keys.
    pub keys: usize,
    /// W4: scans.
    pub w4_scans: usize,
    /// W5: tasks.
    pub w5_tasks: usize,
    /// W5: increments per task.
    pub w5_per_task: usize,
    /// W6: sums in all.
    pub w6_sums: usize,
    /// W6: hot keys.
    pub w6_keys: usize,
    /// W7: messages.
    pub w7_messages: usize,
}

/// `base * scale`, rounded, at least 1.
pub fn scaled(base: usize, scale: f64) -> usize {
    let n = (base as f64 * scale).round();
    if n.is_finite() && n >= 1.0 {
        n as usize
    } else {
        1
    }
}

impl Counts {
    /// The counts at `scale` (1.0 = the published workloads); `keys` overrides the preloaded
    /// data set size (dataset scaling runs).
    pub fn new(scale: f64, keys: Option<usize>) -> Self {
        Counts {
            w1_sets: scaled(20_000, scale),
            w3_gets: scaled(100_000, scale),
            keys: keys.unwrap_or_else(|| scaled(100_000, scale)),
            w4_scans: scaled(2_000, scale),
            w5_tasks: 8,
            w5_per_task: scaled(500, scale),
            w6_sums: scaled(20_000, scale),
            w6_keys: 16,
            w7_messages: scaled(5_000, scale),
        }
    }

    /// W2's concurrent tasks: 64, or fewer if there are fewer sets.
    pub fn w2_tasks(&self) -> usize {
        self.w1_sets.min(64)
    }

    /// W4's entries per scan: 100, or the whole data set if smaller.
    pub fn scan_len(&self) -> usize {
        self.keys.min(100)
    }

    /// W6's tasks: 16, or fewer if there are fewer sums.
    pub fn w6_tasks(&self) -> usize {
        self.w6_sums.min(16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for w in Workload::SELECTABLE
            .iter()
            .copied()
            .chain([Workload::W3Core])
        {
            assert_eq!(Workload::parse(w.name()), Some(w));
        }
        for t in [
            Target::Memory,
            Target::Sqlite,
            Target::RawSqlite,
            Target::Redb,
            Target::RawRedb,
            Target::Postgres,
            Target::PostgresReplica,
            Target::Denokv,
        ] {
            assert_eq!(Target::parse(t.name()), Some(t));
        }
        assert_eq!(Workload::parse("w9"), None);
        assert_eq!(Durability::parse("FULL"), Some(Durability::Full));
    }

    #[test]
    fn scaling_never_reaches_zero() {
        let tiny = Counts::new(0.000_001, None);
        assert_eq!(tiny.w1_sets, 1);
        assert_eq!(tiny.w2_tasks(), 1);
        assert_eq!(tiny.scan_len(), 1);
        let full = Counts::new(1.0, None);
        assert_eq!(full.w1_sets, 20_000);
        assert_eq!(full.keys, 100_000);
        assert_eq!(full.w5_tasks * full.w5_per_task, 4_000);
        assert_eq!(Counts::new(0.5, Some(10)).keys, 10);
    }
}
