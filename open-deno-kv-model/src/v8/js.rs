//! [`Graph`] → a one-line JavaScript literal for people to read.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::KvValue;
use num_bigint::BigInt;

use super::error::Fallible;
use super::graph::{
    Array, Graph, MAX_RENDER_DEPTH, MAX_RENDERED_NODES, Node, NodeId, Val, ViewKind, boxed_path,
    check_depth, index_path, map_key_path, map_value_path, prop_path, render_budget_exceeded,
    set_path,
};
use super::number::number_repr;

/// The elements of a typed array (little-endian, as V8 stores them on every platform Deno
/// runs on): numbers, or bigints for the 64-bit integer kinds. A `DataView` reads as bytes.
pub(crate) fn view_elements(kind: ViewKind, bytes: &[u8]) -> Vec<Val> {
    let width = kind.width();
    bytes
        .chunks_exact(width)
        .map(|chunk| {
            let mut raw = [0u8; 8];
            if let Some(dst) = raw.get_mut(..width) {
                dst.copy_from_slice(chunk);
            }
            let [b0, b1, b2, b3, ..] = raw;
            match kind {
                ViewKind::Int8 => Val::Number(f64::from(i8::from_le_bytes([b0]))),
                ViewKind::Uint8 | ViewKind::Uint8Clamped | ViewKind::DataView => {
                    Val::Number(f64::from(b0))
                }
                ViewKind::Int16 => Val::Number(f64::from(i16::from_le_bytes([b0, b1]))),
                ViewKind::Uint16 => Val::Number(f64::from(u16::from_le_bytes([b0, b1]))),
                ViewKind::Int32 => Val::Number(f64::from(i32::from_le_bytes([b0, b1, b2, b3]))),
                ViewKind::Uint32 => Val::Number(f64::from(u32::from_le_bytes([b0, b1, b2, b3]))),
                ViewKind::Float16 => Val::Number(f16_to_f64(u16::from_le_bytes([b0, b1]))),
                ViewKind::Float32 => Val::Number(f64::from(f32::from_le_bytes([b0, b1, b2, b3]))),
                ViewKind::Float64 => Val::Number(f64::from_le_bytes(raw)),
                ViewKind::BigInt64 => Val::BigInt(BigInt::from(i64::from_le_bytes(raw))),
                ViewKind::BigUint64 => Val::BigInt(BigInt::from(u64::from_le_bytes(raw))),
            }
        })
        .collect()
}

/// An IEEE 754 half-precision number (a `Float16Array` element).
fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    let magnitude = match exponent {
        0 => fraction * 2f64.powi(-24),
        0x1f if fraction == 0.0 => f64::INFINITY,
        0x1f => f64::NAN,
        e => (1.0 + fraction / 1024.0) * 2f64.powi(e - 15),
    };
    sign * magnitude
}

/// A string as a double-quoted JavaScript string literal.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            // "\0" only when no digit follows (else it would read as an octal escape).
            '\0' if !chars.peek().is_some_and(char::is_ascii_digit) => out.push_str("\\0"),
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if c.is_control() => {
                let code = u32::from(c);
                if code <= 0xff {
                    let _ = write!(out, "\\x{code:02x}");
                } else {
                    let _ = write!(out, "\\u{code:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// True for a property name that can be written without quotes (an ASCII identifier).
fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

fn key_literal(key: &str) -> String {
    if is_identifier(key) {
        key.to_owned()
    } else {
        quote(key)
    }
}

/// A RegExp literal body is safe when it is non-empty, has no line break, and every `/`
/// outside a character class is escaped.
fn regexp_literal_safe(source: &str) -> bool {
    if source.is_empty() {
        return false;
    }
    let mut in_class = false;
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if matches!(
                    chars.next(),
                    None | Some('\n' | '\r' | '\u{2028}' | '\u{2029}')
                ) {
                    return false;
                }
            }
            '\n' | '\r' | '\u{2028}' | '\u{2029}' => return false,
            '[' => in_class = true,
            ']' => in_class = false,
            '/' if !in_class => return false,
            _ => {}
        }
    }
    true
}

/// Renders a stored value.
pub(crate) fn to_js_literal(value: &KvValue) -> Fallible<String> {
    match value {
        KvValue::U64(n) => Ok(format!("new Deno.KvU64({n}n)")),
        KvValue::Bytes(bytes) => Ok(view_literal(ViewKind::Uint8, bytes)),
        KvValue::V8(bytes) => graph_to_js(&super::read::read(bytes)?),
    }
}

