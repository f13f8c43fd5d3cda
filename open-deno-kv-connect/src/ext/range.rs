//! The wire shapes of the three range extensions (`range-delete/1`, `count/1`,
//! `watch-range/1`; the [parent module](super) describes the protocol) and their conversions to
//! and from open-deno-kv-model's types, for both sides.
//!
//! Decoders take untrusted bytes and never panic: anything malformed is a [`ProtocolError`].
//!
//! ```
//! use open_deno_kv_connect::ext::{RangeWatchAssembler, range_watch_frames};
//! use open_deno_kv_model::{KeyRange, RangeWatchEvent};
//! let range = KeyRange::new(vec![2, b'a', 0], vec![2, b'z', 0]);
//! // A stream starts with `reread`; the client turns frames back into events.
//! let mut client = RangeWatchAssembler::new(range);
//! let mut events = Vec::new();
//! for frame in range_watch_frames(&RangeWatchEvent::Reread) {
//!     events.extend(client.push(frame).unwrap());
//! }
//! assert_eq!(events, vec![RangeWatchEvent::Reread]);
//! ```

use open_deno_kv_model::watch::MAX_PENDING_RANGE_CHANGES;
use open_deno_kv_model::{KeyRange, RangeChange, RangeCount, RangeWatchEvent};
use prost::Message;

use super::{expiry_from_ms, expiry_ms};
use crate::error::ProtocolError;
use crate::pb;
use crate::values::{entry_from_pb, entry_to_pb};

/// One range delete of an `atomic_write` body (`range-delete/1`, field
/// [`super::RANGE_DELETE_FIELD`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeDeleteExt {
    /// Index into `mutations` of the placeholder ([`super::RANGE_DELETE_MUTATION_TYPE`]) whose
    /// key is the range's (inclusive) start.
    #[prost(uint32, tag = "1")]
    pub mutation: u32,
    /// The range's exclusive end.
    #[prost(bytes = "vec", tag = "2")]
    pub end: Vec<u8>,
}

/// The request body of `range/count` and `range/watch`: the range `[start, end)` of encoded
/// keys (an empty or inverted range holds nothing).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    /// Inclusive start.
    #[prost(bytes = "vec", tag = "1")]
    pub start: Vec<u8>,
    /// Exclusive end.
    #[prost(bytes = "vec", tag = "2")]
    pub end: Vec<u8>,
}

impl RangeRequest {
    /// The client side: the request for `range`.
    pub fn of(range: &KeyRange) -> Self {
        RangeRequest {
            start: range.start.clone(),
            end: range.end.clone(),
        }
    }

    /// The server side: the range a request body names. The bounds' sizes are the server's
    /// limits to check ([`open_deno_kv_model::Limits::accept_range`]).
    pub fn decode_range(body: &[u8]) -> Result<KeyRange, ProtocolError> {
        let request = RangeRequest::decode(body)
            .map_err(|e| ProtocolError::new(format!("Request protobuf is invalid: {e}")))?;
        Ok(KeyRange::new(request.start, request.end))
    }
}

/// The answer of `range/count`: [`RangeCount`] on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeCountResponse {
    /// Visible entries in the range.
    #[prost(uint64, tag = "1")]
    pub entries: u64,
    /// The sum of their encoded key lengths.
    #[prost(uint64, tag = "2")]
    pub key_bytes: u64,
    /// The sum of their encoded value lengths.
    #[prost(uint64, tag = "3")]
    pub value_bytes: u64,
}

impl From<RangeCount> for RangeCountResponse {
    fn from(count: RangeCount) -> Self {
        RangeCountResponse {
            entries: count.entries,
            key_bytes: count.key_bytes,
            value_bytes: count.value_bytes,
        }
    }
}

impl From<RangeCountResponse> for RangeCount {
    fn from(count: RangeCountResponse) -> Self {
        RangeCount {
            entries: count.entries,
            key_bytes: count.key_bytes,
            value_bytes: count.value_bytes,
        }
    }
}

/// One frame of a `range/watch` stream (inside the length prefix of [`crate::frames`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeWatchFrame {
    /// [`RangeWatchEvent::Reread`]: read the range again. Such a frame has no changes.
    #[prost(bool, tag = "1")]
    pub reread: bool,
    /// Changed keys, in key order (part of a [`RangeWatchEvent::Changed`]).
    #[prost(message, repeated, tag = "2")]
    pub changes: Vec<RangeWatchChange>,
    /// The change list goes on in the next frame: the event is complete only at the first frame
    /// without this flag.
    #[prost(bool, tag = "3")]
    pub continues: bool,
}

/// One changed key in a [`RangeWatchFrame`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeWatchChange {
    /// The encoded key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// Its entry now (its key equal to `key`); absent once deleted or expired.
    #[prost(message, optional, tag = "2")]
    pub entry: Option<pb::KvEntry>,
    /// The entry's expiry time, Unix milliseconds; 0 for none.
    #[prost(int64, tag = "3")]
    pub expires_at_ms: i64,
}

