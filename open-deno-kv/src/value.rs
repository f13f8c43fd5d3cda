//! Plain Rust values in and out of the store, with no ceremony.
//!
//! Everything that takes a value ([`crate::Kv::set`], [`crate::AtomicOperation::set`],
//! [`crate::Kv::enqueue`], …) takes an [`IntoValue`], so a program writes what it has and Deno
//! reads it natively:
//!
//! | Rust | stored as | Deno reads |
//! |---|---|---|
//! | `&str`, `String` | V8 string | `"hello"` |
//! | `bool` | V8 boolean | `true` |
//! | `i8` … `i32`, `u8` … `u32`, `f32`, `f64` | V8 number | `42`, `1.5` |
//! | `i64`, `isize`, `usize` within ±2^53 | V8 number (beyond: an error, use a `BigInt`) | `42` |
//! | [`num_bigint::BigInt`] | V8 bigint | `42n` |
//! | `u64` | `Deno.KvU64` (sums, min, max) | `new Deno.KvU64(42n)` |
//! | `Vec<u8>`, `&[u8]` | `Uint8Array` | `new Uint8Array([1, 2])` |
//! | [`serde_json::Value`] | the value `JSON.parse` gives | `{ name: "Alice" }` |
//! | [`Json`]`(any serde type)` | the same object, through JSON | `{ name: "Alice" }` |
//! | [`KvValue`] | as it is | — |
//!
//! Reading back: [`crate::Entry::value_as`] / [`crate::MaybeEntry::value_as`] deserialize into
//! any serde type, and a queue handler takes a [`FromValue`] (a [`KvValue`] or a [`Json`]).
//!
//! ```
//! # async fn demo() -> open_deno_kv::Result<()> {
//! use open_deno_kv::{Json, Kv, key};
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct User { name: String, age: u32 }
//!
//! let kv = Kv::open("memory:").await?;
//! kv.set(key!["greeting"], "hello").await?;
//! kv.set(key!["answer"], 42).await?;
//! kv.set(key!["users", 1], Json(User { name: "Alice".into(), age: 30 })).await?;
//! let alice: Option<User> = kv.get(key!["users", 1]).await?.value_as()?;
//! assert_eq!(alice, Some(User { name: "Alice".into(), age: 30 }));
//! assert_eq!(kv.get(key!["greeting"]).await?.value_as::<String>()?.as_deref(), Some("hello"));
//! # Ok(()) }
//! ```

use num_bigint::BigInt;
use open_deno_kv_model::KvValue;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::v8::{self, Primitive};

/// The largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: i128 = (1 << 53) - 1;

/// A Rust value that can be stored: see the [module documentation](self) for what each type
/// becomes. Implement it for your own types to store them directly (usually through
/// [`Json`] or [`crate::v8`]).
pub trait IntoValue {
    /// The value to store, or why this one cannot be stored (a serde type that JSON cannot
    /// express, an integer a JavaScript number would round).
    fn into_value(self) -> Result<KvValue>;
}

/// A value read from the store that a queue handler can take: a [`KvValue`] as it is, or
/// [`Json`]`<T>` deserialized.
pub trait FromValue: Sized {
    /// Converts the stored value, or says why it does not fit.
    fn from_value(value: KvValue) -> Result<Self>;
}

/// Any serde type, stored as the V8 value Deno reads as the same JSON (structs and maps as
/// objects, sequences as arrays, numbers as numbers, `None` as `null`), and read back from one.
///
/// ```
/// use open_deno_kv::{IntoValue, Json};
/// #[derive(serde::Serialize)]
/// struct Point { x: i32, y: i32 }
/// let value = Json(Point { x: 1, y: 2 }).into_value().unwrap();
/// assert_eq!(open_deno_kv::v8::to_js_literal(&value).unwrap(), "{ x: 1, y: 2 }");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoValue for Json<T> {
    fn into_value(self) -> Result<KvValue> {
        Ok(v8::to_v8(&self.0)?)
    }
}

