//! Rust types ↔ V8 values, through `serde_json::Value`.

use crate::KvValue;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::V8Error;

/// Serializes any `serde` type as the V8 value Deno reads as the same JSON.
///
/// The value goes through [`serde_json::to_value`] and then [`super::from_json`], so it gets
/// exactly JSON's shapes: structs and maps become objects (fields in declaration order),
/// sequences and tuples arrays, integers and floats JavaScript numbers (`f64`: integers beyond
/// ±2^53 lose precision, as in JavaScript), `None` and `()` `null`, enums serde's usual JSON
/// forms. A `Vec<u8>` becomes an array of numbers, not a `Uint8Array`: use
/// [`KvValue::Bytes`] for raw bytes, and [`KvValue::U64`] for a `Deno.KvU64`.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct User { name: String, age: u32, tags: Vec<String> }
///
/// let alice = User { name: "Alice".into(), age: 30, tags: vec!["admin".into()] };
/// let value = open_deno_kv_model::v8::to_v8(&alice).unwrap();
/// assert_eq!(
///     open_deno_kv_model::v8::to_js_literal(&value).unwrap(),
///     r#"{ name: "Alice", age: 30, tags: ["admin"] }"#
/// );
/// assert_eq!(open_deno_kv_model::v8::from_v8::<User>(&value).unwrap(), alice);
/// ```
pub fn to_v8<T: Serialize + ?Sized>(value: &T) -> Result<KvValue, V8Error> {
    let json = serde_json::to_value(value).map_err(|err| V8Error::Serde(err.to_string()))?;
    super::from_json(&json)
}

/// Deserializes a stored value into any `serde` type.
///
/// The value goes through [`super::to_json`] (see there for how dates, bigints, `undefined`,
/// `Deno.KvU64` and the rest map to JSON) and then [`serde_json::from_value`]. So a
/// `Deno.KvU64`, or a bigint that fits, deserializes into a Rust integer; a `Date` into a
/// `String` (ISO 8601); a missing property or `undefined` into `None`.
///
/// ```
/// use open_deno_kv_model::KvValue;
/// assert_eq!(open_deno_kv_model::v8::from_v8::<u64>(&KvValue::U64(7)).unwrap(), 7);
/// let point = open_deno_kv_model::v8::from_json(&serde_json::json!([1, 2])).unwrap();
/// assert_eq!(open_deno_kv_model::v8::from_v8::<(i32, i32)>(&point).unwrap(), (1, 2));
/// assert!(open_deno_kv_model::v8::from_v8::<String>(&point).is_err());
/// ```
pub fn from_v8<T: DeserializeOwned>(value: &KvValue) -> Result<T, V8Error> {
    let json = super::to_json(value)?;
    serde_json::from_value(json).map_err(|err| V8Error::Serde(err.to_string()))
}
