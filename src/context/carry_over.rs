//! Carry-over notes: what a new context of a session opens with, written from the old one.
//!
//! A session may start afresh after an idle time (`rollover`) or by hand (`/new-context`). The
//! old context is not sent again; a short note stands for it. The note is written by the model
//! from the newest user and assistant text and the names of the tools called (never their
//! results, which are bulky and may hold anything), or, when the model fails, copied from the
//! conversation. Either way it is redacted of anything credential-shaped and cut to a fixed
//! length before it is stored, since it is sent with every later request of the new context.
//!
//! Pure and deterministic; the runtime makes the request and stores the note.

use std::sync::OnceLock;

use regex::Regex;

use super::projection::Stored;
use super::redact::{REDACTED, redact};
use crate::protocol::{Block, Role};

/// How much of the old context the note's writer is shown: its newest characters of user and
/// assistant text.
pub const SOURCE_CHARS: usize = 24_000;

/// Most tokens the note's writer may answer with.
pub const NOTE_MAX_OUTPUT: u32 = 500;

/// Most characters a stored note keeps.
pub const NOTE_MAX_CHARS: usize = 1_500;

/// Most characters of each part of a copied note (the task, the last request, the last answer).
pub const COPIED_PART_CHARS: usize = 400;

/// The note writer's standing instructions.
pub const NOTE_SYSTEM: &str = "You write the hand-over note of a coding assistant's \
conversation, for the same assistant starting a fresh conversation with the same user. You \
never invent anything that is not in the conversation.";

/// What the note's writer is asked, about the `source` text.
pub fn note_prompt(source: &str) -> String {
    format!(
        "The conversation below is ending; a new one starts from your note alone. Write at most \
         about 200 words: what the user is working on and wants, the decisions made, the files \
         involved, what is unfinished and what comes next. Never copy passwords, keys or tokens. \
         Write the note only.\n\n<conversation>\n{source}\n</conversation>"
    )
}

/// A rollover period as the user writes it: `off`, or a whole number of seconds, minutes,
/// hours or days (`90s`, `30m`, `3h`, `1d`, `7d`). `None` for `off`.
pub fn parse_rollover(text: &str) -> Result<Option<u64>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let invalid = || {
        format!(
            "rollover must be off or a whole number of s, m, h or d (such as 3h, 1d or 7d); got {text:?}"
        )
    };
    let split = text.len().saturating_sub(1);
    let (number, unit) = (
        text.get(..split).unwrap_or(""),
        text.get(split..).unwrap_or(""),
    );
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(invalid()),
    };
    let number: u64 = number
        .parse()
        .ok()
        .filter(|n| *n > 0 && number.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(invalid)?;
    number.checked_mul(scale).map(Some).ok_or_else(invalid)
}

/// A rollover period in its largest whole unit (`86400` → `1d`).
pub fn format_rollover(secs: u64) -> String {
    [(86_400, "d"), (3_600, "h"), (60, "m")]
        .iter()
        .find(|(scale, _)| secs.is_multiple_of(*scale))
        .map_or_else(
            || format!("{secs}s"),
            |(scale, unit)| format!("{}{unit}", secs / scale),
        )
}

/// What the note's writer is shown of the old context: its newest [`SOURCE_CHARS`] of user and
/// assistant text, redacted, one line per message, then the names of the tools that were
/// called. Tool results, attachments and earlier notes are left out.
pub fn note_source(entries: &[Stored]) -> String {
    let mut lines: Vec<(&str, &String)> = Vec::new();
    let mut tools: Vec<&str> = Vec::new();
    for stored in entries {
        let entry = &stored.entry;
        for block in &entry.blocks {
            match (entry.role, block) {
                (Role::User, Block::Text { text } | Block::Interjection { text, .. }) => {
                    lines.push(("User", text))
                }
                (Role::Assistant, Block::Text { text }) => lines.push(("Assistant", text)),
                (Role::Assistant, Block::ToolCall { name, .. })
                    if !tools.contains(&name.as_str()) =>
                {
                    tools.push(name)
                }
                _ => {}
            }
        }
    }
    let mut kept: Vec<String> = Vec::new();
    let mut room = SOURCE_CHARS;
    for (who, text) in lines.iter().rev() {
        // Redacted before the cut below, so that no part of a key is left at its edge.
        let line = format!("{who}: {}", redact(text));
        let separator = if kept.is_empty() { 0 } else { 2 };
        let chars = line.chars().count();
        if chars + separator > room {
            // The newest part of the line that still fits, after an ellipsis, so the limit is
            // used up exactly.
            let available = room.saturating_sub(separator);
            if available > 1 {
                let tail: String = line.chars().skip(chars + 1 - available).collect();
                kept.push(format!("…{tail}"));
            }
            break;
        }
        room -= chars + separator;
        kept.push(line);
    }
    kept.reverse();
    let mut text = kept.join("\n\n");
    if !tools.is_empty() {
        text.push_str(&format!("\n\nTools called: {}", tools.join(", ")));
    }
    text
}

