//! V8 bytes → [`Graph`]: a reader of V8's `ValueSerializer` format.
//!
//! Written here rather than taken from `v8_valueserializer` (which the tests use as a
//! reference) for two reasons: it builds the graph directly, numbering objects with V8's own
//! ids, and its recursion is shallow enough per level that a value nested to the depth limit
//! reads on a 2 MiB thread stack (a Tokio worker's) even in a debug build.
//!
//! The layout, per V8's `value-serializer.cc`: a header `ff <version varint>`, then one value.
//! Each value starts with a tag byte (`0x00` padding bytes are skipped before a tag); lengths
//! and counts are base-128 varints; objects are numbered in the order they start, and `^ id`
//! refers back to one.

use num_bigint::{BigInt, Sign};

use super::error::{Fallible, V8Error};
use super::graph::{
    Array, ErrorKind, Graph, MAX_DEPTH, Node, NodeId, REGEXP_FLAGS, Val, ViewKind, dedupe_entries,
    dedupe_properties, dedupe_values, flags_from_bits,
};
use super::number::{array_index, number_key};

/// The wire format versions read: 13 (no view flags) to 16 (Deno 2.9.6).
const VERSIONS: std::ops::RangeInclusive<u64> = 13..=16;

/// Reads V8 `ValueSerializer` bytes.
pub(crate) fn read(bytes: &[u8]) -> Fallible<Graph> {
    let mut reader = Reader {
        bytes,
        pos: 0,
        version: 0,
        nodes: Vec::new(),
    };
    if reader.byte()? != 0xff {
        return Err(reader.fail_at(0, "no V8 header (expected the byte ff)"));
    }
    let version = reader.varint()?;
    if !VERSIONS.contains(&version) {
        return Err(reader.fail(format!(
            "wire format version {version} is not one this reader knows (13 to 16)"
        )));
    }
    reader.version = version;
    let root = reader.value(0)?;
    reader.skip_padding();
    if reader.pos != bytes.len() {
        return Err(reader.fail(format!(
            "{} bytes left over after the value",
            bytes.len() - reader.pos
        )));
    }
    let nodes = reader
        .nodes
        .into_iter()
        .enumerate()
        .map(|(id, node)| {
            node.ok_or_else(|| V8Error::InvalidBytes {
                reason: format!("internal: object #{id} was never filled"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Graph { nodes, root })
}

struct Reader<'b> {
    bytes: &'b [u8],
    pos: usize,
    version: u64,
    /// Objects by V8 id; `None` while being read (a reference to it then is a cycle).
    nodes: Vec<Option<Node>>,
}

/// What follows an object's properties: its end tag.
#[derive(Clone, Copy)]
enum PropertiesEnd {
    Object,
    SparseArray,
    DenseArray,
}

impl PropertiesEnd {
    fn tag(self) -> u8 {
        match self {
            PropertiesEnd::Object => b'{',
            PropertiesEnd::SparseArray => b'@',
            PropertiesEnd::DenseArray => b'$',
        }
    }
}

impl Reader<'_> {
    #[cold]
    #[inline(never)]
    fn fail_at(&self, pos: usize, reason: impl std::fmt::Display) -> Box<V8Error> {
        Box::new(V8Error::InvalidBytes {
            reason: format!("at byte {pos}: {reason}"),
        })
    }

    #[cold]
    #[inline(never)]
    fn fail(&self, reason: impl std::fmt::Display) -> Box<V8Error> {
        self.fail_at(self.pos, reason)
    }

    fn byte(&mut self) -> Fallible<u8> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.fail("unexpected end of the value"))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, len: u64) -> Fallible<&[u8]> {
        let bytes = self.bytes;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(len))
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| self.fail(format!("{len} bytes announced, fewer left")))?;
        let slice = bytes.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(slice)
    }

    fn skip_padding(&mut self) {
        while self.bytes.get(self.pos) == Some(&0) {
            self.pos += 1;
        }
    }

    /// The next tag (after padding), not consumed.
    fn peek_tag(&mut self) -> Option<u8> {
        self.skip_padding();
        self.bytes.get(self.pos).copied()
    }

    /// Consumes the next tag if it is `tag`.
    fn eat(&mut self, tag: u8) -> bool {
        if self.peek_tag() == Some(tag) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// A base-128 varint; bits beyond 64 are dropped, as V8 drops them.
    fn varint(&mut self) -> Fallible<u64> {
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if shift < 64 {
                value |= u64::from(b & 0x7f) << shift;
                shift += 7;
            }
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
    }

    /// A varint that V8 writes as a 32-bit value (V8 keeps its low 32 bits).
    fn varint32(&mut self) -> Fallible<u32> {
        Ok(self.varint()? as u32)
    }

    /// A count of things each taking at least one byte: refused when more than the bytes left.
    fn count(&mut self) -> Fallible<u32> {
        let n = self.varint32()?;
        let left = self.bytes.len() - self.pos;
        if usize::try_from(n).map_or(true, |n| n > left) {
            return Err(self.fail(format!("{n} elements announced, only {left} bytes left")));
        }
        Ok(n)
    }

    fn double(&mut self) -> Fallible<f64> {
        let raw: [u8; 8] = self
            .take(8)?
            .try_into()
            .map_err(|_| self.fail("a double needs 8 bytes"))?;
        Ok(f64::from_le_bytes(raw))
    }

    fn bigint(&mut self) -> Fallible<BigInt> {
        let bitfield = self.varint32()?;
        let len = (bitfield >> 1) & ((1 << 30) - 1);
        let sign = if bitfield & 1 == 1 {
            Sign::Minus
        } else {
            Sign::Plus
        };
        let digits = self.take(u64::from(len))?;
        Ok(BigInt::from_bytes_le(sign, digits))
    }

    /// The string after a string tag.
    fn string_body(&mut self, tag: u8) -> Fallible<String> {
        let len = self.varint()?;
        let at = self.pos;
        let bytes = self.take(len)?;
        Ok(match tag {
            // Latin-1: every byte is the code point.
            b'"' => bytes.iter().map(|b| char::from(*b)).collect(),
            b'S' => String::from_utf8_lossy(bytes).into_owned(),
            _ => {
                if bytes.len() % 2 != 0 {
                    return Err(self.fail_at(at, "a UTF-16 string of an odd number of bytes"));
                }
                let units: Vec<u16> = bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect();
                // A lone surrogate cannot be in a Rust string: it becomes U+FFFD.
                String::from_utf16_lossy(&units)
            }
        })
    }

    /// A value that must be a string (a RegExp's source, a String object, an error field).
    fn string(&mut self) -> Fallible<String> {
        self.skip_padding();
        let at = self.pos;
        match self.byte()? {
            tag @ (b'"' | b'S' | b'c') => self.string_body(tag),
            other => Err(self.fail_at(at, format!("expected a string, found tag {other:#04x}"))),
        }
    }

    /// Starts an object: its V8 id.
    fn start(&mut self) -> NodeId {
        self.nodes.push(None);
        self.nodes.len() - 1
    }

    fn finish(&mut self, id: NodeId, node: Node) -> Val {
        if let Some(slot) = self.nodes.get_mut(id) {
            *slot = Some(node);
        }
        Val::Obj(id)
    }

    fn value(&mut self, depth: usize) -> Fallible<Val> {
        if depth > MAX_DEPTH {
            return Err(self.fail(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let value = self.value_inner(depth)?;
        // An ArrayBuffer followed by `V` is the buffer of a view, and the value is the view.
        if let Val::Obj(id) = value
            && matches!(self.nodes.get(id), Some(Some(Node::ArrayBuffer(_))))
            && self.eat(b'V')
        {
            return self.view(id);
        }
        Ok(value)
    }

    fn value_inner(&mut self, depth: usize) -> Fallible<Val> {
        self.skip_padding();
        let at = self.pos;
        let tag = self.byte()?;
        Ok(match tag {
            b'_' => Val::Undefined,
            b'0' => Val::Null,
            b'T' => Val::Bool(true),
            b'F' => Val::Bool(false),
            b'I' => {
                let z = self.varint32()?;
                Val::Number(f64::from((z >> 1) as i32 ^ -((z & 1) as i32)))
            }
            b'U' => Val::Number(f64::from(self.varint32()?)),
            b'N' => Val::Number(self.double()?),
            b'Z' => Val::BigInt(self.bigint()?),
            b'"' | b'S' | b'c' => Val::String(self.string_body(tag)?),
            b'?' => {
                // A legacy object count: ignored.
                self.varint()?;
                return self.value_inner(depth);
            }
            b'^' => {
                let id = self.varint()?;
                match usize::try_from(id).ok().filter(|id| *id < self.nodes.len()) {
                    Some(id) => Val::Obj(id),
                    None => {
                        return Err(self.fail_at(at, format!("reference to unknown object {id}")));
                    }
                }
            }
            b'o' => {
                let id = self.start();
                let properties = self.properties(PropertiesEnd::Object, depth)?;
                self.finish(id, Node::Object(dedupe_properties(properties)))
            }
            b'a' | b'A' => self.array(tag, depth)?,
            b';' | b'\'' => self.collection(tag, depth)?,
            b'r' => self.error(depth)?,
            _ => self.leaf_object(tag, at)?,
        })
    }

    /// Objects without contents of their own to recurse into.
    fn leaf_object(&mut self, tag: u8, at: usize) -> Fallible<Val> {
        let id = self.start();
        let node = match tag {
            b'D' => Node::Date({
                let ms = self.double()?;
                // A Date's time is integral and within ±8.64e15, else NaN ("TimeClip").
                if ms.is_finite() && ms.abs() <= 8.64e15 {
                    ms.trunc() + 0.0
                } else {
                    f64::NAN
                }
            }),
            b'y' => Node::Boxed(Val::Bool(true)),
            b'x' => Node::Boxed(Val::Bool(false)),
            b'n' => Node::Boxed(Val::Number(self.double()?)),
            b'z' => Node::Boxed(Val::BigInt(self.bigint()?)),
            b's' => Node::Boxed(Val::String(self.string()?)),
            b'R' => {
                let source = self.string()?;
                let bits = self.varint32()?;
                let known = REGEXP_FLAGS.iter().fold(0, |all, (_, bit)| all | bit);
                if bits & !known != 0 || (bits & (1 << 4) != 0 && bits & (1 << 8) != 0) {
                    return Err(self.fail(format!("invalid RegExp flags {bits:#x}")));
                }
                Node::RegExp {
                    source,
                    flags: flags_from_bits(bits),
                }
            }
            b'B' | b'~' => {
                let len = self.varint()?;
                if tag == b'~' {
                    let max = self.varint()?;
                    if max < len {
                        return Err(self.fail("a resizable ArrayBuffer longer than its maximum"));
                    }
                }
                Node::ArrayBuffer(self.take(len)?.to_vec())
            }
            b'-' => return Err(self.fail_at(at, "a hole outside an array")),
            b'V' => return Err(self.fail_at(at, "a typed array without its buffer")),
            b'u' | b'm' => {
                return Err(
                    self.fail_at(at, "SharedArrayBuffer / WebAssembly.Memory is not storable")
                );
            }
            b't' => return Err(self.fail_at(at, "a transferred ArrayBuffer is not storable")),
            b'w' => return Err(self.fail_at(at, "a WebAssembly.Module is not storable")),
            b'\\' => return Err(self.fail_at(at, "a host object is not storable")),
            b'p' => return Err(self.fail_at(at, "a shared object is not storable")),
            other => return Err(self.fail_at(at, format!("unknown tag {other:#04x}"))),
        };
        Ok(self.finish(id, node))
    }

    /// The view after a buffer (`V` already read).
    fn view(&mut self, buffer: NodeId) -> Fallible<Val> {
        let at = self.pos;
        let subtag = self.varint()?;
        let kind = ViewKind::ALL
            .into_iter()
            .find(|k| u64::from(k.v8_tag()) == subtag)
            .ok_or_else(|| self.fail_at(at, format!("unknown typed array kind {subtag:#x}")))?;
        let offset = self.varint()?;
        let len = self.varint()?;
        if self.version >= 14 {
            self.varint()?; // flags: length-tracking, resizable-backed
        }
        let Some(Some(Node::ArrayBuffer(data))) = self.nodes.get(buffer) else {
            return Err(self.fail_at(at, "a typed array whose buffer is not an ArrayBuffer"));
        };
        let width = kind.width() as u64;
        let bytes = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(offset.saturating_add(len)).ok())
            .and_then(|(start, end)| data.get(start..end))
            .filter(|_| offset % width == 0 && len % width == 0)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| {
                self.fail_at(
                    at,
                    format!(
                        "a {} of {len} bytes at offset {offset} does not fit its {}-byte buffer",
                        kind.name(),
                        data.len()
                    ),
                )
            })?;
        let id = self.start();
        Ok(self.finish(id, Node::View { kind, bytes }))
    }

    /// Key-value pairs up to `end`, then their count.
    fn properties(&mut self, end: PropertiesEnd, depth: usize) -> Fallible<Vec<(String, Val)>> {
        let mut properties = Vec::new();
        while !self.eat(end.tag()) {
            let at = self.pos;
            let key = match self.value(depth + 1)? {
                Val::String(s) => s,
                Val::Number(x) => number_key(x),
                _ => return Err(self.fail_at(at, "a property key that is not a string or number")),
            };
            let value = self.value(depth + 1)?;
            properties.push((key, value));
        }
        let count = self.varint()?;
        if count != properties.len() as u64 {
            return Err(self.fail(format!(
                "{count} properties announced, {} found",
                properties.len()
            )));
        }
        Ok(properties)
    }

    fn array(&mut self, tag: u8, depth: usize) -> Fallible<Val> {
        let id = self.start();
        let mut array = Array::default();
        let (length, end) = if tag == b'A' {
            let length = self.count()?;
            for index in 0..length {
                if self.eat(b'-') {
                    continue; // a hole
                }
                let v = self.value(depth + 1)?;
                array.items.push((index, v));
            }
            (length, PropertiesEnd::DenseArray)
        } else {
            (self.varint32()?, PropertiesEnd::SparseArray)
        };
        array.length = length;
        for (key, v) in self.properties(end, depth)? {
            match array_index(&key) {
                Some(index) => {
                    // An index at or past the length grows the array, as in JavaScript.
                    array.length = array.length.max(index.saturating_add(1));
                    match array.items.binary_search_by_key(&index, |(i, _)| *i) {
                        Ok(at) => {
                            if let Some(slot) = array.items.get_mut(at) {
                                slot.1 = v;
                            }
                        }
                        Err(at) => array.items.insert(at, (index, v)),
                    }
                }
                None => array.extra.push((key, v)),
            }
        }
        array.extra = dedupe_properties(std::mem::take(&mut array.extra));
        if self.varint32()? != length {
            return Err(self.fail("the array's length differs at its end"));
        }
        Ok(self.finish(id, Node::Array(array)))
    }

    fn collection(&mut self, tag: u8, depth: usize) -> Fallible<Val> {
        let id = self.start();
        let mut values = Vec::new();
        let end = if tag == b';' { b':' } else { b',' };
        while !self.eat(end) {
            values.push(self.value(depth + 1)?);
        }
        let count = self.varint()?;
        if count != values.len() as u64 {
            return Err(self.fail(format!("{count} entries announced, {} found", values.len())));
        }
        let node = if tag == b';' {
            if values.len() % 2 != 0 {
                return Err(self.fail("a Map with a key but no value"));
            }
            let mut entries = Vec::with_capacity(values.len() / 2);
            let mut values = values.into_iter();
            while let (Some(k), Some(v)) = (values.next(), values.next()) {
                entries.push((k, v));
            }
            Node::Map(dedupe_entries(entries))
        } else {
            Node::Set(dedupe_values(values))
        };
        Ok(self.finish(id, node))
    }

    fn error(&mut self, depth: usize) -> Fallible<Val> {
        let id = self.start();
        let mut kind = ErrorKind::Error;
        let mut message = None;
        let mut cause = None;
        loop {
            let at = self.pos;
            let tag = self.varint()?;
            match u8::try_from(tag).unwrap_or(0) {
                b'.' => break,
                b'm' => message = Some(self.string()?),
                b's' => {
                    self.string()?; // the stack: not kept
                }
                b'c' => cause = Some(self.value(depth + 1)?),
                prototype => {
                    kind = ErrorKind::ALL
                        .into_iter()
                        .find(|k| k.v8_tag() == Some(prototype))
                        .ok_or_else(|| self.fail_at(at, format!("unknown error field {tag:#x}")))?;
                }
            }
        }
        Ok(self.finish(
            id,
            Node::Error {
                kind,
                message,
                cause,
            },
        ))
    }
}
