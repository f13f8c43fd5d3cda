//! [`Graph`] → V8 bytes, laid out the way V8's own `ValueSerializer` lays out the same
//! JavaScript value in Deno 2.9.6 (so that, for the values it can tell apart, the bytes are
//! Deno's own):
//!
//! - header `ff 10` (wire format 16);
//! - integral numbers in the Smi range as `I` + zig-zag varint, other numbers as `N` + 8 bytes;
//!   an array whose elements are all numbers, one of them not a Smi, is all `N` (a JavaScript
//!   array literal like `[1.5, 2]` holds unboxed doubles);
//! - bigints as `Z`, a sign-and-length varint, then 64-bit little-endian digits;
//! - strings as Latin-1 (`"`) when every character fits, else UTF-16 (`c`), padded so the
//!   UTF-16 data starts at an even offset;
//! - property keys that are array indices as numbers, others as strings;
//! - an array with holes in the sparse form (`a` … `@`), others dense (`A` … `$`);
//! - a typed array as its own `ArrayBuffer` then the view (`V`);
//! - an object met a second time as a back-reference (`^` + its id, ids counted in the order
//!   objects are first written, a typed array's buffer first).

use std::collections::HashMap;

use num_bigint::{BigInt, Sign};

use super::error::{Fallible, V8Error};
use super::graph::{
    Array, ErrorKind, Graph, MAX_DEPTH, Node, NodeId, Val, boxed_path, check_depth, index_path,
    map_key_path, map_value_path, parse_flags, prop_path, set_path,
};
use super::number::{array_index, as_smi};

/// The V8 wire format version written; `ff 10` is what Deno 2.9.6 (V8 14.9+) writes for
/// values set by its client. Values written by Deno's engine (the result of a V8 `sum`) and
/// by older Deno releases carry `ff 0f` (15); the two differ only in how lengths of array
/// buffers beyond 4 GiB would be written, which a Deno KV value can never have.
pub const WIRE_FORMAT_VERSION: u8 = 16;

/// The largest bigint V8 accepts, in bits.
const MAX_BIGINT_BITS: u64 = 1 << 30;

/// Serializes a graph.
pub(crate) fn write(graph: &Graph) -> Fallible<Vec<u8>> {
    let mut writer = Writer {
        graph,
        out: vec![0xff, WIRE_FORMAT_VERSION],
        ids: HashMap::new(),
        next_id: 0,
    };
    writer.value(&graph.root, "$", 0)?;
    Ok(writer.out)
}

/// The wire format version Deno's engine writes for the values it computes (a V8 `sum`).
pub(crate) const ENGINE_WIRE_FORMAT_VERSION: u8 = 15;

/// Serializes a number or bigint the way Deno's engine writes the result of a V8 `sum`: header
/// `ff 0f`, a number always as a double (`N`), never as a Smi, and a bigint's digits as its
/// minimal little-endian bytes (not padded to 64-bit digits as V8 pads them). Other primitives
/// are written as the client writes them, under the same header.
pub(crate) fn write_engine_primitive(value: &Val) -> Fallible<Vec<u8>> {
    let graph = Graph {
        nodes: Vec::new(),
        root: Val::Undefined,
    };
    let mut writer = Writer {
        graph: &graph,
        out: vec![0xff, ENGINE_WIRE_FORMAT_VERSION],
        ids: HashMap::new(),
        next_id: 0,
    };
    match value {
        Val::Number(x) => {
            writer.tag(b'N');
            writer.double(*x);
        }
        Val::BigInt(n) => {
            let (sign, bytes) = n.to_bytes_le();
            let len = u32::try_from(bytes.len())
                .ok()
                .filter(|len| *len <= 0x7fff_ffff)
                .ok_or_else(|| too_large("$", "bigint longer than 2^31 - 1 bytes"))?;
            writer.tag(b'Z');
            writer.varint((len << 1) | u32::from(sign == Sign::Minus));
            writer.out.extend_from_slice(&bytes);
        }
        other => writer.value(other, "$", 0)?,
    }
    Ok(writer.out)
}

struct Writer<'g> {
    graph: &'g Graph,
    out: Vec<u8>,
    /// Node → V8 object id, for back-references.
    ids: HashMap<NodeId, u32>,
    next_id: u32,
}

#[cold]
#[inline(never)]
fn too_large(path: &str, what: impl Into<String>) -> Box<V8Error> {
    Box::new(V8Error::TooLarge {
        path: path.to_owned(),
        what: what.into(),
    })
}

