//! How the store keeps an entry: compact, its value's bytes an allocation of its own.
//!
//! A read value is a [`Bytes`] (40 bytes with its variant, a [`StoredEntry`] 64), made to share
//! one buffer among a page of entries that an engine reads from storage. With `StoredEntry`s in
//! the map (its nodes an eighth larger), W3's random point gets ran 10–15% slower than with the
//! old 56-byte entries, and a read sharing a stored value counts a reference on it: a write to a
//! cold cache line, and on a hot key a line every reading core takes in turn. So the map holds a
//! [`MemEntry`] (48 bytes) and each read copies its value out, as it always did; W3 then ran
//! 5–15% slower than before, a gap not placed (BENCHMARKS.md, "W4 with pages from one buffer").

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::{
    Bytes, KvEntry, KvValue, KvValueRef, PageBuilder, StoredEntry, Versionstamp, is_expired,
};

/// A value as the store keeps it.
#[derive(Debug, Clone)]
enum MemValue {
    V8(Box<[u8]>),
    Bytes(Box<[u8]>),
    U64(u64),
}

/// An entry as the store keeps it (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct MemEntry {
    value: MemValue,
    versionstamp: Versionstamp,
    pub(crate) expires_at: Option<DateTime<Utc>>,
}

impl MemEntry {
    /// Whether the entry has expired at `now` (expired entries are never visible).
    pub(crate) fn is_expired(&self, now: DateTime<Utc>) -> bool {
        is_expired(self.expires_at, now)
    }

    /// The value, borrowed.
    fn value_ref(&self) -> KvValueRef<'_> {
        match &self.value {
            MemValue::V8(b) => KvValueRef::V8(b),
            MemValue::Bytes(b) => KvValueRef::Bytes(b),
            MemValue::U64(n) => KvValueRef::U64(*n),
        }
    }

    /// The number of bytes the value counts for, as [`KvValue::encoded_len`].
    pub(crate) fn value_len(&self) -> usize {
        self.value_ref().encoded_len()
    }

    /// The entry as the write path and a backup see it, its value copied out.
    pub(crate) fn to_stored(&self) -> StoredEntry {
        StoredEntry {
            value: self.value_ref().to_value(),
            versionstamp: self.versionstamp,
            expires_at: self.expires_at,
        }
    }

    /// Adds the entry, under `key`, to a read's page (its bytes copied into the page's buffer).
    pub(crate) fn push_onto(&self, page: &mut PageBuilder, key: &[u8]) {
        page.push_value(key, self.value_ref(), self.versionstamp, self.expires_at);
    }

    /// The entry a read returns for it under `key`, its key and value copied out.
    pub(crate) fn to_entry(&self, key: &[u8]) -> KvEntry {
        KvEntry {
            key: Bytes::copy_from_slice(key),
            value: self.value_ref().to_value(),
            versionstamp: self.versionstamp,
            expires_at: self.expires_at,
        }
    }
}

/// Takes a committed entry's value bytes over (without a copy when the write's buffer is its
/// own and exactly as long as the value).
impl From<StoredEntry> for MemEntry {
    fn from(stored: StoredEntry) -> Self {
        let own = |bytes: Bytes| Vec::from(bytes).into_boxed_slice();
        MemEntry {
            value: match stored.value {
                KvValue::V8(b) => MemValue::V8(own(b)),
                KvValue::Bytes(b) => MemValue::Bytes(own(b)),
                KvValue::U64(n) => MemValue::U64(n),
            },
            versionstamp: stored.versionstamp,
            expires_at: stored.expires_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_it_was_stored() {
        let at = DateTime::from_timestamp_millis(1_700_000_000_000);
        for value in [
            KvValue::V8(Bytes::from_static(b"\xff\x0f\x22\x01x")),
            KvValue::Bytes(Bytes::from_static(b"raw")),
            KvValue::Bytes(Bytes::new()),
            KvValue::U64(u64::MAX),
        ] {
            let stored = StoredEntry {
                value: value.clone(),
                versionstamp: Versionstamp::from_version(7, 0),
                expires_at: at,
            };
            let kept = MemEntry::from(stored.clone());
            assert_eq!(kept.to_stored(), stored);
            assert_eq!(kept.value_len(), value.encoded_len());
            let entry = kept.to_entry(b"k");
            assert_eq!((&entry.key[..], entry.value), (&b"k"[..], value));
        }
    }

    #[test]
    fn the_kept_form_is_smaller_than_a_stored_entry() {
        assert!(std::mem::size_of::<MemEntry>() < std::mem::size_of::<StoredEntry>());
    }
}
