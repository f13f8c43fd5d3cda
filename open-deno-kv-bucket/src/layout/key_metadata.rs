//! A snapshot entry's metadata: versionstamp, value encoding and expiry, in 19 bytes.

use open_deno_kv_model::Versionstamp;

/// What a snapshot range's `metadata_list` holds for each key: 10 bytes of versionstamp, one
/// byte of value encoding, then the expiry as a signed 64-bit little-endian count of Unix
/// milliseconds, `-1` for none. denokv reads 11 bytes as "no expiry" too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMetadata {
    /// The versionstamp of the commit that wrote the entry.
    pub versionstamp: Versionstamp,
    /// The value's encoding id (1 V8, 2 u64, 3 bytes).
    pub value_encoding: u8,
    /// Expiry in Unix milliseconds, if any.
    pub expire_at_ms: Option<i64>,
}

impl KeyMetadata {
    /// Its 19 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(19);
        out.extend_from_slice(self.versionstamp.as_bytes());
        out.push(self.value_encoding);
        out.extend_from_slice(&self.expire_at_ms.unwrap_or(-1).to_le_bytes());
        out
    }

    /// Reads 11 bytes (no expiry) or at least 19 (denokv ignores what follows); anything else is
    /// `None`. A negative expiry means none.
    pub fn decode(bytes: &[u8]) -> Option<KeyMetadata> {
        let (stamp, rest) = bytes.split_first_chunk::<10>()?;
        let (&value_encoding, rest) = rest.split_first()?;
        let expire_at_ms = match rest.len() {
            0 => None,
            n if n >= 8 => {
                let ms = i64::from_le_bytes(rest[..8].try_into().ok()?);
                (ms >= 0).then_some(ms)
            }
            _ => return None,
        };
        Some(KeyMetadata {
            versionstamp: Versionstamp::from_bytes(*stamp),
            value_encoding,
            expire_at_ms,
        })
    }
}
