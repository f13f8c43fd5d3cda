//! Plain JSON ↔ [`Graph`], following `JSON.parse` one way and `JSON.stringify` the other.

use crate::KvValue;
use num_bigint::BigInt;
use num_traits::ToPrimitive;
use serde_json::{Map, Number, Value};

use super::error::{Fallible, V8Error};
use super::graph::{
    Array, Graph, MAX_DEPTH, MAX_RENDER_DEPTH, MAX_RENDERED_NODES, Node, NodeId, Val, ViewKind,
    boxed_path, check_depth, index_path, prop_path, render_budget_exceeded,
};

/// Plain JSON → graph: objects, arrays, numbers (as `f64`), strings, booleans, null.
pub(crate) fn json_to_graph(json: &Value) -> Fallible<Graph> {
    let mut nodes = Vec::new();
    let root = json_value(json, "$", 0, &mut nodes)?;
    Ok(Graph { nodes, root })
}

fn json_value(json: &Value, path: &str, depth: usize, nodes: &mut Vec<Node>) -> Fallible<Val> {
    check_depth(depth, MAX_DEPTH, path)?;
    Ok(match json {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => Val::Number(n.as_f64().ok_or_else(|| V8Error::InvalidJson {
            path: path.to_owned(),
            reason: format!("the number {n} is not representable as a JavaScript number"),
        })?),
        Value::String(s) => Val::String(s.clone()),
        Value::Array(elements) => {
            let mut values = Vec::with_capacity(elements.len());
            for (i, element) in elements.iter().enumerate() {
                values.push(json_value(element, &index_path(path, i), depth + 1, nodes)?);
            }
            let array = Array::dense(values).map_err(|_| V8Error::TooLarge {
                path: path.to_owned(),
                what: "array longer than 2^32 - 1 elements".to_owned(),
            })?;
            nodes.push(Node::Array(array));
            Val::Obj(nodes.len() - 1)
        }
        Value::Object(map) => {
            // Numbered before its properties, as V8 numbers objects in the order it meets them.
            let id = nodes.len();
            nodes.push(Node::Object(Vec::new()));
            let mut properties = Vec::with_capacity(map.len());
            for (k, v) in map {
                properties.push((
                    k.clone(),
                    json_value(v, &prop_path(path, k), depth + 1, nodes)?,
                ));
            }
            if let Some(slot) = nodes.get_mut(id) {
                *slot = Node::Object(properties);
            }
            Val::Obj(id)
        }
    })
}

/// A stored value as plain JSON, the way `JSON.stringify` sees it (see [`crate::v8::to_json`]
/// for the mapping).
pub(crate) fn to_json(value: &KvValue) -> Fallible<Value> {
    match value {
        KvValue::U64(n) => Ok(Value::Number(Number::from(*n))),
        KvValue::Bytes(bytes) => Ok(view_json(ViewKind::Uint8, bytes)),
        KvValue::V8(bytes) => {
            let graph = super::read::read(bytes)?;
            graph_to_json(&graph)
        }
    }
}

pub(crate) fn graph_to_json(graph: &Graph) -> Fallible<Value> {
    let mut out = JsonWriter {
        graph,
        stack: Vec::new(),
        rendered: 0,
    };
    Ok(out.value(&graph.root, "$")?.unwrap_or(Value::Null))
}

struct JsonWriter<'g> {
    graph: &'g Graph,
    /// The objects being rendered, outermost first, with their paths: meeting one of them
    /// again is a cycle.
    stack: Vec<(NodeId, String)>,
    rendered: usize,
}

/// A number as `JSON.stringify` writes it: `null` for NaN and ±Infinity, `0` for -0, and an
/// integer (exact in `serde_json`) when the value is integral.
pub(crate) fn number_json(x: f64) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    if x.fract() == 0.0 {
        // Integral and |x| < 2^64: exact as i64 / u64. (`as` saturates, so check the range.)
        if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&x) {
            return Value::Number(Number::from(x as i64));
        }
        if (0.0..1.844_674_407_370_955_2e19).contains(&x) {
            return Value::Number(Number::from(x as u64));
        }
    }
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// A bigint as JSON: an integer when it fits `i64` or `u64`, else its decimal string.
pub(crate) fn bigint_json(n: &BigInt) -> Value {
    if let Some(i) = n.to_i64() {
        Value::Number(Number::from(i))
    } else if let Some(u) = n.to_u64() {
        Value::Number(Number::from(u))
    } else {
        Value::String(n.to_string())
    }
}

/// A typed array as `JSON.stringify` writes it: an object of its elements by index.
/// (`DataView` has no index properties: `{}`.)
fn view_json(kind: ViewKind, bytes: &[u8]) -> Value {
    let mut map = Map::new();
    if kind != ViewKind::DataView {
        for (i, element) in super::js::view_elements(kind, bytes)
            .into_iter()
            .enumerate()
        {
            let v = match element {
                Val::Number(x) => number_json(x),
                Val::BigInt(n) => bigint_json(&n),
                _ => Value::Null,
            };
            map.insert(i.to_string(), v);
        }
    }
    Value::Object(map)
}

