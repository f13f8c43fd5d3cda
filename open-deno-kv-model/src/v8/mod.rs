//! V8 values: conversions between the bytes Deno stores and forms a Rust program can use.
//!
//! Deno KV stores a JavaScript value as the bytes of V8's `ValueSerializer` ([`KvValue::V8`]),
//! except for two top-level special cases with encodings of their own: a `Uint8Array`
//! ([`KvValue::Bytes`]) and a `Deno.KvU64` ([`KvValue::U64`]). This module converts between
//! those and four other forms:
//!
//! | form | to a [`KvValue`] | from a [`KvValue`] | lossless |
//! |---|---|---|---|
//! | tagged JSON (the fixture manifests' `value_json`) | [`from_tagged_json`] | [`to_tagged_json`] | nearly: not an error's stack and cause, nor the buffer around a view (see below) |
//! | plain JSON | [`from_json`] | [`to_json`] | no: `JSON.stringify`'s view |
//! | any `serde` type | [`to_v8`] | [`from_v8`] | as plain JSON |
//! | a JavaScript literal, for people | — | [`to_js_literal`] | no |
//!
//! and [`to_v8_bytes`] gives the V8 bytes of any [`KvValue`] (what a queue message carries).
//!
//! ```
//! use open_deno_kv_model::v8;
//! let value = v8::from_json(&serde_json::json!({"name": "Alice", "tags": ["a", "b"]})).unwrap();
//! assert_eq!(v8::to_js_literal(&value).unwrap(), r#"{ name: "Alice", tags: ["a", "b"] }"#);
//! assert_eq!(v8::to_json(&value).unwrap(), serde_json::json!({"name": "Alice", "tags": ["a", "b"]}));
//! assert_eq!(
//!     v8::to_tagged_json(&value).unwrap(),
//!     serde_json::json!({"object": [
//!         ["name", {"string": "Alice"}],
//!         ["tags", {"array": [{"string": "a"}, {"string": "b"}]}],
//!     ]})
//! );
//! ```
//!
//! # Tagged JSON
//!
//! Every JavaScript value is a JSON object with exactly one key, its tag:
//!
//! | tag | JavaScript value |
//! |---|---|
//! | `{"string": "…"}` | a string |
//! | `{"number": "3.14"}` | a number, as `String(x)` writes it except `-0`: `"-0"`, `"NaN"`, `"Infinity"`, `"1e+21"` |
//! | `{"bigint": "-42"}` | a bigint, in decimal |
//! | `{"bool": true}`, `{"null": null}`, `{"undefined": null}` | the other primitives |
//! | `{"date": "1700000000123"}` | a `Date`: milliseconds since the epoch, or `"NaN"` for an invalid date |
//! | `{"regexp": {"source": "ab+c", "flags": "gi"}}` | a `RegExp` |
//! | `{"arraybuffer": "0001ff"}` | an `ArrayBuffer`, its bytes in hex |
//! | `{"view": {"type": "Int16Array", "bytes": "ffff0200"}}` | a typed array (`Int8Array` … `BigUint64Array`, `Float16Array`) or `DataView`: the kind, and the bytes it views in hex (little-endian elements) |
//! | `{"array": [...]}` | an array; a missing element of a sparse array is `{"hole": null}` |
//! | `{"object": [["key", …], …]}` | a plain object: its own enumerable properties in order |
//! | `{"map": [[key, value], …]}`, `{"set": [...]}` | a `Map`, a `Set`, in insertion order (keys unique, as JavaScript keeps them) |
//! | `{"error": {"name": "TypeError", "message": "…"}}` | an error (`Error`, `EvalError`, `RangeError`, `ReferenceError`, `SyntaxError`, `TypeError` or `URIError`) |
//! | `{"boxed": {"string": "s"}}` | a boxed primitive: `new String("s")`, `new Number(1)`, `new Boolean(false)`, `Object(7n)` |
//! | `{"u64": "5"}` | a `Deno.KvU64`: only as the whole value ([`KvValue::U64`]) |
//! | `{"ref": "$.first"}` | the same object as the one first met at that path |
//!
//! An object that appears more than once (shared, or inside itself) is written in full where
//! it first appears, depth first in property order, and as a `ref` to that place everywhere
//! else. A path starts with `$` (the whole value) and adds `.key` for a property, `[i]` for
//! an array element, `<map i key>` / `<map i value>` for the i-th map entry, `<set i>` for the
//! i-th set element and `<boxed>` inside a boxed primitive: `$.list[0]<map 2 value>`. Reading
//! tagged JSON back gives real shared objects (V8 back-references), so cycles survive.
//!
//! The whole value `{"view": {"type": "Uint8Array", …}}` is [`KvValue::Bytes`], as Deno stores
//! a top-level `Uint8Array`; `{"u64": …}` is [`KvValue::U64`]; everything else is V8 bytes.
//!
//! ```
//! use open_deno_kv_model::v8::{from_tagged_json, to_js_literal, to_tagged_json};
//! let cyclic = serde_json::json!({"object": [
//!     ["name", {"string": "cyclic"}],
//!     ["self", {"ref": "$"}],
//! ]});
//! let value = from_tagged_json(&cyclic).unwrap();
//! assert_eq!(to_tagged_json(&value).unwrap(), cyclic);
//! assert_eq!(to_js_literal(&value).unwrap(), r#"<ref *1> { name: "cyclic", self: [Circular *1] }"#);
//! ```
//!
//! What tagged JSON does not carry, because the fixtures' generator does not look at it: an
//! error's `stack` and `cause`, properties of an array other than its elements, the parts of
//! an `ArrayBuffer` outside a view's window, whether a buffer is resizable, and which typed
//! arrays share a buffer. Strings are Rust strings, so a lone UTF-16 surrogate (possible in
//! JavaScript) reads as U+FFFD.
//!
//! V8 bytes are read as JavaScript would hold the value: a `Date` outside ±8.64e15 ms is an
//! invalid date, a repeated object key or map key keeps its first place and its last value,
//! a repeated set element is dropped, and a `-0` map key or set element is `0`.
//!
//! # The bytes written
//!
//! Values made here are serialized as Deno 2.9.6's client serializes the same JavaScript
//! value: header `ff 10` (see [`WIRE_FORMAT_VERSION`]), small integers as V8 "Smi"s, bigints
//! in 64-bit digits, Latin-1 or UTF-16 strings, index keys as numbers, and so on. For the
//! values of the Deno 2.9.6 fixtures the bytes are Deno's own, except where the tagged form
//! drops something (an error's stack, a `DataView`'s whole buffer) and for values Deno's
//! engine computed (the result of a V8 `sum`, header `ff 0f`). Whether V8 held a number as an
//! integer or a double is not visible to JavaScript; the choice here is the one a JavaScript
//! literal gets.
//!
//! V8 bytes of wire format 13 to 16 (headers `ff 0d` … `ff 10`) are read, by a reader of this
//! module's own (denoland's `v8_valueserializer` reads the same values; the tests check that
//! the two agree).
//!
//! # Limits
//!
//! Values nest at most 256 levels, reading and writing (as deep as `v8_valueserializer`
//! reads); every conversion then stays well within a 2 MiB thread stack, even in a debug
//! build. A sparse array is listed slot by slot (tagged JSON, plain JSON) only up to a length
//! of 2^20. [`to_json`] and [`to_js_literal`] repeat shared objects wherever they appear, up
//! to 256 levels deep and 2^20 values in all. Beyond these, conversions fail with
//! [`V8Error::TooDeep`] or [`V8Error::TooLarge`] ([`V8Error::InvalidBytes`] for V8 bytes
//! nested too deeply); nothing panics.

