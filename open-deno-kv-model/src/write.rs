//! Atomic writes: checks, mutations and enqueues committed all together or not at all.
//!
//! ```
//! use open_deno_kv_model::{key, encode_key, AtomicWrite, Check, KvValue, Mutation};
//! let k = encode_key(&key!["counter"]).unwrap();
//! let write = AtomicWrite {
//!     // Only if the counter does not exist yet...
//!     checks: vec![Check { key: k.clone(), versionstamp: None }],
//!     // ...create it.
//!     mutations: vec![Mutation::set(k, KvValue::U64(0))],
//!     enqueues: vec![],
//! };
//! assert_eq!(write.mutations.len(), 1);
//! ```

use chrono::{DateTime, Utc};

use crate::{KeyRange, KvValue, Versionstamp};

/// Deno's default retry schedule for queue messages, in milliseconds.
pub const DEFAULT_BACKOFF_SCHEDULE: [u32; 5] = [100, 1_000, 5_000, 30_000, 60_000];

/// A precondition: the key's current versionstamp must equal `versionstamp` (`None`: the key must
/// be absent). Expired entries count as absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The encoded key.
    pub key: Vec<u8>,
    /// The expected versionstamp, or `None` for "does not exist".
    pub versionstamp: Option<Versionstamp>,
}

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    /// The encoded key. For [`MutationKind::SetSuffixVersionstampedKey`] this is the key *without*
    /// its last part; the commit's versionstamp is appended as a string part.
    pub key: Vec<u8>,
    /// What to do.
    pub kind: MutationKind,
    /// When the written entry expires (only meaningful for sets). `None` clears an earlier expiry.
    pub expire_at: Option<DateTime<Utc>>,
}

impl Mutation {
    /// A set without expiry.
    pub fn set(key: Vec<u8>, value: KvValue) -> Self {
        Mutation {
            key,
            kind: MutationKind::Set(value),
            expire_at: None,
        }
    }

    /// A delete.
    pub fn delete(key: Vec<u8>) -> Self {
        Mutation {
            key,
            kind: MutationKind::Delete,
            expire_at: None,
        }
    }

    /// Deletes every entry in `range` (`[start, end)` over encoded keys), in one commit and with
    /// no per-entry cost in the request, whatever the range holds. Not part of Deno KV: only a
    /// backend whose [`crate::Capabilities::range_delete`] is on accepts it.
    ///
    /// ```
    /// use open_deno_kv_model::{key, KeyRange, Mutation};
    /// let clear_users = Mutation::delete_range(KeyRange::prefix(&key!["users"]).unwrap());
    /// assert_eq!(clear_users.range().map(|r| r.end.last().copied()), Some(Some(0xff)));
    /// ```
    pub fn delete_range(range: KeyRange) -> Self {
        Mutation {
            key: range.start,
            kind: MutationKind::DeleteRange { end: range.end },
            expire_at: None,
        }
    }

    /// The range a [`MutationKind::DeleteRange`] deletes (`None` for every other kind).
    pub fn range(&self) -> Option<KeyRange> {
        match &self.kind {
            MutationKind::DeleteRange { end } => Some(KeyRange::new(self.key.clone(), end.clone())),
            _ => None,
        }
    }

    /// A plain sum (no bounds): wrapping for u64, exact for V8 numbers and bigints.
    pub fn sum(key: Vec<u8>, operand: KvValue) -> Self {
        Mutation {
            key,
            kind: MutationKind::Sum {
                value: operand,
                min_v8: Vec::new(),
                max_v8: Vec::new(),
                clamp: false,
            },
            expire_at: None,
        }
    }

    /// The value this mutation carries (`None` for a delete).
    pub fn value(&self) -> Option<&KvValue> {
        match &self.kind {
            MutationKind::Set(v)
            | MutationKind::Sum { value: v, .. }
            | MutationKind::Min(v)
            | MutationKind::Max(v)
            | MutationKind::SetSuffixVersionstampedKey(v) => Some(v),
            MutationKind::Delete | MutationKind::DeleteRange { .. } => None,
        }
    }
}

/// The kinds of change an atomic write can make. They apply in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MutationKind {
    /// Store the value (replacing any other).
    Set(KvValue),
    /// Remove the key (no error if absent).
    Delete,
    /// Remove every entry from the mutation's key (the range's inclusive start, which need not be
    /// a valid key) up to `end` (exclusive). An extension of this project, not of Deno KV; see
    /// [`Mutation::delete_range`].
    DeleteRange {
        /// The exclusive end of the range.
        end: Vec<u8>,
    },
    /// Add the operand to the stored value. u64 + u64 wraps modulo 2^64. A V8 number or bigint
    /// adds exactly, then `min_v8` / `max_v8` (V8-serialized bounds of the operand's type; empty
    /// means unbounded) either clamp the result (`clamp`) or make an out-of-range result an
    /// error. A missing key takes the operand as it is.
    Sum {
        /// The operand.
        value: KvValue,
        /// V8 bytes of the lower bound, or empty.
        min_v8: Vec<u8>,
        /// V8 bytes of the upper bound, or empty.
        max_v8: Vec<u8>,
        /// Clamp out-of-range results to the bounds instead of failing.
        clamp: bool,
    },
    /// Keep the smaller of the stored u64 and the operand (a missing key takes the operand).
    Min(KvValue),
    /// Keep the larger of the stored u64 and the operand (a missing key takes the operand).
    Max(KvValue),
    /// Set the value at the mutation's key extended by one string part: the commit's versionstamp
    /// as 20 hex digits. (JavaScript: a key ending in `kv.commitVersionstamp()`.)
    SetSuffixVersionstampedKey(KvValue),
}

impl MutationKind {
    /// Deno's name for the operation, as it appears in error texts (`set`, `delete`, `sum`,
    /// `min`, `max`; `deleteRange` for this project's range delete).
    pub fn name(&self) -> &'static str {
        match self {
            MutationKind::Set(_) | MutationKind::SetSuffixVersionstampedKey(_) => "set",
            MutationKind::Delete => "delete",
            MutationKind::DeleteRange { .. } => "deleteRange",
            MutationKind::Sum { .. } => "sum",
            MutationKind::Min(_) => "min",
            MutationKind::Max(_) => "max",
        }
    }
}

/// A queue message sent as part of an atomic write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueue {
    /// The message: V8-serialized bytes.
    pub payload: Vec<u8>,
    /// The earliest time the message may be delivered (now + delay).
    pub ready_at: DateTime<Utc>,
    /// Encoded keys to write the payload to if every delivery attempt fails.
    pub keys_if_undelivered: Vec<Vec<u8>>,
    /// Milliseconds to wait before each retry; `None` means [`DEFAULT_BACKOFF_SCHEDULE`], an empty
    /// list means "never retry".
    pub backoff_schedule: Option<Vec<u32>>,
}

/// Everything one commit does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AtomicWrite {
    /// Preconditions; if any fails, nothing is applied.
    pub checks: Vec<Check>,
    /// Changes, applied in order.
    pub mutations: Vec<Mutation>,
    /// Messages to enqueue in the same commit.
    pub enqueues: Vec<Enqueue>,
}

/// The result of a successful commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitResult {
    /// The versionstamp every key written by the commit now carries.
    pub versionstamp: Versionstamp,
}
