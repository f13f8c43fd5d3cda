//! The value rules of atomic mutations, written once for every backend: `sum`, `min`, `max`, and
//! the key of a versionstamped set.
//!
//! # u64 (`Deno.KvU64`)
//! `sum` wraps modulo 2^64, `min` / `max` keep the smaller / larger. A missing key takes the
//! operand. Anything other than u64 on either side is an error with Deno's text.
//!
//! # V8 numbers and bigints (Deno 2.9)
//! A `sum` whose operand is a V8 value adds JavaScript numbers (f64) or bigints (exact). Optional
//! bounds `min` / `max`, V8 values of the operand's type, are applied to the result: with `clamp`
//! the result is pulled back into range, without it an out-of-range result fails the write. A
//! missing key takes the operand as it is, without a range check. Results are serialized by the
//! engine (header `FF 0F`).
//!
//! ```
//! use open_deno_kv_model::rules::{apply_sum, SumBounds};
//! use open_deno_kv_model::KvValue;
//! let sum = apply_sum(Some(&KvValue::U64(u64::MAX)), &KvValue::U64(2), &SumBounds::default());
//! assert_eq!(sum.unwrap(), KvValue::U64(1));
//! ```

use std::cmp::Ordering;

use num_bigint::BigInt;
use thiserror::Error;

use crate::v8::Primitive;
use crate::{KvValue, Versionstamp};

/// Why a `sum`, `min` or `max` cannot apply. `to_string()` is Deno's text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MutationError {
    /// A u64 operation whose operand is not a u64.
    #[error("Failed to perform '{op}' mutation on a non-U64 operand")]
    NonU64Operand {
        /// `sum`, `min` or `max`.
        op: &'static str,
    },
    /// A u64 operation on a stored value that is not a u64.
    #[error("Failed to perform '{op}' mutation on a non-U64 value in the database")]
    NonU64Stored {
        /// `sum`, `min` or `max`.
        op: &'static str,
    },
    /// A V8 sum whose operand or bounds are not V8 numbers or bigints.
    #[error("Some of the parameters are not valid V8 values")]
    InvalidSumParameters,
    /// A V8 sum whose bounds are not of the operand's type.
    #[error("Min/max parameters have different types than the operand")]
    BoundTypeMismatch,
    /// A V8 sum on a stored value that is not a number, bigint or u64 (Deno's texts:
    /// "unsupported value type", "invalid v8 value").
    #[error("{reason}")]
    UnsupportedStoredValue {
        /// Deno's text.
        reason: &'static str,
    },
    /// A sum mixing kinds, e.g. "Cannot sum Number with BigInt" (stored kind first).
    #[error("Cannot sum {stored} with {operand}")]
    MixedSum {
        /// `Number`, `BigInt` or `KvU64`: what is stored.
        stored: &'static str,
        /// The operand's kind.
        operand: &'static str,
    },
    /// Bounds given with a u64 sum.
    #[error("Cannot use min/max parameters with KvU64 operands")]
    BoundsWithU64,
    /// A bounded V8 sum without clamp whose result is out of range.
    #[error("The result of a Sum operation would exceed its range limit")]
    SumOutOfRange,
    /// A bigint result too large for V8 to serialize.
    #[error("The result of a Sum operation is too large to store")]
    ResultTooLarge,
}

/// The optional bounds of a V8 `sum`: V8-serialized numbers or bigints, empty for "unbounded".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SumBounds {
    /// V8 bytes of the lower bound, or empty.
    pub min_v8: Vec<u8>,
    /// V8 bytes of the upper bound, or empty.
    pub max_v8: Vec<u8>,
    /// Clamp into `[min, max]` instead of failing.
    pub clamp: bool,
}

impl SumBounds {
    fn is_unbounded(&self) -> bool {
        self.min_v8.is_empty() && self.max_v8.is_empty() && !self.clamp
    }
}

/// A number a sum can work on.
#[derive(Debug, Clone, PartialEq)]
enum SumOperand {
    Number(f64),
    BigInt(BigInt),
    U64(u64),
}

