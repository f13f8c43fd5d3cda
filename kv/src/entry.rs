//! What reads return: entries with decoded keys.

use chrono::{DateTime, Utc};
use kv_proto::{Key, KvValue, Versionstamp, decode_key};

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
    pub(crate) fn from_stored(entry: kv_proto::KvEntry) -> Result<Self> {
        Ok(Entry {
            key: decode_stored_key(&entry.key)?,
            value: entry.value,
            versionstamp: entry.versionstamp,
            expires_at: entry.expires_at,
        })
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
    pub(crate) fn new(key: Key, stored: Option<kv_proto::KvEntry>) -> Self {
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
}

/// Decodes a key read from storage; a key that does not decode means a foreign or damaged store.
pub(crate) fn decode_stored_key(bytes: &[u8]) -> Result<Key> {
    decode_key(bytes).map_err(|reason| Error::BadStoredKey {
        key_hex: hex::encode(bytes),
        reason,
    })
}
