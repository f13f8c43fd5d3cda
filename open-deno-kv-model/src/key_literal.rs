//! Keys as JavaScript writes them: `["users", 42n, true]`.
//!
//! [`parse_key_literal`] reads the literal syntax people type (the `kv` command's key arguments,
//! the prefix box of `kv serve --ui`'s explorer) and [`key_literal`] writes a key the way a
//! JavaScript program would spell it. As in JavaScript, a plain number is a float (`42`, `1.5`,
//! `-0`, `NaN`, `Infinity`) and `42n` is a bigint. Strings take double or single quotes with
//! JavaScript's escapes (`\n`, `\t`, `\0`, `\xHH`, `\uHHHH`, `\u{H…}`). Bytes are
//! `new Uint8Array([1, 2])` (also without `new`) or the short hex form `b"0102"` that a key's
//! [`std::fmt::Display`] prints. Both printed forms parse back to the same key.
//!
//! ```
//! use open_deno_kv_model::{key, key_literal, parse_key_literal};
//! let k = parse_key_literal(r#"["users", 42n, new Uint8Array([1, 2])]"#).unwrap();
//! assert_eq!(k, key!["users", 42, vec![1u8, 2]]);
//! assert_eq!(key_literal(&k), r#"["users", 42n, new Uint8Array([1, 2])]"#);
//! assert_eq!(parse_key_literal(&key_literal(&k)).unwrap(), k);
//! ```

use num_bigint::BigInt;

use crate::v8::parse_number;
use crate::{Key, KeyError, KeyPart};

/// Reads a key written as a JavaScript array literal (see the [module documentation](self)).
/// The error ([`KeyError::Literal`]) says what is wrong and at which character.
pub fn parse_key_literal(text: &str) -> Result<Key, KeyError> {
    Parser::new(text).key()
}

