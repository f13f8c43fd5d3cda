//! The value graph every conversion goes through: what V8 bytes mean, as JavaScript sees it.
//!
//! Primitives are held inline ([`Val`]); everything that is an object in JavaScript is a
//! [`Node`] in [`Graph::nodes`], referred to by index, so one object can appear in several
//! places, or inside itself, exactly as V8's back-references allow.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use num_bigint::BigInt;

use super::error::{Fallible, V8Error};

/// Index of a node in [`Graph::nodes`].
pub(crate) type NodeId = usize;

/// The deepest nesting read or written: the value itself is at depth 0, what it contains at 1,
/// and so on. The V8 reader this module uses refuses deeper values, so this keeps what is
/// written readable.
pub(crate) const MAX_DEPTH: usize = 256;

/// How deep rendering (tagged JSON, plain JSON, JS literals) may go. Plain JSON and JS
/// literals render shared objects in full at every place they appear, as `JSON.stringify` and
/// `Deno.inspect` do, so they can nest deeper than the value itself; they stop here.
///
/// Every conversion recurses once per level; at this depth it stays well within a 2 MiB
/// thread stack (a Tokio worker's) even in a debug build (measured: about 3.6 KiB a level).
pub(crate) const MAX_RENDER_DEPTH: usize = 256;

/// The most nodes a rendering (plain JSON, JS literal) may produce, counting shared objects
/// once per appearance; guards against values whose sharing expands exponentially.
pub(crate) const MAX_RENDERED_NODES: usize = 1 << 20;

/// The longest array whose every slot is listed (tagged JSON, plain JSON); longer sparse
/// arrays are refused rather than listing millions of holes.
pub(crate) const MAX_LISTED_LENGTH: u32 = 1 << 20;

/// A JavaScript value: a primitive, or a reference to an object in the graph.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Undefined,
    Null,
    Bool(bool),
    Number(f64),
    BigInt(BigInt),
    String(String),
    Obj(NodeId),
}

/// The typed array kinds and `DataView`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ViewKind {
    Int8,
    Uint8,
    Uint8Clamped,
    Int16,
    Uint16,
    Int32,
    Uint32,
    Float16,
    Float32,
    Float64,
    BigInt64,
    BigUint64,
    DataView,
}

impl ViewKind {
    pub(crate) const ALL: [ViewKind; 13] = [
        ViewKind::Int8,
        ViewKind::Uint8,
        ViewKind::Uint8Clamped,
        ViewKind::Int16,
        ViewKind::Uint16,
        ViewKind::Int32,
        ViewKind::Uint32,
        ViewKind::Float16,
        ViewKind::Float32,
        ViewKind::Float64,
        ViewKind::BigInt64,
        ViewKind::BigUint64,
        ViewKind::DataView,
    ];

    /// The constructor's name, e.g. `Int8Array`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ViewKind::Int8 => "Int8Array",
            ViewKind::Uint8 => "Uint8Array",
            ViewKind::Uint8Clamped => "Uint8ClampedArray",
            ViewKind::Int16 => "Int16Array",
            ViewKind::Uint16 => "Uint16Array",
            ViewKind::Int32 => "Int32Array",
            ViewKind::Uint32 => "Uint32Array",
            ViewKind::Float16 => "Float16Array",
            ViewKind::Float32 => "Float32Array",
            ViewKind::Float64 => "Float64Array",
            ViewKind::BigInt64 => "BigInt64Array",
            ViewKind::BigUint64 => "BigUint64Array",
            ViewKind::DataView => "DataView",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<ViewKind> {
        ViewKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Bytes per element.
    pub(crate) fn width(self) -> usize {
        match self {
            ViewKind::Int8 | ViewKind::Uint8 | ViewKind::Uint8Clamped | ViewKind::DataView => 1,
            ViewKind::Int16 | ViewKind::Uint16 | ViewKind::Float16 => 2,
            ViewKind::Int32 | ViewKind::Uint32 | ViewKind::Float32 => 4,
            ViewKind::Float64 | ViewKind::BigInt64 | ViewKind::BigUint64 => 8,
        }
    }

    /// V8's sub-tag after `V`.
    pub(crate) fn v8_tag(self) -> u8 {
        match self {
            ViewKind::Int8 => b'b',
            ViewKind::Uint8 => b'B',
            ViewKind::Uint8Clamped => b'C',
            ViewKind::Int16 => b'w',
            ViewKind::Uint16 => b'W',
            ViewKind::Int32 => b'd',
            ViewKind::Uint32 => b'D',
            ViewKind::Float16 => b'h',
            ViewKind::Float32 => b'f',
            ViewKind::Float64 => b'F',
            ViewKind::BigInt64 => b'q',
            ViewKind::BigUint64 => b'Q',
            ViewKind::DataView => b'?',
        }
    }
}

/// The error constructors V8 can serialize (any other error is stored as an `Error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    Error,
    EvalError,
    RangeError,
    ReferenceError,
    SyntaxError,
    TypeError,
    UriError,
}

