//! The lossless tagged JSON form ↔ [`Graph`].
//!
//! The format is the one the Deno 2.9.6 fixture manifests use for `value_json` (their
//! generator's `typedValue`); see the module documentation of [`crate::v8`] for the tags.

use std::collections::{HashMap, HashSet};

use crate::KvValue;
use num_bigint::BigInt;
use serde_json::{Map, Value};

use super::error::{Fallible, V8Error, snippet};
use super::graph::{
    Array, ErrorKind, Graph, MAX_DEPTH, Node, NodeId, SameValueZero, Val, ViewKind, boxed_path,
    check_depth, index_path, map_key_path, map_value_path, normalize_zero, parse_flags, prop_path,
    set_path,
};
use super::number::{number_repr, parse_number};

/// `{tag: content}`.
fn tagged(tag: &str, content: Value) -> Value {
    let mut map = Map::new();
    map.insert(tag.to_owned(), content);
    Value::Object(map)
}

/// `{k1: v1, k2: v2}` in this order.
fn record(fields: [(&str, Value); 2]) -> Value {
    let mut map = Map::new();
    for (k, v) in fields {
        map.insert(k.to_owned(), v);
    }
    Value::Object(map)
}

/// The tagged JSON of a stored value.
pub(crate) fn to_tagged(value: &KvValue) -> Fallible<Value> {
    match value {
        KvValue::U64(n) => Ok(tagged("u64", Value::String(n.to_string()))),
        KvValue::Bytes(bytes) => Ok(view_json(ViewKind::Uint8, bytes)),
        KvValue::V8(bytes) => {
            let graph = super::read::read(bytes)?;
            graph_to_tagged(&graph)
        }
    }
}

fn view_json(kind: ViewKind, bytes: &[u8]) -> Value {
    tagged(
        "view",
        record([
            ("type", Value::String(kind.name().to_owned())),
            ("bytes", Value::String(hex::encode(bytes))),
        ]),
    )
}

/// The tagged JSON of a graph: every object in full where it first appears (depth first, in
/// property order), a `{"ref": path}` wherever it appears again.
pub(crate) fn graph_to_tagged(graph: &Graph) -> Fallible<Value> {
    let mut out = TagWriter {
        graph,
        seen: HashMap::new(),
    };
    out.value(&graph.root, "$", 0)
}

struct TagWriter<'g> {
    graph: &'g Graph,
    seen: HashMap<NodeId, String>,
}

/// The tagged form of a primitive.
pub(crate) fn primitive_json(value: &Val) -> Option<Value> {
    Some(match value {
        Val::Undefined => tagged("undefined", Value::Null),
        Val::Null => tagged("null", Value::Null),
        Val::Bool(b) => tagged("bool", Value::Bool(*b)),
        Val::Number(x) => tagged("number", Value::String(number_repr(*x))),
        Val::BigInt(n) => tagged("bigint", Value::String(n.to_string())),
        Val::String(s) => tagged("string", Value::String(s.clone())),
        Val::Obj(_) => return None,
    })
}

