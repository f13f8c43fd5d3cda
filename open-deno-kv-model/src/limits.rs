//! Deno's request limits, their error texts, and the one validation entry point per request kind.
//!
//! Every request passes here before it reaches storage: the engine layer ([`crate::Checked`])
//! calls [`Limits::accept_snapshot_read`], [`Limits::accept_atomic_write`] and
//! [`Limits::accept_watch`], which hand back the request as a [`crate::Validated`] value — the
//! only form an engine accepts — so the same request is refused with the same text whatever
//! engine serves it. A relay that only needs the verdict (a server checking its own limits before
//! passing a request on) calls the `validate_*` methods, which run the same checks by reference.
//! The checks run in the order Deno's CLI runs them, so when a request breaks several limits the
//! error is the one Deno would report.
//!
//! ```
//! use open_deno_kv_model::{encode_key, key, AtomicWrite, KvValue, Limits, Mutation};
//! let limits = Limits::deno();
//! let big = Mutation::set(encode_key(&key!["k"]).unwrap(), KvValue::Bytes(vec![0; 65_537].into()));
//! let write = AtomicWrite { mutations: vec![big], ..Default::default() };
//! let err = limits.validate_atomic_write(&write, chrono::Utc::now()).unwrap_err();
//! assert_eq!(err.to_string(), "Value too large (max 65536 bytes)");
//! ```

use chrono::{DateTime, TimeDelta, Utc};
use thiserror::Error;

use crate::{
    AtomicWrite, Enqueue, KeyError, KeyRange, KvError, MutationKind, SnapshotRead, Validated,
    ValidatedRange, ValidatedRead, ValidatedWatch, ValidatedWrite, decode_key,
};

/// Which limit a request broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// Size of one encoded key in a check, mutation or undelivered-key list.
    KeySizeWrite,
    /// Size of one range bound or watched key in a read.
    KeySizeRead,
    /// Size of one stored value.
    ValueSize,
    /// Size of one enqueued payload.
    EnqueuePayloadSize,
    /// Number of ranges in one snapshot read.
    ReadRanges,
    /// Sum of the range limits in one snapshot read.
    ReadEntries,
    /// Number of checks in one atomic write.
    Checks,
    /// Number of mutations plus enqueues in one atomic write.
    Mutations,
    /// Total bytes of one atomic write (see [`Limits::max_total_mutation_size_bytes`]).
    TotalMutationSize,
    /// Total bytes of the keys that receive values in one atomic write.
    TotalKeySize,
    /// Number of keys in one watch.
    WatchKeys,
}

/// A request broke a limit. `to_string()` is Deno's text, e.g.
/// "Key too large for write (max 2048 bytes)".
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}", limit_text(*.kind, *.max))]
pub struct LimitError {
    /// The limit broken.
    pub kind: LimitKind,
    /// Its configured maximum.
    pub max: usize,
    /// What the request had.
    pub actual: usize,
    /// The encoded key involved, for per-key limits.
    pub key: Option<Vec<u8>>,
}

fn limit_text(kind: LimitKind, max: usize) -> String {
    match kind {
        LimitKind::KeySizeWrite => format!("Key too large for write (max {max} bytes)"),
        LimitKind::KeySizeRead => format!("Key too large for read (max {max} bytes)"),
        LimitKind::ValueSize => format!("Value too large (max {max} bytes)"),
        LimitKind::EnqueuePayloadSize => format!("enqueue payload too large (max {max} bytes)"),
        LimitKind::ReadRanges => format!("Too many ranges (max {max})"),
        LimitKind::ReadEntries => format!("Too many entries (max {max})"),
        LimitKind::Checks => format!("Too many checks (max {max})"),
        LimitKind::Mutations => format!("Too many mutations (max {max})"),
        LimitKind::TotalMutationSize => format!("Total mutation size too large (max {max} bytes)"),
        LimitKind::TotalKeySize => format!("Total key size too large (max {max} bytes)"),
        LimitKind::WatchKeys => format!("Too many keys (max {max})"),
    }
}

/// The limits a backend enforces. [`Limits::deno`] (also `Default`) gives the Deno CLI's values;
/// a server may lower or raise them (the denokv server allows 10 checks, for example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest encoded key in a write: 2048.
    pub max_write_key_size_bytes: usize,
    /// Largest encoded range bound or watched key in a read: 2049 (a write-sized key plus the
    /// `00` or `FF` that turns it into a range bound).
    pub max_read_key_size_bytes: usize,
    /// Largest value: 65536.
    pub max_value_size_bytes: usize,
    /// Largest enqueued payload: 65536.
    pub max_enqueue_payload_size_bytes: usize,
    /// Most ranges in one snapshot read: 10.
    pub max_read_ranges: usize,
    /// Most entries (sum of range limits) in one snapshot read: 1000.
    pub max_read_entries: usize,
    /// Most checks in one atomic write: 100.
    pub max_checks: usize,
    /// Most mutations plus enqueues in one atomic write: 1000.
    pub max_mutations: usize,
    /// Most bytes in one atomic write: 819200. Counted as every check key, every mutation key,
    /// then again key + value for each mutation carrying a value (a u64 counts 8), plus each
    /// enqueue payload and 4 bytes per backoff interval.
    pub max_total_mutation_size_bytes: usize,
    /// Most bytes of keys receiving a value in one atomic write: 81920.
    pub max_total_key_size_bytes: usize,
    /// Most keys in one watch: 10.
    pub max_watched_keys: usize,
    /// Longest queue delay: 30 days.
    pub max_queue_delay: TimeDelta,
    /// Most backoff intervals per message: 5.
    pub max_backoff_intervals: usize,
    /// Longest single backoff interval: one hour (3 600 000 ms).
    pub max_backoff_interval_ms: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self::deno()
    }
}