mod error;
mod graph;
mod js;
mod json;
mod number;
#[cfg(test)]
mod oracle;
mod primitive;
mod read;
mod serde;
mod tagged;
mod write;

#[cfg(test)]
mod tests;

use crate::KvValue;

pub use self::error::V8Error;
pub use self::number::{number_repr, parse_number};
pub use self::primitive::Primitive;
pub use self::serde::{from_v8, to_v8};
pub use self::write::WIRE_FORMAT_VERSION;

/// The lossless tagged JSON form of a stored value (the `value_json` of the fixture
/// manifests). See the [module documentation](self) for the tags.
///
/// Fails only for V8 bytes that do not parse (or that are beyond this module's limits).
///
/// ```
/// use open_deno_kv_model::KvValue;
/// use open_deno_kv_model::v8::to_tagged_json;
/// use serde_json::json;
/// assert_eq!(to_tagged_json(&KvValue::U64(5)).unwrap(), json!({"u64": "5"}));
/// assert_eq!(
///     to_tagged_json(&KvValue::Bytes(vec![1, 2, 3].into())).unwrap(),
///     json!({"view": {"type": "Uint8Array", "bytes": "010203"}})
/// );
/// // Bytes Deno 2.9.6 wrote for `[1, , , , 5]` (a sparse array):
/// let sparse = KvValue::V8(hex::decode("ff106105490049024908490a400205").unwrap().into());
/// assert_eq!(
///     to_tagged_json(&sparse).unwrap(),
///     json!({"array": [{"number": "1"}, {"hole": null}, {"hole": null}, {"hole": null}, {"number": "5"}]})
/// );
/// assert!(to_tagged_json(&KvValue::V8(vec![0xff, 0x10, 0x6f].into())).is_err()); // truncated
/// ```
pub fn to_tagged_json(value: &KvValue) -> Result<serde_json::Value, V8Error> {
    tagged::to_tagged(value).map_err(|e| *e)
}

