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

fn invalid(url: &str, reason: impl Into<String>) -> BucketError {
    BucketError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.into(),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

fn parse_url(text: &str) -> Result<Target, BucketError> {
    let url = url::Url::parse(text).map_err(|err| invalid(text, format!("not a URL: {err}")))?;
    let bucket = url.host_str().unwrap_or_default().to_owned();
    let prefix = url.path().trim_matches('/').to_owned();
    let need_bucket = || {
        if bucket.is_empty() {
            Err(invalid(text, "the URL names no bucket"))
        } else {
            Ok(())
        }
    };
    let built = |result: object_store::Result<Arc<dyn ObjectStore>>| {
        result.map_err(|err| match err {
            object_store::Error::Generic { source, .. } => invalid(text, source.to_string()),
            other => invalid(text, other.to_string()),
        })
    };
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "s3" => {
            need_bucket()?;
            s3(text, &bucket)?
        }
        "gs" => {
            need_bucket()?;
            built(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(&bucket)
                    .build()
                    .map(|store| Arc::new(store) as Arc<dyn ObjectStore>),
            )?
        }
        "az" => {
            need_bucket()?;
            built(
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(&bucket)
                    .build()
                    .map(|store| Arc::new(store) as Arc<dyn ObjectStore>),
            )?
        }
        "file" => {
            if !bucket.is_empty() && bucket != "localhost" {
                return Err(invalid(
                    text,
                    "a file URL names a local directory: file:///absolute/path/",
                ));
            }
            let dir = url
                .to_file_path()
                .map_err(|()| invalid(text, "not an absolute directory path"))?;
            std::fs::create_dir_all(&dir)
                .map_err(|err| invalid(text, format!("cannot create the directory: {err}")))?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                .map_err(|err| invalid(text, err.to_string()))?;
            return Ok(Target::from_store(Arc::new(store), "", text));
        }
        "memory" => {
            return Ok(Target::from_store(
                Arc::new(object_store::memory::InMemory::new()),
                &prefix,
                text,
            ));
        }
        other => {
            return Err(invalid(
                text,
                format!(
                    "unknown scheme `{other}:` (use s3://, gs://, az://, file:// or memory://)"
                ),
            ));
        }
    };
    Ok(Target::from_store(store, &prefix, text))
}

/// An S3 store: credentials and region from the environment, another endpoint when
/// `AWS_ENDPOINT_URL` or `AWS_ENDPOINT` names one (then path-style requests; plain HTTP only to a
/// loopback address).
fn s3(text: &str, bucket: &str) -> Result<Arc<dyn ObjectStore>, BucketError> {
    let has_keys = env("AWS_ACCESS_KEY_ID").is_some() && env("AWS_SECRET_ACCESS_KEY").is_some();
    let has_other = [
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ]
    .iter()
    .any(|name| env(name).is_some());
    if !has_keys && !has_other {
        return Err(BucketError::MissingCredentials {
            url: text.to_owned(),
            detail: "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a web identity or \
                     container credentials)"
                .to_owned(),
        });
    }
    let mut builder = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_region(
            env("AWS_REGION")
                .or_else(|| env("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".to_owned()),
        );
    if let Some(endpoint) = env("AWS_ENDPOINT_URL").or_else(|| env("AWS_ENDPOINT")) {
        let parsed = url::Url::parse(&endpoint).map_err(|err| {
            invalid(
                text,
                format!("AWS_ENDPOINT_URL {endpoint:?} is not a URL: {err}"),
            )
        })?;
        let loopback = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name == "localhost",
            None => false,
        };
        match parsed.scheme() {
            "https" => {}
            "http" if loopback => builder = builder.with_allow_http(true),
            "http" => {
                return Err(invalid(
                    text,
                    format!(
                        "the endpoint {endpoint} is plain HTTP to a host that is not loopback: \
                         use https"
                    ),
                ));
            }
            other => {
                return Err(invalid(
                    text,
                    format!("the endpoint {endpoint} has scheme {other}: use https"),
                ));
            }
        }
        builder = builder
            .with_endpoint(endpoint.trim_end_matches('/'))
            .with_virtual_hosted_style_request(false);
    }
    builder
        .build()
        .map(|store| Arc::new(store) as Arc<dyn ObjectStore>)
        .map_err(|err| invalid(text, err.to_string()))
}

async fn check_target(target: &Target) -> Result<(), BucketError> {
    use futures::TryStreamExt;
    let prefix = (!target.prefix.is_empty()).then(|| Path::from(target.prefix.as_str()));
    let mut listing = target.store.list(prefix.as_ref());
    match listing.try_next().await {
        Ok(_) => Ok(()),
        Err(err) => {
            let text = err.to_string();
            // Listing a prefix finds nothing rather than fail when the bucket exists: a "not
            // found" is the bucket's (S3 answers 404 NoSuchBucket, Azure ContainerNotFound).
            if matches!(err, object_store::Error::NotFound { .. })
                || text.contains("NoSuchBucket")
                || text.contains("ContainerNotFound")
                || text.contains("The specified bucket does not exist")
            {
                // The service's own answer follows its status line (S3: an XML document).
                let detail = text
                    .split("<?xml")
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches([':', ' '])
                    .to_owned();
                Err(BucketError::NoSuchBucket {
                    url: target.url.clone(),
                    detail,
                })
            } else {
                Err(BucketError::Storage {
                    url: target.url.clone(),
                    object: target.prefix.clone(),
                    source: err,
                })
            }
        }
    }
}
