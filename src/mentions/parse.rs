//! Finding `@`-mentions in what the user typed.
//!
//! A mention starts with `@` at the start of the text or after white space or an opening
//! bracket or quote, so the `@` of an email address (`bob@example.com`) is never one. What
//! follows is a path up to the next white space (`@src/lib.rs`), or a quoted path
//! (`@"notes/a b.md"`), optionally with a line or a range of lines (`:12`, `:12-30`). Closing
//! punctuation after a bare path (`see @src/lib.rs.`) belongs to the sentence, not the path.
//! Whether the path exists is not known here: see [`super::attach`].

use crate::protocol::LineRange;

/// One mention as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// The path, without quotes or line range.
    pub path: String,
    /// The lines named, if any, as typed (checked when the file is read).
    pub lines: Option<LineRange>,
    /// Whether the path was quoted.
    pub quoted: bool,
    /// The mention as it stands in the text, `@` included.
    pub typed: String,
}

impl Mention {
    /// Whether the words look meant as a path even when nothing is there: quoted, with lines,
    /// or holding a `/` or a `.`. `@alice` is just a name, and a missing one is plain text;
    /// `@src/gone.rs` is a path, and a missing one is worth a notice.
    pub fn looks_like_a_path(&self) -> bool {
        self.quoted || self.lines.is_some() || self.path.contains(['/', '.'])
    }
}

/// Characters that may come just before a mention's `@`, besides white space.
const OPENERS: &[char] = &['(', '[', '{', '"', '\'', '`', '<'];

/// Punctuation that ends a sentence or closes a bracket: not part of a bare path's end.
const CLOSERS: &[char] = &[
    '.', ',', ';', ':', '!', '?', ')', ']', '}', '"', '\'', '`', '>',
];

/// The mentions in `text`, in the order typed.
pub fn parse(text: &str) -> Vec<Mention> {
    let mut mentions = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find('@') {
        let at = from + found;
        from = at + 1;
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| !c.is_whitespace() && !OPENERS.contains(&c)) {
            continue;
        }
        let rest = &text[at + 1..];
        let parsed = match rest.strip_prefix('"') {
            Some(quoted) => parse_quoted(quoted).map(|(m, len)| (m, len + 1)),
            None => parse_bare(rest),
        };
        if let Some((mut mention, len)) = parsed {
            mention.typed = text[at..at + 1 + len].to_string();
            mentions.push(mention);
            from = at + 1 + len;
        }
    }
    mentions
}

/// `path"` with an optional `:L` or `:L-M` after the closing quote; the mention and the bytes
/// it takes after the opening quote.
fn parse_quoted(quoted: &str) -> Option<(Mention, usize)> {
    let close = quoted.find(['"', '\n'])?;
    if !quoted[close..].starts_with('"') || close == 0 {
        return None;
    }
    let path = &quoted[..close];
    let after = &quoted[close + 1..];
    let suffix_len = after
        .strip_prefix(':')
        .map(|s| {
            s.find(|c: char| !c.is_ascii_digit() && c != '-')
                .unwrap_or(s.len())
        })
        .unwrap_or(0);
    let lines = after
        .get(1..1 + suffix_len)
        .filter(|_| suffix_len > 0)
        .and_then(line_range);
    let taken = close + 1 + if lines.is_some() { 1 + suffix_len } else { 0 };
    Some((
        Mention {
            path: path.to_string(),
            lines,
            quoted: true,
            typed: String::new(),
        },
        taken,
    ))
}

/// A bare path up to white space, closing punctuation trimmed, then its `:L` or `:L-M`.
fn parse_bare(rest: &str) -> Option<(Mention, usize)> {
    let word = &rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())];
    let word = word.trim_end_matches(CLOSERS);
    let (path, lines) = match word.rsplit_once(':') {
        Some((path, range)) => match line_range(range) {
            Some(lines) => (path, Some(lines)),
            None => (word, None),
        },
        None => (word, None),
    };
    if path.is_empty() {
        return None;
    }
    Some((
        Mention {
            path: path.to_string(),
            lines,
            quoted: false,
            typed: String::new(),
        },
        word.len(),
    ))
}

/// `L` or `L-M`, digits only.
fn line_range(text: &str) -> Option<LineRange> {
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    match text.split_once('-') {
        Some((start, end)) => Some(LineRange {
            start: number(start)?,
            end: number(end)?,
        }),
        None => number(text).map(|line| LineRange {
            start: line,
            end: line,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn mention(path: &str, lines: Option<(u64, u64)>, quoted: bool, typed: &str) -> Mention {
        Mention {
            path: path.into(),
            lines: lines.map(|(start, end)| LineRange { start, end }),
            quoted,
            typed: typed.into(),
        }
    }

    #[test]
    fn mentions_are_found_as_typed() {
        let cases: Vec<(&str, Vec<Mention>)> = vec![
            ("no mention here", vec![]),
            (
                "@src/lib.rs",
                vec![mention("src/lib.rs", None, false, "@src/lib.rs")],
            ),
            (
                "explain @src/lib.rs:12 please",
                vec![mention(
                    "src/lib.rs",
                    Some((12, 12)),
                    false,
                    "@src/lib.rs:12",
                )],
            ),
            (
                "see @src/lib.rs:3-5.",
                vec![mention(
                    "src/lib.rs",
                    Some((3, 5)),
                    false,
                    "@src/lib.rs:3-5",
                )],
            ),
            (
                r#"read @"notes/a b.md" now"#,
                vec![mention("notes/a b.md", None, true, r#"@"notes/a b.md""#)],
            ),
            (
                r#"read @"notes/a b.md":2-4, then"#,
                vec![mention(
                    "notes/a b.md",
                    Some((2, 4)),
                    true,
                    r#"@"notes/a b.md":2-4"#,
                )],
            ),
            ("mail bob@example.com", vec![]),
            ("an @ alone", vec![]),
            (r#"@"unclosed path"#, vec![]),
            (r#"@"" empty"#, vec![]),
            (
                "(@docs/), and @README.md:",
                vec![
                    mention("docs/", None, false, "@docs/"),
                    mention("README.md", None, false, "@README.md"),
                ],
            ),
            (
                "@a.rs @b.rs\n@c.rs",
                vec![
                    mention("a.rs", None, false, "@a.rs"),
                    mention("b.rs", None, false, "@b.rs"),
                    mention("c.rs", None, false, "@c.rs"),
                ],
            ),
            (
                "@file:name.txt keeps a colon that is not a range",
                vec![mention("file:name.txt", None, false, "@file:name.txt")],
            ),
            (
                "@src/lib.rs:9-x is not a range",
                vec![mention("src/lib.rs:9-x", None, false, "@src/lib.rs:9-x")],
            ),
            (
                "@alice and @@types",
                vec![
                    mention("alice", None, false, "@alice"),
                    mention("@types", None, false, "@@types"),
                ],
            ),
            (
                "ünïcode @ü.txt:1",
                vec![mention("ü.txt", Some((1, 1)), false, "@ü.txt:1")],
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), expected, "{text:?}");
        }
    }

    #[test]
    fn a_name_is_a_path_when_quoted_ranged_or_dotted() {
        let cases = [
            ("@alice", false),
            ("@src/x", true),
            ("@x.rs", true),
            ("@x:3", true),
            (r#"@"x""#, true),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text)[0].looks_like_a_path(), expected, "{text:?}");
        }
    }
}