/// The note used when the model cannot write one: the task (the context's first request), the
/// last request and the last answer, each redacted, without URLs and cut to
/// [`COPIED_PART_CHARS`].
pub fn copied_note(entries: &[Stored]) -> String {
    let texts = |role: Role| -> Vec<String> {
        entries
            .iter()
            .filter(|s| s.entry.role == role)
            .map(|s| {
                s.entry
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        Block::Text { text } | Block::Interjection { text, .. } => {
                            Some(text.as_str())
                        }
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .filter(|t| !t.trim().is_empty())
            .collect()
    };
    let asked = texts(Role::User);
    let answered = texts(Role::Assistant);
    let part = |label: &str, text: Option<&String>| {
        text.map(|t| {
            // Redacted before the cut, so that a key across the cut is still whole when it is
            // matched (a cut key no longer looks like one).
            let clean = strip_urls(&redact(t));
            format!("{label}: {}", clip(&clean, COPIED_PART_CHARS))
        })
    };
    let mut parts = vec![part("Task", asked.first())];
    if asked.len() > 1 {
        parts.push(part("Last request", asked.last()));
    }
    parts.push(part("Last answer", answered.last()));
    parts.into_iter().flatten().collect::<Vec<_>>().join("\n")
}

/// A note as stored: redacted of anything credential-shaped, then cut to [`NOTE_MAX_CHARS`]
/// (in that order, so a cut never leaves part of a key that no longer looks like one).
pub fn finish_note(text: &str) -> String {
    clip(redact(text.trim()).trim(), NOTE_MAX_CHARS)
}

/// Most uncommitted files a note names; the rest are counted.
pub const STATE_MAX_FILES: usize = 20;

/// Most characters of each name in the workspace state (a branch, a commit subject, a path).
pub const STATE_NAME_CHARS: usize = 120;

/// Where the work stands in a git work tree when a note is written, read by the daemon (the
/// model is not asked, so it cannot get it wrong).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceState {
    /// `None` when HEAD is detached.
    pub branch: Option<String>,
    /// The short hash and subject of the last commit; `None` before the first.
    pub last_commit: Option<String>,
    /// Files with changes not committed (untracked ones included), as `git status` lists them.
    pub uncommitted: Vec<String>,
}

/// The lines a note ends with: the branch, the last commit and the uncommitted files, at most
/// [`STATE_MAX_FILES`] named, then how many more. Each name is redacted, then cut.
pub fn describe_state(state: &WorkspaceState) -> String {
    let name = |text: &str| clip(&redact(text), STATE_NAME_CHARS);
    let mut lines = vec!["Where the work stands (git):".to_string()];
    lines.push(match &state.branch {
        Some(branch) => format!("- branch: {}", name(branch)),
        None => "- branch: none (detached HEAD)".to_string(),
    });
    lines.push(match &state.last_commit {
        Some(commit) => format!("- last commit: {}", name(commit)),
        None => "- last commit: none yet".to_string(),
    });
    let files = &state.uncommitted;
    lines.push(match files.len() {
        0 => "- uncommitted files: none".to_string(),
        n => {
            let named: Vec<String> = files
                .iter()
                .take(STATE_MAX_FILES)
                .map(|f| name(f))
                .collect();
            let more = match n.saturating_sub(STATE_MAX_FILES) {
                0 => String::new(),
                more => format!(" and {more} more"),
            };
            format!("- uncommitted files ({n}): {}{more}", named.join(", "))
        }
    });
    lines.join("\n")
}

/// A finished note with the workspace's state after it, when there is one.
pub fn with_state(note: String, state: Option<&WorkspaceState>) -> String {
    match state {
        Some(state) => format!("{note}\n\n{}", describe_state(state)),
        None => note,
    }
}

/// `text` without URLs (and the space they leave).
pub fn strip_urls(text: &str) -> String {
    static URL: OnceLock<Regex> = OnceLock::new();
    let url = URL.get_or_init(|| {
        Regex::new(r"(?i)\b(https?|ftp|wss?|file)://[^\s<>()\[\]]+|\bwww\.[^\s<>()\[\]]+")
            .expect("a valid pattern")
    });
    let stripped = url.replace_all(text, "");
    stripped
        .split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` cut to at most `max` characters, an ellipsis marking the cut.
pub fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    // A cut inside a redaction marker leaves none of it (rather than `[red…`).
    if let Some(open) = out.rfind('[')
        && REDACTED.starts_with(&out[open..])
        && text[open..].starts_with(REDACTED)
        && out.len() - open < REDACTED.len()
    {
        out.truncate(open);
    }
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Counted;
    use crate::protocol::{MessageStatus, TranscriptEntry};
    use pretty_assertions::assert_eq;

    fn stored(seq: u64, role: Role, blocks: Vec<Block>) -> Stored {
        Stored {
            entry: TranscriptEntry {
                id: format!("msg_{seq}"),
                seq,
                role,
                blocks,
                status: MessageStatus::Complete,
                run_id: None,
                created_at: String::new(),
                rewound: false,
            },
            tokens: Counted::ZERO,
        }
    }

    fn text(seq: u64, role: Role, text: &str) -> Stored {
        stored(seq, role, vec![Block::Text { text: text.into() }])
    }

    fn conversation() -> Vec<Stored> {
        vec![
            text(
                1,
                Role::User,
                "Port the parser to nom, see https://docs.rs/nom and keep the API",
            ),
            stored(
                2,
                Role::Assistant,
                vec![
                    Block::Text {
                        text: "Reading it.".into(),
                    },
                    Block::ToolCall {
                        id: "c1".into(),
                        name: "read_file".into(),
                        input: serde_json::json!({"path": "src/parse.rs"}),
                    },
                ],
            ),
            stored(
                3,
                Role::Tool,
                vec![Block::ToolResult {
                    call_id: "c1".into(),
                    output: "fn parse() { SECRET TOOL OUTPUT }".into(),
                    is_error: false,
                    status: crate::protocol::ToolCallStatus::Done,
                }],
            ),
            text(4, Role::Assistant, "The parser is ported; tests pass."),
            text(5, Role::Note, "Cost of this session: $0.01"),
            text(
                6,
                Role::User,
                "Now the error messages, www.example.com/errors has the list",
            ),
            text(7, Role::Assistant, "Done: errors name the line and column."),
        ]
    }

    #[test]
    fn the_writer_sees_user_and_assistant_text_and_tool_names_never_results() {
        assert_eq!(
            note_source(&conversation()),
            "User: Port the parser to nom, see https://docs.rs/nom and keep the API\n\n\
             Assistant: Reading it.\n\n\
             Assistant: The parser is ported; tests pass.\n\n\
             User: Now the error messages, www.example.com/errors has the list\n\n\
             Assistant: Done: errors name the line and column.\n\n\
             Tools called: read_file"
        );
    }

    #[test]
    fn the_writer_sees_only_the_newest_characters() {
        let long: Vec<Stored> = (1..=100)
            .map(|i| text(i, Role::User, &format!("{i:03} {}", "x".repeat(996))))
            .collect();
        let source = note_source(&long);
        assert_eq!(source.chars().count(), SOURCE_CHARS);
        assert!(source.ends_with(&format!("User: 100 {}", "x".repeat(996))));
        assert!(source.starts_with('…') && !source.contains("User: 076"));
    }

    #[test]
    fn a_copied_note_has_the_task_the_last_request_and_the_last_answer_without_urls() {
        assert_eq!(
            copied_note(&conversation()),
            "Task: Port the parser to nom, see and keep the API\n\
             Last request: Now the error messages, has the list\n\
             Last answer: Done: errors name the line and column."
        );
        let long = vec![
            text(1, Role::User, &"a".repeat(1_000)),
            text(2, Role::Assistant, &"b".repeat(1_000)),
        ];
        let note = copied_note(&long);
        let parts: Vec<usize> = note.lines().map(|l| l.chars().count()).collect();
        assert_eq!(
            parts,
            vec!["Task: ".len() + 400, "Last answer: ".len() + 400]
        );
    }

    #[test]
    fn a_note_is_redacted_then_cut() {
        let key = "sk-ant-api03-kJ8hG7fD6sA5pO4iU3yT2rE1wQ0_zXcVbNmLkJhGf-AbCdEfGh";
        let note = finish_note(&format!("Use {key} for the API. {}", "z".repeat(2_000)));
        assert!(note.starts_with("Use [redacted] for the API."), "{note}");
        assert_eq!(note.chars().count(), NOTE_MAX_CHARS);
        // A key at the cut is removed whole, not cut into a fragment that no longer matches.
        let at_cut = format!("{} {key}", "y".repeat(NOTE_MAX_CHARS - 20));
        assert!(!finish_note(&at_cut).contains("sk-ant"));
    }

    /// A copied note cuts each part at [`COPIED_PART_CHARS`]: a private key and an access key
    /// across that cut are removed whole, no prefix of them left before the ellipsis.
    #[test]
    fn a_copied_note_keeps_nothing_of_a_key_across_its_cut() {
        use crate::context::redact::fixtures::{AWS, PEM, leaks};
        // The key block starts early, so the cut falls inside it; the access key starts four
        // characters before the cut.
        let task = format!("Deploy with this key:\n{PEM}\nthen restart.");
        let answer = format!(
            "{} {AWS} is the access key.",
            "y".repeat(COPIED_PART_CHARS - 6)
        );
        let entries = vec![
            text(1, Role::User, &task),
            text(2, Role::Assistant, &answer),
        ];
        let note = finish_note(&copied_note(&entries));
        assert_eq!(leaks(&note), Vec::<String>::new(), "{note}");
        assert_eq!(
            note,
            format!(
                "Task: Deploy with this key:\n[redacted]\nthen restart.\nLast answer: {}…",
                "y".repeat(COPIED_PART_CHARS - 6)
            )
        );
    }

    /// The note's writer is shown the newest characters only: a key across that cut is removed
    /// before it, so no tail of it is left after the ellipsis.
    #[test]
    fn the_writers_source_keeps_nothing_of_a_key_across_its_cut() {
        use crate::context::redact::fixtures::{AWS, PEM, leaks};
        // Unredacted, the newest SOURCE_CHARS - 1 characters would hold the second half of
        // the key, then a space and the filler.
        let key_and_filler = |secret: &str| {
            let filler = SOURCE_CHARS - 2 - secret.len() / 2;
            format!("{secret} {}", "z".repeat(filler))
        };
        for secret in [PEM, AWS] {
            let entries = vec![text(1, Role::User, &key_and_filler(secret))];
            let source = note_source(&entries);
            assert_eq!(leaks(&source), Vec::<String>::new(), "{source}");
        }
    }

    #[test]
    fn a_note_ends_with_where_the_work_stands() {
        let files: Vec<String> = (1..=23).map(|i| format!("src/f{i:02}.rs")).collect();
        let state = WorkspaceState {
            branch: Some("feature/notes".into()),
            last_commit: Some("a1b2c3d Keep the note AKIAIOSFODNN7EXAMPLE".into()),
            uncommitted: files.clone(),
        };
        assert_eq!(
            with_state("The note.".into(), Some(&state)),
            format!(
                "The note.\n\nWhere the work stands (git):\n- branch: feature/notes\n\
                 - last commit: a1b2c3d Keep the note [redacted]\n\
                 - uncommitted files (23): {} and 3 more",
                files[..20].join(", ")
            )
        );
        let bare = WorkspaceState {
            branch: None,
            last_commit: None,
            uncommitted: Vec::new(),
        };
        assert_eq!(
            describe_state(&bare),
            "Where the work stands (git):\n- branch: none (detached HEAD)\n\
             - last commit: none yet\n- uncommitted files: none"
        );
        assert_eq!(with_state("The note.".into(), None), "The note.");
    }

    #[test]
    fn rollover_periods() {
        let ok = ["off", "OFF", "90s", "30m", "3h", "1d", "7d"];
        assert_eq!(
            ok.iter()
                .map(|t| parse_rollover(t).unwrap())
                .collect::<Vec<_>>(),
            vec![
                None,
                None,
                Some(90),
                Some(1_800),
                Some(10_800),
                Some(86_400),
                Some(604_800)
            ]
        );
        for bad in [
            "",
            "3",
            "h",
            "0h",
            "-1h",
            "+1h",
            "1.5h",
            "3 h",
            "1w",
            "soon",
            "99999999999999999d",
        ] {
            let error = parse_rollover(bad).unwrap_err();
            assert!(
                error.starts_with("rollover must be off or"),
                "{bad}: {error}"
            );
        }
        assert_eq!(
            [90, 1_800, 10_800, 86_400, 604_800, 90_000].map(format_rollover),
            ["90s", "30m", "3h", "1d", "7d", "25h"]
        );
    }
}
