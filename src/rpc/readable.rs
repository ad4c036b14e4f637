//! Makes what a client typed readable before it is parsed, so no message is refused for its
//! bytes.
//!
//! A JavaScript client that cuts a string inside an emoji sends half of a UTF-16 surrogate
//! pair (`JSON.stringify` writes it as `\ud83d`), which is valid JavaScript but not valid
//! Unicode, so a strict JSON parser refuses the whole frame. Each lone surrogate escape is
//! replaced here by `\ufffd` (U+FFFD, the replacement character), which has the same length,
//! so the frame is changed in place. Bytes that are not UTF-8 are replaced by U+FFFD too.

/// The frame's text with lone surrogate escapes and non-UTF-8 bytes replaced by U+FFFD; the
/// same buffer, untouched, when there is none.
pub fn make_readable(mut frame: Vec<u8>) -> String {
    let replaced = replace_lone_surrogates(&mut frame);
    if replaced > 0 {
        tracing::debug!(replaced, "replaced lone surrogate escapes");
    }
    match String::from_utf8(frame) {
        Ok(text) => text,
        Err(e) => {
            tracing::debug!("replaced bytes that are not UTF-8");
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    }
}

/// Replaces each `\uXXXX` escape of a surrogate that is not half of a pair with `\ufffd`;
/// the number replaced. Other escapes (an escaped backslash before `u`, say) are stepped
/// over whole, so only real escapes are read.
fn replace_lone_surrogates(bytes: &mut [u8]) -> usize {
    let mut replaced = 0;
    let mut from = 0;
    while let Some(found) = bytes
        .get(from..)
        .and_then(|rest| memchr::memchr(b'\\', rest))
    {
        let at = from + found;
        let Some(unit) = unicode_escape(bytes, at) else {
            // `\"`, `\\`, `\n` …, or not an escape at all: step over both bytes.
            from = at + 2;
            continue;
        };
        from = at + 6;
        match unit {
            0xD800..=0xDBFF => {
                if unicode_escape(bytes, at + 6).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low))
                {
                    from = at + 12;
                } else {
                    bytes[at + 2..at + 6].copy_from_slice(b"fffd");
                    replaced += 1;
                }
            }
            0xDC00..=0xDFFF => {
                bytes[at + 2..at + 6].copy_from_slice(b"fffd");
                replaced += 1;
            }
            _ => {}
        }
    }
    replaced
}

/// The UTF-16 code unit of the `\uXXXX` escape starting at `at`, if there is one.
fn unicode_escape(bytes: &[u8], at: usize) -> Option<u16> {
    let escape = bytes.get(at..at + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    use super::*;

    fn readable(text: &str) -> String {
        make_readable(text.as_bytes().to_vec())
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let cases = [
            (r#"{"t":"cut \ud83d"}"#, r#"{"t":"cut \ufffd"}"#),
            (r#"{"t":"\ude00 low"}"#, r#"{"t":"\ufffd low"}"#),
            (r#"{"t":"\uD83D\u0041"}"#, r#"{"t":"\ufffd\u0041"}"#),
            (
                r#"{"t":"\ud83d\ud83d\ude00"}"#,
                r#"{"t":"\ufffd\ud83d\ude00"}"#,
            ),
            // Whole pairs, other escapes and an escaped backslash before `u` stay as they are.
            (
                r#"{"t":"\ud83d\ude00 \\ud83d \" \n"}"#,
                r#"{"t":"\ud83d\ude00 \\ud83d \" \n"}"#,
            ),
            // A cut escape at the very end is left for the parser to refuse.
            (r#"{"t":"\ud8"#, r#"{"t":"\ud8"#),
            (r#"\"#, r#"\"#),
        ];
        for (sent, read) in cases {
            assert_eq!(readable(sent), read, "{sent}");
        }
        let value: serde_json::Value = serde_json::from_str(&readable(cases[0].0)).unwrap();
        assert_eq!(value["t"], "cut \u{fffd}");
    }

    #[test]
    fn bytes_that_are_not_utf8_become_replacement_characters() {
        let sent = b"{\"t\":\"a\xff\xc3b\"}".to_vec();
        assert_eq!(make_readable(sent), "{\"t\":\"a\u{fffd}\u{fffd}b\"}");
    }

    proptest! {
        /// Whatever a JavaScript client holds in a string, its `JSON.stringify` form (which
        /// writes lone surrogates as escapes) parses once made readable, to the same text with
        /// lone surrogates replaced.
        #[test]
        fn any_utf16_string_reads_as_its_lossy_text(units in proptest::collection::vec(
            prop_oneof![any::<u16>(), 0xD800u16..0xE000, Just(u16::from(b'\\')), Just(u16::from(b'u'))],
            0..40,
        )) {
            let mut json = String::from("\"");
            for unit in &units {
                match char::from_u32(u32::from(*unit)) {
                    Some(c) if c != '"' && c != '\\' && !c.is_control() => json.push(c),
                    _ => json.push_str(&format!("\\u{unit:04x}")),
                }
            }
            json.push('"');
            let read: String = serde_json::from_str(&make_readable(json.into_bytes())).unwrap();
            prop_assert_eq!(read, String::from_utf16_lossy(&units));
        }
    }
}
