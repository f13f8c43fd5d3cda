//! What reads return: entries with decoded keys.

use chrono::{DateTime, Utc};
use open_deno_kv_model::{Key, KvError, KvValue, Versionstamp, decode_key};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// A stored entry: `Deno.KvEntry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key, decoded.
    pub key: Key,
    /// The value.
    pub value: KvValue,
    /// The versionstamp of the commit that last wrote the key.
    pub versionstamp: Versionstamp,
    /// When the entry expires, if it was set with an expiry (Deno's API does not show this).
    pub expires_at: Option<DateTime<Utc>>,
}

impl Entry {
    /// Decodes a backend's entry (whose key is the encoded bytes).
    pub(crate) fn from_stored(entry: open_deno_kv_model::KvEntry) -> Result<Self> {
        Ok(Entry {
            key: decode_stored_key(&entry.key)?,
            value: entry.value,
            versionstamp: entry.versionstamp,
            expires_at: entry.expires_at,
        })
    }

    /// The value deserialized into any serde type: Deno's `kv.get<T>()`. A string reads into a
    /// `String`, a number into any Rust number it fits, a `Deno.KvU64` into a `u64`, an object
    /// into a struct or map (see [`crate::v8::from_v8`] for dates, bigints and the rest).
    ///
    /// Fails with [`Error::Serialization`] if the stored value has another shape than `T`.
    pub fn value_as<T: DeserializeOwned>(&self) -> Result<T> {
        crate::value::deserialize(&self.value)
    }
}

/// The result of a `get`: `Deno.KvEntryMaybe`. An absent key has neither value nor versionstamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaybeEntry {
    /// The key asked for.
    pub key: Key,
    /// The value, if the key exists.
    pub value: Option<KvValue>,
    /// The versionstamp of the commit that last wrote the key, if it exists. Pass it to
    /// [`crate::AtomicOperation::check`] to write only if the key has not changed since.
    pub versionstamp: Option<Versionstamp>,
    /// When the entry expires, if it exists and was set with an expiry.
    pub expires_at: Option<DateTime<Utc>>,
}

impl MaybeEntry {
    pub(crate) fn new(key: Key, stored: Option<open_deno_kv_model::KvEntry>) -> Self {
        match stored {
            Some(entry) => MaybeEntry {
                key,
                value: Some(entry.value),
                versionstamp: Some(entry.versionstamp),
                expires_at: entry.expires_at,
            },
            None => MaybeEntry {
                key,
                value: None,
                versionstamp: None,
                expires_at: None,
            },
        }
    }

    /// Whether the key exists.
    pub fn exists(&self) -> bool {
        self.value.is_some()
    }

    /// The value deserialized into any serde type, `None` if the key is absent: see
    /// [`Entry::value_as`].
    ///
    /// ```
    /// # async fn demo(kv: open_deno_kv::Kv) -> open_deno_kv::Result<()> {
    /// use open_deno_kv::key;
    /// kv.set(key!["greeting"], "hello").await?;
    /// let greeting: Option<String> = kv.get(key!["greeting"]).await?.value_as()?;
    /// assert_eq!(greeting.as_deref(), Some("hello"));
    /// # Ok(()) }
    /// ```
    pub fn value_as<T: DeserializeOwned>(&self) -> Result<Option<T>> {
        self.value
            .as_ref()
            .map(crate::value::deserialize)
            .transpose()
    }
}

/// Decodes a key read from storage; a key that does not decode means a foreign or damaged store.
pub(crate) fn decode_stored_key(bytes: &[u8]) -> Result<Key> {
    decode_key(bytes).map_err(|reason| {
        Error::Kv(KvError::Corrupt {
            message: format!(
                "stored key {} does not decode: {reason}",
                hex::encode(bytes)
            ),
        })
    })
}
