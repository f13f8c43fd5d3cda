//! Reading and writing a target's objects by their names relative to its prefix, every failure
//! naming the object and the URL.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};

use crate::{BucketError, Target};

/// One object found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    /// Its name relative to the folder listed (`<name>.bin`).
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written.
    pub modified: DateTime<Utc>,
}

impl Target {
    /// The full name of `name` in the bucket, as error messages show it.
    pub(crate) fn full_name(&self, name: &str) -> String {
        self.path(name).to_string()
    }

    fn storage(&self, name: &str, source: object_store::Error) -> BucketError {
        BucketError::Storage {
            url: self.url().to_owned(),
            object: self.full_name(name),
            source,
        }
    }

    /// The bytes of `name`, or `None` if there is no such object.
    pub(crate) async fn get_bytes(&self, name: &str) -> Result<Option<Bytes>, BucketError> {
        let result = match self.store().get(&self.path(name)).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(err) => return Err(self.storage(name, err)),
        };
        match result.bytes().await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(self.storage(name, err)),
        }
    }

    /// The bytes of `name`, which must exist: [`BucketError::MissingObject`] otherwise, saying
    /// `why` it is needed.
    pub(crate) async fn get_required(&self, name: &str, why: &str) -> Result<Bytes, BucketError> {
        self.get_bytes(name)
            .await?
            .ok_or_else(|| BucketError::MissingObject {
                object: self.full_name(name),
                detail: why.to_owned(),
            })
    }

    /// Writes `bytes` as `name`, whole (an object store's put is atomic).
    pub(crate) async fn put_bytes(&self, name: &str, bytes: Vec<u8>) -> Result<(), BucketError> {
        self.store()
            .put(&self.path(name), PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|err| self.storage(name, err))
    }

    /// Deletes `name`; an object already gone is fine.
    pub(crate) async fn delete_object(&self, name: &str) -> Result<(), BucketError> {
        match self.store().delete(&self.path(name)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(self.storage(name, err)),
        }
    }

    /// Moves `from` to `to` (a copy, then a delete: interrupted, both exist, which readers
    /// allow).
    pub(crate) async fn move_object(&self, from: &str, to: &str) -> Result<(), BucketError> {
        match self.store().copy(&self.path(from), &self.path(to)).await {
            Ok(()) => {}
            Err(object_store::Error::NotFound { .. }) => return Ok(()),
            Err(err) => return Err(self.storage(from, err)),
        }
        self.delete_object(from).await
    }

    /// The objects directly in `folder` (a name ending in `/`), sorted by name.
    pub(crate) async fn list_folder(&self, folder: &str) -> Result<Vec<Listed>, BucketError> {
        let prefix = self.path(folder.trim_end_matches('/'));
        let mut listed: Vec<Listed> = self
            .store()
            .list(Some(&prefix))
            .map_err(|err| self.storage(folder, err))
            .try_filter_map(|meta| {
                let file = meta.location.prefix_match(&prefix).and_then(|mut parts| {
                    match (parts.next(), parts.next()) {
                        (Some(part), None) => Some(part.as_ref().to_owned()),
                        _ => None,
                    }
                });
                futures::future::ready(Ok(file.map(|file| Listed {
                    file,
                    size: meta.size,
                    modified: meta.last_modified,
                })))
            })
            .try_collect()
            .await?;
        listed.sort_by(|a, b| a.file.cmp(&b.file));
        Ok(listed)
    }
}
