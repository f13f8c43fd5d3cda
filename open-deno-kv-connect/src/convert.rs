//! Conversions between the wire messages ([`crate::pb`]) and open-deno-kv-model's types, for both sides.
//!
//! Decoders take untrusted bytes and never panic: anything malformed is a [`ProtocolError`] whose
//! text is denokv's where denokv has one (a server answers it with status 400).

use open_deno_kv_model::{
    AtomicWrite, Check, CommitResult, Enqueue, KvEntry, Mutation, MutationKind, ReadRange,
    ReadRangeOutput, SnapshotRead, WatchKeyOutput, ms_to_datetime,
};
use prost::Message;

use crate::error::ProtocolError;
use crate::ext::WatchExpiry;
use crate::frames::WatchFrame;
use crate::pb;
use crate::values::versionstamp_from;
pub use crate::values::{
    TEXT_BAD_VERSIONSTAMP, entry_from_pb, entry_to_pb, value_from_pb, value_to_pb,
};

/// denokv: a range limit of 0 or less.
pub const TEXT_BAD_READ_LIMIT: &str =
    "The read range limit of the snapshot read request is invalid.";
/// denokv: a mutation without its value, or of an unknown type.
pub const TEXT_BAD_MUTATION: &str = "Invalid mutation kind or arguments.";
/// denokv: `expire_at_ms` below −1.
pub const TEXT_BAD_EXPIRE_AT: &str = "Invalid mutation expire at.";
/// denokv: an enqueue deadline that is negative or not a time.
pub const TEXT_BAD_DEADLINE: &str = "Invalid mutation enqueue deadline.";
/// This project's servers (not denokv, which has no such answer): an atomic write whose outcome
/// the store could not learn, answered with status 409 Conflict. Neither Deno's client nor
/// `@deno/kv` retries a 4xx (both replay a 5xx), so the write is not applied a second time
/// behind the caller's back; the caller reads what it wrote before trying again.
pub const TEXT_OUTCOME_UNKNOWN: &str = "The write may or may not have been committed: the \
     database could not be reached to find out. Read what it wrote before retrying it.";

fn decode_message<M: Message + Default>(body: &[u8]) -> Result<M, ProtocolError> {
    M::decode(body).map_err(|e| ProtocolError::new(format!("Request protobuf is invalid: {e}")))
}

// ---- snapshot_read --------------------------------------------------------------------------------

/// Server: decodes a `snapshot_read` body.
pub fn decode_snapshot_read(body: &[u8]) -> Result<SnapshotRead, ProtocolError> {
    let message: pb::SnapshotRead = decode_message(body)?;
    let ranges = message
        .ranges
        .into_iter()
        .map(|range| {
            let limit = u32::try_from(range.limit)
                .ok()
                .filter(|limit| *limit > 0)
                .ok_or_else(|| ProtocolError::new(TEXT_BAD_READ_LIMIT))?;
            Ok(ReadRange {
                start: range.start,
                end: range.end,
                limit,
                reverse: range.reverse,
            })
        })
        .collect::<Result<_, ProtocolError>>()?;
    Ok(SnapshotRead {
        ranges,
        ..Default::default()
    })
}

/// Server: the successful answer to a `snapshot_read` (strongly consistent, `SR_SUCCESS`).
pub fn snapshot_read_output(ranges: &[ReadRangeOutput]) -> pb::SnapshotReadOutput {
    pb::SnapshotReadOutput {
        ranges: ranges
            .iter()
            .map(|range| pb::ReadRangeOutput {
                values: range.entries.iter().map(entry_to_pb).collect(),
            })
            .collect(),
        read_disabled: false,
        read_is_strongly_consistent: true,
        status: pb::SnapshotReadStatus::SrSuccess as i32,
    }
}

/// Client: a `snapshot_read` request.
pub fn encode_snapshot_read(read: &SnapshotRead) -> pb::SnapshotRead {
    pb::SnapshotRead {
        ranges: read
            .ranges
            .iter()
            .map(|range| pb::ReadRange {
                start: range.start.clone(),
                end: range.end.clone(),
                limit: i32::try_from(range.limit).unwrap_or(i32::MAX),
                reverse: range.reverse,
            })
            .collect(),
    }
}