impl ErrorKind {
    pub(crate) const ALL: [ErrorKind; 7] = [
        ErrorKind::Error,
        ErrorKind::EvalError,
        ErrorKind::RangeError,
        ErrorKind::ReferenceError,
        ErrorKind::SyntaxError,
        ErrorKind::TypeError,
        ErrorKind::UriError,
    ];

    /// The error's `name`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ErrorKind::Error => "Error",
            ErrorKind::EvalError => "EvalError",
            ErrorKind::RangeError => "RangeError",
            ErrorKind::ReferenceError => "ReferenceError",
            ErrorKind::SyntaxError => "SyntaxError",
            ErrorKind::TypeError => "TypeError",
            ErrorKind::UriError => "URIError",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// V8's prototype sub-tag; a plain `Error` has none.
    pub(crate) fn v8_tag(self) -> Option<u8> {
        match self {
            ErrorKind::Error => None,
            ErrorKind::EvalError => Some(b'E'),
            ErrorKind::RangeError => Some(b'R'),
            ErrorKind::ReferenceError => Some(b'F'),
            ErrorKind::SyntaxError => Some(b'S'),
            ErrorKind::TypeError => Some(b'T'),
            ErrorKind::UriError => Some(b'U'),
        }
    }
}

/// A JavaScript array: its length, its elements (ascending by index; missing indices are
/// holes) and any other own enumerable properties (`arr.extra = 1`).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Array {
    pub(crate) length: u32,
    pub(crate) items: Vec<(u32, Val)>,
    pub(crate) extra: Vec<(String, Val)>,
}

impl Array {
    /// A dense array of these elements.
    pub(crate) fn dense(values: Vec<Val>) -> Fallible<Array> {
        let length = u32::try_from(values.len()).map_err(|_| V8Error::TooLarge {
            path: "$".to_owned(),
            what: "array longer than 2^32 - 1 elements".to_owned(),
        })?;
        Ok(Array {
            length,
            items: (0..length).zip(values).collect(),
            extra: Vec::new(),
        })
    }

    /// True when every index below the length holds an element.
    pub(crate) fn is_dense(&self) -> bool {
        usize::try_from(self.length).is_ok_and(|len| len == self.items.len())
    }

    /// Every slot in order, `None` for a hole. Refuses arrays longer than
    /// [`MAX_LISTED_LENGTH`] (their holes would be listed one by one).
    pub(crate) fn slots(&self, path: &str) -> Fallible<Vec<Option<&Val>>> {
        if self.length > MAX_LISTED_LENGTH {
            return Err(Box::new(V8Error::TooLarge {
                path: path.to_owned(),
                what: format!(
                    "sparse array of length {} is longer than the {} slots that are listed",
                    self.length, MAX_LISTED_LENGTH
                ),
            }));
        }
        let mut slots = Vec::with_capacity(usize::try_from(self.length).unwrap_or(0));
        let mut items = self.items.iter().peekable();
        for index in 0..self.length {
            match items.next_if(|(i, _)| *i == index) {
                Some((_, v)) => slots.push(Some(v)),
                None => slots.push(None),
            }
        }
        Ok(slots)
    }
}

