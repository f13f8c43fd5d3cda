//! JavaScript primitives on their own: a string, number, bigint, boolean, `null` or
//! `undefined` as V8 bytes, and back.

use num_bigint::BigInt;

use super::error::V8Error;
use super::graph::{Graph, Val};
use super::{read, write};

/// A JavaScript primitive value: what `typeof` calls a string, number, bigint, boolean or
/// undefined, and `null`.
///
/// ```
/// use open_deno_kv_model::v8::Primitive;
/// // Deno 2.9.6 writes `"hello"` as these bytes:
/// let bytes = Primitive::String("hello".into()).to_v8().unwrap();
/// assert_eq!(hex::encode(&bytes), "ff10220568656c6c6f");
/// assert_eq!(Primitive::from_v8(&bytes).unwrap(), Some(Primitive::String("hello".into())));
/// // An object is not a primitive.
/// assert_eq!(Primitive::from_v8(&hex::decode("ff106f7b00").unwrap()).unwrap(), None);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Primitive {
    /// `undefined`.
    Undefined,
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number (an IEEE-754 double, as in JavaScript).
    Number(f64),
    /// A bigint.
    BigInt(BigInt),
    /// A string.
    String(String),
}

impl Primitive {
    /// The V8 bytes Deno's client writes for this value (header `ff 10`; an integral number in
    /// V8's small-integer range as a Smi, as a JavaScript literal is held).
    ///
    /// Fails only for a bigint beyond V8's limit of 2^30 bits.
    pub fn to_v8(&self) -> Result<Vec<u8>, V8Error> {
        write::write(&Graph {
            nodes: Vec::new(),
            root: self.to_val(),
        })
        .map_err(|e| *e)
    }

    /// The V8 bytes Deno's engine writes for a number or bigint it computed (the result of a
    /// V8 `sum`): header `ff 0f`, and a number always as a double.
    ///
    /// ```
    /// use open_deno_kv_model::v8::Primitive;
    /// assert_eq!(hex::encode(Primitive::Number(3.0).to_engine_v8().unwrap()), "ff0f4e0000000000000840");
    /// ```
    pub fn to_engine_v8(&self) -> Result<Vec<u8>, V8Error> {
        write::write_engine_primitive(&self.to_val()).map_err(|e| *e)
    }

    /// Reads V8 bytes: the primitive they hold, or `None` if they hold an object (which
    /// includes a boxed primitive such as `new Number(1)`).
    ///
    /// Fails for bytes that are not a readable V8 value.
    pub fn from_v8(bytes: &[u8]) -> Result<Option<Primitive>, V8Error> {
        let graph = read::read(bytes).map_err(|e| *e)?;
        Ok(match graph.root {
            Val::Undefined => Some(Primitive::Undefined),
            Val::Null => Some(Primitive::Null),
            Val::Bool(b) => Some(Primitive::Bool(b)),
            Val::Number(x) => Some(Primitive::Number(x)),
            Val::BigInt(n) => Some(Primitive::BigInt(n)),
            Val::String(s) => Some(Primitive::String(s)),
            Val::Obj(_) => None,
        })
    }

    fn to_val(&self) -> Val {
        match self {
            Primitive::Undefined => Val::Undefined,
            Primitive::Null => Val::Null,
            Primitive::Bool(b) => Val::Bool(*b),
            Primitive::Number(x) => Val::Number(*x),
            Primitive::BigInt(n) => Val::BigInt(n.clone()),
            Primitive::String(s) => Val::String(s.clone()),
        }
    }
}
