//! What the child writes: a deterministic stream of atomic writes, each identified by a number.
//!
//! Write `id` of a run with seed `seed` is always the same [`WriteSpec`], so the child only has
//! to report ids and the parent can rebuild everything a write contained. Every write sets its
//! own *marker* key; every other part of the write (a counter increment, a group of keys, an
//! overwrite of a shared slot, a queue message) must be visible exactly when the marker is. That
//! turns "was this commit applied atomically?" into exact checks.

use open_deno_kv_model::chrono::{DateTime, Utc};
use open_deno_kv_model::{AtomicWrite, Enqueue, Key, KvValue, Mutation, key};

use crate::support::enc;

/// The first key part of everything the harness writes.
pub(crate) const PREFIX: &str = "kv-crash";
/// How many shared `u64` counters writes add to.
pub(crate) const COUNTERS: u64 = 4;
/// How many shared slots writes overwrite.
pub(crate) const SLOTS: u64 = 8;
/// The most extra keys in one multi-key group.
const MAX_GROUP_KEYS: u64 = 6;
/// The largest value of a group key, in bytes (values span several database pages now and then).
const MAX_GROUP_VALUE: u64 = 3000;

/// A small, fast, seedable pseudo-random generator (SplitMix64). The harness needs
/// reproducible choices, not cryptographic quality, and this keeps the crate free of another
/// dependency.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose whole output is determined by `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0; the tiny modulo bias does not matter here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `num / den`.
    pub(crate) fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// Mixes two numbers into a seed (for "the generator of write `id` in run `seed`").
pub(crate) fn mix(seed: u64, id: u64) -> u64 {
    SplitMix64::new(seed ^ id.wrapping_mul(0xd6e8_feb8_6659_fd93)).next_u64()
}

/// Everything one write of the stream contains, besides its marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteSpec {
    /// The write's number, unique in a trial.
    pub(crate) id: u64,
    /// `sum` of `operand` (a `u64`) into counter `index`.
    pub(crate) counter: Option<(u64, u64)>,
    /// The value length of each key of a multi-key group (empty: no group).
    pub(crate) group: Vec<usize>,
    /// Overwrites this shared slot with the write's id.
    pub(crate) slot: Option<u64>,
    /// Enqueues a message whose payload names the write.
    pub(crate) enqueue: bool,
    /// Where the marker goes among the mutations (so engines that apply or persist mutations in
    /// order get torn in different places).
    marker_position: usize,
}

impl WriteSpec {
    /// Write `id` of the stream seeded with `seed`; with `queues` false no write enqueues (for
    /// backends without queues).
    pub(crate) fn generate(seed: u64, id: u64, queues: bool) -> Self {
        let mut rng = SplitMix64::new(mix(seed, id));
        let counter = rng
            .chance(1, 2)
            .then(|| (rng.below(COUNTERS), 1 + rng.below(9)));
        let group = if rng.chance(1, 2) {
            let keys = 2 + rng.below(MAX_GROUP_KEYS - 1);
            (0..keys)
                .map(|_| 1 + rng.below(MAX_GROUP_VALUE) as usize)
                .collect()
        } else {
            Vec::new()
        };
        let slot = rng.chance(1, 3).then(|| rng.below(SLOTS));
        let enqueue = rng.chance(1, 3) && queues;
        let others = usize::from(counter.is_some()) + group.len() + usize::from(slot.is_some());
        let marker_position = rng.below(others as u64 + 1) as usize;
        WriteSpec {
            id,
            counter,
            group,
            slot,
            enqueue,
            marker_position,
        }
    }

    /// The atomic write the child commits. It has no checks, so it can only commit or fail.
    pub(crate) fn atomic_write(&self) -> AtomicWrite {
        let mut mutations = Vec::with_capacity(self.group.len() + 3);
        if let Some((index, operand)) = self.counter {
            mutations.push(Mutation::sum(counter_key(index), KvValue::U64(operand)));
        }
        for (i, len) in self.group.iter().enumerate() {
            mutations.push(Mutation::set(
                group_key(self.id, i),
                KvValue::Bytes(group_value(self.id, i, *len).into()),
            ));
        }
        if let Some(slot) = self.slot {
            mutations.push(Mutation::set(slot_key(slot), KvValue::U64(self.id)));
        }
        let at = self.marker_position.min(mutations.len());
        mutations.insert(
            at,
            Mutation::set(marker_key(self.id), KvValue::U64(self.id)),
        );
        let enqueues = if self.enqueue {
            vec![Enqueue {
                payload: payload(self.id),
                ready_at: message_ready_at(),
                keys_if_undelivered: Vec::new(),
                backoff_schedule: None,
            }]
        } else {
            Vec::new()
        };
        AtomicWrite {
            checks: Vec::new(),
            mutations,
            enqueues,
        }
    }
}