/// A JavaScript object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// A plain object, own enumerable properties in order.
    Object(Vec<(String, Val)>),
    Array(Array),
    Map(Vec<(Val, Val)>),
    Set(Vec<Val>),
    /// Milliseconds since the epoch: integral, or NaN for an invalid date.
    Date(f64),
    /// `flags` in JavaScript's canonical order (`dgimsuvy`).
    RegExp {
        source: String,
        flags: String,
    },
    ArrayBuffer(Vec<u8>),
    /// A typed array or `DataView`, with the bytes it views (not the whole buffer).
    View {
        kind: ViewKind,
        bytes: Vec<u8>,
    },
    Error {
        kind: ErrorKind,
        message: Option<String>,
        cause: Option<Val>,
    },
    /// `new String(…)`, `new Number(…)`, `new Boolean(…)`, `Object(1n)`: holds the primitive.
    Boxed(Val),
}

/// A value with the objects it reaches.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<Node>,
    pub(crate) root: Val,
}

impl Graph {
    /// A graph whose root is this primitive or the single object `node`.
    pub(crate) fn single(node: Node) -> Graph {
        Graph {
            nodes: vec![node],
            root: Val::Obj(0),
        }
    }

    pub(crate) fn node(&self, id: NodeId) -> Fallible<&Node> {
        self.nodes.get(id).ok_or_else(|| {
            Box::new(V8Error::InvalidBytes {
                reason: format!("internal: object #{id} is missing"),
            })
        })
    }
}

/// Identity of a map key or set element under JavaScript's SameValueZero.
#[derive(Hash, PartialEq, Eq)]
pub(crate) enum SameValueZero {
    Undefined,
    Null,
    Bool(bool),
    Number(u64),
    BigInt(BigInt),
    String(String),
    Obj(NodeId),
}

impl SameValueZero {
    pub(crate) fn of(value: &Val) -> SameValueZero {
        match value {
            Val::Undefined => SameValueZero::Undefined,
            Val::Null => SameValueZero::Null,
            Val::Bool(b) => SameValueZero::Bool(*b),
            Val::Number(x) if x.is_nan() => SameValueZero::Number(f64::NAN.to_bits()),
            // -0 and 0 are the same key (adding 0.0 turns -0 into 0).
            Val::Number(x) => SameValueZero::Number((x + 0.0).to_bits()),
            Val::BigInt(n) => SameValueZero::BigInt(n.clone()),
            Val::String(s) => SameValueZero::String(s.clone()),
            Val::Obj(id) => SameValueZero::Obj(*id),
        }
    }
}

/// Map entries as JavaScript holds them after `map.set(k, v)` for each: one entry per key
/// (under SameValueZero) at its first position with its last value, `-0` keys as `0`.
pub(crate) fn dedupe_entries(entries: Vec<(Val, Val)>) -> Vec<(Val, Val)> {
    let mut out: Vec<(Val, Val)> = Vec::with_capacity(entries.len());
    let mut seen: HashMap<SameValueZero, usize> = HashMap::new();
    for (k, v) in entries {
        let k = normalize_zero(k);
        match seen.entry(SameValueZero::of(&k)) {
            Entry::Occupied(at) => {
                if let Some(slot) = out.get_mut(*at.get()) {
                    slot.1 = v;
                }
            }
            Entry::Vacant(slot) => {
                slot.insert(out.len());
                out.push((k, v));
            }
        }
    }
    out
}

/// Set elements as JavaScript holds them after `set.add(v)` for each.
pub(crate) fn dedupe_values(values: Vec<Val>) -> Vec<Val> {
    let mut seen = HashSet::new();
    values
        .into_iter()
        .map(normalize_zero)
        .filter(|v| seen.insert(SameValueZero::of(v)))
        .collect()
}

