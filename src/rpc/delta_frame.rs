//! The `session/event` notification of a streamed text or thinking delta, written by hand.
//!
//! Streamed text is nearly all of what a run sends, and through serde every delta costs
//! seventeen escaped strings (each key and value) and a formatter call per token. Here only
//! the four strings that vary are escaped; the rest is fixed bytes. The output is byte for byte
//! what the general path writes (whose JSON objects keep their fields in declaration order:
//! serde_json's `preserve_order`, which the ACP types require), which a test checks, so a
//! client cannot tell the two paths apart.

use crate::json_text::next_special;
use crate::protocol::{Delta, DeltaKind, Notification, SessionEvent};

/// The frame's fixed start, up to the session id, with the method name from its declaration:
/// joined at compile time, so writing it is one copy of constant bytes.
const HEAD: &[u8] = &{
    const METHOD: &str = <SessionEvent as Notification>::METHOD;
    const PARTS: [&str; 3] = [
        r#"{"jsonrpc":"2.0","method":""#,
        METHOD,
        r#"","params":{"sessionId":"#,
    ];
    const LEN: usize = PARTS[0].len() + PARTS[1].len() + PARTS[2].len();
    assert!(
        needs_no_escape(METHOD),
        "the method name needs a JSON escape"
    );
    concat::<LEN>(&PARTS)
};

/// Whether `text` stands in a JSON string as it is.
const fn needs_no_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] < 0x20 || bytes[i] == b'"' || bytes[i] == b'\\' {
            return false;
        }
        i += 1;
    }
    true
}

/// `parts` joined into one array of `N` bytes; a wrong `N` fails the build.
const fn concat<const N: usize>(parts: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    let mut part = 0;
    while part < parts.len() {
        let bytes = parts[part].as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            out[at] = bytes[i];
            at += 1;
            i += 1;
        }
        part += 1;
    }
    assert!(at == N, "the parts are not N bytes long");
    out
}

/// The `session/event` frame of a text or thinking delta.
#[cfg(test)]
pub fn delta_frame(delta: &Delta<'_>) -> String {
    let mut out = Vec::new();
    write_delta_frame(delta, &mut out);
    // Built from `&str`s, ASCII and whole escapes only, so always UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends the `session/event` frame of a text or thinking delta to `out`: the outbox renders
/// it straight into the bytes waiting for the writer, with no string of its own.
pub fn write_delta_frame(delta: &Delta<'_>, out: &mut Vec<u8>) {
    let Delta {
        session_id,
        seq,
        run_id,
        kind,
        message_id,
        text,
    } = *delta;
    let kind = match kind {
        DeltaKind::Text => "textDelta",
        DeltaKind::Thinking => "thinkingDelta",
    };
    let dynamic = message_id.len() + text.len() + session_id.len();
    // The fixed part, with the longest kind and seq, is under 192 bytes; escapes are rare.
    out.reserve(192 + dynamic + dynamic / 8 + run_id.map_or(0, str::len));
    out.extend_from_slice(HEAD);
    write_json_string(out, session_id);
    out.extend_from_slice(br#","seq":"#);
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    if let Some(run_id) = run_id {
        out.extend_from_slice(br#","runId":"#);
        write_json_string(out, run_id);
    }
    out.extend_from_slice(br#","event":{"kind":""#);
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(br#"","messageId":"#);
    write_json_string(out, message_id);
    out.extend_from_slice(br#","text":"#);
    write_json_string(out, text);
    out.extend_from_slice(b"}}}");
}

/// What a byte becomes inside a JSON string: itself (0), a two-character escape, or `\u00XX`
/// (`u`). The same choices as serde_json, so both paths write the same bytes.
const ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Appends `text` as a quoted JSON string, copying the runs between escapes whole.
fn write_json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    while let Some(at) = next_special(bytes, start) {
        out.extend_from_slice(&bytes[start..at]);
        let byte = bytes[at];
        match ESCAPES[usize::from(byte)] {
            b'u' => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]),
            other => out.extend_from_slice(&[b'\\', other]),
        }
        start = at + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn deltas_are_written_as_the_general_path_would() {
        let every_control: String = (0u8..0x20).map(char::from).collect();
        let texts = [
            "w1 ".to_string(),
            String::new(),
            "é \"quoted\" \\ \n\t\u{1} 😀 </script> \u{7f} \u{2028}".to_string(),
            every_control,
            "\\\\\"\"".to_string(),
            "a longer text of more than eight bytes, with a \"quote\" at the end\"".to_string(),
        ];
        for run_id in [Some("run_1"), None] {
            for text in &texts {
                for (kind, message_id) in
                    [(DeltaKind::Text, "msg_1"), (DeltaKind::Thinking, "msg_\"2")]
                {
                    for seq in [0, 7, u64::MAX] {
                        let delta = Delta {
                            session_id: "ses_\n1",
                            seq,
                            run_id,
                            kind,
                            message_id,
                            text,
                        };
                        let general = json!({"jsonrpc": "2.0", "method": SessionEvent::METHOD, "params": delta.to_event()});
                        assert_eq!(delta_frame(&delta), general.to_string());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_text_is_escaped_as_serde_json_escapes_it(
            text in prop_oneof![any::<String>(), "[\\x00-\\x7f]{0,40}", "[a-z\"\\\\\\n]{0,40}"]
        ) {
            let mut out = Vec::new();
            write_json_string(&mut out, &text);
            prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&text).unwrap());
        }
    }
}
