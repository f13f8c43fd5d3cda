//! Versionstamps: the 10-byte commit identifiers of Deno KV.
//!
//! Every successful atomic write gets one versionstamp, and every key it writes carries it. They
//! strictly increase in commit order, so comparing two versionstamps tells which commit came
//! later; they are not dense (Deno adds a random 1–9 per commit), so nothing may rely on
//! consecutive values.
//!
//! In Deno's SQLite layout the first 8 bytes are the big-endian commit version and the last 2 a
//! sequence number (0 in practice).
//!
//! ```
//! use open_deno_kv_model::Versionstamp;
//! let vs = Versionstamp::from_version(120, 0);
//! assert_eq!(vs.to_string(), "00000000000000780000");
//! assert_eq!("00000000000000780000".parse::<Versionstamp>().unwrap(), vs);
//! assert_eq!(vs.version(), 120);
//! ```

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// A 10-byte commit identifier, displayed as 20 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Versionstamp([u8; 10]);

/// A string that is not 20 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid versionstamp {input:?}: expected 20 hexadecimal digits")]
pub struct VersionstampParseError {
    /// What was given.
    pub input: String,
}

impl Versionstamp {
    /// The smallest versionstamp; no commit ever gets it.
    pub const ZERO: Versionstamp = Versionstamp([0; 10]);

    /// Wraps 10 raw bytes.
    pub const fn from_bytes(bytes: [u8; 10]) -> Self {
        Versionstamp(bytes)
    }

    /// Builds the versionstamp of commit `version` with sequence `seq`, as Deno's SQLite backend
    /// does: 8 bytes big-endian version, then 2 bytes big-endian sequence.
    pub fn from_version(version: u64, seq: u16) -> Self {
        let mut bytes = [0u8; 10];
        bytes[..8].copy_from_slice(&version.to_be_bytes());
        bytes[8..].copy_from_slice(&seq.to_be_bytes());
        Versionstamp(bytes)
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 10] {
        &self.0
    }

    /// The commit version: the first 8 bytes, big-endian.
    pub fn version(&self) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(v)
    }

    /// The sequence number: the last 2 bytes, big-endian.
    pub fn seq(&self) -> u16 {
        u16::from_be_bytes([self.0[8], self.0[9]])
    }
}

impl fmt::Display for Versionstamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Versionstamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Versionstamp({self})")
    }
}

impl FromStr for Versionstamp {
    type Err = VersionstampParseError;

    /// Parses 20 hex digits (either case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut bytes = [0u8; 10];
        hex::decode_to_slice(s, &mut bytes).map_err(|_| VersionstampParseError {
            input: s.to_owned(),
        })?;
        Ok(Versionstamp(bytes))
    }
}

impl From<[u8; 10]> for Versionstamp {
    fn from(bytes: [u8; 10]) -> Self {
        Versionstamp(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rejects_wrong_length_and_digits() {
        assert!("0000000000000078000".parse::<Versionstamp>().is_err());
        assert!("000000000000007800000".parse::<Versionstamp>().is_err());
        assert!("0000000000000078000g".parse::<Versionstamp>().is_err());
        assert_eq!(
            "00000000000000ABCDEF"
                .parse::<Versionstamp>()
                .unwrap()
                .to_string(),
            "00000000000000abcdef"
        );
    }

    #[test]
    fn order_follows_version_then_seq() {
        assert!(Versionstamp::from_version(1, 9) < Versionstamp::from_version(2, 0));
        assert!(Versionstamp::from_version(2, 0) < Versionstamp::from_version(2, 1));
        assert_eq!(Versionstamp::from_version(0x0102, 3).seq(), 3);
        assert_eq!(Versionstamp::from_version(u64::MAX, 0).version(), u64::MAX);
    }
}