/// Client: decodes a `snapshot_read` answer; the server must report success and strong
/// consistency, and every entry must be well-formed.
pub fn decode_snapshot_read_output(body: &[u8]) -> Result<Vec<ReadRangeOutput>, ProtocolError> {
    let message: pb::SnapshotReadOutput = decode_message(body)?;
    if message.read_disabled || message.status == pb::SnapshotReadStatus::SrReadDisabled as i32 {
        return Err(ProtocolError::new("Reads are disabled for this database"));
    }
    if message.status != pb::SnapshotReadStatus::SrSuccess as i32 {
        return Err(ProtocolError::new(format!(
            "Unspecified read error (code={})",
            message.status
        )));
    }
    if !message.read_is_strongly_consistent {
        return Err(ProtocolError::new(
            "Strong consistency reads are not available for this database",
        ));
    }
    message
        .ranges
        .into_iter()
        .map(|range| {
            Ok(ReadRangeOutput {
                entries: range
                    .values
                    .into_iter()
                    .map(entry_from_pb)
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

// ---- atomic_write -------------------------------------------------------------------------------

/// Server: decodes an `atomic_write` body into open-deno-kv-model's write. Checks versionstamp lengths,
/// mutation kinds and their values (LE64 must be 8 bytes), expiry times and enqueue deadlines.
pub fn decode_atomic_write(body: &[u8]) -> Result<AtomicWrite, ProtocolError> {
    let message: pb::AtomicWrite = decode_message(body)?;
    let checks = message
        .checks
        .into_iter()
        .map(|check| {
            let versionstamp = if check.versionstamp.is_empty() {
                None
            } else {
                Some(versionstamp_from(&check.versionstamp)?)
            };
            Ok(Check {
                key: check.key,
                versionstamp,
            })
        })
        .collect::<Result<_, ProtocolError>>()?;
    let mutations = message
        .mutations
        .into_iter()
        .map(mutation_from_pb)
        .collect::<Result<_, _>>()?;
    let enqueues = message
        .enqueues
        .into_iter()
        .map(enqueue_from_pb)
        .collect::<Result<_, _>>()?;
    Ok(AtomicWrite {
        checks,
        mutations,
        enqueues,
    })
}

fn mutation_from_pb(mutation: pb::Mutation) -> Result<Mutation, ProtocolError> {
    let expire_at = match mutation.expire_at_ms {
        0 | -1 => None,
        ms if ms < -1 => return Err(ProtocolError::new(TEXT_BAD_EXPIRE_AT)),
        ms => Some(ms_to_datetime(ms).ok_or_else(|| ProtocolError::new(TEXT_BAD_EXPIRE_AT))?),
    };
    // A range delete's placeholder (`range-delete/1`): its end comes from the extension field
    // (`ext::AtomicWriteExt::apply_to`), which refuses the write if it does not supply one.
    if mutation.mutation_type == crate::ext::RANGE_DELETE_MUTATION_TYPE {
        return Ok(Mutation {
            key: mutation.key,
            kind: MutationKind::DeleteRange { end: Vec::new() },
            expire_at: None,
        });
    }
    let kind = pb::MutationType::try_from(mutation.mutation_type)
        .map_err(|_| ProtocolError::new(TEXT_BAD_MUTATION))?;
    // Deno sends a delete with an empty BYTES value: accepted and ignored.
    if kind == pb::MutationType::MDelete {
        return Ok(Mutation {
            key: mutation.key,
            kind: MutationKind::Delete,
            expire_at,
        });
    }
    let value = value_from_pb(
        mutation
            .value
            .ok_or_else(|| ProtocolError::new(TEXT_BAD_MUTATION))?,
    )?;
    let kind = match kind {
        pb::MutationType::MSet => MutationKind::Set(value),
        pb::MutationType::MSum => MutationKind::Sum {
            value,
            min_v8: mutation.sum_min,
            max_v8: mutation.sum_max,
            clamp: mutation.sum_clamp,
        },
        pb::MutationType::MMin => MutationKind::Min(value),
        pb::MutationType::MMax => MutationKind::Max(value),
        pb::MutationType::MSetSuffixVersionstampedKey => {
            MutationKind::SetSuffixVersionstampedKey(value)
        }
        pb::MutationType::MDelete | pb::MutationType::MUnspecified => {
            return Err(ProtocolError::new(TEXT_BAD_MUTATION));
        }
    };
    Ok(Mutation {
        key: mutation.key,
        kind,
        expire_at,
    })
}

fn enqueue_from_pb(enqueue: pb::Enqueue) -> Result<Enqueue, ProtocolError> {
    let ready_at = Some(enqueue.deadline_ms)
        .filter(|ms| *ms >= 0)
        .and_then(ms_to_datetime)
        .ok_or_else(|| ProtocolError::new(TEXT_BAD_DEADLINE))?;
    Ok(Enqueue {
        payload: enqueue.payload,
        ready_at,
        keys_if_undelivered: enqueue.keys_if_undelivered,
        // The protocol cannot say "never retry": an empty schedule means the default.
        backoff_schedule: (!enqueue.backoff_schedule.is_empty())
            .then_some(enqueue.backoff_schedule),
    })
}

/// Server: the answer to an `atomic_write`: the commit's versionstamp, or a check failure with
/// the indexes of the checks known to have failed (may be empty).
pub fn atomic_write_output(
    result: Option<CommitResult>,
    failed_checks: Vec<u32>,
) -> pb::AtomicWriteOutput {
    match result {
        Some(commit) => pb::AtomicWriteOutput {
            status: pb::AtomicWriteStatus::AwSuccess as i32,
            versionstamp: commit.versionstamp.as_bytes().to_vec(),
            failed_checks: Vec::new(),
        },
        None => pb::AtomicWriteOutput {
            status: pb::AtomicWriteStatus::AwCheckFailure as i32,
            versionstamp: Vec::new(),
            failed_checks,
        },
    }
}

/// Client: an `atomic_write` request. Enqueue times become absolute milliseconds, and a
/// "never retry" schedule (`Some(empty)`) cannot be expressed: it travels as the default.
pub fn encode_atomic_write(write: &AtomicWrite) -> pb::AtomicWrite {
    pb::AtomicWrite {
        checks: write
            .checks
            .iter()
            .map(|check| pb::Check {
                key: check.key.clone(),
                versionstamp: check
                    .versionstamp
                    .map(|vs| vs.as_bytes().to_vec())
                    .unwrap_or_default(),
            })
            .collect(),
        mutations: write.mutations.iter().map(mutation_to_pb).collect(),
        enqueues: write
            .enqueues
            .iter()
            .map(|enqueue| pb::Enqueue {
                payload: enqueue.payload.clone(),
                deadline_ms: enqueue.ready_at.timestamp_millis(),
                keys_if_undelivered: enqueue.keys_if_undelivered.clone(),
                backoff_schedule: enqueue.backoff_schedule.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

fn mutation_to_pb(mutation: &Mutation) -> pb::Mutation {
    let mut out = pb::Mutation {
        key: mutation.key.clone(),
        expire_at_ms: mutation.expire_at.map_or(0, |at| at.timestamp_millis()),
        ..Default::default()
    };
    let (kind, value) = match &mutation.kind {
        MutationKind::Set(v) => (pb::MutationType::MSet, Some(v)),
        MutationKind::Delete => (pb::MutationType::MDelete, None),
        // KV Connect has no range delete: it travels as a placeholder of a mutation type the
        // protocol does not have (other servers refuse the write), keyed by its start; the
        // `range-delete/1` field of the same body carries its end (see `crate::ext`).
        MutationKind::DeleteRange { .. } => {
            out.mutation_type = crate::ext::RANGE_DELETE_MUTATION_TYPE;
            return out;
        }
        MutationKind::Sum {
            value,
            min_v8,
            max_v8,
            clamp,
        } => {
            out.sum_min = min_v8.clone();
            out.sum_max = max_v8.clone();
            out.sum_clamp = *clamp;
            (pb::MutationType::MSum, Some(value))
        }
        MutationKind::Min(v) => (pb::MutationType::MMin, Some(v)),
        MutationKind::Max(v) => (pb::MutationType::MMax, Some(v)),
        MutationKind::SetSuffixVersionstampedKey(v) => {
            (pb::MutationType::MSetSuffixVersionstampedKey, Some(v))
        }
    };
    out.mutation_type = kind as i32;
    out.value = value.map(value_to_pb);
    out
}

/// What an `atomic_write` answer says (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtomicWriteResult {
    /// Committed with this versionstamp.
    Committed(CommitResult),
    /// A check failed; the indexes the server reported.
    CheckFailed(Vec<u32>),
}

/// Client: decodes an `atomic_write` answer.
pub fn decode_atomic_write_output(body: &[u8]) -> Result<AtomicWriteResult, ProtocolError> {
    let message: pb::AtomicWriteOutput = decode_message(body)?;
    match pb::AtomicWriteStatus::try_from(message.status) {
        Ok(pb::AtomicWriteStatus::AwSuccess) => Ok(AtomicWriteResult::Committed(CommitResult {
            versionstamp: versionstamp_from(&message.versionstamp)?,
        })),
        Ok(pb::AtomicWriteStatus::AwCheckFailure) => {
            Ok(AtomicWriteResult::CheckFailed(message.failed_checks))
        }
        Ok(pb::AtomicWriteStatus::AwWriteDisabled) => {
            Err(ProtocolError::new("Writes are disabled for this database"))
        }
        _ => Err(ProtocolError::new("Unspecified write error")),
    }
}

// ---- watch --------------------------------------------------------------------------------------

/// Server: decodes a `watch` body into the watched keys.
pub fn decode_watch(body: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let message: pb::Watch = decode_message(body)?;
    Ok(message.keys.into_iter().map(|k| k.key).collect())
}

/// Client: a `watch` request.
pub fn encode_watch(keys: &[Vec<u8>]) -> pb::Watch {
    pb::Watch {
        keys: keys
            .iter()
            .map(|key| pb::WatchKey { key: key.clone() })
            .collect(),
    }
}

/// Server: one watch frame holding every watched key's current entry (`None`: absent), each with
/// `changed = true` — Deno 2.9.6 reads `changed = false` as "deleted".
pub fn watch_output(entries: &[Option<KvEntry>]) -> pb::WatchOutput {
    pb::WatchOutput {
        status: pb::SnapshotReadStatus::SrSuccess as i32,
        keys: entries
            .iter()
            .map(|entry| pb::WatchKeyOutput {
                changed: true,
                entry_if_changed: entry.as_ref().map(entry_to_pb),
            })
            .collect(),
    }
}

/// Client: one decoded watch frame as open-deno-kv-model's emission (`changed = false` is "unchanged", as
/// the protocol means it).
pub fn watch_output_from_pb(output: pb::WatchOutput) -> Result<Vec<WatchKeyOutput>, ProtocolError> {
    match pb::SnapshotReadStatus::try_from(output.status) {
        Ok(pb::SnapshotReadStatus::SrSuccess) => {}
        Ok(pb::SnapshotReadStatus::SrReadDisabled) => {
            return Err(ProtocolError::new("Reads are disabled for this database"));
        }
        _ => {
            return Err(ProtocolError::new(format!(
                "Unspecified read error (code={})",
                output.status
            )));
        }
    }
    output
        .keys
        .into_iter()
        .map(|key| {
            if key.changed {
                Ok(WatchKeyOutput::Changed(
                    key.entry_if_changed.map(entry_from_pb).transpose()?,
                ))
            } else {
                Ok(WatchKeyOutput::Unchanged)
            }
        })
        .collect()
}

/// Server: the frame for the watched keys' current entries ([`watch_output`]), with their
/// expiry times when the client asked for `expiry/1`.
pub fn watch_frame(entries: &[Option<KvEntry>], expiry: bool) -> WatchFrame {
    WatchFrame {
        output: watch_output(entries),
        expiry: expiry.then(|| WatchExpiry::of(entries)),
    }
}

/// Client: one decoded frame as open-deno-kv-model's emission ([`watch_output_from_pb`]), the entries
/// carrying the expiry times of the `expiry/1` extension when the frame has it.
pub fn watch_frame_from_pb(frame: WatchFrame) -> Result<Vec<WatchKeyOutput>, ProtocolError> {
    let mut outputs = watch_output_from_pb(frame.output)?;
    if let Some(expiry) = frame.expiry {
        expiry.apply_to(&mut outputs)?;
    }
    Ok(outputs)
}