/// An ISO 8601 date as `Date.prototype.toISOString` writes it (`+275760-09-13T00:00:00.000Z`
/// beyond year 9999).
pub(crate) fn iso_date(ms: f64) -> Option<String> {
    if !ms.is_finite() {
        return None;
    }
    // Integral and within ±8.64e15: exact as i64.
    let ms = ms as i64;
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let year = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else if year < 0 {
        format!("-{:06}", -year)
    } else {
        format!("+{year:06}")
    };
    Some(format!(
        "{year}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z"
    ))
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (the usual era arithmetic:
/// 400-year eras of 146097 days, years counted from March so the leap day comes last).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days since 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

impl JsonWriter<'_> {
    /// `None` is "no JSON value" (undefined): left out of objects, `null` in arrays.
    fn value(&mut self, value: &Val, path: &str) -> Fallible<Option<Value>> {
        check_depth(self.stack.len(), MAX_RENDER_DEPTH, path)?;
        self.rendered += 1;
        if self.rendered > MAX_RENDERED_NODES {
            return Err(render_budget_exceeded(path));
        }
        Ok(Some(match value {
            Val::Undefined => return Ok(None),
            Val::Null => Value::Null,
            Val::Bool(b) => Value::Bool(*b),
            Val::Number(x) => number_json(*x),
            Val::BigInt(n) => bigint_json(n),
            Val::String(s) => Value::String(s.clone()),
            Val::Obj(id) => {
                if let Some((_, target)) = self.stack.iter().find(|(open, _)| open == id) {
                    return Err(Box::new(V8Error::Circular {
                        path: path.to_owned(),
                        target: target.clone(),
                    }));
                }
                self.stack.push((*id, path.to_owned()));
                let out = self.node(*id, path);
                self.stack.pop();
                return out.map(Some);
            }
        }))
    }

    // Each container has a function of its own, so that the recursion's stack frames stay
    // small (see `Fallible`).
    fn node(&mut self, id: NodeId, path: &str) -> Fallible<Value> {
        let graph = self.graph;
        Ok(match graph.node(id)? {
            Node::Object(properties) => self.object(properties, path)?,
            Node::Array(array) => self.array(array, path)?,
            Node::Boxed(primitive) => self
                .value(primitive, &boxed_path(path))?
                .unwrap_or(Value::Null),
            Node::Date(ms) => iso_date(*ms).map_or(Value::Null, Value::String),
            Node::View { kind, bytes } => view_json(*kind, bytes),
            // No enumerable own properties: JSON.stringify writes {}.
            Node::Map(_)
            | Node::Set(_)
            | Node::RegExp { .. }
            | Node::ArrayBuffer(_)
            | Node::Error { .. } => Value::Object(Map::new()),
        })
    }

    fn object(&mut self, properties: &[(String, Val)], path: &str) -> Fallible<Value> {
        let mut map = Map::new();
        for (k, v) in properties {
            if let Some(v) = self.value(v, &prop_path(path, k))? {
                map.insert(k.clone(), v);
            }
        }
        Ok(Value::Object(map))
    }

    fn array(&mut self, array: &Array, path: &str) -> Fallible<Value> {
        let mut items = Vec::new();
        for (i, slot) in array.slots(path)?.into_iter().enumerate() {
            items.push(match slot {
                Some(v) => self.value(v, &index_path(path, i))?.unwrap_or(Value::Null),
                None => Value::Null,
            });
        }
        Ok(Value::Array(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates_match_to_iso_string() {
        let cases: &[(f64, &str)] = &[
            (0.0, "1970-01-01T00:00:00.000Z"),
            (1_700_000_000_123.0, "2023-11-14T22:13:20.123Z"),
            (-1.0, "1969-12-31T23:59:59.999Z"),
            (951_782_400_000.0, "2000-02-29T00:00:00.000Z"),
            (8.64e15, "+275760-09-13T00:00:00.000Z"),
            (-8.64e15, "-271821-04-20T00:00:00.000Z"),
            (-62_167_219_200_000.0, "0000-01-01T00:00:00.000Z"),
            (-62_198_755_200_000.0, "-000001-01-01T00:00:00.000Z"),
            (253_402_300_800_000.0, "+010000-01-01T00:00:00.000Z"),
        ];
        for (ms, want) in cases {
            assert_eq!(iso_date(*ms).as_deref(), Some(*want), "{ms}");
        }
        assert_eq!(iso_date(f64::NAN), None);
    }

    #[test]
    fn numbers_follow_json_stringify() {
        assert_eq!(number_json(f64::NAN), Value::Null);
        assert_eq!(number_json(f64::INFINITY), Value::Null);
        assert_eq!(number_json(-0.0).to_string(), "0");
        assert_eq!(number_json(42.0).to_string(), "42");
        assert_eq!(number_json(1.5).to_string(), "1.5");
        assert_eq!(
            number_json(2f64.powi(63)).to_string(),
            "9223372036854775808"
        );
        assert_eq!(
            number_json(-(2f64.powi(63))).to_string(),
            "-9223372036854775808"
        );
        assert_eq!(number_json(2f64.powi(64)).as_f64(), Some(2f64.powi(64)));
        assert_eq!(bigint_json(&BigInt::from(5)).to_string(), "5");
        assert_eq!(
            bigint_json(&BigInt::from(u64::MAX)).to_string(),
            u64::MAX.to_string()
        );
        let big = BigInt::from(u64::MAX) + 1;
        assert_eq!(
            bigint_json(&big),
            Value::String("18446744073709551616".to_owned())
        );
    }
}
