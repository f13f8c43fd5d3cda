//! Watch stream framing: each message is a 4-byte little-endian length followed by that many
//! bytes of [`crate::pb::WatchOutput`]; a zero length is a keep-alive. Message boundaries are
//! independent of the transport's chunks, so [`FrameDecoder`] reassembles them.
//!
//! ```
//! use kv_connect::frames::{Frame, FrameDecoder, KEEP_ALIVE, encode_frame};
//! use kv_connect::pb::WatchOutput;
//! let mut bytes = encode_frame(&WatchOutput { status: 1, keys: vec![] });
//! bytes.extend_from_slice(&KEEP_ALIVE);
//! let mut decoder = FrameDecoder::default();
//! decoder.push(&bytes[..3]);
//! assert_eq!(decoder.next_frame().unwrap(), None); // not complete yet
//! decoder.push(&bytes[3..]);
//! assert!(matches!(decoder.next_frame().unwrap(), Some(Frame::Output(_))));
//! assert_eq!(decoder.next_frame().unwrap(), Some(Frame::KeepAlive));
//! ```

use prost::Message;

use crate::ProtocolError;
use crate::pb::WatchOutput;

/// A keep-alive frame: length zero, no payload.
pub const KEEP_ALIVE: [u8; 4] = [0; 4];

/// The largest frame a decoder accepts (Deno's client allows 16 MiB).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// One watch output as a length-prefixed frame.
pub fn encode_frame(output: &WatchOutput) -> Vec<u8> {
    let body = output.encode_to_vec();
    // A WatchOutput of at most 10 keys is far below 4 GiB.
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A keep-alive (length 0).
    KeepAlive,
    /// A watch output.
    Output(WatchOutput),
}

/// Reassembles frames from arbitrary chunks of a watch response body.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buffer: Vec<u8>,
}

impl FrameDecoder {
    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete frame, `None` if more bytes are needed. An oversized or undecodable
    /// frame is an error (`Failed to decode watch output`).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtocolError> {
        let Some(prefix) = self.buffer.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(*prefix) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(ProtocolError::new(format!(
                "Failed to decode watch output: frame of {len} bytes exceeds {MAX_FRAME_BYTES}"
            )));
        }
        if self.buffer.len() < 4 + len {
            return Ok(None);
        }
        let frame: Vec<u8> = self.buffer.drain(..4 + len).skip(4).collect();
        if len == 0 {
            return Ok(Some(Frame::KeepAlive));
        }
        WatchOutput::decode(frame.as_slice())
            .map(|output| Some(Frame::Output(output)))
            .map_err(|e| ProtocolError::new(format!("Failed to decode watch output: {e}")))
    }

    /// Bytes received but not yet part of a complete frame.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }
}