impl TagWriter<'_> {
    fn value(&mut self, value: &Val, path: &str, depth: usize) -> Fallible<Value> {
        check_depth(depth, super::graph::MAX_RENDER_DEPTH, path)?;
        let Val::Obj(id) = value else {
            return primitive_json(value).ok_or_else(|| {
                Box::new(V8Error::InvalidBytes {
                    reason: "internal: not a primitive".to_owned(),
                })
            });
        };
        if let Some(first) = self.seen.get(id) {
            return Ok(tagged("ref", Value::String(first.clone())));
        }
        self.seen.insert(*id, path.to_owned());
        self.node(*id, path, depth + 1)
    }

    // Each container has a function of its own, so that the recursion's stack frames stay
    // small (see `Fallible`).
    fn node(&mut self, id: NodeId, path: &str, inner: usize) -> Fallible<Value> {
        let graph = self.graph;
        match graph.node(id)? {
            Node::Object(properties) => self.object(properties, path, inner),
            Node::Array(array) => self.array(array, path, inner),
            Node::Map(entries) => self.map(entries, path, inner),
            Node::Set(values) => self.set(values, path, inner),
            Node::Boxed(primitive) => Ok(tagged(
                "boxed",
                self.value(primitive, &boxed_path(path), inner)?,
            )),
            leaf => Ok(leaf_json(leaf)),
        }
    }

    fn object(
        &mut self,
        properties: &[(String, Val)],
        path: &str,
        inner: usize,
    ) -> Fallible<Value> {
        let mut entries = Vec::with_capacity(properties.len());
        for (k, v) in properties {
            let v = self.value(v, &prop_path(path, k), inner)?;
            entries.push(Value::Array(vec![Value::String(k.clone()), v]));
        }
        Ok(tagged("object", Value::Array(entries)))
    }

    fn array(&mut self, array: &Array, path: &str, inner: usize) -> Fallible<Value> {
        let mut items = Vec::new();
        for (i, slot) in array.slots(path)?.into_iter().enumerate() {
            items.push(match slot {
                Some(v) => self.value(v, &index_path(path, i), inner)?,
                None => tagged("hole", Value::Null),
            });
        }
        Ok(tagged("array", Value::Array(items)))
    }

    fn map(&mut self, entries: &[(Val, Val)], path: &str, inner: usize) -> Fallible<Value> {
        let mut out = Vec::with_capacity(entries.len());
        for (i, (k, v)) in entries.iter().enumerate() {
            let k = self.value(k, &map_key_path(path, i), inner)?;
            let v = self.value(v, &map_value_path(path, i), inner)?;
            out.push(Value::Array(vec![k, v]));
        }
        Ok(tagged("map", Value::Array(out)))
    }

    fn set(&mut self, values: &[Val], path: &str, inner: usize) -> Fallible<Value> {
        let mut out = Vec::with_capacity(values.len());
        for (i, v) in values.iter().enumerate() {
            out.push(self.value(v, &set_path(path, i), inner)?);
        }
        Ok(tagged("set", Value::Array(out)))
    }
}

/// The tagged form of an object without contents to recurse into.
fn leaf_json(node: &Node) -> Value {
    match node {
        Node::Date(ms) => tagged("date", Value::String(number_repr(*ms))),
        Node::RegExp { source, flags } => tagged(
            "regexp",
            record([
                ("source", Value::String(source.clone())),
                ("flags", Value::String(flags.clone())),
            ]),
        ),
        Node::ArrayBuffer(bytes) => tagged("arraybuffer", Value::String(hex::encode(bytes))),
        Node::View { kind, bytes } => view_json(*kind, bytes),
        Node::Error { kind, message, .. } => tagged(
            "error",
            record([
                ("name", Value::String(kind.name().to_owned())),
                (
                    "message",
                    Value::String(message.clone().unwrap_or_default()),
                ),
            ]),
        ),
        // Containers are handled by `TagWriter`.
        Node::Object(_) | Node::Array(_) | Node::Map(_) | Node::Set(_) | Node::Boxed(_) => {
            Value::Null
        }
    }
}

/// Reads tagged JSON into a stored value.
pub(crate) fn from_tagged(json: &Value) -> Fallible<KvValue> {
    // Two top-level forms are not V8 values but Deno KV's other encodings.
    if let Some((tag, content)) = single_tag(json) {
        match tag {
            "u64" => return parse_u64(content, "$").map(KvValue::U64),
            "view" => {
                let (kind, bytes) = parse_view(content, "$")?;
                if kind == ViewKind::Uint8 {
                    return Ok(KvValue::Bytes(bytes.into()));
                }
            }
            _ => {}
        }
    }
    let graph = tagged_to_graph(json)?;
    super::write::write(&graph).map(|b| KvValue::V8(b.into()))
}

/// Reads tagged JSON into a graph (a top-level `u64` is refused: it is not a V8 value).
pub(crate) fn tagged_to_graph(json: &Value) -> Fallible<Graph> {
    let mut reader = TagReader {
        nodes: Vec::new(),
        paths: HashMap::new(),
    };
    let root = reader.value(json, "$", 0)?;
    let nodes = reader
        .nodes
        .into_iter()
        .map(|n| {
            n.ok_or_else(|| V8Error::InvalidBytes {
                reason: "internal: unfilled node".to_owned(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Graph { nodes, root })
}

/// The tag and content of `{tag: content}`.
fn single_tag(json: &Value) -> Option<(&str, &Value)> {
    let map = json.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.iter().next().map(|(k, v)| (k.as_str(), v))
}

#[cold]
#[inline(never)]
fn bad(path: &str, tag: &str, found: &Value, reason: impl Into<String>) -> Box<V8Error> {
    Box::new(V8Error::BadTagValue {
        path: path.to_owned(),
        tag: tag.to_owned(),
        found: snippet(found),
        reason: reason.into(),
    })
}

fn as_str<'j>(content: &'j Value, path: &str, tag: &str) -> Fallible<&'j str> {
    content
        .as_str()
        .ok_or_else(|| bad(path, tag, content, "expected a string"))
}

fn as_array<'j>(content: &'j Value, path: &str, tag: &str) -> Fallible<&'j Vec<Value>> {
    content
        .as_array()
        .ok_or_else(|| bad(path, tag, content, "expected an array"))
}