/// Reads tagged JSON (see the [module documentation](self)) into a value to store: a
/// top-level `{"u64"}` is [`KvValue::U64`], a top-level `Uint8Array` view is
/// [`KvValue::Bytes`], anything else is V8 bytes laid out as Deno writes them.
///
/// `to_tagged_json(&from_tagged_json(&json)?)` gives `json` back for every tagged JSON that
/// describes a JavaScript value in its canonical spelling (as [`to_tagged_json`] writes it):
/// property order, holes, `-0`, `NaN`, invalid dates, boxed primitives, errors, regexps, typed
/// array kinds and shared or circular objects all survive. Other spellings are accepted and
/// normalized: a number as any decimal literal (`"1e21"` reads back as `"1e+21"`), regexp
/// flags in any order, hex in upper case, a map key or set element `-0` (JavaScript holds
/// it as `0`). An error message `""` is stored as no message, which JavaScript also reads as
/// `""`.
///
/// The property order is kept in the bytes as given; JavaScript lists integer-like keys
/// (`"1"`, `"20"`) first, ascending, once it has read the value, as the manifests show.
///
/// Errors, each with the path inside the value: a JSON value that is not `{tag: content}`, an
/// unknown tag, bad content (decimal, hex, a `view` type, an error name V8 cannot store,
/// a duplicate object key, map key or set element, a hole outside an array, a nested `u64`), a
/// `ref` to a path where no object appeared earlier, and nesting deeper than 256 levels.
///
/// ```
/// use open_deno_kv_model::KvValue;
/// use open_deno_kv_model::v8::{from_tagged_json, V8Error};
/// use serde_json::json;
/// assert_eq!(from_tagged_json(&json!({"u64": "7"})).unwrap(), KvValue::U64(7));
/// // Deno's bytes for the string "hello":
/// assert_eq!(
///     from_tagged_json(&json!({"string": "hello"})).unwrap(),
///     KvValue::V8(hex::decode("ff10220568656c6c6f").unwrap().into())
/// );
/// let err = from_tagged_json(&json!({"array": [{"ref": "$.x"}]})).unwrap_err();
/// assert!(matches!(err, V8Error::BadRef { .. }));
/// assert_eq!(
///     err.to_string(),
///     r#"$[0]: bad ref "$.x": no object appears at this path earlier in the value"#
/// );
/// ```
pub fn from_tagged_json(json: &serde_json::Value) -> Result<KvValue, V8Error> {
    tagged::from_tagged(json).map_err(|e| *e)
}

