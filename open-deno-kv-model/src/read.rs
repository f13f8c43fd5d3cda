//! Read requests and their results.
//!
//! A backend serves reads as byte ranges over encoded keys: `get(k)` is the range
//! `[enc(k), enc(k)+00)`, a prefix list is `[enc(p)+00, enc(p)+FF)`. A [`SnapshotRead`] holds up
//! to ten ranges that must all be answered from one consistent snapshot.
//!
//! ```
//! use open_deno_kv_model::{key, ReadRange};
//! let get = ReadRange::single_key(&key!["users", 1]).unwrap();
//! assert_eq!(get.limit, 1);
//! let list = ReadRange::prefix(&key!["users"], 100).unwrap();
//! assert!(list.start < list.end);
//! ```

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::{Key, KeyError, KvValue, StoredEntry, Versionstamp, encode_key};

/// One key range to read, `[start, end)` over encoded keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRange {
    /// Inclusive lower bound (encoded key bytes, not necessarily a valid key).
    pub start: Vec<u8>,
    /// Exclusive upper bound.
    pub end: Vec<u8>,
    /// The most entries to return (at least 1; validation enforces the upper bound).
    pub limit: u32,
    /// Return the entries from the end of the range backwards.
    pub reverse: bool,
}

impl ReadRange {
    /// The range holding exactly one key: `[enc(k), enc(k)+00)`.
    pub fn single_key(key: &Key) -> Result<Self, KeyError> {
        let start = encode_key(key)?;
        Ok(Self::single_encoded_key(start))
    }

    /// The range holding exactly one already-encoded key.
    pub fn single_encoded_key(start: Vec<u8>) -> Self {
        let mut end = start.clone();
        end.push(0);
        ReadRange {
            start,
            end,
            limit: 1,
            reverse: false,
        }
    }

    /// The one key this range can hold, if it is a point read: `[k, k+00)` holds exactly `k`,
    /// because no byte string sorts strictly between `k` and `k` followed by a zero byte.
    ///
    /// Engines use it to answer a `get` with an equality lookup instead of a range scan.
    ///
    /// ```
    /// use open_deno_kv_model::{encode_key, key, ReadRange};
    /// let get = ReadRange::single_key(&key!["a"]).unwrap();
    /// assert_eq!(get.point_key(), Some(encode_key(&key!["a"]).unwrap().as_slice()));
    /// assert_eq!(ReadRange::prefix(&key!["a"], 1).unwrap().point_key(), None);
    /// ```
    pub fn point_key(&self) -> Option<&[u8]> {
        let (last, head) = self.end.split_last()?;
        (*last == 0 && head == self.start.as_slice()).then_some(self.start.as_slice())
    }

    /// Every key strictly under `prefix` (the prefix itself excluded): `[enc(p)+00, enc(p)+FF)`.
    pub fn prefix(prefix: &Key, limit: u32) -> Result<Self, KeyError> {
        let encoded = encode_key(prefix)?;
        let mut start = encoded.clone();
        start.push(0x00);
        let mut end = encoded;
        end.push(0xff);
        Ok(ReadRange {
            start,
            end,
            limit,
            reverse: false,
        })
    }
}

/// How fresh a read must be. Every backend in this workspace is strongly consistent and treats
/// both alike; a replicated backend may serve `Eventual` reads from a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consistency {
    /// See every commit acknowledged before the read started.
    #[default]
    Strong,
    /// May lag behind recent commits.
    Eventual,
}

/// Several ranges read from one consistent snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotRead {
    /// The ranges, answered in this order.
    pub ranges: Vec<ReadRange>,
    /// Required freshness.
    pub consistency: Consistency,
}

impl SnapshotRead {
    /// The most entries the read can return: the sum of its ranges' limits (what bounds its
    /// work, for [`crate::run_read`]).
    pub fn max_entries(&self) -> usize {
        self.ranges.iter().map(|range| range.limit as usize).sum()
    }
}

/// A stored entry as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// The encoded key, a reference-counted slice like the value's bytes (see [`KvValue`]).
    pub key: Bytes,
    /// The value.
    pub value: KvValue,
    /// The versionstamp of the commit that last wrote this key.
    pub versionstamp: Versionstamp,
    /// When the entry expires, if it was written with an expiry. Deno's JavaScript API does not
    /// show it; tools that copy a store (dump, migrate) need it to copy the entry faithfully.
    pub expires_at: Option<DateTime<Utc>>,
}

impl KvEntry {
    /// The entry a read returns for a stored row.
    pub fn from_stored(key: impl Into<Bytes>, stored: StoredEntry) -> Self {
        KvEntry {
            key: key.into(),
            value: stored.value,
            versionstamp: stored.versionstamp,
            expires_at: stored.expires_at,
        }
    }

    /// The key and the stored form of this entry (what an engine writes for it, as a restore
    /// does): the inverse of [`KvEntry::from_stored`].
    pub fn into_stored(self) -> (Vec<u8>, StoredEntry) {
        let stored = StoredEntry {
            value: self.value,
            versionstamp: self.versionstamp,
            expires_at: self.expires_at,
        };
        (self.key.into(), stored)
    }
}

/// The entries found in one [`ReadRange`], in the requested direction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadRangeOutput {
    /// Entries in key order (descending if the range was `reverse`), at most `limit` of them.
    pub entries: Vec<KvEntry>,
}

/// What one watched key reports in a watch emission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchKeyOutput {
    /// The key's state differs from the previous emission: its current entry, or `None` if it is
    /// absent (deleted or expired).
    Changed(Option<KvEntry>),
    /// The key did not change since the previous emission.
    Unchanged,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::ReadRange;

    proptest! {
        /// `point_key` names a key exactly when the range can hold no other: `[s, s+00)`.
        #[test]
        fn point_key_only_for_single_key_ranges(start: Vec<u8>, end: Vec<u8>) {
            let point = ReadRange::single_encoded_key(start.clone());
            prop_assert_eq!(point.point_key(), Some(start.as_slice()));

            let range = ReadRange { start: start.clone(), end: end.clone(), limit: 1, reverse: false };
            let mut successor = start.clone();
            successor.push(0);
            prop_assert_eq!(range.point_key().is_some(), end == successor);
        }
    }
}