/// Object properties as JavaScript holds them after defining each: one per key, at its first
/// position, with its last value.
pub(crate) fn dedupe_properties(properties: Vec<(String, Val)>) -> Vec<(String, Val)> {
    let mut out: Vec<(String, Val)> = Vec::with_capacity(properties.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (k, v) in properties {
        match seen.entry(k) {
            Entry::Occupied(at) => {
                if let Some(slot) = out.get_mut(*at.get()) {
                    slot.1 = v;
                }
            }
            Entry::Vacant(slot) => {
                let k = slot.key().clone();
                slot.insert(out.len());
                out.push((k, v));
            }
        }
    }
    out
}

/// `-0` as `0` (what a Map key or Set element becomes).
pub(crate) fn normalize_zero(value: Val) -> Val {
    match value {
        // Adding 0 turns -0 into 0 and leaves every other number as it is.
        Val::Number(x) => Val::Number(x + 0.0),
        other => other,
    }
}

/// Path of a property (`$.name`), as the manifests' generator writes it.
pub(crate) fn prop_path(path: &str, key: &str) -> String {
    format!("{path}.{key}")
}

/// Path of an array element (`$[2]`).
pub(crate) fn index_path(path: &str, index: impl std::fmt::Display) -> String {
    format!("{path}[{index}]")
}

/// Path of a map key (`$<map 0 key>`).
pub(crate) fn map_key_path(path: &str, i: usize) -> String {
    format!("{path}<map {i} key>")
}

/// Path of a map value (`$<map 0 value>`).
pub(crate) fn map_value_path(path: &str, i: usize) -> String {
    format!("{path}<map {i} value>")
}

/// Path of a set element (`$<set 0>`).
pub(crate) fn set_path(path: &str, i: usize) -> String {
    format!("{path}<set {i}>")
}

/// Path of the primitive in a boxed primitive (`$<boxed>`).
pub(crate) fn boxed_path(path: &str) -> String {
    format!("{path}<boxed>")
}

/// The error for a rendering past [`MAX_RENDERED_NODES`].
#[cold]
#[inline(never)]
pub(crate) fn render_budget_exceeded(path: &str) -> Box<V8Error> {
    Box::new(V8Error::TooLarge {
        path: path.to_owned(),
        what: format!(
            "rendering would produce more than {MAX_RENDERED_NODES} values (shared objects are \
             repeated wherever they appear)"
        ),
    })
}

/// The `TooDeep` error, if `depth` is past `limit`.
pub(crate) fn check_depth(depth: usize, limit: usize, path: &str) -> Fallible<()> {
    if depth > limit {
        Err(Box::new(V8Error::TooDeep {
            path: path.to_owned(),
            limit,
        }))
    } else {
        Ok(())
    }
}

/// RegExp flags: letter and V8's bit, in JavaScript's canonical order.
pub(crate) const REGEXP_FLAGS: [(char, u32); 8] = [
    ('d', 1 << 7), // hasIndices
    ('g', 1 << 0), // global
    ('i', 1 << 1), // ignoreCase
    ('m', 1 << 2), // multiline
    ('s', 1 << 5), // dotAll
    ('u', 1 << 4), // unicode
    ('v', 1 << 8), // unicodeSets
    ('y', 1 << 3), // sticky
];

/// The flags string for V8's flag bits (unknown bits ignored).
pub(crate) fn flags_from_bits(bits: u32) -> String {
    REGEXP_FLAGS
        .iter()
        .filter(|(_, bit)| bits & bit != 0)
        .map(|(c, _)| *c)
        .collect()
}

/// V8's flag bits for a flags string, and the string in canonical order; `Err` names what is
/// wrong.
pub(crate) fn parse_flags(flags: &str) -> Result<(u32, String), String> {
    let mut bits = 0u32;
    for c in flags.chars() {
        let Some((_, bit)) = REGEXP_FLAGS.iter().find(|(f, _)| *f == c) else {
            return Err(format!("unknown flag {c:?}"));
        };
        if bits & bit != 0 {
            return Err(format!("flag {c:?} given twice"));
        }
        bits |= bit;
    }
    if bits & (1 << 4) != 0 && bits & (1 << 8) != 0 {
        return Err("flags \"u\" and \"v\" cannot be combined".to_owned());
    }
    Ok((bits, flags_from_bits(bits)))
}