/// Turns plain JSON into the V8 value `JSON.parse` would give: objects (keys in the JSON's
/// order), arrays, numbers, strings, booleans and `null`. The result is always
/// [`KvValue::V8`].
///
/// Numbers become JavaScript numbers, i.e. `f64`: integers beyond ±2^53 lose precision, as they
/// do in JavaScript. Keys keep the JSON's order in the bytes (this crate turns on
/// `serde_json`'s `preserve_order`); JavaScript itself lists integer-like keys (`"1"`, `"20"`)
/// first, in ascending order, once it has read the value.
///
/// Fails only for nesting deeper than 256 levels (or, with `serde_json`'s
/// `arbitrary_precision`, a number that is not an `f64`).
///
/// ```
/// use open_deno_kv_model::KvValue;
/// use serde_json::json;
/// let value = open_deno_kv_model::v8::from_json(&json!({"a": 1, "b": 2})).unwrap();
/// // Byte for byte what Deno 2.9.6 writes for `{ a: 1, b: 2 }`:
/// assert_eq!(value, KvValue::V8(hex::decode("ff106f220161490222016249047b02").unwrap().into()));
/// ```
pub fn from_json(json: &serde_json::Value) -> Result<KvValue, V8Error> {
    let graph = json::json_to_graph(json).map_err(|e| *e)?;
    write::write(&graph)
        .map(|b| KvValue::V8(b.into()))
        .map_err(|e| *e)
}

/// The plain JSON `JSON.stringify` would make of a stored value, with answers of its own where
/// `JSON.stringify` has none.
///
/// As `JSON.stringify`:
/// - objects keep their property order; a property whose value is `undefined` is left out;
/// - arrays: holes and `undefined` elements are `null`;
/// - numbers: `NaN` and `±Infinity` are `null`, `-0` is `0`; integral numbers are JSON
///   integers (so they deserialize into Rust integers), others floats;
/// - a `Date` is its ISO 8601 string (`"2023-11-14T22:13:20.123Z"`), an invalid date `null`;
/// - boxed primitives are their primitive;
/// - typed arrays (and a top-level [`KvValue::Bytes`]) are objects of their elements by index,
///   `{"0": 1, "1": 2}`; a `DataView` is `{}`;
/// - `Map`, `Set`, `RegExp`, `ArrayBuffer` and errors are `{}`: they have no enumerable own
///   properties, so their contents are not shown (use [`to_tagged_json`] or
///   [`to_js_literal`] to see them);
/// - an object that contains itself is an error ([`V8Error::Circular`]); an object that is
///   merely shared is written out at each place.
///
/// Where `JSON.stringify` has no answer:
/// - a bigint (where `JSON.stringify` throws) is a JSON integer if it fits `i64` or `u64`
///   (exact in `serde_json`), otherwise its decimal string: `5n` → `5`, `2n ** 64n` →
///   `"18446744073709551616"`;
/// - a [`KvValue::U64`] is a JSON integer (a `u64`: exact in Rust; JavaScript readers of the
///   text lose precision above 2^53);
/// - a top-level `undefined` (where `JSON.stringify` returns no text) is `null`.
///
/// ```
/// use open_deno_kv_model::v8::{from_tagged_json, to_json};
/// use serde_json::json;
/// let value = from_tagged_json(&json!({"object": [
///     ["when", {"date": "1700000000123"}],
///     ["n", {"bigint": "42"}],
///     ["gone", {"undefined": null}],
///     ["nan", {"number": "NaN"}],
///     ["tags", {"set": [{"string": "a"}]}],
///     ["list", {"array": [{"number": "1"}, {"hole": null}]}],
/// ]})).unwrap();
/// assert_eq!(
///     to_json(&value).unwrap(),
///     json!({"when": "2023-11-14T22:13:20.123Z", "n": 42, "nan": null, "tags": {}, "list": [1, null]})
/// );
/// ```
pub fn to_json(value: &KvValue) -> Result<serde_json::Value, V8Error> {
    json::to_json(value).map_err(|e| *e)
}