pub(crate) fn graph_to_js(graph: &Graph) -> Fallible<String> {
    let mut renderer = Renderer {
        graph,
        stack: Vec::new(),
        circular: HashMap::new(),
        rendered: 0,
    };
    renderer.value(&graph.root, "$")
}

fn primitive(value: &Val) -> Option<String> {
    Some(match value {
        Val::Undefined => "undefined".to_owned(),
        Val::Null => "null".to_owned(),
        Val::Bool(b) => b.to_string(),
        Val::Number(x) => number_repr(*x),
        Val::BigInt(n) => format!("{n}n"),
        Val::String(s) => quote(s),
        Val::Obj(_) => return None,
    })
}

fn view_literal(kind: ViewKind, bytes: &[u8]) -> String {
    let list = |values: Vec<Val>| {
        values
            .iter()
            .filter_map(primitive)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match kind {
        ViewKind::DataView => format!(
            "new DataView(new Uint8Array([{}]).buffer)",
            list(view_elements(ViewKind::Uint8, bytes))
        ),
        kind => format!(
            "new {}([{}])",
            kind.name(),
            list(view_elements(kind, bytes))
        ),
    }
}

struct Renderer<'g> {
    graph: &'g Graph,
    stack: Vec<NodeId>,
    /// Objects met again inside themselves, numbered as `Deno.inspect` numbers them.
    circular: HashMap<NodeId, usize>,
    rendered: usize,
}

impl Renderer<'_> {
    fn value(&mut self, value: &Val, path: &str) -> Fallible<String> {
        check_depth(self.stack.len(), MAX_RENDER_DEPTH, path)?;
        self.rendered += 1;
        if self.rendered > MAX_RENDERED_NODES {
            return Err(render_budget_exceeded(path));
        }
        let Val::Obj(id) = value else {
            return Ok(primitive(value).unwrap_or_default());
        };
        let id = *id;
        if self.stack.contains(&id) {
            let next = self.circular.len() + 1;
            let n = *self.circular.entry(id).or_insert(next);
            return Ok(format!("[Circular *{n}]"));
        }
        self.stack.push(id);
        let body = self.node(id, path);
        self.stack.pop();
        let body = body?;
        Ok(match self.circular.get(&id) {
            Some(n) => format!("<ref *{n}> {body}"),
            None => body,
        })
    }

    fn entries(&mut self, entries: &[(String, Val)], path: &str) -> Fallible<Vec<String>> {
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let v = self.value(v, &prop_path(path, k))?;
            out.push(format!("{}: {v}", key_literal(k)));
        }
        Ok(out)
    }

    // Each container has a function of its own, so that the recursion's stack frames stay
    // small (see `Fallible`).
    fn node(&mut self, id: NodeId, path: &str) -> Fallible<String> {
        let graph = self.graph;
        match graph.node(id)? {
            Node::Object(properties) => self.object(properties, path),
            Node::Array(array) => self.array(array, path),
            Node::Map(entries) => self.map(entries, path),
            Node::Set(values) => self.set(values, path),
            Node::Error {
                kind,
                message,
                cause: Some(cause),
            } => {
                let cause = self.value(cause, &prop_path(path, "cause"))?;
                let message = quote(message.as_deref().unwrap_or(""));
                Ok(format!(
                    "new {}({message}, {{ cause: {cause} }})",
                    kind.name()
                ))
            }
            Node::Boxed(inner) => {
                let inner_text = self.value(inner, &boxed_path(path))?;
                Ok(match inner {
                    Val::String(_) => format!("new String({inner_text})"),
                    Val::Number(_) => format!("new Number({inner_text})"),
                    Val::Bool(_) => format!("new Boolean({inner_text})"),
                    _ => format!("Object({inner_text})"),
                })
            }
            leaf => Ok(leaf_literal(leaf)),
        }
    }

    fn object(&mut self, properties: &[(String, Val)], path: &str) -> Fallible<String> {
        let parts = self.entries(properties, path)?;
        Ok(if parts.is_empty() {
            "{}".to_owned()
        } else {
            format!("{{ {} }}", parts.join(", "))
        })
    }

    fn array(&mut self, array: &Array, path: &str) -> Fallible<String> {
        let mut parts = Vec::new();
        let mut next = 0u32;
        for (i, v) in &array.items {
            holes(&mut parts, next, *i);
            parts.push(self.value(v, &index_path(path, i))?);
            next = i.saturating_add(1);
        }
        holes(&mut parts, next, array.length.max(next));
        parts.extend(self.entries(&array.extra, path)?);
        Ok(format!("[{}]", parts.join(", ")))
    }

    fn map(&mut self, entries: &[(Val, Val)], path: &str) -> Fallible<String> {
        let mut parts = Vec::with_capacity(entries.len());
        for (i, (k, v)) in entries.iter().enumerate() {
            let k = self.value(k, &map_key_path(path, i))?;
            let v = self.value(v, &map_value_path(path, i))?;
            parts.push(format!("[{k}, {v}]"));
        }
        Ok(if parts.is_empty() {
            "new Map()".to_owned()
        } else {
            format!("new Map([{}])", parts.join(", "))
        })
    }

    fn set(&mut self, values: &[Val], path: &str) -> Fallible<String> {
        let mut parts = Vec::with_capacity(values.len());
        for (i, v) in values.iter().enumerate() {
            parts.push(self.value(v, &set_path(path, i))?);
        }
        Ok(if parts.is_empty() {
            "new Set()".to_owned()
        } else {
            format!("new Set([{}])", parts.join(", "))
        })
    }
}