/// The two fields of `{a: …, b: …}`, refusing others.
fn fields<'j>(
    content: &'j Value,
    path: &str,
    tag: &str,
    names: [&str; 2],
) -> Fallible<[&'j str; 2]> {
    let expected = || {
        format!(
            "expected {{\"{}\": string, \"{}\": string}}",
            names[0], names[1]
        )
    };
    let map = content
        .as_object()
        .ok_or_else(|| bad(path, tag, content, expected()))?;
    if map.len() != 2 {
        return Err(bad(path, tag, content, expected()));
    }
    let field = |name: &str| {
        map.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| bad(path, tag, content, expected()))
    };
    Ok([field(names[0])?, field(names[1])?])
}

fn parse_u64(content: &Value, path: &str) -> Fallible<u64> {
    let text = as_str(content, path, "u64")?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(path, "u64", content, "not a decimal integer"));
    }
    text.parse::<u64>()
        .map_err(|_| bad(path, "u64", content, "out of the range 0 ..= 2^64 - 1"))
}

fn parse_hex(content: &Value, path: &str, tag: &str) -> Fallible<Vec<u8>> {
    let text = as_str(content, path, tag)?;
    hex::decode(text).map_err(|err| bad(path, tag, content, format!("bad hex: {err}")))
}

fn parse_view(content: &Value, path: &str) -> Fallible<(ViewKind, Vec<u8>)> {
    let [name, hex_bytes] = fields(content, path, "view", ["type", "bytes"])?;
    let kind = ViewKind::from_name(name).ok_or_else(|| {
        bad(
            path,
            "view",
            content,
            format!("unknown type {name:?} (expected a typed array name or DataView)"),
        )
    })?;
    let bytes = hex::decode(hex_bytes)
        .map_err(|err| bad(path, "view", content, format!("bad hex: {err}")))?;
    if bytes.len() % kind.width() != 0 {
        return Err(bad(
            path,
            "view",
            content,
            format!(
                "{} bytes are not a whole number of {}-byte elements",
                bytes.len(),
                kind.width()
            ),
        ));
    }
    Ok((kind, bytes))
}

fn parse_bigint(content: &Value, path: &str, tag: &str) -> Fallible<BigInt> {
    let text = as_str(content, path, tag)?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(path, tag, content, "not a decimal integer"));
    }
    text.parse::<BigInt>()
        .map_err(|err| bad(path, tag, content, err.to_string()))
}

/// What a path names, for resolving refs.
enum PathTarget {
    Node(NodeId),
    Primitive,
    /// Two different things have this path (keys containing `.`, `[`, `<`).
    Ambiguous,
}

struct TagReader {
    nodes: Vec<Option<Node>>,
    paths: HashMap<String, PathTarget>,
}

impl TagReader {
    fn register(&mut self, path: &str, target: PathTarget) {
        use std::collections::hash_map::Entry;
        match self.paths.entry(path.to_owned()) {
            Entry::Vacant(slot) => {
                slot.insert(target);
            }
            Entry::Occupied(mut slot) => {
                let same = matches!(
                    (slot.get(), &target),
                    (PathTarget::Primitive, PathTarget::Primitive)
                );
                if !same {
                    slot.insert(PathTarget::Ambiguous);
                }
            }
        }
    }

    fn value(&mut self, json: &Value, path: &str, depth: usize) -> Fallible<Val> {
        check_depth(depth, MAX_DEPTH, path)?;
        let Some((tag, content)) = single_tag(json) else {
            return Err(Box::new(V8Error::NotTagged {
                path: path.to_owned(),
                found: snippet(json),
            }));
        };
        match tag {
            "ref" => self.reference(content, path),
            "string" | "number" | "bigint" | "bool" | "null" | "undefined" | "hole" | "u64" => {
                let primitive = primitive(tag, content, path)?;
                self.register(path, PathTarget::Primitive);
                Ok(primitive)
            }
            _ => self.object(tag, content, path, depth),
        }
    }