/// A one-line JavaScript rendering of a stored value, for people (a CLI's `--format js`).
///
/// Mostly valid JavaScript that evaluates to the value: `{ name: "Alice", "1": 2 }` (keys
/// quoted unless they are identifiers), `[1, 2]`, `42n`, `-0`, `NaN`, strings double-quoted
/// with JavaScript escapes, `new Date(1700000000123)`, `/ab+c/gi`, `new Map([["k", 1]])`,
/// `new Set([1, 2])`, `new Uint8Array([1, 2, 3])`, `new Uint8Array([0, 1]).buffer`,
/// `new TypeError("boom")`, `new String("s")`, `Object(7n)`, `new Deno.KvU64(5n)`. Two
/// things follow `Deno.inspect` instead: holes are `<1 empty item>` / `<3 empty items>`, and
/// an object that contains itself is marked `<ref *1>` where it starts and `[Circular *1]`
/// where it recurs. Objects that are merely shared are written out at each place.
///
/// Fails only for V8 bytes that do not parse, or values beyond the limits of the
/// [module documentation](self).
///
/// ```
/// use open_deno_kv_model::KvValue;
/// use open_deno_kv_model::v8::{from_tagged_json, to_js_literal};
/// use serde_json::json;
/// assert_eq!(to_js_literal(&KvValue::U64(5)).unwrap(), "new Deno.KvU64(5n)");
/// let value = from_tagged_json(&json!({"object": [
///     ["n", {"bigint": "42"}],
///     ["d", {"date": "1700000000123"}],
///     ["s", {"set": [{"number": "1"}, {"number": "2"}]}],
///     ["m", {"map": [[{"string": "k"}, {"number": "1"}]]}],
///     ["u", {"view": {"type": "Uint8Array", "bytes": "010203"}}],
///     ["sparse", {"array": [{"number": "1"}, {"hole": null}, {"hole": null}, {"number": "4"}]}],
///     ["my key", {"string": "tab\there"}],
/// ]})).unwrap();
/// assert_eq!(
///     to_js_literal(&value).unwrap(),
///     r#"{ n: 42n, d: new Date(1700000000123), s: new Set([1, 2]), m: new Map([["k", 1]]), u: new Uint8Array([1, 2, 3]), sparse: [1, <2 empty items>, 4], "my key": "tab\there" }"#
/// );
/// ```
pub fn to_js_literal(value: &KvValue) -> Result<String, V8Error> {
    js::to_js_literal(value).map_err(|e| *e)
}

/// The V8 bytes of a value as a JavaScript program holding it would serialize it: what a queue
/// message carries, since queue messages are always V8 values.
///
/// [`KvValue::V8`] bytes are returned as they are (not checked). A [`KvValue::Bytes`] becomes
/// a V8 `Uint8Array`, and a [`KvValue::U64`] the plain object `{ value: <bigint> }`, which is
/// how V8 serializes a `Deno.KvU64` anywhere but as a whole KV value.
///
/// ```
/// use open_deno_kv_model::KvValue;
/// use open_deno_kv_model::v8::{to_js_literal, to_v8_bytes};
/// let bytes = to_v8_bytes(&KvValue::Bytes(vec![1, 2].into())).unwrap();
/// assert_eq!(to_js_literal(&KvValue::V8(bytes.into())).unwrap(), "new Uint8Array([1, 2])");
/// let bytes = to_v8_bytes(&KvValue::U64(5)).unwrap();
/// assert_eq!(to_js_literal(&KvValue::V8(bytes.into())).unwrap(), "{ value: 5n }");
/// ```
pub fn to_v8_bytes(value: &KvValue) -> Result<Vec<u8>, V8Error> {
    let bytes = match value {
        KvValue::V8(bytes) => Ok(bytes.to_vec()),
        KvValue::Bytes(bytes) => write::write(&graph::Graph::single(graph::Node::View {
            kind: graph::ViewKind::Uint8,
            bytes: bytes.to_vec(),
        })),
        KvValue::U64(n) => write::write(&graph::Graph::single(graph::Node::Object(vec![(
            "value".to_owned(),
            graph::Val::BigInt((*n).into()),
        )]))),
    };
    bytes.map_err(|e| *e)
}