impl Limits {
    /// The limits of Deno 2.9's CLI (`Deno.openKv(path)`).
    pub fn deno() -> Self {
        Limits {
            max_write_key_size_bytes: 2048,
            max_read_key_size_bytes: 2049,
            max_value_size_bytes: 65_536,
            max_enqueue_payload_size_bytes: 65_536,
            max_read_ranges: 10,
            max_read_entries: 1000,
            max_checks: 100,
            max_mutations: 1000,
            max_total_mutation_size_bytes: 819_200,
            max_total_key_size_bytes: 81_920,
            max_watched_keys: 10,
            max_queue_delay: TimeDelta::days(30),
            max_backoff_intervals: 5,
            max_backoff_interval_ms: 3_600_000,
        }
    }

    /// Validates `write` at `now` (see [`Limits::validate_atomic_write`]) and hands it back as the
    /// proof an engine's write path requires.
    pub fn accept_atomic_write(
        &self,
        write: AtomicWrite,
        now: DateTime<Utc>,
    ) -> Result<ValidatedWrite, KvError> {
        self.validate_atomic_write(&write, now)?;
        Ok(Validated::vouched(write))
    }

    /// Validates `read` (see [`Limits::validate_snapshot_read`]) and hands it back as the proof
    /// an engine's read requires.
    pub fn accept_snapshot_read(&self, read: SnapshotRead) -> Result<ValidatedRead, KvError> {
        self.validate_snapshot_read(&read)?;
        Ok(Validated::vouched(read))
    }

    /// Validates watched `keys` (see [`Limits::validate_watch`]) and hands them back as the proof
    /// an engine's watch requires.
    pub fn accept_watch(&self, keys: Vec<Vec<u8>>) -> Result<ValidatedWatch, KvError> {
        self.validate_watch(&keys)?;
        Ok(Validated::vouched(keys))
    }

    /// Validates the bounds of a range counted or watched as a whole (see
    /// [`crate::Backend::count_range`]): each is sized like a read's range bound. An empty or
    /// inverted range is valid and holds nothing.
    pub fn accept_range(&self, range: KeyRange) -> Result<ValidatedRange, KvError> {
        self.check_read_key(&range.start)?;
        self.check_read_key(&range.end)?;
        Ok(Validated::vouched(range))
    }

    /// Validates a snapshot read: range count, each range's limit and bound sizes, then the total
    /// of the limits.
    pub fn validate_snapshot_read(&self, read: &SnapshotRead) -> Result<(), KvError> {
        at_most(
            LimitKind::ReadRanges,
            read.ranges.len(),
            self.max_read_ranges,
            None,
        )?;
        let mut total_entries = 0usize;
        for range in &read.ranges {
            self.check_read_key(&range.start)?;
            self.check_read_key(&range.end)?;
            if range.limit == 0 {
                return Err(KvError::invalid_argument("limit must be greater than 0"));
            }
            total_entries = total_entries.saturating_add(range.limit as usize);
        }
        at_most(
            LimitKind::ReadEntries,
            total_entries,
            self.max_read_entries,
            None,
        )
    }

    /// Validates a watch request: key count, then each key's size and form.
    pub fn validate_watch(&self, keys: &[Vec<u8>]) -> Result<(), KvError> {
        at_most(
            LimitKind::WatchKeys,
            keys.len(),
            self.max_watched_keys,
            None,
        )?;
        for key in keys {
            self.check_read_key(key)?;
            check_key_form(key)?;
        }
        Ok(())
    }