    fn reference(&self, content: &Value, path: &str) -> Fallible<Val> {
        let target = as_str(content, path, "ref")?;
        let bad_ref = |reason: &str| {
            Box::new(V8Error::BadRef {
                path: path.to_owned(),
                target: target.to_owned(),
                reason: reason.to_owned(),
            })
        };
        match self.paths.get(target) {
            Some(PathTarget::Node(id)) => Ok(Val::Obj(*id)),
            Some(PathTarget::Primitive) => Err(bad_ref(
                "names a primitive; only objects can be referred to",
            )),
            Some(PathTarget::Ambiguous) => Err(bad_ref(
                "names more than one place (property names contain path characters)",
            )),
            None => Err(bad_ref(
                "no object appears at this path earlier in the value",
            )),
        }
    }

    /// An object: numbered and registered before its contents, which may refer to it.
    fn object(&mut self, tag: &str, content: &Value, path: &str, depth: usize) -> Fallible<Val> {
        let id = self.nodes.len();
        self.nodes.push(None);
        self.register(path, PathTarget::Node(id));
        let inner = depth + 1;
        let node = match tag {
            "object" => Node::Object(self.object_entries(content, path, inner)?),
            "array" => Node::Array(self.array_items(content, path, inner)?),
            "map" => Node::Map(self.map_entries(content, path, inner)?),
            "set" => Node::Set(self.set_values(content, path, inner)?),
            "boxed" => {
                let primitive = self.value(content, &boxed_path(path), inner)?;
                if !matches!(
                    primitive,
                    Val::String(_) | Val::Number(_) | Val::BigInt(_) | Val::Bool(_)
                ) {
                    return Err(bad(
                        path,
                        tag,
                        content,
                        "only a string, number, bigint or bool can be boxed",
                    ));
                }
                Node::Boxed(primitive)
            }
            _ => leaf_node(tag, content, path)?,
        };
        let slot = self
            .nodes
            .get_mut(id)
            .ok_or_else(|| V8Error::InvalidBytes {
                reason: "internal: node slot missing".to_owned(),
            })?;
        *slot = Some(node);
        Ok(Val::Obj(id))
    }

    fn object_entries(
        &mut self,
        content: &Value,
        path: &str,
        inner: usize,
    ) -> Fallible<Vec<(String, Val)>> {
        let entries = as_array(content, path, "object")?;
        let mut properties = Vec::with_capacity(entries.len());
        let mut keys = HashSet::new();
        for entry in entries {
            let Some((k, v)) = pair(entry) else {
                return Err(bad(
                    path,
                    "object",
                    entry,
                    "expected an entry [\"key\", <tagged value>]",
                ));
            };
            let Some(k) = k.as_str() else {
                return Err(bad(path, "object", entry, "a key must be a string"));
            };
            if !keys.insert(k) {
                return Err(bad(path, "object", entry, format!("duplicate key {k:?}")));
            }
            let v = self.value(v, &prop_path(path, k), inner)?;
            properties.push((k.to_owned(), v));
        }
        Ok(properties)
    }

    fn array_items(&mut self, content: &Value, path: &str, inner: usize) -> Fallible<Array> {
        let elements = as_array(content, path, "array")?;
        let length = u32::try_from(elements.len())
            .ok()
            .filter(|len| *len < u32::MAX)
            .ok_or_else(|| V8Error::TooLarge {
                path: path.to_owned(),
                what: "array longer than 2^32 - 1 elements".to_owned(),
            })?;
        let mut items = Vec::with_capacity(elements.len());
        for (i, element) in (0..length).zip(elements) {
            if matches!(single_tag(element), Some(("hole", Value::Null))) {
                continue;
            }
            items.push((i, self.value(element, &index_path(path, i), inner)?));
        }
        Ok(Array {
            length,
            items,
            extra: Vec::new(),
        })
    }

    fn map_entries(
        &mut self,
        content: &Value,
        path: &str,
        inner: usize,
    ) -> Fallible<Vec<(Val, Val)>> {
        let entries = as_array(content, path, "map")?;
        let mut out = Vec::with_capacity(entries.len());
        let mut keys = HashSet::new();
        for (i, entry) in entries.iter().enumerate() {
            let Some((k, v)) = pair(entry) else {
                return Err(bad(
                    path,
                    "map",
                    entry,
                    "expected an entry [<tagged key>, <tagged value>]",
                ));
            };
            // A Map holds a -0 key as 0.
            let k = normalize_zero(self.value(k, &map_key_path(path, i), inner)?);
            if !keys.insert(SameValueZero::of(&k)) {
                return Err(bad(path, "map", entry, "duplicate key"));
            }
            let v = self.value(v, &map_value_path(path, i), inner)?;
            out.push((k, v));
        }
        Ok(out)
    }

