//! A fast reader for the chunk nearly every streamed token arrives in.
//!
//! A Chat Completions stream sends one JSON chunk per token, and serde_json spends about 3,700
//! instructions on each (every key and value goes through its generic visitor machinery): more
//! than everything else the daemon does with the token. This reader walks the chunk once,
//! borrowing strings without escapes, and fills the same [`WireChunk`] serde would.
//!
//! It takes only what it is sure of: an object with at most one choice, no tool calls, no
//! usage and no error. Anything else (a duplicate key, a value of an unexpected type, a tool
//! call, invalid JSON) returns `None`, and the caller parses the chunk with serde, which then
//! also gives the error message. A property test checks that whatever this reader accepts,
//! serde reads the same.

use std::borrow::Cow;

use super::{WireChoice, WireChunk, WireDelta};
use crate::json_text::next_special;

/// Deepest nesting skipped in a value this reader does not use.
const MAX_DEPTH: usize = 64;

/// The chunk, if it is one this reader handles.
pub(super) fn read(data: &str) -> Option<WireChunk<'_>> {
    let mut reader = Reader {
        bytes: data.as_bytes(),
        text: data,
        at: 0,
    };
    let chunk = reader.chunk()?;
    reader.skip_whitespace();
    (reader.at == reader.bytes.len()).then_some(chunk)
}

struct Reader<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    fn chunk(&mut self) -> Option<WireChunk<'a>> {
        let mut choices = None;
        let mut seen = Seen::default();
        self.object(|reader, key| {
            match key.as_ref() {
                "choices" => {
                    seen.first(0)?;
                    choices = reader.nullable(Self::choices)?;
                }
                // Usage and errors are rare: serde reads those chunks.
                "usage" | "error" => reader.null()?,
                _ => reader.skip_value(0)?,
            }
            Some(())
        })?;
        Some(WireChunk {
            choices,
            usage: None,
            error: None,
        })
    }

    /// At most one choice.
    fn choices(&mut self) -> Option<Vec<WireChoice<'a>>> {
        self.expect(b'[')?;
        self.skip_whitespace();
        if self.eat(b']') {
            return Some(Vec::new());
        }
        let choice = self.choice()?;
        self.skip_whitespace();
        self.expect(b']')?;
        Some(vec![choice])
    }

    fn choice(&mut self) -> Option<WireChoice<'a>> {
        let mut choice = WireChoice {
            index: None,
            delta: None,
            finish_reason: None,
        };
        let mut seen = Seen::default();
        self.object(|reader, key| {
            match key.as_ref() {
                "index" => {
                    seen.first(0)?;
                    choice.index = reader.nullable(Self::unsigned)?;
                }
                "delta" => {
                    seen.first(1)?;
                    choice.delta = reader.nullable(Self::delta)?;
                }
                "finish_reason" => {
                    seen.first(2)?;
                    choice.finish_reason = reader.nullable(Self::string)?;
                }
                _ => reader.skip_value(0)?,
            }
            Some(())
        })?;
        Some(choice)
    }

    fn delta(&mut self) -> Option<WireDelta<'a>> {
        let mut delta = WireDelta {
            content: None,
            reasoning_content: None,
            reasoning: None,
            refusal: None,
            tool_calls: None,
        };
        let mut seen = Seen::default();
        self.object(|reader, key| {
            match key.as_ref() {
                "content" => {
                    seen.first(0)?;
                    delta.content = reader.nullable(Self::string)?;
                }
                "reasoning_content" => {
                    seen.first(1)?;
                    delta.reasoning_content = reader.nullable(Self::string)?;
                }
                "reasoning" => {
                    seen.first(2)?;
                    delta.reasoning = reader.nullable(Self::string)?;
                }
                "refusal" => {
                    seen.first(3)?;
                    delta.refusal = reader.nullable(Self::string)?;
                }
                "tool_calls" => reader.null()?,
                _ => reader.skip_value(0)?,
            }
            Some(())
        })?;
        Some(delta)
    }

    /// Calls `field` with the reader placed at each value, after its key.
    fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, Cow<'a, str>) -> Option<()>,
    ) -> Option<()> {
        self.skip_whitespace();
        self.expect(b'{')?;
        self.skip_whitespace();
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.skip_whitespace();
            let key = self.string()?;
            self.skip_whitespace();
            self.expect(b':')?;
            self.skip_whitespace();
            field(self, key)?;
            self.skip_whitespace();
            if self.eat(b'}') {
                return Some(());
            }
            self.expect(b',')?;
        }
    }

    /// `null` as `None`, or the value `read` reads.
    fn nullable<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.bytes[self.at..].starts_with(b"null") {
            self.at += 4;
            return Some(None);
        }
        read(self).map(Some)
    }

    fn null(&mut self) -> Option<()> {
        self.nullable(|_| None::<()>).map(|_| ())
    }

    /// An unsigned integer as serde reads one into a `u64`.
    fn unsigned(&mut self) -> Option<u64> {
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let digits = &self.text[start..self.at];
        // A leading zero, a sign, a fraction or an exponent: left to serde.
        if digits.is_empty()
            || (digits.len() > 1 && digits.starts_with('0'))
            || matches!(self.bytes.get(self.at), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        digits.parse().ok()
    }

    /// A string, borrowed when it has no escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.expect(b'"')?;
        let start = self.at;
        let special = next_special(self.bytes, start)?;
        if self.bytes[special] == b'"' {
            self.at = special + 1;
            return self.text.get(start..special).map(Cow::Borrowed);
        }
        let mut owned = String::new();
        let mut run = start;
        let mut special = special;
        loop {
            owned.push_str(self.text.get(run..special)?);
            self.at = special + 1;
            match self.bytes[special] {
                b'"' => return Some(Cow::Owned(owned)),
                b'\\' => owned.push(self.escape()?),
                // A raw control byte.
                _ => return None,
            }
            run = self.at;
            special = next_special(self.bytes, run)?;
        }
    }

    /// The character an escape stands for, the backslash already read.
    fn escape(&mut self) -> Option<char> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                match unit {
                    0xd800..=0xdbff => {
                        // A high surrogate must be followed by an escaped low one.
                        if !self.bytes[self.at..].starts_with(b"\\u") {
                            return None;
                        }
                        self.at += 2;
                        let low = self.hex4()?;
                        if !(0xdc00..=0xdfff).contains(&low) {
                            return None;
                        }
                        let code = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                        char::from_u32(code)?
                    }
                    0xdc00..=0xdfff => return None,
                    _ => char::from_u32(unit)?,
                }
            }
            _ => return None,
        })
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.at..self.at + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.at += 4;
        u32::from_str_radix(digits, 16).ok()
    }

    /// Skips any JSON value, checking it is well formed.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match *self.bytes.get(self.at)? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(|reader, _| reader.skip_value(depth + 1)),
            b'[' => {
                self.at += 1;
                self.skip_whitespace();
                if self.eat(b']') {
                    return Some(());
                }
                loop {
                    self.skip_whitespace();
                    self.skip_value(depth + 1)?;
                    self.skip_whitespace();
                    if self.eat(b']') {
                        return Some(());
                    }
                    self.expect(b',')?;
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes[self.at..].starts_with(word).then(|| {
            self.at += word.len();
        })
    }

    /// A number in JSON's grammar: `-`? int frac? exp?.
    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.') {
            self.some_digits()?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _ = self.eat(b'+') || self.eat(b'-');
            self.some_digits()?;
        }
        Some(())
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    fn digits(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.bytes.get(self.at) == Some(&byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }
}

