//! The parent's side: what the child acknowledged, and whether a reopened store agrees with it.
//!
//! [`History`] accumulates the child's reports across every kill of a trial; [`History::check`]
//! compares it with what a reopened store holds ([`Recovered`]) and returns every
//! [`Violation`]. The checker is a pure function of those two, so its teeth are tested with
//! fabricated logs and states (see `tests.rs` next to this file).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use open_deno_kv_model::{KvEntry, KvValue, Versionstamp};

use super::workload::{
    COUNTERS, SLOTS, WriteSpec, counter_key, group_key, group_value, marker_key, parse_payload,
    probe_key, slot_key,
};

/// The line the child prints once its backend is open.
pub(crate) const READY: &str = "kv-crash ready";
/// The prefix of a line announcing a write before it is committed: `kv-crash begin <id>`.
pub(crate) const BEGIN: &str = "kv-crash begin ";
/// The prefix of a line acknowledging a write: `kv-crash ack <id> <versionstamp>`.
pub(crate) const ACK: &str = "kv-crash ack ";

/// What kind of promise a backend broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// An acknowledged commit (or a part of it, or its message) is missing after the crash, or
    /// something seen after an earlier recovery disappeared.
    Loss,
    /// Part of one atomic write is visible without the rest.
    PartialCommit,
    /// A queue message was delivered twice.
    DuplicateMessage,
    /// Versionstamps went backwards, were reused, or differ from the acknowledged ones.
    Versionstamp,
    /// Data the child never wrote: unknown keys, wrong values, resurrected writes.
    Corrupt,
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ViolationKind::Loss => "loss",
            ViolationKind::PartialCommit => "partial commit",
            ViolationKind::DuplicateMessage => "duplicate message",
            ViolationKind::Versionstamp => "versionstamp",
            ViolationKind::Corrupt => "corrupt data",
        })
    }
}

/// One broken promise, with a message precise enough to debug from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What kind of promise.
    pub kind: ViolationKind,
    /// What exactly was expected and what was found.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.kind, self.message)
    }
}

fn violation(kind: ViolationKind, message: String) -> Violation {
    Violation { kind, message }
}

/// What the parent knows about one write the child began.
#[derive(Debug, Clone)]
struct WriteState {
    spec: WriteSpec,
    /// The versionstamp the child was given, if the commit returned before the kill.
    acked: Option<Versionstamp>,
    /// The largest versionstamp known, when the write began, to belong to a commit that had
    /// already returned: the write's own versionstamp must be greater.
    floor: Option<Versionstamp>,
    /// Whether the write was visible at the first recovery after it (later recoveries must
    /// agree).
    seen: Option<bool>,
}

/// Everything the parent read from a reopened store.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recovered {
    /// Every entry under `["kv-crash"]`, in key order.
    pub(crate) entries: Vec<KvEntry>,
    /// The payload of every message dequeued (and finished with success), in delivery order.
    pub(crate) messages: Vec<Vec<u8>>,
    /// The versionstamp of the parent's probe write, committed after reading and draining.
    pub(crate) probe: Versionstamp,
}

/// Counts for one recovery, for the per-kill report line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RecoveryStats {
    /// Writes the child began in the run just killed.
    pub(crate) begun: usize,
    /// Of those, acknowledged.
    pub(crate) acked: usize,
    /// Begun, not acknowledged, but visible after the crash (committed just before the kill).
    pub(crate) landed_unacked: usize,
    /// Begun, not acknowledged, and not visible (the kill came first).
    pub(crate) vanished_unacked: usize,
    /// Messages delivered by this recovery.
    pub(crate) messages: usize,
    /// Messages this recovery should have delivered (from visible writes).
    pub(crate) expected_messages: usize,
}

/// Where a key belongs.
#[derive(Debug, Clone, Copy)]
enum Role {
    Marker(u64),
    Group(u64, usize),
    Counter(u64),
    Slot(u64),
    Probe,
}

/// The child's reports so far in one trial, and what earlier recoveries established.
#[derive(Debug)]
pub(crate) struct History {
    seed: u64,
    queues: bool,
    writes: BTreeMap<u64, WriteState>,
    /// The largest versionstamp of any commit known to have returned (acks and probes).
    latest: Option<Versionstamp>,
    /// Which write each acknowledged versionstamp went to.
    ack_stamps: HashMap<Versionstamp, u64>,
    /// Write ids whose message an earlier recovery already received.
    delivered: HashSet<u64>,
    /// The previous recovery's probe write.
    probe: Option<Versionstamp>,
    /// Ids begun by the child run being checked next.
    current_run: Vec<u64>,
    recoveries: usize,
}