/// When the harness's messages are due: 2024-01-01T00:00:00Z, in the past for the system clock
/// and exactly "now" for [`open_deno_kv_model::ManualClock::at_test_epoch`], so they are due at once under
/// either clock (zero delay).
pub(crate) fn message_ready_at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_704_067_200, 0).unwrap_or_default()
}

fn encoded(key: &Key) -> Vec<u8> {
    enc(key)
}

/// `["kv-crash", "w", id]`: set by write `id` and nothing else.
pub(crate) fn marker_key(id: u64) -> Vec<u8> {
    encoded(&key![PREFIX, "w", id])
}

/// `["kv-crash", "counter", index]`: a `u64` that writes `sum` into.
pub(crate) fn counter_key(index: u64) -> Vec<u8> {
    encoded(&key![PREFIX, "counter", index])
}

/// `["kv-crash", "group", id, i]`: key `i` of write `id`'s multi-key group.
pub(crate) fn group_key(id: u64, i: usize) -> Vec<u8> {
    encoded(&key![PREFIX, "group", id, i as u64])
}

/// `["kv-crash", "slot", slot]`: overwritten by every write that picks this slot.
pub(crate) fn slot_key(slot: u64) -> Vec<u8> {
    encoded(&key![PREFIX, "slot", slot])
}

/// `["kv-crash", "probe"]`: the parent's own write after each recovery.
pub(crate) fn probe_key() -> Vec<u8> {
    encoded(&key![PREFIX, "probe"])
}

/// `["kv-crash"]`, the prefix to scan.
pub(crate) fn prefix_key() -> Key {
    key![PREFIX]
}

/// The value of group key `i` of write `id`: `len` bytes derived from both, so a value from the
/// wrong write or a torn value is noticed.
pub(crate) fn group_value(id: u64, i: usize, len: usize) -> Vec<u8> {
    let mut rng = SplitMix64::new(mix(id, i as u64 + 1));
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

const PAYLOAD_PREFIX: &str = "kv-crash message ";

/// The payload of write `id`'s message: the V8 serialization of the string
/// `"kv-crash message <id>"`.
pub(crate) fn payload(id: u64) -> Vec<u8> {
    let text = format!("{PAYLOAD_PREFIX}{id}");
    // V8 header (version 15), one-byte string tag, length (< 128, a one-byte varint), bytes.
    let mut bytes = vec![0xff, 0x0f, b'"', text.len() as u8];
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

/// The write id a payload names, if it is one of the harness's payloads.
pub(crate) fn parse_payload(bytes: &[u8]) -> Option<u64> {
    let [0xff, 0x0f, b'"', len, text @ ..] = bytes else {
        return None;
    };
    if usize::from(*len) != text.len() {
        return None;
    }
    std::str::from_utf8(text)
        .ok()?
        .strip_prefix(PAYLOAD_PREFIX)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use open_deno_kv_model::{Limits, MutationKind};

    #[test]
    fn writes_are_deterministic_and_valid() {
        let limits = Limits::deno();
        let mut kinds = [0usize; 4];
        for id in 0..500 {
            let spec = WriteSpec::generate(7, id, true);
            assert_eq!(spec, WriteSpec::generate(7, id, true));
            assert!(!WriteSpec::generate(7, id, false).enqueue);
            let write = spec.atomic_write();
            limits
                .validate_atomic_write(&write, message_ready_at())
                .unwrap();
            let markers = write
                .mutations
                .iter()
                .filter(|m| m.key == marker_key(id))
                .count();
            assert_eq!(markers, 1);
            assert!(
                write
                    .mutations
                    .iter()
                    .all(|m| matches!(m.kind, MutationKind::Set(_) | MutationKind::Sum { .. }))
            );
            kinds[0] += usize::from(spec.counter.is_some());
            kinds[1] += usize::from(!spec.group.is_empty());
            kinds[2] += usize::from(spec.slot.is_some());
            kinds[3] += usize::from(spec.enqueue);
        }
        // Every kind of part shows up often.
        assert!(kinds.iter().all(|&n| n > 100), "{kinds:?}");
    }

    #[test]
    fn payloads_round_trip() {
        for id in [0, 1, 4_294_967_296, u64::MAX] {
            assert_eq!(parse_payload(&payload(id)), Some(id));
        }
        assert_eq!(parse_payload(b"\xff\x0f\"\x03abc"), None);
        assert_eq!(parse_payload(b""), None);
    }
}