/// Keys already read in one object, one bit each: serde rejects a known key given twice, so
/// this reader leaves such a chunk to it.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    fn first(&mut self, bit: u8) -> Option<()> {
        let mask = 1 << bit;
        if self.0 & mask != 0 {
            return None;
        }
        self.0 |= mask;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    use super::*;

    fn serde_read(data: &str) -> Result<WireChunk<'_>, serde_json::Error> {
        serde_json::from_str(data)
    }

    #[test]
    fn the_usual_chunks_take_the_fast_path() {
        let chunks = [
            // OpenAI
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"ab"}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello \"you\"\n\u00e9\ud83d\ude00"},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            // Ollama, llama.cpp, vLLM
            r#"{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":"llama3","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}"#,
            r#" { "choices" : [ { "delta" : { "reasoning_content" : "hm" , "content" : null } } ] } "#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"m","tool_calls":null}}]}"#,
            r#"{"choices":[]}"#,
        ];
        for chunk in chunks {
            let fast = read(chunk).unwrap_or_else(|| panic!("not read: {chunk}"));
            assert_eq!(
                format!("{fast:?}"),
                format!("{:?}", serde_read(chunk).unwrap())
            );
        }
    }

    #[test]
    fn everything_else_is_left_to_serde() {
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
            r#"{"error":{"message":"boom"}}"#,
            r#"{"choices":[{"index":0},{"index":1}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"index":-0,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
            r#"{"choices":[{"delta":{"content":"tab	inside"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}]} x"#,
            r#"{"choices":[{"delta":{"content":"a"}}]"#,
            "[DONE]",
        ];
        for chunk in chunks {
            assert!(read(chunk).is_none(), "read: {chunk}");
        }
    }

    fn join_object(pairs: Vec<(&'static str, String)>, space: &'static str) -> String {
        let fields: Vec<String> = pairs
            .into_iter()
            .map(|(key, value)| format!("{space}\"{key}\"{space}:{space}{value}"))
            .collect();
        format!("{{{}{space}}}", fields.join(","))
    }

    fn string() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
            "[a-z \\\\\"\n\u{e9}]{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just(r#""\u00e9\ud83d\ude00\/""#.to_string()),
        ]
    }

    fn scalar() -> impl Strategy<Value = String> {
        prop_oneof![
            string(),
            Just(r#""\ud800""#.to_string()),
            Just(r#""a\x""#.to_string()),
            Just("\"raw\ttab\"".to_string()),
            prop::sample::select(vec![
                "0",
                "-0",
                "1",
                "01",
                "1.5",
                "2e3",
                "1e400",
                "-",
                "18446744073709551616",
                "null",
                "true",
                "false",
                "nul",
                "{}",
                "[]",
                r#"[1,{"a":[null,-2.5E+3]}]"#,
                r#"{"a":"#,
            ])
            .prop_map(str::to_string),
        ]
    }

    fn delta() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "content",
            "reasoning_content",
            "reasoning",
            "role",
            "tool_calls",
            "refusal",
        ]);
        let value = prop_oneof![
            4 => string(),
            1 => scalar(),
            1 => Just(r#"[{"index":0,"id":"c"}]"#.to_string()),
        ];
        (
            prop::collection::vec((key, value), 0..4),
            prop::sample::select(vec!["", " ", "\n"]),
        )
            .prop_map(|(pairs, space)| join_object(pairs, space))
    }

    fn choice() -> impl Strategy<Value = String> {
        let key =
            prop::sample::select(vec!["index", "delta", "delta", "finish_reason", "logprobs"]);
        let value = prop_oneof![
            1 => scalar(),
            3 => delta(),
            1 => Just("0".to_string()),
            1 => Just("null".to_string()),
        ];
        (
            prop::collection::vec((key, value), 0..4),
            prop::sample::select(vec!["", " "]),
        )
            .prop_map(|(pairs, space)| join_object(pairs, space))
    }

    fn chunk() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "id", "object", "choices", "choices", "choices", "usage", "error", "model",
        ]);
        let choices = prop_oneof![
            4 => prop::collection::vec(choice(), 1..2).prop_map(|c| format!("[{}]", c.join(","))),
            1 => prop::collection::vec(choice(), 0..3).prop_map(|c| format!("[{}]", c.join(","))),
            1 => scalar(),
        ];
        let value = prop_oneof![3 => choices, 1 => scalar()];
        (
            prop::collection::vec((key, value), 0..5),
            prop::sample::select(vec!["", " ", "\r\n"]),
        )
            .prop_map(|(pairs, space)| join_object(pairs, space))
    }

    /// Chunks as servers send them: the shapes the fast reader is for.
    fn realistic() -> impl Strategy<Value = String> {
        let text = prop_oneof![any::<String>(), "[a-z \\\\\"\n\t\u{e9}\u{1f600}]{0,12}"];
        (
            prop::option::of(text.clone()),
            prop::option::of(text),
            prop::sample::select(vec!["content", "reasoning_content", "reasoning"]),
            prop::option::of(prop::sample::select(vec!["stop", "length"])),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(content, other, other_key, finish, role, pretty)| {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(other) = other {
                    delta.insert(other_key.into(), other.into());
                }
                if let Some(content) = content {
                    delta.insert("content".into(), content.into());
                }
                let chunk = serde_json::json!({
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1_694_268_190,
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
                    "usage": null,
                });
                if pretty {
                    serde_json::to_string_pretty(&chunk).unwrap()
                } else {
                    chunk.to_string()
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// What the fast reader accepts, serde reads the same way.
        #[test]
        fn the_fast_reader_agrees_with_serde(
            text in prop_oneof![chunk(), realistic()],
            cut in any::<prop::sample::Index>(),
        ) {
            for data in [text.clone(), text[..text.floor_char_boundary_compat(cut.index(text.len() + 1))].to_string()] {
                if let Some(fast) = read(&data) {
                    let slow = serde_read(&data);
                    prop_assert!(slow.is_ok(), "serde rejects {:?}: {:?}", data, slow.err());
                    prop_assert_eq!(format!("{fast:?}"), format!("{:?}", slow.unwrap()));
                }
            }
        }
    }

    trait FloorCharBoundary {
        fn floor_char_boundary_compat(&self, at: usize) -> usize;
    }

    impl FloorCharBoundary for String {
        fn floor_char_boundary_compat(&self, mut at: usize) -> usize {
            while !self.is_char_boundary(at) {
                at -= 1;
            }
            at
        }
    }
}
