//! Values and entries between open-deno-kv-model and the wire ([`crate::pb`]): the part of
//! the conversions that the extensions ([`crate::ext`]) share with the standard messages
//! ([`crate::convert`], which re-exports them).

use open_deno_kv_model::{KvEntry, KvValue, Versionstamp};

use crate::error::ProtocolError;
use crate::pb;

/// denokv: a check versionstamp that is neither empty nor 10 bytes.
pub const TEXT_BAD_VERSIONSTAMP: &str = "Invalid versionstamp.";

/// A wire value as an open-deno-kv-model value. The encoding must be V8, LE64 or BYTES, and an LE64 value
/// exactly 8 bytes.
pub fn value_from_pb(value: pb::KvValue) -> Result<KvValue, ProtocolError> {
    decode_value(value.data, value.encoding)
}

fn decode_value(data: Vec<u8>, encoding: i32) -> Result<KvValue, ProtocolError> {
    match pb::ValueEncoding::try_from(encoding) {
        Ok(pb::ValueEncoding::VeV8) => Ok(KvValue::V8(data.into())),
        Ok(pb::ValueEncoding::VeBytes) => Ok(KvValue::Bytes(data.into())),
        Ok(pb::ValueEncoding::VeLe64) => {
            let len = data.len();
            let raw: [u8; 8] = data.try_into().map_err(|_| {
                ProtocolError::new(format!("Invalid LE64 value: expected 8 bytes, got {len}."))
            })?;
            Ok(KvValue::U64(u64::from_le_bytes(raw)))
        }
        _ => Err(ProtocolError::new(format!(
            "Invalid value encoding: {encoding}."
        ))),
    }
}

/// An open-deno-kv-model value on the wire.
pub fn value_to_pb(value: &KvValue) -> pb::KvValue {
    let (data, encoding) = encode_value(value);
    pb::KvValue { data, encoding }
}

fn encode_value(value: &KvValue) -> (Vec<u8>, i32) {
    let (data, encoding) = value.encode();
    let encoding = match encoding {
        open_deno_kv_model::ValueEncoding::V8 => pb::ValueEncoding::VeV8,
        open_deno_kv_model::ValueEncoding::U64 => pb::ValueEncoding::VeLe64,
        open_deno_kv_model::ValueEncoding::Bytes => pb::ValueEncoding::VeBytes,
    };
    (data.to_vec(), encoding as i32)
}

/// An entry on the wire (the expiry is not part of the protocol).
pub fn entry_to_pb(entry: &KvEntry) -> pb::KvEntry {
    let (value, encoding) = encode_value(&entry.value);
    pb::KvEntry {
        key: entry.key.to_vec(),
        value,
        encoding,
        versionstamp: entry.versionstamp.as_bytes().to_vec(),
    }
}

/// A wire entry as an open-deno-kv-model entry: the versionstamp must be 10 bytes and the value valid.
pub fn entry_from_pb(entry: pb::KvEntry) -> Result<KvEntry, ProtocolError> {
    let versionstamp = versionstamp_from(&entry.versionstamp)?;
    Ok(KvEntry {
        key: entry.key.into(),
        value: decode_value(entry.value, entry.encoding)?,
        versionstamp,
        expires_at: None,
    })
}

pub(crate) fn versionstamp_from(bytes: &[u8]) -> Result<Versionstamp, ProtocolError> {
    let raw: [u8; 10] = bytes
        .try_into()
        .map_err(|_| ProtocolError::new(TEXT_BAD_VERSIONSTAMP))?;
    Ok(Versionstamp::from_bytes(raw))
}
