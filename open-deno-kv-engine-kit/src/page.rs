//! A page of read entries built from borrowed rows, with one allocation for the small ones.
//!
//! A range read answers a `Vec<KvEntry>`, each entry owning its key and value. Copied one by one,
//! a page of 100 entries is 200 allocations alive at once, and on glibc's allocator that costs a
//! scan a third of its speed by itself (BENCHMARKS.md, "W4: the floor answers no page"). An
//! engine that reads rows as borrowed slices (a redb guard, a SQLite column) pushes them into a
//! [`PageBuilder`] instead: the keys and values of small entries are copied into one buffer, and
//! [`PageBuilder::finish`] hands them out as [`Bytes`] slices of it, a reference count each.
//!
//! One kept entry keeps its page's buffer alive. So that a caller who keeps a few entries of a
//! large page does not keep much more memory than it asked for, an entry larger than
//! [`SHARED_ENTRY_MAX`] bytes (key and value together) gets its own allocations, as before; the
//! shared buffer then holds at most `limit` entries of at most that size, and at most half of it
//! (or 16 KiB) is room never used.

use chrono::{DateTime, Utc};
use open_deno_kv_model::{Bytes, KvEntry, KvValue, KvValueRef, ValueError, Versionstamp};

/// The largest entry (key and value bytes together) whose bytes go into the page's shared
/// buffer; a larger one is copied into its own allocations.
pub const SHARED_ENTRY_MAX: usize = 1024;

/// The most a page reserves for its shared buffer before it knows how many entries it will hold;
/// beyond it the buffer grows by doubling, so at most half of it is ever unused.
const FIRST_RESERVE: usize = 16 * 1024;

/// Where one entry's bytes are, until the page is finished.
enum Place {
    /// In the shared buffer: the key is `start..split`, the value `split..end`.
    Shared {
        start: usize,
        split: usize,
        end: usize,
    },
    /// In allocations of its own.
    Own { key: Bytes, value: Bytes },
}

/// One entry, its bytes not yet handed out.
struct Pending {
    place: Place,
    /// The value's encoding; a u64 is kept decoded (its bytes are never shared).
    value: PendingValue,
    versionstamp: Versionstamp,
    expires_at: Option<DateTime<Utc>>,
}

enum PendingValue {
    V8,
    Bytes,
    U64(u64),
}

/// Builds the entries of one range read from borrowed keys and stored values (see the module
/// docs).
///
/// ```
/// use open_deno_kv_engine_kit::PageBuilder;
/// use open_deno_kv_engine_kit::{KvValue, Versionstamp};
///
/// let mut page = PageBuilder::for_limit(2);
/// page.push(b"\x02a\x00", b"one", 3, Versionstamp::from_version(1, 0), None).unwrap();
/// page.push(b"\x02b\x00", &7u64.to_le_bytes(), 2, Versionstamp::from_version(2, 0), None).unwrap();
/// let entries = page.finish();
/// assert_eq!(&entries[0].key[..], b"\x02a\x00");
/// assert_eq!(entries[0].value, KvValue::Bytes(b"one".as_slice().into()));
/// assert_eq!(entries[1].value, KvValue::U64(7));
/// ```
pub struct PageBuilder {
    buffer: Vec<u8>,
    pending: Vec<Pending>,
}

impl PageBuilder {
    /// A builder for a read of at most `limit` entries. Room for a typical page (Deno's default
    /// list batch is 100) is made at once, up to 256 entries; a larger limit grows as entries
    /// are found.
    pub fn for_limit(limit: usize) -> Self {
        PageBuilder {
            buffer: Vec::new(),
            pending: Vec::with_capacity(limit.min(256)),
        }
    }

