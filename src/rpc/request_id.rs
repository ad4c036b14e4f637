//! Request ids exactly as the client wrote them.
//!
//! JSON-RPC lets an id be any string or number. A client matches answers to requests by the
//! id it sent, so the answer carries the same JSON text: `-1`, `1.5` and `1e2` come back as
//! `-1`, `1.5` and `1e2`, not as numbers re-written (`1e2` would become `100.0`).

use serde_json::Value;
use serde_json::value::RawValue;

/// A request's id as its JSON text; `None` stands for `null`.
#[derive(Debug, Clone)]
pub struct RequestId(Option<Box<RawValue>>);

impl RequestId {
    /// `null`: the id of an answer to a request whose own id could not be read.
    pub fn null() -> Self {
        Self(None)
    }

    pub fn new(raw: Box<RawValue>) -> Self {
        Self(Some(raw))
    }

    /// The id's JSON text, as sent.
    pub fn json(&self) -> &str {
        self.0.as_deref().map_or("null", RawValue::get)
    }

    /// A string or a number: an id a request may carry.
    pub fn is_valid(&self) -> bool {
        matches!(
            self.json().as_bytes().first(),
            Some(b'"' | b'-' | b'0'..=b'9')
        )
    }

    /// Tells ids apart for `$/cancelRequest` and the in-flight map: a string by its text
    /// (however its escapes were written), a number as written. A string is never equal to a
    /// number.
    pub fn key(&self) -> String {
        match serde_json::from_str::<String>(self.json()) {
            Ok(text) => Value::String(text).to_string(),
            Err(_) => self.json().to_string(),
        }
    }

    /// The id as a JSON value (numbers as `serde_json` reads them).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.json()).unwrap_or(Value::Null)
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.json())
    }
}

/// The id of a frame that does not parse as a message, when its envelope can still be read:
/// the value of a top-level `"id"` member that is a string or a number, found by a lexical
/// scan that steps over other members without reading them (so a broken `params` or a cut
/// end does not hide the id). `None` when there is no such member.
pub fn recover_id(frame: &[u8]) -> Option<RequestId> {
    let mut at = skip_space(frame, 0);
    if frame.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        at = skip_space(frame, at);
        let key_start = at;
        at = skip_string(frame, at)?;
        let key = &frame[key_start..at];
        at = skip_space(frame, at);
        if frame.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(frame, at + 1);
        if key == b"\"id\"" {
            let mut value = serde_json::Deserializer::from_slice(&frame[at..]);
            let raw: Box<RawValue> = serde::Deserialize::deserialize(&mut value).ok()?;
            let id = RequestId::new(raw);
            return id.is_valid().then_some(id);
        }
        at = skip_value(frame, at)?;
        match frame.get(at) {
            Some(b',') => at += 1,
            _ => return None,
        }
    }
}

/// The id of a frame already parsed as a JSON `value` (whose `"id"` member is `parsed`), as
/// the client wrote it: the text [`recover_id`] finds, when it reads as the same value (a
/// duplicate `"id"` member could make them differ), else `parsed` written out again.
pub fn id_as_sent(frame: &[u8], parsed: &Value) -> RequestId {
    if let Some(id) = recover_id(frame).filter(|id| id.to_value() == *parsed) {
        return id;
    }
    match serde_json::value::to_raw_value(parsed) {
        Ok(raw) if !parsed.is_null() => RequestId::new(raw),
        _ => RequestId::null(),
    }
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// The position after the string starting at `at`.
fn skip_string(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', bytes.get(i..)?)?;
        if bytes[i] == b'"' {
            return Some(i + 1);
        }
        i += 2;
    }
}

/// The position of the `,` or `}` that ends the member value starting at `at`, stepping over
/// strings and nested brackets without checking what is between them.
fn skip_value(bytes: &[u8], mut at: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        match *bytes.get(at)? {
            b'"' => {
                at = skip_string(bytes, at)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => depth -= 1,
            b',' | b'}' if depth == 0 => return Some(at),
            _ => {}
        }
        at += 1;
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn recovered(frame: &str) -> Option<String> {
        recover_id(frame.as_bytes()).map(|id| id.json().to_string())
    }

    #[test]
    fn the_id_of_a_frame_whose_body_does_not_parse_is_found() {
        let cases = [
            (r#"{"jsonrpc":"2.0","id":5,"#, Some("5")),
            (
                r#"{"jsonrpc":"2.0","id":"a\"b","method":"x","params":{"t":tru}}"#,
                Some(r#""a\"b""#),
            ),
            (
                r#"{"method":"x","params":{"t":[1,{"id":9}],"s":"}\"{"} nonsense,"id":-1.5e3}"#,
                Some("-1.5e3"),
            ),
            (r#" { "id" : 1e2 , "#, Some("1e2")),
            // Inside params only, or not a usable id, or not an object: none.
            (r#"{"params":{"id":3},"method":"#, None),
            (r#"{"id":true,"method":"x"#, None),
            (r#"{"id":nul"#, None),
            (r#"[{"id":1}]"#, None),
            (r#"{"id""#, None),
            ("", None),
        ];
        for (frame, id) in cases {
            assert_eq!(recovered(frame), id.map(String::from), "{frame}");
        }
    }

    #[test]
    fn ids_keep_their_text_and_compare_strings_by_content() {
        let id = |text: &str| RequestId::new(RawValue::from_string(text.into()).unwrap());
        assert_eq!(id("1e2").json(), "1e2");
        assert_eq!(id(r#""\u0061""#).key(), id(r#""a""#).key());
        assert_ne!(id(r#""7""#).key(), id("7").key());
        assert!(id("-1").is_valid() && id("1.5").is_valid() && id(r#""x""#).is_valid());
        assert!(!id("null").is_valid() && !id("true").is_valid() && !id("{}").is_valid());
        assert_eq!(RequestId::null().json(), "null");
    }

    #[test]
    fn the_id_of_a_parsed_frame_keeps_its_text() {
        let cases = [
            (r#"{"id":1e2,"method":"x"}"#, "1e2"),
            (r#"{"method":"x","id":-1}"#, "-1"),
            (r#"{"params":{"id":7},"id":1.50}"#, "1.50"),
            (r#"{"id":"a\u0062"}"#, r#""a\u0062""#),
            // Two `"id"` members: the parsed one (the last) wins, written out again.
            (r#"{"id":1e2,"id":5}"#, "5"),
            // Not a string or a number: as parsed.
            (r#"{"id":[1e2]}"#, "[100.0]"),
            (r#"{"id":null}"#, "null"),
        ];
        for (frame, id) in cases {
            let value: Value = serde_json::from_str(frame).unwrap();
            assert_eq!(
                id_as_sent(frame.as_bytes(), &value["id"]).json(),
                id,
                "{frame}"
            );
        }
    }
}