impl SumOperand {
    fn kind_name(&self) -> &'static str {
        match self {
            SumOperand::Number(_) => "Number",
            SumOperand::BigInt(_) => "BigInt",
            SumOperand::U64(_) => "KvU64",
        }
    }

    /// Reads a value as a sum operand; `Err` carries Deno's reason text.
    fn parse(value: &KvValue) -> Result<Self, &'static str> {
        match value {
            KvValue::U64(n) => Ok(SumOperand::U64(*n)),
            KvValue::Bytes(_) => Err("unsupported value type"),
            KvValue::V8(bytes) => Self::parse_v8(bytes),
        }
    }

    fn parse_v8(bytes: &[u8]) -> Result<Self, &'static str> {
        if bytes.is_empty() {
            return Err("operand cannot be empty");
        }
        match Primitive::from_v8(bytes).map_err(|_| "invalid v8 value")? {
            Some(Primitive::Number(x)) => Ok(SumOperand::Number(x)),
            Some(Primitive::BigInt(x)) => Ok(SumOperand::BigInt(x)),
            _ => Err("unsupported value type"),
        }
    }

    /// Parses an optional bound; empty bytes mean "none".
    fn parse_bound(bytes: &[u8]) -> Result<Option<Self>, &'static str> {
        if bytes.is_empty() {
            Ok(None)
        } else {
            Self::parse_v8(bytes).map(Some)
        }
    }

    fn into_value(self) -> Result<KvValue, MutationError> {
        match self {
            SumOperand::U64(n) => Ok(KvValue::U64(n)),
            SumOperand::Number(x) => Ok(KvValue::V8(v8_number(x).into())),
            SumOperand::BigInt(x) => v8_bigint(&x).map(|b| KvValue::V8(b.into())),
        }
    }
}

/// Serializes a JavaScript number as V8 bytes, as the engine does for sum results (`FF 0F 4E`
/// then 8 bytes little-endian). Useful to build operands and bounds.
pub fn v8_number(value: f64) -> Vec<u8> {
    let mut out = vec![0xff, 0x0f, b'N'];
    out.extend_from_slice(&value.to_le_bytes());
    out
}

/// Serializes a JavaScript bigint as V8 bytes, as the engine does for sum results (header
/// `FF 0F`, the digits' minimal bytes).
pub fn v8_bigint(value: &BigInt) -> Result<Vec<u8>, MutationError> {
    Primitive::BigInt(value.clone())
        .to_engine_v8()
        .map_err(|_| MutationError::ResultTooLarge)
}

/// Applies `sum` to the current (unexpired) value of a key.
///
/// `current` is `None` for a missing key, which takes the operand (re-serialized if it is V8).
pub fn apply_sum(
    current: Option<&KvValue>,
    operand: &KvValue,
    bounds: &SumBounds,
) -> Result<KvValue, MutationError> {
    if let KvValue::U64(add) = operand {
        if !bounds.is_unbounded() {
            return Err(MutationError::BoundsWithU64);
        }
        return match current {
            None => Ok(KvValue::U64(*add)),
            Some(KvValue::U64(stored)) => Ok(KvValue::U64(stored.wrapping_add(*add))),
            Some(_) => Err(MutationError::NonU64Stored { op: "sum" }),
        };
    }

    // A V8 operand: Deno refuses it, or either bound, if it is not a V8 number or bigint.
    let invalid = |_| MutationError::InvalidSumParameters;
    let operand = SumOperand::parse(operand).map_err(invalid)?;
    let min = SumOperand::parse_bound(&bounds.min_v8).map_err(invalid)?;
    let max = SumOperand::parse_bound(&bounds.max_v8).map_err(invalid)?;
    for bound in [&min, &max].into_iter().flatten() {
        if std::mem::discriminant(bound) != std::mem::discriminant(&operand) {
            return Err(MutationError::BoundTypeMismatch);
        }
    }

    let Some(current) = current else {
        return operand.into_value();
    };
    let stored = SumOperand::parse(current)
        .map_err(|reason| MutationError::UnsupportedStoredValue { reason })?;

    // A small non-negative bigint added to a stored u64 acts as a u64 sum (Deno's compatibility
    // rule for `sum` with a bigint operand on counters written as KvU64).
    let operand = match (&stored, operand) {
        (SumOperand::U64(_), SumOperand::BigInt(x)) if bounds.is_unbounded() => {
            match u64::try_from(&x) {
                Ok(n) => SumOperand::U64(n),
                Err(_) => SumOperand::BigInt(x),
            }
        }
        (_, operand) => operand,
    };

    let result = match (stored, operand) {
        (SumOperand::Number(a), SumOperand::Number(b)) => SumOperand::Number(within_bounds(
            a + b,
            as_number(min),
            as_number(max),
            bounds.clamp,
        )?),
        (SumOperand::BigInt(a), SumOperand::BigInt(b)) => SumOperand::BigInt(within_bounds(
            a + b,
            as_bigint(min),
            as_bigint(max),
            bounds.clamp,
        )?),
        (SumOperand::U64(a), SumOperand::U64(b)) => SumOperand::U64(a.wrapping_add(b)),
        (stored, operand) => {
            return Err(MutationError::MixedSum {
                stored: stored.kind_name(),
                operand: operand.kind_name(),
            });
        }
    };
    result.into_value()
}