    /// The number of entries pushed so far.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no entry has been pushed.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Adds an entry: its encoded key, its stored value bytes and their encoding id (as
    /// [`KvValueRef::decode`] reads them), its versionstamp and expiry.
    ///
    /// Fails, adding nothing, when the encoding is unknown or a u64 is not eight bytes: stored
    /// bytes that are not a value are damage, to be reported.
    pub fn push(
        &mut self,
        key: &[u8],
        value: &[u8],
        encoding_id: i64,
        versionstamp: Versionstamp,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<(), ValueError> {
        let value = KvValueRef::decode(value, encoding_id)?;
        self.push_value(key, value, versionstamp, expires_at);
        Ok(())
    }

    /// Adds an entry whose value is already decoded (an engine that keeps values decoded, as
    /// open-deno-kv-memory does).
    pub fn push_value(
        &mut self,
        key: &[u8],
        value: KvValueRef<'_>,
        versionstamp: Versionstamp,
        expires_at: Option<DateTime<Utc>>,
    ) {
        let (bytes, pending_value) = match value {
            KvValueRef::V8(bytes) => (bytes, PendingValue::V8),
            KvValueRef::Bytes(bytes) => (bytes, PendingValue::Bytes),
            KvValueRef::U64(n) => (&[][..], PendingValue::U64(n)),
        };
        let place = if key.len() + bytes.len() <= SHARED_ENTRY_MAX {
            if self.buffer.capacity() == 0 {
                // Room for a page of entries like the first without regrowing, but no more than
                // `FIRST_RESERVE`: the entries keep the whole allocation alive, used or not, and
                // a large limit over a short range would otherwise pin a mostly empty buffer.
                let each = key.len() + bytes.len();
                let page = each.max(16) * self.pending.capacity().max(1);
                self.buffer.reserve(page.min(FIRST_RESERVE));
            }
            let start = self.buffer.len();
            self.buffer.extend_from_slice(key);
            let split = self.buffer.len();
            self.buffer.extend_from_slice(bytes);
            Place::Shared {
                start,
                split,
                end: self.buffer.len(),
            }
        } else {
            Place::Own {
                key: Bytes::copy_from_slice(key),
                value: Bytes::copy_from_slice(bytes),
            }
        };
        self.pending.push(Pending {
            place,
            value: pending_value,
            versionstamp,
            expires_at,
        });
    }

    /// The entries, in the order they were pushed.
    pub fn finish(self) -> Vec<KvEntry> {
        let shared = Bytes::from(self.buffer);
        self.pending
            .into_iter()
            .map(|pending| {
                let (key, value) = match pending.place {
                    Place::Shared { start, split, end } => {
                        (shared.slice(start..split), shared.slice(split..end))
                    }
                    Place::Own { key, value } => (key, value),
                };
                let value = match pending.value {
                    PendingValue::V8 => KvValue::V8(value),
                    PendingValue::Bytes => KvValue::Bytes(value),
                    PendingValue::U64(n) => KvValue::U64(n),
                };
                KvEntry {
                    key,
                    value,
                    versionstamp: pending.versionstamp,
                    expires_at: pending.expires_at,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(n: u64) -> Versionstamp {
        Versionstamp::from_version(n, 0)
    }

    #[test]
    fn entries_come_back_in_order_with_their_values() {
        let mut page = PageBuilder::for_limit(4);
        page.push(b"a", b"\xff\x0f\x22\x01x", 1, stamp(1), None)
            .unwrap();
        page.push(b"b", b"raw", 3, stamp(2), None).unwrap();
        page.push(b"c", &9u64.to_le_bytes(), 2, stamp(3), None)
            .unwrap();
        let at = DateTime::from_timestamp_millis(1_700_000_000_000);
        page.push(b"d", b"", 3, stamp(4), at).unwrap();
        assert_eq!(page.len(), 4);
        let entries = page.finish();
        let keys: Vec<&[u8]> = entries.iter().map(|e| &e.key[..]).collect();
        assert_eq!(keys, [&b"a"[..], b"b", b"c", b"d"]);
        assert_eq!(
            entries[0].value,
            KvValue::V8(Bytes::from_static(b"\xff\x0f\x22\x01x"))
        );
        assert_eq!(entries[1].value, KvValue::Bytes(Bytes::from_static(b"raw")));
        assert_eq!(entries[2].value, KvValue::U64(9));
        assert_eq!(entries[3].value, KvValue::Bytes(Bytes::new()));
        assert_eq!(entries[3].expires_at, at);
        assert_eq!(entries[2].versionstamp, stamp(3));
    }

    #[test]
    fn small_entries_share_one_buffer_and_large_ones_do_not() {
        let mut page = PageBuilder::for_limit(3);
        page.push(b"a", b"small", 3, stamp(1), None).unwrap();
        page.push(b"b", b"also small", 3, stamp(1), None).unwrap();
        let large = vec![7u8; SHARED_ENTRY_MAX];
        page.push(b"c", &large, 3, stamp(1), None).unwrap();
        let entries = page.finish();
        let value_of = |i: usize| match &entries[i].value {
            KvValue::Bytes(b) => b.clone(),
            other => panic!("not bytes: {other:?}"),
        };
        // The first two entries' bytes are neighbours in one allocation: key a, "small",
        // key b, "also small".
        let (first, second) = (value_of(0), value_of(1));
        assert_eq!(
            first.as_ptr().wrapping_add(first.len()),
            entries[1].key.as_ptr()
        );
        assert_eq!(entries[1].key.as_ptr().wrapping_add(1), second.as_ptr());
        assert_eq!(entries[0].key.as_ptr().wrapping_add(1), first.as_ptr());
        // The large one has its own.
        let third = value_of(2);
        assert_eq!(&third[..], &large[..]);
        assert_ne!(
            second.as_ptr().wrapping_add(second.len()),
            entries[2].key.as_ptr()
        );
    }

    #[test]
    fn bytes_that_are_not_a_value_are_refused_and_nothing_is_added() {
        let mut page = PageBuilder::for_limit(2);
        assert_eq!(
            page.push(b"a", b"x", 4, stamp(1), None),
            Err(ValueError::UnknownEncoding(4))
        );
        assert_eq!(
            page.push(b"a", &[1; 7], 2, stamp(1), None),
            Err(ValueError::BadU64Length(7))
        );
        assert!(page.is_empty());
        assert!(page.finish().is_empty());
    }

    #[test]
    fn an_entry_outlives_its_page_and_the_others() {
        let mut page = PageBuilder::for_limit(2);
        page.push(b"a", b"kept", 3, stamp(1), None).unwrap();
        page.push(b"b", b"dropped", 3, stamp(1), None).unwrap();
        let kept = page.finish().swap_remove(0);
        assert_eq!(&kept.key[..], b"a");
        assert_eq!(kept.value, KvValue::Bytes(Bytes::from_static(b"kept")));
    }
}
