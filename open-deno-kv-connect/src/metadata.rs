//! The metadata exchange: the JSON a client POSTs to the database URL, and the JSON the server
//! answers with.
//!
//! ```
//! use open_deno_kv_connect::metadata::{MetadataExchangeRequest, negotiate_version};
//! let request = MetadataExchangeRequest::parse(br#"{"supportedVersions":[1,2,3]}"#).unwrap();
//! assert_eq!(negotiate_version(&request.supported_versions), Some(3));
//! ```

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ProtocolError;

/// denokv's answer to a body that is missing or not JSON (Deno clients older than 1.38 sent none).
pub const TEXT_BODY_NOT_JSON: &str =
    "The server requires at least protocol version 2. Use Deno 1.38.0 or newer.";
/// denokv's answer when no offered version is 2 or 3.
pub const TEXT_NO_COMMON_VERSION: &str = "The server could not negotiate a protocol version. The server requires protocol version 2 or 3.";

/// The body of the metadata POST: `{"supportedVersions":[1,2,3]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MetadataExchangeRequest {
    /// The protocol versions the client speaks. Missing counts as empty.
    #[serde(rename = "supportedVersions", default)]
    pub supported_versions: Vec<u64>,
}

impl MetadataExchangeRequest {
    /// Parses the request body; an error carries denokv's text.
    pub fn parse(body: &[u8]) -> Result<Self, ProtocolError> {
        serde_json::from_slice(body).map_err(|_| ProtocolError::new(TEXT_BODY_NOT_JSON))
    }
}

/// The version a server speaking 2 and 3 answers with: 3 if offered, else 2, else none.
pub fn negotiate_version(offered: &[u64]) -> Option<u64> {
    [3, 2].into_iter().find(|v| offered.contains(v))
}

/// Where the data path of a database is served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointInfo {
    /// The endpoint URL, resolved against the metadata URL (v2/v3); must not end with `/`.
    pub url: String,
    /// `strong` or `eventual`. Deno 2.9.6 uses the first `strong` endpoint for everything.
    pub consistency: String,
}

/// The metadata response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseMetadata {
    /// The negotiated protocol version (1, 2 or 3).
    pub version: u64,
    /// The database's id; sent back in `x-denokv-database-id`.
    #[serde(rename = "databaseId")]
    pub database_id: Uuid,
    /// The data-path endpoints.
    pub endpoints: Vec<EndpointInfo>,
    /// Sent as `authorization: Bearer <token>` on the data path; must be a valid header value.
    pub token: String,
    /// When the client must fetch metadata again (RFC 3339). Clients refresh at
    /// `min(expiresAt − 10 s, 60 s)`, so this must be well over 10 s away.
    #[serde(rename = "expiresAt", with = "rfc3339")]
    pub expires_at: DateTime<Utc>,
}

impl DatabaseMetadata {
    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing these plain fields cannot fail; an empty body would be refused by clients.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a metadata response (client side).
    pub fn parse(body: &[u8]) -> Result<Self, ProtocolError> {
        serde_json::from_slice(body)
            .map_err(|e| ProtocolError::new(format!("failed to parse metadata response: {e}")))
    }
}

mod rfc3339 {
    use super::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|at| at.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_like_denokv() {
        assert_eq!(negotiate_version(&[1, 2, 3]), Some(3));
        assert_eq!(negotiate_version(&[1, 2]), Some(2));
        assert_eq!(negotiate_version(&[1]), None);
        assert_eq!(
            MetadataExchangeRequest::parse(b"{}")
                .unwrap()
                .supported_versions,
            Vec::<u64>::new()
        );
        assert_eq!(
            MetadataExchangeRequest::parse(b"nope")
                .unwrap_err()
                .to_string(),
            TEXT_BODY_NOT_JSON
        );
    }

    #[test]
    fn metadata_round_trips_with_deno_field_names() {
        let meta = DatabaseMetadata {
            version: 3,
            database_id: Uuid::nil(),
            endpoints: vec![EndpointInfo {
                url: "/v2".into(),
                consistency: "strong".into(),
            }],
            token: "t".into(),
            expires_at: DateTime::from_timestamp_millis(1_700_000_000_123).unwrap(),
        };
        let json = String::from_utf8(meta.to_json()).unwrap();
        assert!(json.contains(r#""databaseId":"00000000-0000-0000-0000-000000000000""#));
        assert!(json.contains(r#""expiresAt":"2023-11-14T22:13:20.123Z""#));
        assert_eq!(DatabaseMetadata::parse(json.as_bytes()).unwrap(), meta);
    }
}