/// The most bytes of changes the server puts in one frame before it continues the list in the
/// next: far below the decoders' [`crate::frames::MAX_FRAME_BYTES`], since one change (a key and
/// a value within Deno's limits) is at most a few tens of KiB.
pub const RANGE_WATCH_FRAME_BYTES: usize = 1024 * 1024;

/// The server side: the frames of one event, in order. `Reread` is one frame; `Changed` is as
/// many frames as its changes need at [`RANGE_WATCH_FRAME_BYTES`] each (at least one change per
/// frame), all but the last with `continues = true`.
pub fn range_watch_frames(event: &RangeWatchEvent) -> Vec<RangeWatchFrame> {
    let changes = match event {
        RangeWatchEvent::Reread => {
            return vec![RangeWatchFrame {
                reread: true,
                changes: Vec::new(),
                continues: false,
            }];
        }
        RangeWatchEvent::Changed(changes) => changes,
    };
    let mut frames = Vec::new();
    let mut current: Vec<RangeWatchChange> = Vec::new();
    let mut size = 0;
    for change in changes {
        let change = RangeWatchChange {
            key: change.key.clone(),
            entry: change.entry.as_ref().map(entry_to_pb),
            expires_at_ms: expiry_ms(change.entry.as_ref()),
        };
        let len = change.encoded_len();
        if !current.is_empty() && size + len > RANGE_WATCH_FRAME_BYTES {
            frames.push(RangeWatchFrame {
                reread: false,
                changes: std::mem::take(&mut current),
                continues: true,
            });
            size = 0;
        }
        size += len;
        current.push(change);
    }
    frames.push(RangeWatchFrame {
        reread: false,
        changes: current,
        continues: false,
    });
    frames
}

/// The client side: turns the frames of one `range/watch` stream back into events, checking
/// them: the stream starts with `reread`, every key lies in the watched range and the keys of
/// one event are in strictly ascending order, an entry's key is its change's key, a split
/// change list holds no more than [`MAX_PENDING_RANGE_CHANGES`] changes.
#[derive(Debug)]
pub struct RangeWatchAssembler {
    range: KeyRange,
    /// The changes of a split list received so far.
    pending: Vec<RangeChange>,
    /// Whether this stream's first frame (which must be `reread`) was seen.
    started: bool,
}

impl RangeWatchAssembler {
    /// An assembler for a new stream watching `range`.
    pub fn new(range: KeyRange) -> Self {
        RangeWatchAssembler {
            range,
            pending: Vec::new(),
            started: false,
        }
    }

    /// A new stream of the same watch begins (after a reconnect): a change list left half
    /// received is dropped, and the new stream must start with `reread` again.
    pub fn restart(&mut self) {
        self.pending.clear();
        self.started = false;
    }

    /// Takes one frame; returns the event it completes, if any.
    pub fn push(
        &mut self,
        frame: RangeWatchFrame,
    ) -> Result<Option<RangeWatchEvent>, ProtocolError> {
        let bad = |what: &str| ProtocolError::new(format!("invalid range watch frame: {what}"));
        if frame.reread {
            if !frame.changes.is_empty() || frame.continues {
                return Err(bad("a reread frame with changes"));
            }
            if !self.pending.is_empty() {
                return Err(bad("a reread in the middle of a change list"));
            }
            self.started = true;
            return Ok(Some(RangeWatchEvent::Reread));
        }
        if !self.started {
            return Err(bad("the stream does not start with reread"));
        }
        if frame.changes.is_empty() {
            return Err(bad("no changes"));
        }
        if self.pending.len() + frame.changes.len() > MAX_PENDING_RANGE_CHANGES {
            return Err(bad("more changes in one event than a range watch sends"));
        }
        for change in frame.changes {
            if !self.range.contains(&change.key) {
                return Err(bad("a key outside the watched range"));
            }
            if self
                .pending
                .last()
                .is_some_and(|previous| previous.key >= change.key)
            {
                return Err(bad("keys out of order"));
            }
            let entry = match change.entry {
                Some(entry) => {
                    if entry.key != change.key {
                        return Err(bad("an entry under another key"));
                    }
                    let mut entry = entry_from_pb(entry)?;
                    entry.expires_at = expiry_from_ms(change.expires_at_ms)?;
                    Some(entry)
                }
                None => None,
            };
            self.pending.push(RangeChange {
                key: change.key,
                entry,
            });
        }
        if frame.continues {
            return Ok(None);
        }
        Ok(Some(RangeWatchEvent::Changed(std::mem::take(
            &mut self.pending,
        ))))
    }
}

#[cfg(test)]
mod tests;
