//! Watch stream framing: each message is a 4-byte little-endian length followed by that many
//! bytes of [`crate::pb::WatchOutput`]; a zero length is a keep-alive. Message boundaries are
//! independent of the transport's chunks, so [`FrameDecoder`] reassembles them.
//!
//! A frame may carry the `expiry/1` extension ([`crate::ext`]): a [`WatchExpiry`] appended to
//! the `WatchOutput` bytes inside the same frame (the length covers both). Only a server and a
//! client that negotiated it write and read it: [`WatchFrame::expiry`] is `None` otherwise, and
//! the bytes are then exactly KV Connect's, as Deno's client and server write them.
//!
//! ```
//! use open_deno_kv_connect::ext::WatchExpiry;
//! use open_deno_kv_connect::frames::{Frame, FrameDecoder, KEEP_ALIVE, WatchFrame, encode_frame};
//! use open_deno_kv_connect::pb::WatchOutput;
//! let plain = WatchFrame::plain(WatchOutput { status: 1, keys: vec![] });
//! let mut bytes = encode_frame(&plain);
//! bytes.extend_from_slice(&KEEP_ALIVE);
//! let mut decoder = FrameDecoder::default(); // no extension: what Deno's client reads
//! decoder.push(&bytes[..3]);
//! assert_eq!(decoder.next_frame().unwrap(), None); // not complete yet
//! decoder.push(&bytes[3..]);
//! assert_eq!(decoder.next_frame().unwrap(), Some(Frame::Output(plain)));
//! assert_eq!(decoder.next_frame().unwrap(), Some(Frame::KeepAlive));
//!
//! // With `expiry/1` negotiated, both sides carry the times.
//! let timed = WatchFrame {
//!     output: WatchOutput { status: 1, keys: vec![Default::default()] },
//!     expiry: Some(WatchExpiry { expires_at_ms: vec![1_700_000_000_000] }),
//! };
//! let mut decoder = FrameDecoder::new(true);
//! decoder.push(&encode_frame(&timed));
//! assert_eq!(decoder.next_frame().unwrap(), Some(Frame::Output(timed)));
//! ```

use prost::Message;

use crate::error::ProtocolError;
use crate::ext::WatchExpiry;
pub use crate::framing::{KEEP_ALIVE, encode_payload};
use crate::pb::WatchOutput;

/// The largest frame a decoder accepts (Deno's client allows 16 MiB).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// What one watch frame carries.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchFrame {
    /// The protocol's message: every watched key's state.
    pub output: WatchOutput,
    /// The `expiry/1` extension: one expiry time per key. `None` when it was not negotiated;
    /// the frame is then KV Connect's alone.
    pub expiry: Option<WatchExpiry>,
}

impl WatchFrame {
    /// A frame without extension (what a client that asked for none gets).
    pub fn plain(output: WatchOutput) -> Self {
        WatchFrame {
            output,
            expiry: None,
        }
    }
}

/// One watch frame, length-prefixed: the output, then the extension when there is one.
pub fn encode_frame(frame: &WatchFrame) -> Vec<u8> {
    let mut body = frame.output.encode_to_vec();
    if let Some(expiry) = &frame.expiry {
        body.extend_from_slice(&expiry.encode_to_vec());
    }
    encode_payload(&body)
}

/// A frame's bytes, before they are decoded as a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawFrame {
    /// A keep-alive (length 0).
    KeepAlive,
    /// The bytes of one message.
    Payload(Vec<u8>),
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A keep-alive (length 0).
    KeepAlive,
    /// A watch output.
    Output(WatchFrame),
}

/// Reassembles frames from arbitrary chunks of a watch response body.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buffer: Vec<u8>,
    /// Read the `expiry/1` extension from every frame.
    expiry: bool,
    /// The largest frame accepted, if lower than [`MAX_FRAME_BYTES`].
    max_frame: Option<usize>,
}

impl FrameDecoder {
    /// A decoder for a watch whose request asked for `expiry/1` (`true`) or for nothing
    /// (`false`, the same as [`FrameDecoder::default`]: the extension's bytes, if a server sent
    /// them anyway, are skipped as protobuf skips unknown fields).
    pub fn new(expiry: bool) -> Self {
        FrameDecoder {
            buffer: Vec::new(),
            expiry,
            max_frame: None,
        }
    }

