//! The error type of the V8 conversions.

use thiserror::Error;

/// Why a value could not be converted.
///
/// Every variant that is about a place inside a value carries its `path`, written the way the
/// tagged JSON's `ref`s are: `$` is the value itself, `$.name` a property, `$[2]` an array
/// element, `$<map 0 key>` / `$<map 0 value>` a map entry, `$<set 1>` a set element and
/// `$<boxed>` the primitive inside a boxed primitive. `to_string()` starts with that path:
///
/// ```
/// use open_deno_kv_model::v8::{from_tagged_json, V8Error};
/// let json = serde_json::json!({"object": [["a", {"array": [{"bigint": "x"}]}]]});
/// let err = from_tagged_json(&json).unwrap_err();
/// assert!(matches!(err, V8Error::BadTagValue { .. }));
/// assert_eq!(err.to_string(), r#"$.a[0]: bad bigint "x": not a decimal integer"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum V8Error {
    /// Bytes that are not a V8 value this module can read (damaged, truncated, or using a
    /// feature such as host objects or `SharedArrayBuffer` that Deno KV never stores).
    #[error("not a readable V8 value: {reason}")]
    InvalidBytes {
        /// What the V8 reader found.
        reason: String,
    },

    /// Tagged JSON that is not an object with exactly one key (the tag).
    #[error("{path}: expected a tagged value like {{\"string\": \"…\"}}, found {found}")]
    NotTagged {
        /// Where in the value.
        path: String,
        /// The JSON found there (shortened).
        found: String,
    },

    /// A tag this format does not have.
    #[error("{path}: unknown tag {tag:?}")]
    UnknownTag {
        /// Where in the value.
        path: String,
        /// The tag found.
        tag: String,
    },

    /// A known tag whose content is wrong: a bad decimal, bad hex, a misplaced tag, …
    #[error("{path}: bad {tag} {found}: {reason}")]
    BadTagValue {
        /// Where in the value.
        path: String,
        /// The tag, e.g. `bigint`.
        tag: String,
        /// The JSON found as the tag's content (shortened).
        found: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A `{"ref": path}` that does not name an object seen earlier in the value.
    #[error("{path}: bad ref {target:?}: {reason}")]
    BadRef {
        /// Where the ref is.
        path: String,
        /// The path it refers to.
        target: String,
        /// Why it cannot be resolved.
        reason: String,
    },

    /// A value that contains itself, converted to plain JSON (as `JSON.stringify` refuses to).
    #[error("{path}: circular reference to {target}, which plain JSON cannot express")]
    Circular {
        /// Where the circular reference is.
        path: String,
        /// The path of the object it refers back to.
        target: String,
    },

    /// A value nested deeper than this module handles.
    #[error("{path}: nested deeper than {limit} levels")]
    TooDeep {
        /// Where the limit was reached.
        path: String,
        /// The limit.
        limit: usize,
    },

    /// A value too large to convert: a bigint beyond V8's limit, an array too sparse to list,
    /// a value whose shared parts expand beyond the rendering budget, …
    #[error("{path}: {what}")]
    TooLarge {
        /// Where in the value.
        path: String,
        /// What is too large, and the limit.
        what: String,
    },

    /// Plain JSON that cannot become a V8 value (a number that is not an `f64`).
    #[error("{path}: {reason}")]
    InvalidJson {
        /// Where in the value.
        path: String,
        /// What is wrong.
        reason: String,
    },

    /// A Rust value that serde could not turn into JSON, or JSON that does not fit the Rust
    /// type asked for.
    #[error("serde: {0}")]
    Serde(String),
}

/// Shortens a JSON value's text for an error message.
pub(crate) fn snippet(json: &serde_json::Value) -> String {
    const MAX: usize = 60;
    let text = json.to_string();
    if text.chars().count() <= MAX {
        text
    } else {
        let mut short: String = text.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

/// What the conversions return inside this module: the error boxed, so that results stay
/// small and a value nested to the depth limit converts within a thread's stack even in a
/// debug build. The public functions unbox it.
pub(crate) type Fallible<T> = Result<T, Box<V8Error>>;
