//! Object names: what each object of a bucket is called, parsed strictly.

use std::fmt;

use open_deno_kv_model::Versionstamp;

/// The folder of snapshot range objects.
pub const SNAPSHOTS: &str = "snapshots/";
/// The folder of log segment objects.
pub const LOGS: &str = "logs/";
/// The object holding the versionstamp a snapshot is consistent at (20 hex digits).
pub const DIFFERENTIAL: &str = "differential";
/// The folder of this crate's own objects, which denokv never lists.
pub const OURS: &str = "odkv/";
/// Snapshot manifests: `odkv/snapshots/<versionstamp>.bin`.
pub const MANIFESTS: &str = "odkv/snapshots/";
/// Segment side objects: `odkv/logs/<the segment's name>`.
pub const SIDES: &str = "odkv/logs/";
/// Objects of earlier generations, moved out of denokv's sight: `odkv/archive/snapshots/…`
/// and `odkv/archive/logs/…`.
pub const ARCHIVE: &str = "odkv/archive/";

/// The name of one snapshot range object, `snapshots/<name>.bin`.
///
/// Two forms: format 0, `<epoch>_<tsn>_<seq>` (each 16 hex digits; `monoseq` is
/// `epoch << 32 | tsn`), which Deno Deploy writes; and format 1, `0001_<monoseq>_<seq>`, which
/// this crate writes with `monoseq` the snapshot's commit version. `seq` numbers the ranges of
/// one snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotRangeName {
    /// 0 or 1.
    pub format_version: u16,
    /// The snapshot's sequence (see the type's documentation).
    pub monoseq: u64,
    /// The range's number within the snapshot.
    pub seq: u64,
}

/// The name of one log segment object, `logs/<name>.bin`.
///
/// Format 0: `<epoch>_<tsn>_<first>_<last>`; format 1: `0001_<monoseq>_<first>_<last>`, where
/// `first` and `last` are the 12-byte versionstamps (24 hex digits) of the segment's first and
/// last change. This crate writes format 1 with `monoseq` the first commit's version, so names
/// sort in commit order, as denokv's listing (`start-after` the last name it read) needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentName {
    /// 0 or 1.
    pub format_version: u16,
    /// The segment's sequence.
    pub monoseq: u64,
    /// The first change's 12-byte versionstamp.
    pub first: [u8; 12],
    /// The last change's 12-byte versionstamp.
    pub last: [u8; 12],
}

impl SegmentName {
    /// The versionstamp of the segment's first commit.
    pub fn first_commit(&self) -> Versionstamp {
        commit_of(&self.first)
    }

    /// The versionstamp of the segment's last commit.
    pub fn last_commit(&self) -> Versionstamp {
        commit_of(&self.last)
    }
}

/// The 10-byte commit versionstamp of a 12-byte change versionstamp.
pub fn commit_of(stamp12: &[u8; 12]) -> Versionstamp {
    let mut ten = [0u8; 10];
    ten.copy_from_slice(&stamp12[..10]);
    Versionstamp::from_bytes(ten)
}

/// A 12-byte change versionstamp: the commit's, then `index` (big-endian).
pub fn change_stamp(commit: Versionstamp, index: u16) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..10].copy_from_slice(commit.as_bytes());
    out[10..].copy_from_slice(&index.to_be_bytes());
    out
}

fn sequence(f: &mut fmt::Formatter<'_>, format_version: u16, monoseq: u64) -> fmt::Result {
    if format_version == 0 {
        write!(f, "{:016x}_{:016x}", monoseq >> 32, monoseq & 0xffff_ffff)
    } else {
        write!(f, "{format_version:04x}_{monoseq:016x}")
    }
}

impl fmt::Display for SnapshotRangeName {
    /// The name without folder and `.bin`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        sequence(f, self.format_version, self.monoseq)?;
        write!(f, "_{:016x}", self.seq)
    }
}

impl fmt::Display for SegmentName {
    /// The name without folder and `.bin`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        sequence(f, self.format_version, self.monoseq)?;
        write!(f, "_{}_{}", hex::encode(self.first), hex::encode(self.last))
    }
}