    fn set_values(&mut self, content: &Value, path: &str, inner: usize) -> Fallible<Vec<Val>> {
        let elements = as_array(content, path, "set")?;
        let mut values = Vec::with_capacity(elements.len());
        let mut seen = HashSet::new();
        for (i, element) in elements.iter().enumerate() {
            // A Set holds -0 as 0.
            let v = normalize_zero(self.value(element, &set_path(path, i), inner)?);
            if !seen.insert(SameValueZero::of(&v)) {
                return Err(bad(path, "set", element, "duplicate element"));
            }
            values.push(v);
        }
        Ok(values)
    }
}

/// The two items of a JSON array `[a, b]`.
fn pair(entry: &Value) -> Option<(&Value, &Value)> {
    match entry.as_array()?.as_slice() {
        [a, b] => Some((a, b)),
        _ => None,
    }
}

/// A primitive tag's value.
fn primitive(tag: &str, content: &Value, path: &str) -> Fallible<Val> {
    Ok(match tag {
        "string" => Val::String(as_str(content, path, tag)?.to_owned()),
        "number" => {
            let text = as_str(content, path, tag)?;
            Val::Number(
                parse_number(text)
                    .ok_or_else(|| bad(path, tag, content, "not a JavaScript number"))?,
            )
        }
        "bigint" => Val::BigInt(parse_bigint(content, path, tag)?),
        "bool" => Val::Bool(
            content
                .as_bool()
                .ok_or_else(|| bad(path, tag, content, "expected true or false"))?,
        ),
        "u64" => {
            return Err(bad(
                path,
                tag,
                content,
                "a Deno.KvU64 is a u64 value only at the top level (nested, Deno stores \
                 it as the plain object {value: <bigint>}; write that instead)",
            ));
        }
        _ => {
            if !content.is_null() {
                return Err(bad(path, tag, content, "expected null"));
            }
            match tag {
                "null" => Val::Null,
                "undefined" => Val::Undefined,
                _ => {
                    return Err(bad(
                        path,
                        tag,
                        content,
                        "a hole can only be an element of an array",
                    ));
                }
            }
        }
    })
}

/// The objects without contents of their own.
fn leaf_node(tag: &str, content: &Value, path: &str) -> Fallible<Node> {
    Ok(match tag {
        "date" => {
            let text = as_str(content, path, tag)?;
            let ms = parse_number(text)
                .ok_or_else(|| bad(path, tag, content, "not a JavaScript number"))?;
            // A Date holds NaN or an integral time within ±8.64e15 ms (never -0).
            let valid = ms.is_nan()
                || (ms.fract() == 0.0
                    && ms.abs() <= 8.64e15
                    && !(ms == 0.0 && ms.is_sign_negative()));
            if !valid {
                return Err(bad(
                    path,
                    tag,
                    content,
                    "a Date's time is NaN or a whole number of milliseconds within ±8.64e15",
                ));
            }
            Node::Date(ms)
        }
        "regexp" => {
            let [source, flags] = fields(content, path, tag, ["source", "flags"])?;
            let (_, flags) =
                parse_flags(flags).map_err(|reason| bad(path, tag, content, reason))?;
            Node::RegExp {
                source: source.to_owned(),
                flags,
            }
        }
        "arraybuffer" => Node::ArrayBuffer(parse_hex(content, path, tag)?),
        "view" => {
            let (kind, bytes) = parse_view(content, path)?;
            Node::View { kind, bytes }
        }
        "error" => {
            let [name, message] = fields(content, path, tag, ["name", "message"])?;
            let kind = ErrorKind::from_name(name).ok_or_else(|| {
                bad(
                    path,
                    tag,
                    content,
                    format!(
                        "V8 stores only Error, EvalError, RangeError, ReferenceError, \
                         SyntaxError, TypeError and URIError, not {name:?}"
                    ),
                )
            })?;
            Node::Error {
                kind,
                message: (!message.is_empty()).then(|| message.to_owned()),
                cause: None,
            }
        }
        other => {
            return Err(Box::new(V8Error::UnknownTag {
                path: path.to_owned(),
                tag: other.to_owned(),
            }));
        }
    })
}
