//! The data every target works on: the same encoded keys, values and random orders, so a backend
//! and its raw floor do exactly the same operations.

use open_deno_kv_model::{KvValue, encode_key, key};

use crate::spec::VALUE_SIZE;
use crate::stats::Rng;

/// Errors of a benchmark run.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Results of a benchmark run.
pub type Result<T> = std::result::Result<T, BoxError>;

/// The encoded key `["bench", i]` (i as a bigint part, as `key!` makes Rust integers).
pub fn bench_key(i: usize) -> Result<Vec<u8>> {
    Ok(encode_key(&key!["bench", u64::try_from(i)?])?)
}

/// Many encoded keys in one buffer: a million keys cost about 19 MB here instead of the ~56 MB
/// a `Vec<Vec<u8>>` takes, so the harness adds little to the peak memory reported per backend,
/// and reading keys in order reads memory in order.
#[derive(Debug, Clone, Default)]
pub struct KeyTable {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl KeyTable {
    /// The encoded keys `["bench", 0..n]`. They sort in numeric order.
    pub fn bench(n: usize) -> Result<Self> {
        let mut table = KeyTable::default();
        for i in 0..n {
            table.push(&bench_key(i)?);
        }
        Ok(table)
    }

    /// Appends a key.
    pub fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Key `i` (empty past the end).
    pub fn get(&self, i: usize) -> &[u8] {
        let start = match i.checked_sub(1) {
            Some(before) => self.ends.get(before).copied().unwrap_or(self.bytes.len()),
            None => 0,
        };
        let end = self.ends.get(i).copied().unwrap_or(start);
        self.bytes.get(start..end).unwrap_or_default()
    }

    /// The keys in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// The exclusive end of every `["bench", ...]` key: `enc(["bench"])` followed by 0xFF.
pub fn bench_prefix_end() -> Result<Vec<u8>> {
    let mut end = encode_key(&key!["bench"])?;
    end.push(0xff);
    Ok(end)
}

/// The value stored at `["bench", i]`: 100 bytes, the first one `i mod 256`, so reads can check
/// they got the right one.
pub fn value_bytes(i: usize) -> Vec<u8> {
    (0..VALUE_SIZE).map(|j| (i + j) as u8).collect()
}

/// [`value_bytes`] as a `Uint8Array` value.
pub fn bench_value(i: usize) -> KvValue {
    KvValue::Bytes(value_bytes(i).into())
}

/// Checks a value read back for `["bench", i]`.
pub fn check_value(bytes: &[u8], i: usize) -> Result<()> {
    if bytes.len() != VALUE_SIZE || bytes.first().copied() != Some(i as u8) {
        return Err(format!(
            "read of [\"bench\", {i}] returned a wrong value ({} bytes)",
            bytes.len()
        )
        .into());
    }
    Ok(())
}

/// `count` random key indices in `0..keys`, the same every run.
pub fn random_indices(count: usize, keys: usize) -> Vec<usize> {
    let mut rng = Rng::new(0x5eed_0003);
    (0..count).map(|_| rng.below(keys)).collect()
}

/// W3's gets: each get's key, in the order they are asked for, and its entry number. Laid out
/// in order so reading the next request key is not itself a cache miss (a server takes its keys
/// from a request buffer, not from a random place in a table of every key).
#[derive(Debug, Clone, Default)]
pub struct Probes {
    /// The keys, in the order they are read.
    pub keys: KeyTable,
    /// The entry number of each.
    pub indices: Vec<usize>,
}

impl Probes {
    /// The gets of `indices` into `keys`.
    pub fn new(keys: &KeyTable, indices: Vec<usize>) -> Self {
        let mut table = KeyTable::default();
        for &i in &indices {
            table.push(keys.get(i));
        }
        Probes {
            keys: table,
            indices,
        }
    }

    /// How many gets.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The gets in order: entry number and key.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.indices.iter().copied().zip(self.keys.iter())
    }
}

/// `count` random scan starts such that `scan_len` keys follow each, the same every run.
pub fn scan_starts(count: usize, keys: usize, scan_len: usize) -> Vec<usize> {
    let mut rng = Rng::new(0x5eed_0004);
    let span = keys.saturating_sub(scan_len) + 1;
    (0..count).map(|_| rng.below(span)).collect()
}

/// Untimed operations before a timed read run, to warm caches and prepared statements.
pub fn warmup_len(ops: usize) -> usize {
    ops.min(2_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_table_holds_keys_in_order() {
        let table = KeyTable::bench(300).unwrap();
        assert_eq!(table.len(), 300);
        for i in [0, 1, 255, 256, 299] {
            assert_eq!(table.get(i), bench_key(i).unwrap().as_slice());
        }
        assert!(table.get(300).is_empty());
        assert!(table.iter().zip(table.iter().skip(1)).all(|(a, b)| a < b));
        let probes = Probes::new(&table, vec![7, 3, 7]);
        let got: Vec<(usize, Vec<u8>)> = probes.iter().map(|(i, k)| (i, k.to_vec())).collect();
        assert_eq!(got[1], (3, bench_key(3).unwrap()));
        assert_eq!(got[2], (7, bench_key(7).unwrap()));
    }
}
