//! Key ranges for the operations Deno KV does not have: deleting, counting and watching every
//! entry between two bounds in one request.
//!
//! A [`KeyRange`] is `[start, end)` over encoded keys, like a [`crate::ReadRange`] without a limit
//! or a direction. Deno programs name such a range with a prefix (`{ prefix: ["users"] }`, every
//! key strictly under it) or with two keys; [`KeyRange::prefix`] and [`KeyRange::new`] build the
//! same bytes their reads use, so a range delete, a count and a list of the same selector cover
//! exactly the same entries.
//!
//! ```
//! use open_deno_kv_model::{encode_key, key, KeyRange};
//! let users = KeyRange::prefix(&key!["users"]).unwrap();
//! assert!(users.contains(&encode_key(&key!["users", 1]).unwrap()));
//! assert!(!users.contains(&encode_key(&key!["users"]).unwrap())); // the prefix itself is not under it
//! assert!(!users.contains(&encode_key(&key!["usersX"]).unwrap()));
//! ```

use crate::{Key, KeyError, ReadRange, encode_key};

/// The encoded keys `k` with `start <= k < end`. Empty when `start >= end`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyRange {
    /// Inclusive lower bound (encoded key bytes, not necessarily a valid key).
    pub start: Vec<u8>,
    /// Exclusive upper bound.
    pub end: Vec<u8>,
}

impl KeyRange {
    /// The range `[start, end)` of already-encoded bounds.
    pub fn new(start: Vec<u8>, end: Vec<u8>) -> Self {
        KeyRange { start, end }
    }

    /// Every key strictly under `prefix`: `[enc(p)+00, enc(p)+FF)`, as a prefix list reads.
    pub fn prefix(prefix: &Key) -> Result<Self, KeyError> {
        let read = ReadRange::prefix(prefix, 1)?;
        Ok(KeyRange::new(read.start, read.end))
    }

    /// Every key from `start` (included) to `end` (excluded), both given as keys.
    pub fn between(start: &Key, end: &Key) -> Result<Self, KeyError> {
        Ok(KeyRange::new(encode_key(start)?, encode_key(end)?))
    }

    /// Whether the range holds no key at all.
    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.start.as_slice() <= key && key < self.end.as_slice()
    }

    /// Whether the two ranges share at least one key.
    pub fn overlaps(&self, other: &KeyRange) -> bool {
        !self.is_empty() && !other.is_empty() && self.start < other.end && other.start < self.end
    }
}

impl From<&ReadRange> for KeyRange {
    /// The keys a read range covers, whatever its limit and direction.
    fn from(read: &ReadRange) -> Self {
        KeyRange::new(read.start.clone(), read.end.clone())
    }
}

/// What [`crate::Backend::count_range`] finds in a range, from one snapshot: how many visible
/// entries (expired ones are not counted), and their sizes as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RangeCount {
    /// Visible entries in the range.
    pub entries: u64,
    /// The sum of their encoded key lengths.
    pub key_bytes: u64,
    /// The sum of their encoded value lengths ([`crate::KvValue::encoded_len`]: V8 bytes as
    /// stored, raw bytes, 8 for a u64).
    pub value_bytes: u64,
}

impl RangeCount {
    /// Adds one entry of these sizes.
    pub fn add(&mut self, key_len: usize, value_len: usize) {
        self.entries += 1;
        self.key_bytes += key_len as u64;
        self.value_bytes += value_len as u64;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// `overlaps` agrees with "some key lies in both", checked on the bounds themselves
        /// (if two half-open ranges share a key, the larger start is one).
        #[test]
        fn overlap_means_a_shared_key(a: (Vec<u8>, Vec<u8>), b: (Vec<u8>, Vec<u8>)) {
            let (a, b) = (KeyRange::new(a.0, a.1), KeyRange::new(b.0, b.1));
            let later_start = std::cmp::max(&a.start, &b.start);
            let shared = a.contains(later_start) && b.contains(later_start);
            prop_assert_eq!(a.overlaps(&b), shared);
            prop_assert_eq!(b.overlaps(&a), shared);
        }
    }

    #[test]
    fn an_inverted_range_is_empty_and_overlaps_nothing() {
        let inverted = KeyRange::new(vec![5], vec![1]);
        assert!(inverted.is_empty());
        assert!(!inverted.contains(&[3]));
        assert!(!inverted.overlaps(&KeyRange::new(vec![0], vec![9])));
    }
}
