//! When `kv get` finds nothing: the key a person most likely meant.
//!
//! On the command line `2` is a JavaScript number and `2n` a bigint, and Deno KV keeps them as
//! different keys (`["users", 2]` is not `["users", 2n]`); a quoted `"2"` is a string, a third
//! key. A program that writes with Rust integers stores bigints, so `kv get '["users", 2]'` is an
//! easy miss. [`near_keys`] lists the keys one such confusion away, and [`find_near`] looks them
//! all up in one read, so a miss costs at most one more round trip.

use num_traits::{FromPrimitive, ToPrimitive};
use open_deno_kv::Kv;
use open_deno_kv_model::num_bigint::BigInt;
use open_deno_kv_model::{Key, KeyPart};

/// How many near keys are looked up at most: Deno's limit of keys in one `getMany`.
const MAX_NEAR_KEYS: usize = 10;

/// A key that exists near the one asked for, and why they differ.
#[derive(Debug, Clone, PartialEq)]
pub struct NearKey {
    /// The key that holds an entry.
    pub key: Key,
    /// The difference, in words: `2 is a number, 2n a bigint`.
    pub why: String,
}

/// The other readings of one key part: a whole number as a bigint and the reverse, and a
/// number written as a string and the reverse. Each comes with the words that tell them apart.
fn other_readings(part: &KeyPart) -> Vec<(KeyPart, String)> {
    let mut readings = Vec::new();
    match part {
        KeyPart::Float(x) if x.is_finite() && x.fract() == 0.0 => {
            if let Some(int) = BigInt::from_f64(*x) {
                let int = KeyPart::Int(int);
                readings.push((int.clone(), format!("{part} is a number, {int} a bigint")));
            }
            let string = KeyPart::String(part.to_string());
            readings.push((
                string.clone(),
                format!("{part} is a number, {string} a string"),
            ));
        }
        KeyPart::Float(_) => {
            let string = KeyPart::String(part.to_string());
            readings.push((
                string.clone(),
                format!("{part} is a number, {string} a string"),
            ));
        }
        KeyPart::Int(int) => {
            // Only where the number is the same value: 2n and 2, not 2n**60n and a rounding.
            if let Some(x) = int
                .to_f64()
                .filter(|x| BigInt::from_f64(*x).as_ref() == Some(int))
            {
                let float = KeyPart::Float(x);
                readings.push((
                    float.clone(),
                    format!("{part} is a bigint, {float} a number"),
                ));
            }
            let string = KeyPart::String(int.to_string());
            readings.push((
                string.clone(),
                format!("{part} is a bigint, {string} a string"),
            ));
        }
        KeyPart::String(text) => {
            if let Ok(int) = text.parse::<BigInt>() {
                let int = KeyPart::Int(int);
                readings.push((int.clone(), format!("{part} is a string, {int} a bigint")));
            }
            if let Some(x) = open_deno_kv_model::v8::parse_number(text).filter(|x| x.is_finite()) {
                let float = KeyPart::Float(x);
                readings.push((
                    float.clone(),
                    format!("{part} is a string, {float} a number"),
                ));
            }
        }
        KeyPart::Bytes(_) | KeyPart::Bool(_) => {}
    }
    readings
}

/// The keys one confusion away from `key` (one part read another way), nearest parts last so
/// that the key's own end (an id, usually) comes first; at most [`MAX_NEAR_KEYS`].
pub fn near_keys(key: &Key) -> Vec<NearKey> {
    let parts = key.parts();
    let mut near = Vec::new();
    for (index, part) in parts.iter().enumerate().rev() {
        for (reading, why) in other_readings(part) {
            let mut changed = parts.to_vec();
            changed[index] = reading;
            near.push(NearKey {
                key: Key::new(changed),
                why,
            });
        }
    }
    near.truncate(MAX_NEAR_KEYS);
    near
}

/// The first of [`near_keys`] that holds an entry, looked up in one read.
pub async fn find_near(kv: &Kv, key: &Key) -> Result<Option<NearKey>, open_deno_kv::Error> {
    let near = near_keys(key);
    if near.is_empty() {
        return Ok(None);
    }
    let entries = kv.get_many(near.iter().map(|n| n.key.clone())).await?;
    Ok(near
        .into_iter()
        .zip(entries)
        .find(|(_, entry)| entry.exists())
        .map(|(near, _)| near))
}

#[cfg(test)]
mod tests {
    use open_deno_kv_model::key;

    use super::*;

    fn keys(key: &Key) -> Vec<String> {
        near_keys(key).iter().map(|n| n.key.to_string()).collect()
    }

    #[test]
    fn a_whole_number_is_also_tried_as_a_bigint_and_a_string() {
        let near = near_keys(&key!["users", 2.0]);
        assert_eq!(near[0].key, key!["users", 2]);
        assert_eq!(near[0].why, "2 is a number, 2n a bigint");
        assert_eq!(
            keys(&key!["users", 2.0]),
            [r#"["users", 2n]"#, r#"["users", "2"]"#]
        );
    }

    #[test]
    fn a_bigint_is_tried_as_a_number_only_where_the_value_is_the_same() {
        assert_eq!(keys(&key![7]), ["[7]", r#"["7"]"#]);
        assert_eq!(near_keys(&key![7])[0].why, "7n is a bigint, 7 a number");
        let huge = BigInt::from(2u8).pow(60) + 1;
        assert_eq!(keys(&Key::new(vec![KeyPart::Int(huge)])).len(), 1);
    }

    #[test]
    fn a_string_of_digits_is_tried_as_numbers_and_other_parts_are_left_alone() {
        assert_eq!(keys(&key!["2"]), ["[2n]", "[2]"]);
        assert_eq!(
            near_keys(&key!["2"])[0].why,
            r#""2" is a string, 2n a bigint"#
        );
        assert!(near_keys(&key!["users", true, vec![1u8]]).is_empty());
        assert!(near_keys(&key![1.5])[0].why.contains("a string"));
    }

    #[test]
    fn at_most_ten_keys_are_looked_up() {
        assert_eq!(near_keys(&key![1, 2, 3, 4, 5, 6]).len(), MAX_NEAR_KEYS);
    }
}