/// Reads the leading `<format>_<monoseq>` or `<epoch>_<tsn>` of a name, as denokv does: a first
/// part of four digits is a format version (only 1 is known), anything else is format 0's epoch.
fn parse_sequence<'a>(parts: &mut impl Iterator<Item = &'a str>) -> Option<(u16, u64)> {
    let first = parts.next()?;
    if first.len() == 4 {
        let format_version = u16::from_str_radix(first, 16).ok()?;
        if format_version != 1 {
            return None;
        }
        Some((1, hex_u64(parts.next()?)?))
    } else {
        let epoch = hex_u64(first)?;
        let tsn = hex_u64(parts.next()?)?;
        if epoch >= u64::from(u32::MAX) || tsn >= u64::from(u32::MAX) {
            return None;
        }
        Some((0, (epoch << 32) | tsn))
    }
}

fn hex_u64(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

fn hex_12(text: &str) -> Option<[u8; 12]> {
    let mut out = [0u8; 12];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

impl SnapshotRangeName {
    /// The name of `file` (`<name>.bin`, without the folder); `None` if it is not one.
    pub fn parse(file: &str) -> Option<SnapshotRangeName> {
        let stem = file.strip_suffix(".bin")?;
        let mut parts = stem.split('_');
        let (format_version, monoseq) = parse_sequence(&mut parts)?;
        let seq = hex_u64(parts.next()?)?;
        if parts.next().is_some() {
            return None;
        }
        Some(SnapshotRangeName {
            format_version,
            monoseq,
            seq,
        })
    }

    /// Its file name, `<name>.bin`.
    pub fn file(&self) -> String {
        format!("{self}.bin")
    }
}

impl SegmentName {
    /// The name of `file` (`<name>.bin`, without the folder); `None` if it is not one.
    pub fn parse(file: &str) -> Option<SegmentName> {
        let stem = file.strip_suffix(".bin")?;
        let mut parts = stem.split('_');
        let (format_version, monoseq) = parse_sequence(&mut parts)?;
        let first = hex_12(parts.next()?)?;
        let last = hex_12(parts.next()?)?;
        if parts.next().is_some() || first > last {
            return None;
        }
        Some(SegmentName {
            format_version,
            monoseq,
            first,
            last,
        })
    }

    /// Its file name, `<name>.bin`.
    pub fn file(&self) -> String {
        format!("{self}.bin")
    }
}

/// The manifest file name of the snapshot at `versionstamp`: `<20 hex digits>.bin`.
pub fn manifest_file(versionstamp: Versionstamp) -> String {
    format!("{versionstamp}.bin")
}

/// The snapshot versionstamp of a manifest file name.
pub fn parse_manifest_file(file: &str) -> Option<Versionstamp> {
    file.strip_suffix(".bin")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_both_formats() {
        for name in [
            "0001_0000000000000007_0000000000000002.bin",
            "0000000000000003_0000000000000004_0000000000000000.bin",
        ] {
            let parsed = SnapshotRangeName::parse(name).unwrap();
            assert_eq!(parsed.file(), name);
        }
        let segment = "0001_0000000000000007_000000000000000700000000_00000000000000090000ffff.bin";
        let parsed = SegmentName::parse(segment).unwrap();
        assert_eq!(parsed.file(), segment);
        assert_eq!(parsed.first_commit(), Versionstamp::from_version(7, 0));
        assert_eq!(parsed.last_commit(), Versionstamp::from_version(9, 0));
        let deploy = "0000000000000001_0000000000000002_000000000000000700000000_00000000000000090000ffff.bin";
        assert_eq!(SegmentName::parse(deploy).unwrap().monoseq, (1 << 32) | 2);
    }

    #[test]
    fn strange_names_are_not_ours() {
        for name in [
            "0002_0000000000000007_0000000000000002.bin",
            "0001_0000000000000007.bin",
            "0001_0000000000000007_0000000000000002_x.bin",
            "0001_zz_0000000000000002.bin",
            "00000000ffffffff_0000000000000000_0000000000000000.bin",
            "0001_0000000000000007_0000000000000002",
        ] {
            assert_eq!(SnapshotRangeName::parse(name), None, "{name}");
        }
    }
}
