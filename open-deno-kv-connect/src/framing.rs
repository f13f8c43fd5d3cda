//! The length prefix of every stream frame (watch frames, range watch frames, snapshot frames):
//! 4 bytes, little-endian, then the message; a zero length is a keep-alive. Re-exported by
//! [`crate::frames`].

/// A keep-alive frame: length zero, no payload.
pub const KEEP_ALIVE: [u8; 4] = [0; 4];

/// Any message framed as a watch stream frames it: its length (4 bytes, little-endian), then
/// its bytes. The `watch-range/1` stream and the snapshot stream use it too.
pub fn encode_payload(body: &[u8]) -> Vec<u8> {
    // A frame is bounded far below 4 GiB (10 watched keys, or a split range watch event).
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut bytes = Vec::with_capacity(4 + body.len());
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}