    /// A decoder that refuses frames longer than `max` bytes (at most [`MAX_FRAME_BYTES`]):
    /// a server reading a framed request body (`snapshot/1`'s import) bounds what it buffers.
    pub fn with_max_frame(max: usize) -> Self {
        FrameDecoder {
            max_frame: Some(max.min(MAX_FRAME_BYTES)),
            ..FrameDecoder::default()
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete frame, `None` if more bytes are needed. An oversized or undecodable
    /// frame is an error (`Failed to decode watch output`).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtocolError> {
        let frame = match self.next_payload()? {
            None => return Ok(None),
            Some(RawFrame::KeepAlive) => return Ok(Some(Frame::KeepAlive)),
            Some(RawFrame::Payload(frame)) => frame,
        };
        let failed = |e: prost::DecodeError| {
            ProtocolError::new(format!("Failed to decode watch output: {e}"))
        };
        let output = WatchOutput::decode(frame.as_slice()).map_err(failed)?;
        let expiry = if self.expiry {
            Some(WatchExpiry::decode(frame.as_slice()).map_err(failed)?)
        } else {
            None
        };
        Ok(Some(Frame::Output(WatchFrame { output, expiry })))
    }

    /// The next complete frame's bytes, undecoded (for streams of other messages framed the
    /// same way, such as `watch-range/1`); `None` if more bytes are needed. A frame longer than
    /// [`MAX_FRAME_BYTES`] is an error.
    pub fn next_payload(&mut self) -> Result<Option<RawFrame>, ProtocolError> {
        let Some(prefix) = self.buffer.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(*prefix) as usize;
        let max = self.max_frame.unwrap_or(MAX_FRAME_BYTES);
        if len > max {
            return Err(ProtocolError::new(format!(
                "Failed to decode watch output: frame of {len} bytes exceeds {max}"
            )));
        }
        if self.buffer.len() < 4 + len {
            return Ok(None);
        }
        let frame: Vec<u8> = self.buffer.drain(..4 + len).skip(4).collect();
        if len == 0 {
            return Ok(Some(RawFrame::KeepAlive));
        }
        Ok(Some(RawFrame::Payload(frame)))
    }

    /// Bytes received but not yet part of a complete frame.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{watch_frame, watch_frame_from_pb};
    use chrono::{DateTime, Utc};
    use open_deno_kv_model::{KvEntry, KvValue, Versionstamp, WatchKeyOutput};

    fn entry(name: &str, expires_at: Option<DateTime<Utc>>) -> KvEntry {
        KvEntry {
            key: vec![2, name.as_bytes()[0], 0].into(),
            value: KvValue::U64(7),
            versionstamp: Versionstamp::from_version(3, 0),
            expires_at,
        }
    }

    fn decode_one(decoder: &mut FrameDecoder, bytes: &[u8]) -> WatchFrame {
        decoder.push(bytes);
        match decoder.next_frame() {
            Ok(Some(Frame::Output(frame))) => frame,
            other => panic!("expected one frame, got {other:?}"),
        }
    }

    #[test]
    fn a_frame_without_the_extension_is_kv_connects_bytes() {
        let entries = [Some(entry("a", Some(Utc::now()))), None];
        let frame = watch_frame(&entries, false);
        let body = frame.output.encode_to_vec();
        let mut expected = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
        expected.extend_from_slice(&body);
        assert_eq!(encode_frame(&frame), expected);
    }

    #[test]
    fn expiry_times_travel_when_both_sides_negotiated_them() {
        let at = DateTime::from_timestamp_millis(1_700_000_123_456).unwrap();
        let entries = [Some(entry("a", Some(at))), Some(entry("b", None)), None];
        let bytes = encode_frame(&watch_frame(&entries, true));
        let frame = decode_one(&mut FrameDecoder::new(true), &bytes);
        let outputs = watch_frame_from_pb(frame).unwrap();
        let expected: Vec<WatchKeyOutput> = entries
            .iter()
            .cloned()
            .map(WatchKeyOutput::Changed)
            .collect();
        assert_eq!(outputs, expected);
    }

    #[test]
    fn a_client_that_did_not_ask_reads_the_protocol_alone() {
        let at = DateTime::from_timestamp_millis(1_700_000_123_456).unwrap();
        let entries = [Some(entry("a", Some(at)))];
        let bytes = encode_frame(&watch_frame(&entries, true));
        let frame = decode_one(&mut FrameDecoder::default(), &bytes);
        assert_eq!(frame, watch_frame(&entries, false));
        let outputs = watch_frame_from_pb(frame).unwrap();
        assert_eq!(
            outputs,
            vec![WatchKeyOutput::Changed(Some(entry("a", None)))]
        );
    }

    #[test]
    fn a_negotiated_frame_without_its_times_is_refused() {
        let bytes = encode_frame(&watch_frame(&[Some(entry("a", None))], false));
        let frame = decode_one(&mut FrameDecoder::new(true), &bytes);
        let err = watch_frame_from_pb(frame).unwrap_err();
        assert_eq!(err.message, "expiry extension: wrong number of keys");
    }
}
