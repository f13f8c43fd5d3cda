//! Where backups go: a URL parsed into an object store and a prefix inside it.
//!
//! | URL | store | configured from |
//! |---|---|---|
//! | `s3://bucket/prefix/` | Amazon S3 or an S3-compatible server | `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), `AWS_REGION` (default `us-east-1`), `AWS_ENDPOINT_URL` or `AWS_ENDPOINT` for another server (requests are then path-style; plain `http://` is allowed only to a loopback address) |
//! | `gs://bucket/prefix/` | Google Cloud Storage | `GOOGLE_SERVICE_ACCOUNT` / `GOOGLE_SERVICE_ACCOUNT_KEY` / `GOOGLE_APPLICATION_CREDENTIALS` (object_store's names) |
//! | `az://container/prefix/` | Azure Blob Storage | `AZURE_STORAGE_ACCOUNT_NAME` and a key or token (object_store's names) |
//! | `file:///absolute/dir/` | a local directory, created if absent | — |
//! | `memory://` | a new in-memory store (tests) | — |
//!
//! The prefix is everything after the bucket, with a trailing `/` implied: `s3://b/kv/prod`
//! and `s3://b/kv/prod/` both write `kv/prod/snapshots/…`. Deno Deploy's and denokv's prefix
//! option is the same string with its trailing slash (`kv/prod/`).
//!
//! Parsing only builds a client: nothing is sent. [`Target::check`] lists the prefix once, and
//! turns a missing bucket or refused credentials into an error naming the URL.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;

use crate::BucketError;

/// An object store and the prefix a bucket's objects live under.
#[derive(Debug, Clone)]
pub struct Target {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    url: String,
}

impl Target {
    /// Parses `url` (see the module documentation) and builds its store from the environment.
    ///
    /// Refused: an unknown scheme or a malformed URL ([`BucketError::InvalidUrl`]); an S3 URL
    /// without credentials in the environment ([`BucketError::MissingCredentials`]); an
    /// `http://` endpoint that is not on a loopback address; a `file://` URL that is not an
    /// absolute directory path, or a directory that cannot be created.
    pub fn parse(url: &str) -> Result<Target, BucketError> {
        parse_url(url)
    }

    /// A target over an object store the caller built (a wrapper that injects faults, a store
    /// shared between two targets), with objects under `prefix` (`""` for the whole store, or
    /// `a/b` / `a/b/`). `url` is what error messages call it.
    pub fn from_store(store: Arc<dyn ObjectStore>, prefix: &str, url: &str) -> Target {
        Target {
            store,
            prefix: prefix.trim_matches('/').to_owned(),
            url: url.to_owned(),
        }
    }

    /// The URL error messages name.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The prefix inside the store, without leading or trailing `/` (`""`: none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The full path of `name`, an object name relative to the prefix (`snapshots/…`).
    pub fn path(&self, name: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.prefix))
        }
    }

    /// Lists the prefix once: `Ok` when the bucket exists and the credentials may list it;
    /// [`BucketError::NoSuchBucket`], or [`BucketError::Storage`] naming the URL, otherwise.
    pub async fn check(&self) -> Result<(), BucketError> {
        check_target(self).await
    }
}

fn parse_url(url: &str) -> Result<Target, BucketError> {
    todo!("{url}")
}

async fn check_target(target: &Target) -> Result<(), BucketError> {
    todo!("{target:?}")
}