impl History {
    /// An empty history for a trial whose writes are generated from `seed` (with enqueues if
    /// `queues`).
    pub(crate) fn new(seed: u64, queues: bool) -> Self {
        History {
            seed,
            queues,
            writes: BTreeMap::new(),
            latest: None,
            ack_stamps: HashMap::new(),
            delivered: HashSet::new(),
            probe: None,
            current_run: Vec::new(),
            recoveries: 0,
        }
    }

    /// Whether the trial's writes enqueue messages.
    pub(crate) fn queues(&self) -> bool {
        self.queues
    }

    /// Reads one child run's stdout. Only complete lines count (the kill may cut the last one);
    /// lines without the `kv-crash` prefix (the engine's own output) are ignored.
    ///
    /// Returns the versionstamp-order violations seen in the acks, or `Err` if the output breaks
    /// the protocol (an ack for a write never begun, a write begun twice, garbage after the
    /// prefix): that is a harness or child bug, not a storage one.
    pub(crate) fn record_child_output(&mut self, stdout: &str) -> Result<Vec<Violation>, String> {
        let mut violations = Vec::new();
        let complete = match stdout.rfind('\n') {
            Some(end) => &stdout[..end],
            None => "",
        };
        for line in complete.lines() {
            if let Some(rest) = line.strip_prefix(BEGIN) {
                let id: u64 = rest
                    .trim()
                    .parse()
                    .map_err(|_| format!("unreadable line from the child: {line:?}"))?;
                if self.writes.contains_key(&id) {
                    return Err(format!("the child began write {id} twice"));
                }
                let spec = WriteSpec::generate(self.seed, id, self.queues);
                self.writes.insert(
                    id,
                    WriteState {
                        spec,
                        acked: None,
                        floor: self.latest,
                        seen: None,
                    },
                );
                self.current_run.push(id);
            } else if let Some(rest) = line.strip_prefix(ACK) {
                let mut fields = rest.split_whitespace();
                let (Some(id), Some(stamp), None) = (fields.next(), fields.next(), fields.next())
                else {
                    return Err(format!("unreadable line from the child: {line:?}"));
                };
                let id: u64 = id
                    .parse()
                    .map_err(|_| format!("unreadable line from the child: {line:?}"))?;
                let stamp: Versionstamp = stamp
                    .parse()
                    .map_err(|_| format!("unreadable line from the child: {line:?}"))?;
                violations.extend(self.record_ack(id, stamp)?);
            }
        }
        Ok(violations)
    }

    /// Records that write `id` was acknowledged with `stamp`.
    fn record_ack(&mut self, id: u64, stamp: Versionstamp) -> Result<Vec<Violation>, String> {
        let mut violations = Vec::new();
        let write = self
            .writes
            .get_mut(&id)
            .ok_or_else(|| format!("the child acknowledged write {id}, which it never began"))?;
        if write.acked.is_some() {
            return Err(format!("the child acknowledged write {id} twice"));
        }
        write.acked = Some(stamp);
        if let Some(floor) = write.floor
            && stamp <= floor
        {
            violations.push(violation(
                ViolationKind::Versionstamp,
                format!(
                    "write {id} was acknowledged with versionstamp {stamp}, not above {floor}, \
                     the versionstamp of a commit that returned before write {id} began"
                ),
            ));
        }
        if let Some(other) = self.ack_stamps.insert(stamp, id) {
            violations.push(violation(
                ViolationKind::Versionstamp,
                format!("writes {other} and {id} were both acknowledged with versionstamp {stamp}"),
            ));
        }
        self.latest = self.latest.max(Some(stamp));
        Ok(violations)
    }

    /// How many messages the store should hold now: one per visible write with an enqueue whose
    /// message no earlier recovery received. (The parent waits for that many before it waits only
    /// briefly for any extra, duplicate one.)
    pub(crate) fn expected_messages(&self, entries: &[KvEntry]) -> usize {
        let markers: HashSet<&[u8]> = entries.iter().map(|e| &e.key[..]).collect();
        self.writes
            .values()
            .filter(|w| {
                w.spec.enqueue
                    && !self.delivered.contains(&w.spec.id)
                    && markers.contains(marker_key(w.spec.id).as_slice())
            })
            .count()
    }

