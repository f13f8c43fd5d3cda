//! The one error type of the crate: what went wrong with a bucket, a target URL, the layout or
//! the store, each variant something a caller can act on.

use open_deno_kv_model::{DatabaseId, KvError, Versionstamp};

/// What a target, a shipper or a reader can fail with.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// The URL is not one this crate can write to: its scheme is unknown, or it is malformed.
    /// Fix the URL (`s3://bucket/prefix/`, `gs://…`, `az://…`, `file:///abs/dir/`, `memory://`).
    #[error("{url}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The target needs credentials the environment does not give. Set them (for S3:
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`) and try again.
    #[error("{url}: missing credentials: {detail}")]
    MissingCredentials {
        /// The URL as given.
        url: String,
        /// What is missing.
        detail: String,
    },
    /// The bucket (or container) the URL names does not exist. Create it, or fix the URL.
    #[error("{url}: the bucket does not exist ({detail})")]
    NoSuchBucket {
        /// The URL as given.
        url: String,
        /// What the object store said.
        detail: String,
    },
    /// The object store could not be reached or refused a request (network, permissions,
    /// throttling, a full disk). Transient as far as a shipper can tell: it retries.
    #[error("{url}: object {object}: {source}")]
    Storage {
        /// The target's URL.
        url: String,
        /// The object (or listing prefix) the request was about.
        object: String,
        /// The object store's error.
        #[source]
        source: object_store::Error,
    },
    /// An object the bucket's listing or chain requires is not there.
    #[error("object {object} is missing: {detail}")]
    MissingObject {
        /// The object's full name in the bucket.
        object: String,
        /// Why it is needed.
        detail: String,
    },
    /// An object does not decode: it is truncated, damaged, or not of this layout. A restore
    /// refuses it rather than skip it.
    #[error("object {object} is corrupt: {detail}")]
    Corrupt {
        /// The object's full name in the bucket.
        object: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The shipped log has a gap: a commit between two shipped ones is not in the bucket.
    #[error(
        "the bucket's log has a gap at object {object}: its first commit follows {previous}, but \
         the commit before it in the bucket is {last}"
    )]
    Gap {
        /// The segment whose first commit does not follow on.
        object: String,
        /// The commit that segment's first commit names as its predecessor.
        previous: Versionstamp,
        /// The last commit the bucket holds before it.
        last: Versionstamp,
    },
    /// The bucket holds backups of another database than the store's (identities differ, see
    /// `open_deno_kv_model::identity`). Use another prefix for this store.
    #[error(
        "{url} holds backups of database {bucket}, not of this store's database {store}: use \
         another bucket or prefix"
    )]
    OtherDatabase {
        /// The target's URL.
        url: String,
        /// The database the bucket's backups are of.
        bucket: DatabaseId,
        /// The database of the store being shipped (or `(none)`).
        store: String,
    },
    /// The bucket holds no complete snapshot yet, so there is nothing to restore.
    #[error("{url} holds no complete snapshot: nothing to restore")]
    Empty {
        /// The target's URL.
        url: String,
    },
    /// The point asked for is not a recovery point of the bucket; the nearest ones are named.
    #[error(
        "{asked} is not a recovery point of the bucket (nearest before: {before}; nearest \
         after: {after})"
    )]
    NoSuchPoint {
        /// The point asked for, as text.
        asked: String,
        /// The nearest recovery point before it, as text (`none`).
        before: String,
        /// The nearest recovery point after it, as text (`none`).
        after: String,
    },
    /// The store cannot be shipped: it lacks the export or the change log.
    #[error("the store cannot be shipped: {0}")]
    Unsupported(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] KvError),
}

impl BucketError {
    /// Whether retrying later may succeed: the object store was unreachable or refused a
    /// request, or the store failed transiently. A shipper retries these with back-off and stops
    /// on every other.
    pub fn is_transient(&self) -> bool {
        match self {
            BucketError::Storage { .. } => true,
            BucketError::Store(err) => {
                matches!(
                    err,
                    KvError::Storage { .. } | KvError::OutcomeUnknown { .. }
                )
            }
            _ => false,
        }
    }
}
