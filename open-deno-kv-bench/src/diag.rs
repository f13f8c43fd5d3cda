//! `open-deno-kv-bench diagnose-memory`: what a point get over an in-memory ordered map can cost on this
//! machine, piece by piece, to put open-deno-kv-memory's W3 figure in context.
//!
//! It builds the W3 data set (100,000 `["bench", i]` keys, 100-byte values) in the structure
//! open-deno-kv-memory uses — a `BTreeMap<Vec<u8>, StoredEntry>` — and in two alternatives, then times
//! lookups in W3's random order, one core, no async:
//!
//! - the range lookup open-deno-kv-memory's `read_range` does for a get (`range(k..k+00)`), alone and
//!   with the copy of the entry a read returns;
//! - a plain `get` (one descent instead of a search for both bounds);
//! - keys stored inline in the tree nodes (no pointer to chase per key comparison);
//! - a hash index.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::time::Instant;

use open_deno_kv_model::{KvEntry, StoredEntry, Versionstamp};

use crate::data::{KeyTable, Result, bench_value, random_indices};

/// A key of up to 23 bytes stored inside the tree node.
#[derive(Clone, PartialEq, Eq)]
struct InlineKey {
    len: u8,
    bytes: [u8; 23],
}

impl InlineKey {
    fn new(key: &[u8]) -> Option<Self> {
        let mut bytes = [0; 23];
        bytes.get_mut(..key.len())?.copy_from_slice(key);
        Some(InlineKey {
            len: u8::try_from(key.len()).ok()?,
            bytes,
        })
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Ord for InlineKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl PartialOrd for InlineKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Times `f` over every probe; prints ns per lookup and lookups per second.
fn time(name: &str, probes: &KeyTable, mut f: impl FnMut(&[u8]) -> usize) -> Result<()> {
    let mut found = 0;
    // Warm up once, then measure.
    for key in probes.iter().take(10_000) {
        found += f(key);
    }
    let started = Instant::now();
    for key in probes.iter() {
        found += f(key);
    }
    let secs = started.elapsed().as_secs_f64();
    if found < probes.len() {
        return Err(format!("{name}: only {found} of {} keys found", probes.len()).into());
    }
    println!(
        "{name:<58} {:>7.0} ns   {:>6.2} M/s",
        secs * 1e9 / probes.len() as f64,
        probes.len() as f64 / secs / 1e6
    );
    Ok(())
}

/// Runs the diagnosis and prints one line per variant.
pub fn memory(keys: usize, gets: usize) -> Result<()> {
    let table = KeyTable::bench(keys)?;
    let mut probes = KeyTable::default();
    for i in random_indices(gets, keys) {
        probes.push(table.get(i));
    }
    let entry = |i: usize| StoredEntry {
        value: bench_value(i),
        versionstamp: Versionstamp::from_version(i as u64 + 1, 0),
        expires_at: None,
    };
    let map: BTreeMap<Vec<u8>, StoredEntry> = table
        .iter()
        .enumerate()
        .map(|(i, k)| (k.to_vec(), entry(i)))
        .collect();
    let inline: BTreeMap<InlineKey, StoredEntry> = table
        .iter()
        .enumerate()
        .filter_map(|(i, k)| Some((InlineKey::new(k)?, entry(i))))
        .collect();
    let hash: HashMap<Vec<u8>, StoredEntry> = map.clone().into_iter().collect();
    let now = open_deno_kv_model::chrono::Utc::now();
    let copy = |k: &[u8], e: &StoredEntry| {
        (!e.is_expired(now)).then(|| KvEntry::from_stored(k.to_vec(), e.clone()))
    };
    println!(
        "{keys} keys, {gets} lookups in W3's random order, one thread ({} cpus here)\n",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    time(
        "BTreeMap<Vec<u8>> range(k..k+00) (open-deno-kv-memory's get)",
        &probes,
        |key| {
            let mut end = key.to_vec();
            end.push(0);
            map.range::<[u8], _>((Bound::Included(key), Bound::Excluded(end.as_slice())))
                .count()
        },
    )?;
    time(
        "  + visibility check and the copy a read returns",
        &probes,
        |key| {
            let mut end = key.to_vec();
            end.push(0);
            let found: Vec<KvEntry> = map
                .range::<[u8], _>((Bound::Included(key), Bound::Excluded(end.as_slice())))
                .filter_map(|(k, e)| copy(k, e))
                .take(1)
                .collect();
            found.len()
        },
    )?;
    time("BTreeMap<Vec<u8>> get(k)", &probes, |key| {
        usize::from(map.contains_key(key))
    })?;
    time("  + visibility check and copy", &probes, |key| {
        map.get_key_value(key)
            .and_then(|(k, e)| copy(k, e))
            .map_or(0, |_| 1)
    })?;
    time("BTreeMap<inline 23-byte key> get(k)", &probes, |key| {
        InlineKey::new(key).map_or(0, |k| usize::from(inline.contains_key(&k)))
    })?;
    time("  + visibility check and copy", &probes, |key| {
        InlineKey::new(key)
            .and_then(|k| inline.get_key_value(&k))
            .and_then(|(k, e)| copy(k.as_slice(), e))
            .map_or(0, |_| 1)
    })?;
    time("HashMap<Vec<u8>> get(k)", &probes, |key| {
        usize::from(hash.contains_key(key))
    })?;
    time("  + visibility check and copy", &probes, |key| {
        hash.get_key_value(key)
            .and_then(|(k, e)| copy(k, e))
            .map_or(0, |_| 1)
    })?;
    Ok(())
}