    fn key_roles(&self) -> HashMap<Vec<u8>, Role> {
        let mut roles = HashMap::new();
        for index in 0..COUNTERS {
            roles.insert(counter_key(index), Role::Counter(index));
        }
        for slot in 0..SLOTS {
            roles.insert(slot_key(slot), Role::Slot(slot));
        }
        roles.insert(probe_key(), Role::Probe);
        for (&id, write) in &self.writes {
            roles.insert(marker_key(id), Role::Marker(id));
            for i in 0..write.spec.group.len() {
                roles.insert(group_key(id, i), Role::Group(id, i));
            }
        }
        roles
    }

    /// Compares a reopened store with everything the child reported, then folds the recovery
    /// into the history (what was visible must stay visible, delivered messages must not come
    /// back, the probe is now the latest commit).
    pub(crate) fn check(&mut self, recovered: &Recovered) -> (Vec<Violation>, RecoveryStats) {
        use ViolationKind::{Corrupt, DuplicateMessage, Loss, PartialCommit};
        let stamp_kind = ViolationKind::Versionstamp;
        self.recoveries += 1;
        let recovery = self.recoveries;
        let mut out = Vec::new();
        let probe = recovered.probe;

        // 1. Classify every stored entry.
        let roles = self.key_roles();
        let mut markers: HashMap<u64, Versionstamp> = HashMap::new();
        let mut groups: HashMap<u64, Vec<(usize, Versionstamp)>> = HashMap::new();
        let mut counters: HashMap<u64, (u64, Versionstamp)> = HashMap::new();
        let mut slots: HashMap<u64, (u64, Versionstamp)> = HashMap::new();
        for entry in &recovered.entries {
            if entry.versionstamp >= probe {
                out.push(violation(
                    stamp_kind,
                    format!(
                        "key {} carries versionstamp {}, not below {probe}, the versionstamp the \
                         store gave the parent's next commit",
                        show_key(&entry.key),
                        entry.versionstamp
                    ),
                ));
            }
            let Some(role) = roles.get(&entry.key[..]) else {
                out.push(violation(
                    Corrupt,
                    format!(
                        "key {} holds {:?}, but no write the child began has this key",
                        show_key(&entry.key),
                        short(&entry.value)
                    ),
                ));
                continue;
            };
            match (*role, &entry.value) {
                (Role::Marker(id), KvValue::U64(v)) if *v == id => {
                    markers.insert(id, entry.versionstamp);
                }
                (Role::Group(id, i), KvValue::Bytes(bytes))
                    if self
                        .writes
                        .get(&id)
                        .is_some_and(|w| *bytes == group_value(id, i, w.spec.group[i])) =>
                {
                    groups.entry(id).or_default().push((i, entry.versionstamp));
                }
                (Role::Counter(index), KvValue::U64(v)) => {
                    counters.insert(index, (*v, entry.versionstamp));
                }
                (Role::Slot(slot), KvValue::U64(v)) => {
                    slots.insert(slot, (*v, entry.versionstamp));
                }
                (Role::Probe, _) => match self.probe {
                    None => out.push(violation(
                        Corrupt,
                        "the parent's probe key is stored before the parent ever wrote it"
                            .to_owned(),
                    )),
                    Some(written) if written != entry.versionstamp => out.push(violation(
                        stamp_kind,
                        format!(
                            "the parent's probe key carries versionstamp {}, but the parent \
                             last wrote it at {written} (before the previous child run)",
                            entry.versionstamp
                        ),
                    )),
                    Some(_) => {}
                },
                (role, value) => out.push(violation(
                    Corrupt,
                    format!(
                        "key {} ({role:?}) holds a value no write put there: {:?}",
                        show_key(&entry.key),
                        short(value)
                    ),
                )),
            }
        }
        if self.probe.is_some() && !recovered.entries.iter().any(|e| e.key == probe_key()) {
            out.push(violation(
                Loss,
                "the parent's probe write from the previous recovery is missing".to_owned(),
            ));
        }

        // 2. Messages delivered now, by write id.
        let mut delivered_now: HashMap<u64, usize> = HashMap::new();
        for payload in &recovered.messages {
            match parse_payload(payload) {
                Some(id) => *delivered_now.entry(id).or_default() += 1,
                None => out.push(violation(
                    Corrupt,
                    format!(
                        "a message with a payload the child never sent: {}",
                        hex(payload)
                    ),
                )),
            }
        }
        for (&id, &count) in &delivered_now {
            if count > 1 {
                out.push(violation(
                    DuplicateMessage,
                    format!("the message of write {id} was delivered {count} times"),
                ));
            }
            if self.delivered.contains(&id) {
                out.push(violation(
                    DuplicateMessage,
                    format!(
                        "the message of write {id} was delivered again, after an earlier \
                         recovery received it and finished it with success"
                    ),
                ));
            }
            match self.writes.get(&id) {
                None => out.push(violation(
                    Corrupt,
                    format!("a message names write {id}, which the child never began"),
                )),
                Some(w) if !w.spec.enqueue => out.push(violation(
                    Corrupt,
                    format!("a message names write {id}, which enqueues nothing"),
                )),
                Some(_) if !markers.contains_key(&id) => out.push(violation(
                    PartialCommit,
                    format!(
                        "the message of write {id} was delivered, but the rest of write {id} \
                         (its marker key) is not in the store"
                    ),
                )),
                Some(_) => {}
            }
        }

        // 3. Each write: all of it or none of it, and all of it if acknowledged.
        let current_run: HashSet<u64> = self.current_run.drain(..).collect();
        let mut stats = RecoveryStats {
            begun: current_run.len(),
            messages: recovered.messages.len(),
            ..Default::default()
        };
        for (&id, write) in &mut self.writes {
            let visible = markers.get(&id).copied();
            let group_found = groups.get(&id).map_or(&[][..], Vec::as_slice);
            let state = if write.acked.is_some() {
                "acknowledged"
            } else {
                "unacknowledged"
            };
            if current_run.contains(&id) {
                match (write.acked, visible) {
                    (Some(_), _) => stats.acked += 1,
                    (None, Some(_)) => stats.landed_unacked += 1,
                    (None, None) => stats.vanished_unacked += 1,
                }
            }
            match (write.acked, visible) {
                (Some(acked), None) => out.push(violation(
                    Loss,
                    format!(
                        "write {id} was acknowledged with versionstamp {acked}, but its marker \
                         key is missing after recovery {recovery} ({})",
                        describe(&write.spec)
                    ),
                )),
                (Some(acked), Some(stored)) if acked != stored => out.push(violation(
                    stamp_kind,
                    format!(
                        "write {id} was acknowledged with versionstamp {acked}, but its marker \
                         key carries {stored}"
                    ),
                )),
                _ => {}
            }
            match write.seen {
                Some(true) if visible.is_none() => out.push(violation(
                    Loss,
                    format!(
                        "{state} write {id} was visible after an earlier recovery but is gone \
                         after recovery {recovery}"
                    ),
                )),
                Some(false) if visible.is_some() => out.push(violation(
                    Corrupt,
                    format!(
                        "{state} write {id} was absent after an earlier recovery but is visible \
                         after recovery {recovery}"
                    ),
                )),
                None => write.seen = Some(visible.is_some()),
                _ => {}
            }
            match visible {
                Some(stamp) => {
                    if write.floor.is_some_and(|floor| stamp <= floor) && write.acked.is_none() {
                        out.push(violation(
                            stamp_kind,
                            format!(
                                "unacknowledged write {id} is stored with versionstamp {stamp}, \
                                 not above a commit that returned before it began"
                            ),
                        ));
                    }
                    let mut missing: Vec<usize> = (0..write.spec.group.len()).collect();
                    for (i, key_stamp) in group_found {
                        missing.retain(|m| m != i);
                        if *key_stamp != stamp {
                            out.push(violation(
                                PartialCommit,
                                format!(
                                    "group key {i} of write {id} carries versionstamp \
                                     {key_stamp}, but the write's marker carries {stamp}"
                                ),
                            ));
                        }
                    }
                    if !missing.is_empty() {
                        let kind = if write.acked.is_some() {
                            Loss
                        } else {
                            PartialCommit
                        };
                        out.push(violation(
                            kind,
                            format!(
                                "{state} write {id} is visible (its marker is stored) but group \
                                 keys {missing:?} of its {} are missing",
                                write.spec.group.len()
                            ),
                        ));
                    }
                    if write.spec.enqueue && !self.delivered.contains(&id) {
                        stats.expected_messages += 1;
                        if !delivered_now.contains_key(&id) {
                            let kind = if write.acked.is_some() {
                                Loss
                            } else {
                                PartialCommit
                            };
                            out.push(violation(
                                kind,
                                format!(
                                    "{state} write {id} is visible but its queue message was \
                                     never delivered"
                                ),
                            ));
                        }
                    }
                }
                None => {
                    if !group_found.is_empty() {
                        let present: Vec<usize> = group_found.iter().map(|(i, _)| *i).collect();
                        out.push(violation(
                            PartialCommit,
                            format!(
                                "group keys {present:?} of {state} write {id} are stored, but \
                                 its marker key is not"
                            ),
                        ));
                    }
                }
            }
        }

        // 4. Counters: each must equal the sum of the operands of the visible writes adding to
        // it, and carry the versionstamp of the last of them.
        for index in 0..COUNTERS {
            let adders: Vec<(u64, u64, Versionstamp, bool)> = self
                .writes
                .values()
                .filter_map(|w| match (w.spec.counter, markers.get(&w.spec.id)) {
                    (Some((c, operand)), Some(stamp)) if c == index => {
                        Some((w.spec.id, operand, *stamp, w.acked.is_some()))
                    }
                    _ => None,
                })
                .collect();
            let expected: u64 = adders.iter().map(|a| a.1).sum();
            let acked: u64 = adders.iter().filter(|a| a.3).map(|a| a.1).sum();
            let last = adders.iter().map(|a| a.2).max();
            let stored = counters.get(&index).copied();
            match (stored, last) {
                (None, None) => {}
                (Some((value, stamp)), Some(last)) if value == expected && stamp == last => {}
                (stored, _) => {
                    let kind = if stored.map_or(0, |s| s.0) < acked {
                        Loss
                    } else {
                        PartialCommit
                    };
                    out.push(violation(
                        kind,
                        format!(
                            "counter {index} holds {stored:?} (value, versionstamp), but the {} \
                             visible writes that sum into it add up to {expected} (of which \
                             acknowledged: {acked}) and the last of them has versionstamp \
                             {last:?}",
                            adders.len()
                        ),
                    ));
                }
            }
        }

        // 5. Slots: the visible write with the greatest versionstamp wins.
        for slot in 0..SLOTS {
            let winner = self
                .writes
                .values()
                .filter(|w| w.spec.slot == Some(slot))
                .filter_map(|w| markers.get(&w.spec.id).map(|s| (*s, w.spec.id, w.acked)))
                .max();
            let stored = slots.get(&slot).copied();
            match (stored, winner) {
                (None, None) => {}
                (Some((id, stamp)), Some((w_stamp, w_id, _))) if id == w_id && stamp == w_stamp => {
                }
                (stored, winner) => {
                    let kind = match (stored, winner) {
                        (_, Some((_, _, Some(_)))) => Loss,
                        _ => PartialCommit,
                    };
                    out.push(violation(
                        kind,
                        format!(
                            "slot {slot} holds {stored:?} (write id, versionstamp), but the last \
                             visible write to it is {winner:?} (versionstamp, write id, acked \
                             versionstamp)"
                        ),
                    ));
                }
            }
        }

        // 6. The next commit must come after everything acknowledged.
        if let Some(latest) = self.latest
            && probe <= latest
        {
            out.push(violation(
                stamp_kind,
                format!(
                    "after recovery {recovery} the store gave the parent's commit versionstamp \
                     {probe}, not above {latest}, already acknowledged: versionstamps went back"
                ),
            ));
        }

        self.latest = self.latest.max(Some(probe));
        self.probe = Some(probe);
        self.delivered.extend(delivered_now.keys().copied());
        out.sort_by_key(|v| v.kind);
        (out, stats)
    }
}

/// A short description of a write, for loss messages.
fn describe(spec: &WriteSpec) -> String {
    let mut parts = vec!["marker".to_owned()];
    if let Some((index, operand)) = spec.counter {
        parts.push(format!("sum {operand} into counter {index}"));
    }
    if !spec.group.is_empty() {
        parts.push(format!("{} group keys", spec.group.len()));
    }
    if let Some(slot) = spec.slot {
        parts.push(format!("slot {slot}"));
    }
    if spec.enqueue {
        parts.push("a message".to_owned());
    }
    parts.join(", ")
}

/// A key as Deno would print it (`["kv-crash", "w", 12n]`), or its hex if it does not decode.
fn show_key(bytes: &[u8]) -> String {
    match open_deno_kv_model::decode_key(bytes) {
        Ok(key) => key.to_string(),
        Err(_) => format!("(undecodable) {}", hex(bytes)),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A value shortened for messages.
fn short(value: &KvValue) -> String {
    let text = format!("{value:?}");
    if text.len() > 80 {
        format!(
            "{}…",
            &text[..text.char_indices().nth(80).map_or(text.len(), |(i, _)| i)]
        )
    } else {
        text
    }
}