impl<T: DeserializeOwned> FromValue for Json<T> {
    fn from_value(value: KvValue) -> Result<Self> {
        Ok(Json(v8::from_v8(&value)?))
    }
}

impl FromValue for KvValue {
    fn from_value(value: KvValue) -> Result<Self> {
        Ok(value)
    }
}

impl IntoValue for KvValue {
    fn into_value(self) -> Result<KvValue> {
        Ok(self)
    }
}

impl IntoValue for &KvValue {
    fn into_value(self) -> Result<KvValue> {
        Ok(self.clone())
    }
}

impl IntoValue for u64 {
    /// A `Deno.KvU64`: the type `sum`, `min` and `max` work on.
    fn into_value(self) -> Result<KvValue> {
        Ok(KvValue::U64(self))
    }
}

impl IntoValue for Vec<u8> {
    /// A `Uint8Array`.
    fn into_value(self) -> Result<KvValue> {
        Ok(KvValue::Bytes(self.into()))
    }
}

impl IntoValue for &[u8] {
    /// A `Uint8Array`.
    fn into_value(self) -> Result<KvValue> {
        Ok(KvValue::Bytes(self.to_vec().into()))
    }
}

impl<const N: usize> IntoValue for &[u8; N] {
    /// A `Uint8Array`.
    fn into_value(self) -> Result<KvValue> {
        Ok(KvValue::Bytes(self.to_vec().into()))
    }
}

impl IntoValue for serde_json::Value {
    fn into_value(self) -> Result<KvValue> {
        Ok(v8::from_json(&self)?)
    }
}

impl IntoValue for &serde_json::Value {
    fn into_value(self) -> Result<KvValue> {
        Ok(v8::from_json(self)?)
    }
}

impl IntoValue for Primitive {
    fn into_value(self) -> Result<KvValue> {
        Ok(KvValue::V8(self.to_v8()?.into()))
    }
}

/// Implements [`IntoValue`] for types that become one JavaScript primitive.
macro_rules! primitive_values {
    ($($ty:ty => |$v:ident| $make:expr;)*) => {$(
        impl IntoValue for $ty {
            fn into_value(self) -> Result<KvValue> {
                let $v = self;
                $make.into_value()
            }
        }
    )*};
}

primitive_values! {
    &str => |s| Primitive::String(s.to_owned());
    String => |s| Primitive::String(s);
    &String => |s| Primitive::String(s.clone());
    bool => |b| Primitive::Bool(b);
    f64 => |x| Primitive::Number(x);
    f32 => |x| Primitive::Number(f64::from(x));
    i8 => |n| Primitive::Number(f64::from(n));
    i16 => |n| Primitive::Number(f64::from(n));
    i32 => |n| Primitive::Number(f64::from(n));
    u8 => |n| Primitive::Number(f64::from(n));
    u16 => |n| Primitive::Number(f64::from(n));
    u32 => |n| Primitive::Number(f64::from(n));
    i64 => |n| safe_integer(i128::from(n))?;
    isize => |n| safe_integer(n as i128)?;
    usize => |n| safe_integer(n as i128)?;
    BigInt => |n| Primitive::BigInt(n);
    &BigInt => |n| Primitive::BigInt(n.clone());
}

/// A JavaScript number holding `n` exactly, or an error rather than a silently rounded value.
fn safe_integer(n: i128) -> Result<Primitive> {
    if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&n) {
        // Exact: |n| < 2^53.
        Ok(Primitive::Number(n as f64))
    } else {
        Err(Error::invalid_argument(format!(
            "{n} is beyond a JavaScript number's exact integers (±2^53 - 1): store it as a \
             num_bigint::BigInt (a JavaScript bigint) or a u64 (a Deno.KvU64)"
        )))
    }
}

/// Deserializes a stored value into a serde type (see [`crate::v8::from_v8`] for the mapping).
pub(crate) fn deserialize<T: DeserializeOwned>(value: &KvValue) -> Result<T> {
    Ok(v8::from_v8(value)?)
}