    /// Validates an atomic write against every limit, in Deno's order: counts first, then every
    /// key (checks, then mutations), then values, enqueues, and the two totals. Keys must also be
    /// well-formed, non-empty encoded keys.
    ///
    /// `now` is the backend's current time, used to bound queue delays.
    pub fn validate_atomic_write(
        &self,
        write: &AtomicWrite,
        now: DateTime<Utc>,
    ) -> Result<(), KvError> {
        // Deno checks delays and backoff schedules in JavaScript, before anything else.
        for enqueue in &write.enqueues {
            self.check_enqueue_timing(enqueue, now)?;
        }
        at_most(LimitKind::Checks, write.checks.len(), self.max_checks, None)?;
        let operations = write.mutations.len() + write.enqueues.len();
        at_most(LimitKind::Mutations, operations, self.max_mutations, None)?;

        let mut total_size = 0usize;
        let mut total_key_size = 0usize;
        for check in &write.checks {
            total_size += self.check_write_key(&check.key)?;
        }
        for mutation in &write.mutations {
            total_size += match &mutation.kind {
                // A range's bounds are read bounds (`prefix + 00`), not keys: sized as a read's.
                MutationKind::DeleteRange { end } => {
                    self.check_read_key(&mutation.key)?;
                    self.check_read_key(end)?;
                    mutation.key.len() + end.len()
                }
                _ => self.check_write_key(&mutation.key)?,
            };
        }
        for mutation in &write.mutations {
            if let Some(value) = mutation.value() {
                let key_len = mutation.key.len();
                let value_len = value.encoded_len();
                at_most(
                    LimitKind::ValueSize,
                    value_len,
                    self.max_value_size_bytes,
                    Some(&mutation.key),
                )?;
                total_size += key_len + value_len;
                total_key_size += key_len;
            }
        }
        for enqueue in &write.enqueues {
            total_size += self.check_enqueue_size(enqueue)?;
        }
        at_most(
            LimitKind::TotalMutationSize,
            total_size,
            self.max_total_mutation_size_bytes,
            None,
        )?;
        at_most(
            LimitKind::TotalKeySize,
            total_key_size,
            self.max_total_key_size_bytes,
            None,
        )
    }

    /// Checks one key of a write; returns its size for the totals.
    fn check_write_key(&self, key: &[u8]) -> Result<usize, KvError> {
        if key.is_empty() {
            return Err(KvError::InvalidKey {
                reason: KeyError::Empty,
                key: None,
            });
        }
        at_most(
            LimitKind::KeySizeWrite,
            key.len(),
            self.max_write_key_size_bytes,
            Some(key),
        )?;
        check_key_form(key)?;
        Ok(key.len())
    }

    fn check_read_key(&self, key: &[u8]) -> Result<(), KvError> {
        at_most(
            LimitKind::KeySizeRead,
            key.len(),
            self.max_read_key_size_bytes,
            Some(key),
        )
    }

    /// Checks an enqueue's delay and backoff schedule.
    fn check_enqueue_timing(&self, enqueue: &Enqueue, now: DateTime<Utc>) -> Result<(), KvError> {
        let delay = enqueue.ready_at - now;
        if delay > self.max_queue_delay {
            return Err(KvError::invalid_argument(format!(
                "Delay cannot be greater than 30 days: received {}",
                delay.num_milliseconds()
            )));
        }
        let schedule = enqueue.backoff_schedule.as_deref().unwrap_or_default();
        if schedule.len() > self.max_backoff_intervals {
            return Err(KvError::invalid_argument(format!(
                "Invalid backoffSchedule, max {} intervals allowed",
                self.max_backoff_intervals
            )));
        }
        if let Some(index) = schedule
            .iter()
            .position(|&ms| ms > self.max_backoff_interval_ms)
        {
            return Err(KvError::invalid_argument(format!(
                "Invalid backoffSchedule, interval at index {index} is invalid"
            )));
        }
        Ok(())
    }

    /// Checks an enqueue's payload and undelivered keys; returns what it adds to the total
    /// mutation size (the payload, and 4 bytes per backoff interval).
    fn check_enqueue_size(&self, enqueue: &Enqueue) -> Result<usize, KvError> {
        let payload = enqueue.payload.len();
        at_most(
            LimitKind::EnqueuePayloadSize,
            payload,
            self.max_enqueue_payload_size_bytes,
            None,
        )?;
        // Deno neither limits nor counts these keys; refusing a key that could never be written
        // here beats failing when the message is dead-lettered days later.
        for key in &enqueue.keys_if_undelivered {
            self.check_write_key(key)?;
        }
        let intervals = enqueue.backoff_schedule.as_ref().map_or(0, Vec::len);
        Ok(payload + 4 * intervals)
    }
}

/// The key must decode (strictly) and be non-empty. Deno's client always sends such keys; a
/// network client may not, and a malformed key written to storage would break every later list.
fn check_key_form(key: &[u8]) -> Result<(), KvError> {
    if key.is_empty() {
        return Err(KvError::InvalidKey {
            reason: KeyError::Empty,
            key: None,
        });
    }
    decode_key(key)
        .map(|_| ())
        .map_err(|reason| KvError::invalid_key(reason, key))
}

fn at_most(kind: LimitKind, actual: usize, max: usize, key: Option<&[u8]>) -> Result<(), KvError> {
    if actual > max {
        return Err(LimitError {
            kind,
            max,
            actual,
            key: key.map(<[u8]>::to_vec),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