impl Writer<'_> {
    fn tag(&mut self, tag: u8) {
        self.out.push(tag);
    }

    fn varint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.out.push((value & 0x7f) as u8 | 0x80);
            value >>= 7;
        }
        self.out.push(value as u8);
    }

    fn len_varint(&mut self, len: usize, path: &str) -> Fallible<()> {
        let len = u32::try_from(len).map_err(|_| too_large(path, "longer than 2^32 - 1"))?;
        self.varint(len);
        Ok(())
    }

    fn double(&mut self, x: f64) {
        // One NaN, the one JavaScript produces.
        let x = if x.is_nan() { f64::NAN } else { x };
        self.out.extend_from_slice(&x.to_le_bytes());
    }

    fn number(&mut self, x: f64) {
        match as_smi(x) {
            Some(i) => {
                self.tag(b'I');
                self.varint(((i << 1) ^ (i >> 31)) as u32);
            }
            None => {
                self.tag(b'N');
                self.double(x);
            }
        }
    }

    /// Sign-and-length bitfield then 64-bit digits, as V8 stores a bigint.
    fn bigint_body(&mut self, n: &BigInt, path: &str) -> Fallible<()> {
        if n.bits() > MAX_BIGINT_BITS {
            return Err(too_large(
                path,
                format!(
                    "bigint of {} bits is beyond V8's limit of 2^30 bits",
                    n.bits()
                ),
            ));
        }
        if n.sign() == Sign::NoSign {
            self.varint(0);
            return Ok(());
        }
        let (sign, mut digits) = n.to_bytes_le();
        let padded = digits.len().div_ceil(8) * 8;
        digits.resize(padded, 0);
        let len = u32::try_from(padded).map_err(|_| too_large(path, "bigint too large"))?;
        self.varint((len << 1) | u32::from(sign == Sign::Minus));
        self.out.extend_from_slice(&digits);
        Ok(())
    }

    fn string(&mut self, s: &str, path: &str) -> Fallible<()> {
        if s.chars().all(|c| u32::from(c) <= 0xff) {
            self.tag(b'"');
            self.len_varint(s.chars().count(), path)?;
            // Every char is below 256: its Latin-1 byte.
            self.out.extend(s.chars().map(|c| u32::from(c) as u8));
        } else {
            let units: Vec<u16> = s.encode_utf16().collect();
            let byte_len = u32::try_from(units.len().saturating_mul(2))
                .map_err(|_| too_large(path, "string longer than 2^32 - 1 bytes"))?;
            let mut varint_len = 1;
            let mut rest = byte_len >> 7;
            while rest > 0 {
                varint_len += 1;
                rest >>= 7;
            }
            if (self.out.len() + 1 + varint_len) % 2 == 1 {
                self.tag(0x00); // padding
            }
            self.tag(b'c');
            self.varint(byte_len);
            for unit in units {
                self.out.extend_from_slice(&unit.to_le_bytes());
            }
        }
        Ok(())
    }

    fn key(&mut self, key: &str, path: &str) -> Fallible<()> {
        match array_index(key) {
            Some(index) => self.number(f64::from(index)),
            None => self.string(key, path)?,
        }
        Ok(())
    }

    fn value(&mut self, value: &Val, path: &str, depth: usize) -> Fallible<()> {
        check_depth(depth, MAX_DEPTH, path)?;
        match value {
            Val::Undefined => self.tag(b'_'),
            Val::Null => self.tag(b'0'),
            Val::Bool(true) => self.tag(b'T'),
            Val::Bool(false) => self.tag(b'F'),
            Val::Number(x) => self.number(*x),
            Val::BigInt(n) => {
                self.tag(b'Z');
                self.bigint_body(n, path)?;
            }
            Val::String(s) => self.string(s, path)?,
            Val::Obj(id) => self.object(*id, path, depth)?,
        }
        Ok(())
    }

    fn new_id(&mut self, path: &str) -> Fallible<u32> {
        let id = self.next_id;
        self.next_id = id
            .checked_add(1)
            .ok_or_else(|| too_large(path, "more than 2^32 objects"))?;
        Ok(id)
    }

    fn object(&mut self, node_id: NodeId, path: &str, depth: usize) -> Fallible<()> {
        if let Some(id) = self.ids.get(&node_id) {
            let id = *id;
            self.tag(b'^');
            self.varint(id);
            return Ok(());
        }
        let graph = self.graph;
        let node = graph.node(node_id)?;
        if let Node::View { .. } = node {
            // The view's buffer is written (and numbered) first.
            self.new_id(path)?;
        }
        let id = self.new_id(path)?;
        self.ids.insert(node_id, id);
        let inner = depth + 1;
        // Each container has a function of its own, so that the recursion's stack frames stay
        // small (see `Fallible`).
        match node {
            Node::Object(properties) => self.object_body(properties, path, inner),
            Node::Array(array) => self.array(array, path, inner),
            Node::Map(entries) => self.map(entries, path, inner),
            Node::Set(values) => self.set(values, path, inner),
            Node::Error {
                kind,
                message,
                cause,
            } => self.error(*kind, message.as_deref(), cause.as_ref(), path, inner),
            Node::Boxed(primitive) => self.boxed(primitive, path),
            leaf => self.leaf(leaf, path),
        }
    }

    fn object_body(
        &mut self,
        properties: &[(String, Val)],
        path: &str,
        inner: usize,
    ) -> Fallible<()> {
        self.tag(b'o');
        for (k, v) in properties {
            let p = prop_path(path, k);
            self.key(k, &p)?;
            self.value(v, &p, inner)?;
        }
        self.tag(b'{');
        self.len_varint(properties.len(), path)
    }

    fn map(&mut self, entries: &[(Val, Val)], path: &str, inner: usize) -> Fallible<()> {
        self.tag(b';');
        for (i, (k, v)) in entries.iter().enumerate() {
            self.value(k, &map_key_path(path, i), inner)?;
            self.value(v, &map_value_path(path, i), inner)?;
        }
        self.tag(b':');
        self.len_varint(entries.len().saturating_mul(2), path)
    }

    fn set(&mut self, values: &[Val], path: &str, inner: usize) -> Fallible<()> {
        self.tag(b'\'');
        for (i, v) in values.iter().enumerate() {
            self.value(v, &set_path(path, i), inner)?;
        }
        self.tag(b',');
        self.len_varint(values.len(), path)
    }

    fn error(
        &mut self,
        kind: ErrorKind,
        message: Option<&str>,
        cause: Option<&Val>,
        path: &str,
        inner: usize,
    ) -> Fallible<()> {
        self.tag(b'r');
        if let Some(tag) = kind.v8_tag() {
            self.varint(u32::from(tag));
        }
        if let Some(message) = message {
            self.varint(u32::from(b'm'));
            self.string(message, path)?;
        }
        if let Some(cause) = cause {
            self.varint(u32::from(b'c'));
            self.value(cause, &prop_path(path, "cause"), inner)?;
        }
        self.varint(u32::from(b'.'));
        Ok(())
    }

    fn boxed(&mut self, primitive: &Val, path: &str) -> Fallible<()> {
        let p = boxed_path(path);
        match primitive {
            Val::Bool(true) => self.tag(b'y'),
            Val::Bool(false) => self.tag(b'x'),
            Val::Number(x) => {
                self.tag(b'n');
                self.double(*x);
            }
            Val::BigInt(n) => {
                self.tag(b'z');
                self.bigint_body(n, &p)?;
            }
            Val::String(s) => {
                self.tag(b's');
                self.string(s, &p)?;
            }
            _ => {
                return Err(Box::new(V8Error::BadTagValue {
                    path: path.to_owned(),
                    tag: "boxed".to_owned(),
                    found: "a non-primitive".to_owned(),
                    reason: "only strings, numbers, bigints and booleans can be boxed".to_owned(),
                }));
            }
        }
        Ok(())
    }

    /// Objects without contents to recurse into.
    fn leaf(&mut self, node: &Node, path: &str) -> Fallible<()> {
        match node {
            Node::Date(ms) => {
                self.tag(b'D');
                self.double(*ms);
            }
            Node::RegExp { source, flags } => {
                let (bits, _) = parse_flags(flags).map_err(|reason| {
                    Box::new(V8Error::BadTagValue {
                        path: path.to_owned(),
                        tag: "regexp".to_owned(),
                        found: format!("{flags:?}"),
                        reason,
                    })
                })?;
                self.tag(b'R');
                self.string(source, path)?;
                self.varint(bits);
            }
            Node::ArrayBuffer(bytes) => {
                self.tag(b'B');
                self.len_varint(bytes.len(), path)?;
                self.out.extend_from_slice(bytes);
            }
            Node::View { kind, bytes } => {
                self.tag(b'B');
                self.len_varint(bytes.len(), path)?;
                self.out.extend_from_slice(bytes);
                self.tag(b'V');
                self.varint(u32::from(kind.v8_tag()));
                self.varint(0); // byte offset
                self.len_varint(bytes.len(), path)?;
                self.varint(0); // flags: not length-tracking, not resizable
            }
            // Containers are handled by `object`.
            Node::Object(_)
            | Node::Array(_)
            | Node::Map(_)
            | Node::Set(_)
            | Node::Error { .. }
            | Node::Boxed(_) => {}
        }
        Ok(())
    }

    fn array(&mut self, array: &Array, path: &str, inner: usize) -> Fallible<()> {
        if array.is_dense() {
            self.tag(b'A');
            self.varint(array.length);
            let doubles = !array.items.is_empty()
                && array.items.iter().all(|(_, v)| matches!(v, Val::Number(_)))
                && array
                    .items
                    .iter()
                    .any(|(_, v)| matches!(v, Val::Number(x) if as_smi(*x).is_none()));
            for (i, v) in &array.items {
                match v {
                    Val::Number(x) if doubles => {
                        self.tag(b'N');
                        self.double(*x);
                    }
                    v => self.value(v, &index_path(path, i), inner)?,
                }
            }
            for (k, v) in &array.extra {
                let p = prop_path(path, k);
                self.key(k, &p)?;
                self.value(v, &p, inner)?;
            }
            self.tag(b'$');
            self.len_varint(array.extra.len(), path)?;
            self.varint(array.length);
        } else {
            self.tag(b'a');
            self.varint(array.length);
            for (i, v) in &array.items {
                self.number(f64::from(*i));
                self.value(v, &index_path(path, i), inner)?;
            }
            for (k, v) in &array.extra {
                let p = prop_path(path, k);
                self.key(k, &p)?;
                self.value(v, &p, inner)?;
            }
            self.tag(b'@');
            self.len_varint(array.items.len() + array.extra.len(), path)?;
            self.varint(array.length);
        }
        Ok(())
    }
}