/// `<n empty items>` for the holes from `from` up to `to`, as `Deno.inspect` writes them.
fn holes(parts: &mut Vec<String>, from: u32, to: u32) {
    match to.saturating_sub(from) {
        0 => {}
        1 => parts.push("<1 empty item>".to_owned()),
        n => parts.push(format!("<{n} empty items>")),
    }
}

/// An object without contents to recurse into.
fn leaf_literal(node: &Node) -> String {
    match node {
        Node::Date(ms) => format!("new Date({})", number_repr(*ms)),
        Node::RegExp { source, flags } => {
            if regexp_literal_safe(source) {
                format!("/{source}/{flags}")
            } else {
                format!("new RegExp({}, {})", quote(source), quote(flags))
            }
        }
        Node::ArrayBuffer(bytes) => format!(
            "new Uint8Array([{}]).buffer",
            bytes
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Node::View { kind, bytes } => view_literal(*kind, bytes),
        Node::Error { kind, message, .. } => {
            format!(
                "new {}({})",
                kind.name(),
                quote(message.as_deref().unwrap_or(""))
            )
        }
        // Containers are handled by `Renderer`.
        Node::Object(_) | Node::Array(_) | Node::Map(_) | Node::Set(_) | Node::Boxed(_) => {
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(quote("line\nbreak\ttab"), r#""line\nbreak\ttab""#);
        assert_eq!(quote("a\0b"), r#""a\0b""#);
        assert_eq!(quote("a\u{0}1"), r#""a\x001""#);
        assert_eq!(quote("\u{1}\u{7f}\u{2028}"), r#""\x01\x7f\u2028""#);
        assert_eq!(quote("café 中文 😀"), "\"café 中文 😀\"");
    }

    #[test]
    fn keys_and_regexps() {
        assert_eq!(key_literal("name"), "name");
        assert_eq!(key_literal("$x_1"), "$x_1");
        assert_eq!(key_literal("1"), "\"1\"");
        assert_eq!(key_literal("a-b"), "\"a-b\"");
        assert_eq!(key_literal(""), "\"\"");
        assert!(regexp_literal_safe("ab+c"));
        assert!(regexp_literal_safe("a\\/b"));
        assert!(regexp_literal_safe("[/]"));
        assert!(!regexp_literal_safe("a/b"));
        assert!(!regexp_literal_safe(""));
        assert!(!regexp_literal_safe("a\nb"));
        assert!(!regexp_literal_safe("a\\"));
    }

    #[test]
    fn typed_array_elements() {
        assert_eq!(
            view_literal(ViewKind::Int16, &[0xff, 0xff, 2, 0]),
            "new Int16Array([-1, 2])"
        );
        assert_eq!(
            view_literal(ViewKind::Float32, &1.5f32.to_le_bytes()),
            "new Float32Array([1.5])"
        );
        assert_eq!(
            view_literal(ViewKind::BigUint64, &u64::MAX.to_le_bytes()),
            "new BigUint64Array([18446744073709551615n])"
        );
        assert_eq!(
            view_literal(ViewKind::Float16, &[0x00, 0x3e, 0x00, 0xfc, 0x01, 0x00]),
            "new Float16Array([1.5, -Infinity, 5.960464477539063e-8])"
        );
        assert_eq!(
            view_literal(ViewKind::DataView, &[2, 3]),
            "new DataView(new Uint8Array([2, 3]).buffer)"
        );
    }
}