/// A sum checked against its bounds: clamped to the bound it crossed when `clamp`, refused as
/// [`MutationError::SumOutOfRange`] otherwise. Numbers and bigints follow the same rule.
fn within_bounds<T: PartialOrd>(
    mut sum: T,
    min: Option<T>,
    max: Option<T>,
    clamp: bool,
) -> Result<T, MutationError> {
    // The minimum first, then the maximum, so that with min > max a clamped sum ends at max.
    for (bound, crossed) in [(min, Ordering::Less), (max, Ordering::Greater)] {
        if let Some(bound) = bound.filter(|b| sum.partial_cmp(b) == Some(crossed)) {
            if !clamp {
                return Err(MutationError::SumOutOfRange);
            }
            sum = bound;
        }
    }
    Ok(sum)
}

fn as_number(bound: Option<SumOperand>) -> Option<f64> {
    match bound {
        Some(SumOperand::Number(x)) => Some(x),
        _ => None,
    }
}

fn as_bigint(bound: Option<SumOperand>) -> Option<BigInt> {
    match bound {
        Some(SumOperand::BigInt(x)) => Some(x),
        _ => None,
    }
}

/// Which of the u64-only comparisons to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinMax {
    /// Keep the smaller.
    Min,
    /// Keep the larger.
    Max,
}

/// Applies `min` or `max` to the current (unexpired) value of a key. Both work on u64 only; the
/// operand is checked before the stored value, as Deno does.
pub fn apply_min_max(
    which: MinMax,
    current: Option<&KvValue>,
    operand: &KvValue,
) -> Result<KvValue, MutationError> {
    let op = match which {
        MinMax::Min => "min",
        MinMax::Max => "max",
    };
    let KvValue::U64(operand) = operand else {
        return Err(MutationError::NonU64Operand { op });
    };
    match current {
        None => Ok(KvValue::U64(*operand)),
        Some(KvValue::U64(stored)) => Ok(KvValue::U64(match which {
            MinMax::Min => (*stored).min(*operand),
            MinMax::Max => (*stored).max(*operand),
        })),
        Some(_) => Err(MutationError::NonU64Stored { op }),
    }
}

/// The key a versionstamped set writes: the prefix followed by a string part holding the commit's
/// versionstamp as 20 lowercase hex digits (`02`, 20 ASCII bytes, `00`).
///
/// ```
/// use open_deno_kv_model::{decode_key, encode_key, key, Versionstamp};
/// use open_deno_kv_model::rules::versionstamped_key;
/// let prefix = encode_key(&key!["log"]).unwrap();
/// let full = versionstamped_key(&prefix, Versionstamp::from_version(7, 0));
/// assert_eq!(decode_key(&full).unwrap(), key!["log", "00000000000000070000"]);
/// ```
pub fn versionstamped_key(prefix: &[u8], versionstamp: Versionstamp) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 22);
    key.extend_from_slice(prefix);
    key.push(0x02);
    key.extend_from_slice(versionstamp.to_string().as_bytes());
    key.push(0x00);
    key
}

#[cfg(test)]
mod tests;