/// Writes `key` as JavaScript would: a key's [`std::fmt::Display`], except that a bytes part is
/// `new Uint8Array([1, 2])`, as Deno writes a `Uint8Array`, instead of the short `b"0102"`.
pub fn key_literal(key: &Key) -> String {
    let parts: Vec<String> = key
        .parts()
        .iter()
        .map(|part| match part {
            KeyPart::Bytes(bytes) => {
                let list: Vec<String> = bytes.iter().map(u8::to_string).collect();
                format!("new Uint8Array([{}])", list.join(", "))
            }
            other => other.to_string(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// A recursive-descent reader of the literal syntax.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser { text, pos: 0 }
    }

    fn error(&self, reason: impl Into<String>) -> KeyError {
        KeyError::Literal {
            reason: format!("{} (at character {})", reason.into(), self.pos + 1),
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn expect(&mut self, wanted: char) -> Result<(), KeyError> {
        self.skip_space();
        match self.bump() {
            Some(c) if c == wanted => Ok(()),
            Some(c) => Err(self.error(format!("expected '{wanted}', found '{c}'"))),
            None => Err(self.error(format!("expected '{wanted}', found the end"))),
        }
    }

    fn eat(&mut self, word: &str) -> bool {
        if self.rest().starts_with(word) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    fn key(mut self) -> Result<Key, KeyError> {
        self.expect('[')?;
        let mut parts = Vec::new();
        loop {
            self.skip_space();
            if self.peek() == Some(']') {
                self.bump();
                break;
            }
            parts.push(self.part()?);
            self.skip_space();
            match self.bump() {
                Some(',') => continue,
                Some(']') => break,
                Some(c) => return Err(self.error(format!("expected ',' or ']', found '{c}'"))),
                None => return Err(self.error("the key is not closed with ']'")),
            }
        }
        self.skip_space();
        if let Some(c) = self.peek() {
            return Err(self.error(format!("unexpected '{c}' after the key")));
        }
        Ok(Key::new(parts))
    }

    fn part(&mut self) -> Result<KeyPart, KeyError> {
        self.skip_space();
        match self.peek() {
            Some('"') | Some('\'') => Ok(KeyPart::String(self.string()?)),
            Some('b') if self.rest().starts_with("b\"") => {
                self.bump();
                let text = self.string()?;
                let bytes = hex::decode(&text)
                    .map_err(|_| self.error(format!("b\"{text}\" is not hex bytes")))?;
                Ok(KeyPart::Bytes(bytes))
            }
            Some('n') | Some('U')
                if self.rest().starts_with("new ") || self.rest().starts_with("Uint8Array") =>
            {
                self.bytes_constructor()
            }
            Some(_) if self.eat("true") => Ok(KeyPart::Bool(true)),
            Some(_) if self.eat("false") => Ok(KeyPart::Bool(false)),
            Some(_) => self.number(),
            None => Err(self.error("expected a key part, found the end")),
        }
    }

    /// `new Uint8Array([1, 2, 3])` (or without `new`).
    fn bytes_constructor(&mut self) -> Result<KeyPart, KeyError> {
        if self.eat("new") {
            self.skip_space();
        }
        if !self.eat("Uint8Array") {
            return Err(self.error("only Uint8Array is a bytes key part"));
        }
        self.expect('(')?;
        self.expect('[')?;
        let mut bytes = Vec::new();
        loop {
            self.skip_space();
            if self.peek() == Some(']') {
                self.bump();
                break;
            }
            let start = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
            }
            let digits = &self.text[start..self.pos];
            let byte: u8 = digits
                .parse()
                .map_err(|_| self.error(format!("{digits:?} is not a byte (0 to 255)")))?;
            bytes.push(byte);
            self.skip_space();
            match self.bump() {
                Some(',') => continue,
                Some(']') => break,
                _ => return Err(self.error("expected ',' or ']' in the byte list")),
            }
        }
        self.expect(')')?;
        Ok(KeyPart::Bytes(bytes))
    }

    fn number(&mut self) -> Result<KeyPart, KeyError> {
        let start = self.pos;
        if matches!(self.peek(), Some('-') | Some('+')) {
            self.bump();
        }
        if self.eat("Infinity") || self.eat("NaN") {
            let text = &self.text[start..self.pos];
            return parse_number(text)
                .map(KeyPart::Float)
                .ok_or_else(|| self.error(format!("{text:?} is not a number")));
        }
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
            || (self.peek().is_some_and(|c| c == '-' || c == '+')
                && self.text[..self.pos].ends_with(['e', 'E']))
        {
            self.bump();
        }
        let text = self.text[start..self.pos].replace('_', "");
        if text.is_empty() || text == "-" || text == "+" {
            return Err(match self.peek() {
                Some(c) => self.error(format!(
                    "unexpected '{c}': expected a string, number, bigint (42n), boolean or bytes"
                )),
                None => self.error("expected a key part, found the end"),
            });
        }
        if let Some(digits) = text.strip_suffix('n') {
            return digits
                .parse::<BigInt>()
                .map(KeyPart::Int)
                .map_err(|_| self.error(format!("{text:?} is not a bigint")));
        }
        parse_number(&text)
            .filter(|_| !text.contains(['x', 'X', 'o', 'O']))
            .map(KeyPart::Float)
            .ok_or_else(|| self.error(format!("{text:?} is not a number")))
    }

    fn string(&mut self) -> Result<String, KeyError> {
        let Some(quote) = self.bump() else {
            return Err(self.error("expected a string"));
        };
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error("the string is not closed")),
                Some(c) if c == quote => return Ok(out),
                Some('\\') => out.push(self.escape()?),
                Some(c) => out.push(c),
            }
        }
    }

    fn escape(&mut self) -> Result<char, KeyError> {
        let c = self
            .bump()
            .ok_or_else(|| self.error("the string ends in the middle of an escape"))?;
        Ok(match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'v' => '\u{b}',
            '0' => '\0',
            'x' => self.hex_char(2)?,
            'u' if self.peek() == Some('{') => {
                self.bump();
                let start = self.pos;
                while self.peek().is_some_and(|c| c != '}') {
                    self.bump();
                }
                let digits = &self.text[start..self.pos];
                self.expect('}')?;
                u32::from_str_radix(digits, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| self.error(format!("\\u{{{digits}}} is not a character")))?
            }
            'u' => {
                let unit = self.hex_unit()?;
                if (0xD800..0xDC00).contains(&unit) && self.eat("\\u") {
                    let low = self.hex_unit()?;
                    char::decode_utf16([unit, low])
                        .next()
                        .and_then(Result::ok)
                        .ok_or_else(|| self.error("an invalid surrogate pair"))?
                } else {
                    // A lone surrogate cannot be in a Rust string; Deno stores U+FFFD for it.
                    char::from_u32(u32::from(unit)).unwrap_or('\u{FFFD}')
                }
            }
            other => other,
        })
    }

    fn hex_char(&mut self, digits: usize) -> Result<char, KeyError> {
        let start = self.pos;
        for _ in 0..digits {
            self.bump();
        }
        let text = self.text.get(start..self.pos).unwrap_or_default();
        u32::from_str_radix(text, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.error(format!("\\x{text} is not a character")))
    }

    fn hex_unit(&mut self) -> Result<u16, KeyError> {
        let start = self.pos;
        for _ in 0..4 {
            self.bump();
        }
        let text = self.text.get(start..self.pos).unwrap_or_default();
        u16::from_str_radix(text, 16)
            .map_err(|_| self.error(format!("\\u{text} is not 4 hex digits")))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::key;

    #[test]
    fn errors_say_where() {
        match parse_key_literal("[1, foo]") {
            Err(KeyError::Literal { reason }) => {
                assert!(
                    reason.contains("\"foo\" is not a number (at character 8)"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_key_literal("[b\"00ff\"]"), Ok(key![vec![0u8, 255]]));
    }

    fn any_part() -> impl Strategy<Value = KeyPart> {
        prop_oneof![
            any::<Vec<u8>>().prop_map(KeyPart::Bytes),
            any::<String>().prop_map(KeyPart::String),
            any::<i128>().prop_map(|i| KeyPart::Int(BigInt::from(i))),
            any::<f64>()
                .prop_filter("NaN prints as NaN", |x| !x.is_nan())
                .prop_map(KeyPart::Float),
            any::<bool>().prop_map(KeyPart::Bool),
        ]
    }

    proptest! {
        /// Both printed forms of a key parse back to the same key.
        #[test]
        fn printed_keys_parse_back(parts in proptest::collection::vec(any_part(), 0..6)) {
            let key = Key::new(parts);
            prop_assert_eq!(parse_key_literal(&key_literal(&key)), Ok(key.clone()));
            prop_assert_eq!(parse_key_literal(&key.to_string()), Ok(key));
        }
    }
}
