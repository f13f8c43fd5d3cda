//! What a bucket holds, from its listings: snapshot manifests, range objects, segments and side
//! objects, wherever they are (in denokv's sight or archived).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use open_deno_kv_model::{DatabaseId, Versionstamp};

use crate::layout::{
    ARCHIVE, DIFFERENTIAL, LOGS, MANIFESTS, SIDES, SNAPSHOTS, SegmentName, SnapshotManifest,
    SnapshotRangeName, parse_manifest_file,
};
use crate::objects::Listed;
use crate::{BucketError, Target};

/// One object that may be in denokv's sight (`snapshots/`, `logs/`), archived, or (after an
/// interrupted move) both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placed {
    /// `<name>.bin`.
    pub file: String,
    /// Its size.
    pub size: u64,
    /// When it was written.
    pub modified: DateTime<Utc>,
    /// In `snapshots/` or `logs/`.
    pub visible: bool,
    /// In `odkv/archive/…`.
    pub archived: bool,
}

impl Placed {
    /// The object's name to read it by: where it is in sight, else in the archive.
    pub fn name(&self, folder: &str) -> String {
        if self.visible {
            format!("{folder}{}", self.file)
        } else {
            format!("{ARCHIVE}{folder}{}", self.file)
        }
    }
}

/// A segment found in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentObject {
    /// Its parsed name.
    pub name: SegmentName,
    /// Where it is.
    pub placed: Placed,
    /// Whether its side object exists.
    pub has_side: bool,
}

impl SegmentObject {
    /// The name to read the segment by.
    pub fn object(&self) -> String {
        self.placed.name(LOGS)
    }

    /// Its side object's name.
    pub fn side(&self) -> String {
        format!("{SIDES}{}", self.placed.file)
    }
}

/// A bucket's listing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inventory {
    /// Manifest files (`odkv/snapshots/`), by versionstamp.
    pub manifests: BTreeMap<Versionstamp, Listed>,
    /// Range objects by file name.
    pub ranges: BTreeMap<String, Placed>,
    /// Segments, in commit order.
    pub segments: Vec<SegmentObject>,
    /// Side objects whose segment is not there.
    pub orphan_sides: Vec<String>,
}

fn corrupt(target: &Target, name: &str, detail: &str) -> BucketError {
    BucketError::Corrupt {
        object: target.full_name(name),
        detail: detail.to_owned(),
    }
}

fn place(into: &mut BTreeMap<String, Placed>, listed: Vec<Listed>, visible: bool) {
    for item in listed {
        let entry = into.entry(item.file.clone()).or_insert(Placed {
            file: item.file,
            size: item.size,
            modified: item.modified,
            visible: false,
            archived: false,
        });
        if visible {
            entry.visible = true;
        } else {
            entry.archived = true;
        }
    }
}

impl Inventory {
    /// Lists `target`. Objects under the layout's folders whose names are not the layout's are
    /// refused as [`BucketError::Corrupt`].
    pub async fn read(target: &Target) -> Result<Inventory, BucketError> {
        let mut manifests = BTreeMap::new();
        for listed in target.list_folder(MANIFESTS).await? {
            let stamp = parse_manifest_file(&listed.file).ok_or_else(|| {
                corrupt(
                    target,
                    &format!("{MANIFESTS}{}", listed.file),
                    "not a manifest name",
                )
            })?;
            manifests.insert(stamp, listed);
        }
        let mut ranges = BTreeMap::new();
        place(&mut ranges, target.list_folder(SNAPSHOTS).await?, true);
        place(
            &mut ranges,
            target.list_folder(&format!("{ARCHIVE}{SNAPSHOTS}")).await?,
            false,
        );
        for placed in ranges.values() {
            if SnapshotRangeName::parse(&placed.file).is_none() {
                return Err(corrupt(
                    target,
                    &placed.name(SNAPSHOTS),
                    "not a snapshot range name",
                ));
            }
        }
        let mut logs = BTreeMap::new();
        place(&mut logs, target.list_folder(LOGS).await?, true);
        place(
            &mut logs,
            target.list_folder(&format!("{ARCHIVE}{LOGS}")).await?,
            false,
        );
        let sides: BTreeSet<String> = target
            .list_folder(SIDES)
            .await?
            .into_iter()
            .map(|listed| listed.file)
            .collect();
        let mut segments = Vec::with_capacity(logs.len());
        for placed in logs.into_values() {
            let name = SegmentName::parse(&placed.file)
                .ok_or_else(|| corrupt(target, &placed.name(LOGS), "not a log segment name"))?;
            segments.push(SegmentObject {
                name,
                has_side: sides.contains(&placed.file),
                placed,
            });
        }
        segments.sort_by_key(|segment| (segment.name.first, segment.name.last));
        let orphan_sides = sides
            .into_iter()
            .filter(|side| !segments.iter().any(|segment| segment.placed.file == *side))
            .collect();
        Ok(Inventory {
            manifests,
            ranges,
            segments,
            orphan_sides,
        })
    }

    /// Whether this crate wrote the bucket (it has manifests or side objects).
    pub fn is_ours(&self) -> bool {
        !self.manifests.is_empty() || self.segments.iter().any(|segment| segment.has_side)
    }

    /// Whether the bucket holds anything of the layout at all.
    pub fn is_empty(&self) -> bool {
        self.manifests.is_empty() && self.ranges.is_empty() && self.segments.is_empty()
    }
}

/// Reads and decodes every manifest, oldest first; they must all name one database.
pub(crate) async fn load_manifests(
    target: &Target,
    inventory: &Inventory,
) -> Result<Vec<SnapshotManifest>, BucketError> {
    let mut out: Vec<SnapshotManifest> = Vec::with_capacity(inventory.manifests.len());
    for (stamp, listed) in &inventory.manifests {
        let name = format!("{MANIFESTS}{}", listed.file);
        let bytes = target
            .get_required(&name, "it was listed a moment ago")
            .await?;
        let manifest = SnapshotManifest::decode(&target.full_name(&name), &bytes)?;
        if manifest.versionstamp != *stamp {
            return Err(corrupt(
                target,
                &name,
                "its versionstamp is not the one its name gives",
            ));
        }
        if let Some(first) = out.first()
            && first.database != manifest.database
        {
            return Err(corrupt(
                target,
                &name,
                &format!(
                    "it names database {}, an earlier snapshot names {}",
                    shown(manifest.database),
                    shown(first.database)
                ),
            ));
        }
        out.push(manifest);
    }
    Ok(out)
}

/// The `differential` object's versionstamp, if there is one.
pub(crate) async fn differential(target: &Target) -> Result<Option<Versionstamp>, BucketError> {
    let Some(bytes) = target.get_bytes(DIFFERENTIAL).await? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&bytes)
        .ok()
        .map(str::trim)
        .and_then(|text| text.parse::<Versionstamp>().ok())
        .ok_or_else(|| corrupt(target, DIFFERENTIAL, "not 20 hex digits"))?;
    Ok(Some(text))
}

/// An identity as text, `(none)` for none.
pub(crate) fn shown(id: Option<DatabaseId>) -> String {
    id.map_or_else(|| "(none)".to_owned(), |id| id.to_string())
}
