//! A second reader, for tests: denoland's `v8_valueserializer`, with its result turned into a
//! [`Graph`]. The tests check that it and this module's own reader agree.

use std::collections::HashMap;

use v8_valueserializer::{
    ArrayBufferViewKind, ErrorName, Heap, HeapReference, HeapValue, PropertyKey, StringValue,
    Value, ValueDeserializer,
};

use super::graph::{
    Array, ErrorKind, Graph, Node, NodeId, Val, ViewKind, dedupe_entries, dedupe_properties,
    dedupe_values, flags_from_bits,
};
use super::number::{array_index, number_key};

/// Reads V8 bytes with `v8_valueserializer`; `None` if it refuses them.
pub(crate) fn read(bytes: &[u8]) -> Option<Graph> {
    let (value, heap) = ValueDeserializer::default().read(bytes).ok()?;
    let mut reader = Reader {
        heap: &heap,
        ids: HashMap::new(),
        nodes: Vec::new(),
    };
    let root = reader.value(&value)?;
    let nodes = reader.nodes.into_iter().collect::<Option<Vec<_>>>()?;
    Some(Graph { nodes, root })
}

struct Reader<'h> {
    heap: &'h Heap,
    ids: HashMap<HeapReference, NodeId>,
    nodes: Vec<Option<Node>>,
}

fn string(s: &StringValue) -> String {
    s.to_string().into_owned()
}

fn key(key: &PropertyKey) -> String {
    match key {
        PropertyKey::I32(i) => i.to_string(),
        PropertyKey::U32(u) => u.to_string(),
        PropertyKey::Double(d) => number_key(*d),
        PropertyKey::String(s) => string(s),
    }
}

impl Reader<'_> {
    fn value(&mut self, value: &Value) -> Option<Val> {
        Some(match value {
            Value::Undefined => Val::Undefined,
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::I32(i) => Val::Number(f64::from(*i)),
            Value::U32(u) => Val::Number(f64::from(*u)),
            Value::Double(d) => Val::Number(*d),
            Value::BigInt(b) => Val::BigInt(b.clone()),
            Value::String(s) => Val::String(string(s)),
            Value::HeapReference(r) => Val::Obj(self.object(*r)?),
        })
    }

    fn object(&mut self, reference: HeapReference) -> Option<NodeId> {
        if let Some(id) = self.ids.get(&reference) {
            return Some(*id);
        }
        let id = self.nodes.len();
        self.nodes.push(None);
        self.ids.insert(reference, id);
        let node = self.node(reference.try_open(self.heap)?)?;
        *self.nodes.get_mut(id)? = Some(node);
        Some(id)
    }

    fn entries(&mut self, properties: &[(PropertyKey, Value)]) -> Option<Vec<(String, Val)>> {
        properties
            .iter()
            .map(|(k, v)| Some((key(k), self.value(v)?)))
            .collect()
    }

    fn node(&mut self, heap_value: &HeapValue) -> Option<Node> {
        Some(match heap_value {
            HeapValue::BooleanObject(b) => Node::Boxed(Val::Bool(*b)),
            HeapValue::NumberObject(x) => Node::Boxed(Val::Number(*x)),
            HeapValue::BigIntObject(b) => Node::Boxed(Val::BigInt(b.clone())),
            HeapValue::StringObject(s) => Node::Boxed(Val::String(string(s))),
            HeapValue::RegExp(re) => Node::RegExp {
                source: string(&re.pattern),
                flags: flags_from_bits(re.flags.bits()),
            },
            HeapValue::Date(date) => {
                Node::Date(date.ms_since_epoch().map_or(f64::NAN, |ms| ms as f64))
            }
            HeapValue::Object(object) => {
                Node::Object(dedupe_properties(self.entries(&object.properties)?))
            }
            HeapValue::DenseArray(array) => {
                let mut items = Vec::new();
                for (i, element) in array.elements.iter().enumerate() {
                    if let Some(element) = element {
                        items.push((u32::try_from(i).ok()?, self.value(element)?));
                    }
                }
                let length = u32::try_from(array.elements.len()).ok()?;
                array_node(length, items, self.entries(&array.properties)?)
            }
            HeapValue::SparseArray(array) => {
                array_node(array.length, Vec::new(), self.entries(&array.properties)?)
            }
            HeapValue::Map(map) => Node::Map(dedupe_entries(
                map.entries
                    .iter()
                    .map(|(k, v)| Some((self.value(k)?, self.value(v)?)))
                    .collect::<Option<_>>()?,
            )),
            HeapValue::Set(set) => Node::Set(dedupe_values(
                set.values
                    .iter()
                    .map(|v| self.value(v))
                    .collect::<Option<_>>()?,
            )),
            HeapValue::ArrayBuffer(buffer) => Node::ArrayBuffer(buffer.as_u8_slice().to_vec()),
            HeapValue::ArrayBufferView(view) => {
                let kind = match view.kind {
                    ArrayBufferViewKind::Int8Array => ViewKind::Int8,
                    ArrayBufferViewKind::Uint8Array => ViewKind::Uint8,
                    ArrayBufferViewKind::Uint8ClampedArray => ViewKind::Uint8Clamped,
                    ArrayBufferViewKind::Int16Array => ViewKind::Int16,
                    ArrayBufferViewKind::Uint16Array => ViewKind::Uint16,
                    ArrayBufferViewKind::Int32Array => ViewKind::Int32,
                    ArrayBufferViewKind::Uint32Array => ViewKind::Uint32,
                    ArrayBufferViewKind::Float32Array => ViewKind::Float32,
                    ArrayBufferViewKind::Float64Array => ViewKind::Float64,
                    ArrayBufferViewKind::BigInt64Array => ViewKind::BigInt64,
                    ArrayBufferViewKind::BigUint64Array => ViewKind::BigUint64,
                    ArrayBufferViewKind::DataView => ViewKind::DataView,
                };
                let Some(HeapValue::ArrayBuffer(buffer)) = view.buffer.try_open(self.heap) else {
                    return None;
                };
                let start = usize::try_from(view.byte_offset).ok()?;
                let len = usize::try_from(view.length).ok()? * kind.width();
                Node::View {
                    kind,
                    bytes: buffer.as_u8_slice().get(start..start + len)?.to_vec(),
                }
            }
            HeapValue::Error(error) => Node::Error {
                kind: match error.name {
                    ErrorName::Error => ErrorKind::Error,
                    ErrorName::EvalError => ErrorKind::EvalError,
                    ErrorName::RangeError => ErrorKind::RangeError,
                    ErrorName::ReferenceError => ErrorKind::ReferenceError,
                    ErrorName::SyntaxError => ErrorKind::SyntaxError,
                    ErrorName::TypeError => ErrorKind::TypeError,
                    ErrorName::UriError => ErrorKind::UriError,
                },
                message: error.message.as_ref().map(string),
                cause: match &error.cause {
                    Some(cause) => Some(self.value(cause)?),
                    None => None,
                },
            },
        })
    }
}

fn array_node(mut length: u32, mut items: Vec<(u32, Val)>, properties: Vec<(String, Val)>) -> Node {
    let mut extra = Vec::new();
    for (k, v) in properties {
        match array_index(&k) {
            Some(index) => {
                length = length.max(index.saturating_add(1));
                items.retain(|(i, _)| *i != index);
                items.push((index, v));
            }
            None => extra.push((k, v)),
        }
    }
    items.sort_by_key(|(i, _)| *i);
    Node::Array(Array {
        length,
        items,
        extra: dedupe_properties(extra),
    })
}
