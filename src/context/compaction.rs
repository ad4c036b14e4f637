//! Planning a compaction: which of the oldest turns to fold so the history fits its share, and
//! what the summariser is shown of them.
//!
//! Pure and deterministic; the runtime makes the summary request and stores the result.

use super::projection::{Projection, Stored, brief_line};
use super::redact::redact;
use super::tokens::{Counted, Part, TokenCounter};
use crate::protocol::{Block, CompactionMethod, CompactionReason, Role};

/// Tokens a dropped-range marker takes, rounded up generously.
pub const DROP_MARKER_TOKENS: u64 = 40;

/// Most tokens a summary may have.
pub const SUMMARY_MAX_OUTPUT: u64 = 2_048;

/// Fewest output tokens worth asking a summariser for.
pub const SUMMARY_MIN_OUTPUT: u64 = 256;

/// Why a compaction happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The history passed its share of the window.
    Share,
    /// The request would not fit the window.
    Window,
    /// The user asked (`/compact`).
    Command,
}

impl From<Reason> for CompactionReason {
    fn from(reason: Reason) -> Self {
        match reason {
            Reason::Share => CompactionReason::Share,
            Reason::Window => CompactionReason::Window,
            Reason::Command => CompactionReason::Command,
        }
    }
}

/// What to fold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The folded range by `seq`, inclusive; it starts where the summary in force started.
    pub from_seq: u64,
    pub to_seq: u64,
    /// Messages in the range, those the summary in force stood for included.
    pub messages: u64,
    /// Where the turns to fold start: the `seq` of the first turn not already summarised.
    pub new_from_seq: u64,
    /// The summary entry in force, folded in too.
    pub summary_seq: Option<u64>,
    /// Tokens of the turns kept verbatim.
    pub kept_tokens: u64,
    /// What the history may fill after the compaction.
    pub target: u64,
}

/// Which oldest turns to fold so the history (summary and kept turns) fits `target`.
///
/// For a summary the newest turns are kept verbatim within half the target, leaving the rest
/// for the summary; for a drop, within the whole target less the marker. `/compact` folds the
/// whole history. `None` when nothing can be folded.
pub fn plan(
    projection: &Projection,
    target: u64,
    method: CompactionMethod,
    reason: Reason,
) -> Option<Plan> {
    let turns = &projection.turns;
    let keep_budget = match (reason, method) {
        (Reason::Command, _) => 0,
        (_, CompactionMethod::Drop) => target.saturating_sub(DROP_MARKER_TOKENS),
        _ => target / 2,
    };
    let mut kept = 0usize;
    let mut kept_tokens = 0u64;
    for turn in turns.iter().rev() {
        if kept_tokens + turn.tokens > keep_budget {
            break;
        }
        kept += 1;
        kept_tokens += turn.tokens;
    }
    let folded = &turns[..turns.len() - kept];
    let last = folded.last()?;
    let first = folded.first()?;
    let previous = projection.summary_range;
    let carried = previous.map_or(0, |p| p.messages);
    Some(Plan {
        from_seq: previous
            .and_then(|p| p.from_seq)
            .unwrap_or(first.first_seq)
            .min(first.first_seq),
        to_seq: last.last_seq,
        messages: carried + folded.iter().map(|t| t.messages).sum::<u64>(),
        new_from_seq: first.first_seq,
        summary_seq: previous.map(|p| p.seq),
        kept_tokens,
        target,
    })
}

/// What the summariser is asked.
pub fn instructions(focus: Option<&str>, max_words: u64) -> String {
    let mut text = format!(
        "Summarise the conversation below so that it can go on from your summary alone; the \
         messages themselves will no longer be available. Keep: the decisions made and why; open \
         threads and unanswered questions; the files touched (their paths) and what changed in \
         them; what is to be done next; and what the user asked for, quoting the user's own \
         words. Leave out pleasantries and anything settled that no longer matters. Use at most \
         about {max_words} words and write the summary only."
    );
    if let Some(focus) = focus.filter(|f| !f.trim().is_empty()) {
        text.push_str(&format!(
            "\nThe user asks you to pay particular attention to: {}",
            focus.trim()
        ));
    }
    text
}

/// The folded range as plain text for the summariser: the summary in force, then each message
/// of the range, tool results as one line each (they are the bulk and the least worth keeping).
/// Redacted, since [`fit_text`] may cut it anywhere and the summary is sent again and again.
pub fn source_text(entries: &[Stored], plan: &Plan) -> String {
    let mut lines = Vec::new();
    let calls: std::collections::HashMap<&str, (&str, &serde_json::Value)> = entries
        .iter()
        .flat_map(|s| s.entry.blocks.iter())
        .filter_map(|b| match b {
            Block::ToolCall { id, name, input } => Some((id.as_str(), (name.as_str(), input))),
            _ => None,
        })
        .collect();
    for stored in entries {
        let entry = &stored.entry;
        if entry.role == Role::Summary {
            if Some(entry.seq) == plan.summary_seq
                && let Some(Block::Summary { method, text, .. }) = entry.blocks.first()
            {
                lines.insert(
                    0,
                    match method {
                        CompactionMethod::Drop => "[Earlier messages were left out.]".into(),
                        _ => format!("Summary of what came before:\n{text}"),
                    },
                );
            }
            continue;
        }
        if entry.seq < plan.new_from_seq || entry.seq > plan.to_seq {
            continue;
        }
        for block in &entry.blocks {
            let line = match (entry.role, block) {
                (Role::User, Block::Text { text }) => format!("User: {text}"),
                (Role::User, Block::Interjection { text, .. }) => {
                    format!("User (while the assistant worked): {text}")
                }
                (Role::User, Block::Attachment { name, text, .. }) => {
                    format!("User attached {name} ({} bytes)", text.len())
                }
                (Role::Assistant, Block::Text { text }) => format!("Assistant: {text}"),
                (Role::Assistant, Block::ToolCall { name, input, .. }) => {
                    format!("Assistant called {name} {input}")
                }
                (
                    Role::Tool,
                    Block::ToolResult {
                        call_id,
                        output,
                        is_error,
                        ..
                    },
                ) => brief_line(calls.get(call_id.as_str()), output, *is_error),
                _ => continue,
            };
            lines.push(line);
        }
    }
    redact(&lines.join("\n\n"))
}

/// A summary as stored: the summariser's text redacted of anything credential-shaped, since it
/// is sent with every later request.
pub fn finish_summary(text: &str) -> String {
    redact(text.trim()).trim().to_string()
}

/// `text` cut to at most `max_tokens`: its beginning (where the task was stated) and, mostly,
/// its end (the latest state), with a marker where the middle was left out.
pub fn fit_text(counter: TokenCounter, text: &str, max_tokens: u64) -> String {
    let mut fitted = text.to_string();
    for _ in 0..6 {
        let tokens = counter.count_text(&fitted).tokens;
        if tokens <= max_tokens {
            return fitted;
        }
        let chars: Vec<char> = fitted.chars().collect();
        let keep = ((chars.len() as f64) * (max_tokens as f64 / tokens as f64) * 0.9) as usize;
        let head = keep / 5;
        let tail = keep - head;
        fitted = format!(
            "{}\n[… the middle was left out …]\n{}",
            chars[..head].iter().collect::<String>(),
            chars[chars.len() - tail..].iter().collect::<String>()
        );
    }
    String::new()
}

/// The count of a user message holding `text`.
pub fn count_user(counter: TokenCounter, text: &str) -> Counted {
    counter.count_message("user", &[Part::Text(text)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::redact::fixtures::{AWS, PEM, leaks};
    use crate::protocol::{MessageStatus, TranscriptEntry};
    use pretty_assertions::assert_eq;

    fn text(seq: u64, role: Role, text: &str) -> Stored {
        Stored {
            entry: TranscriptEntry {
                id: format!("m{seq}"),
                seq,
                role,
                blocks: vec![Block::Text { text: text.into() }],
                status: MessageStatus::Complete,
                run_id: None,
                created_at: String::new(),
                rewound: false,
            },
            tokens: Counted::ZERO,
        }
    }

    /// The summariser's source is cut in the middle to fit its window; wherever that cut falls,
    /// no part of a key is left on either side of it, nor in the summary that comes back.
    #[test]
    fn the_summarisers_source_and_the_summary_keep_nothing_of_a_key() {
        let entries = vec![
            text(1, Role::User, &format!("Deploy with\n{PEM}\nand {AWS}.")),
            text(2, Role::Assistant, &format!("Deployed with {AWS}; {PEM}")),
        ];
        let plan = Plan {
            from_seq: 1,
            to_seq: 2,
            messages: 2,
            new_from_seq: 1,
            summary_seq: None,
            kept_tokens: 0,
            target: 1_000,
        };
        let source = source_text(&entries, &plan);
        assert_eq!(
            source,
            "User: Deploy with\n[redacted]\nand [redacted].\n\nAssistant: Deployed with [redacted]; [redacted]"
        );
        let counter = TokenCounter::for_model("gpt-4o");
        for max_tokens in 8..40 {
            let fitted = fit_text(counter, &source, max_tokens);
            assert_eq!(leaks(&fitted), Vec::<String>::new(), "{fitted}");
        }
        assert_eq!(
            finish_summary(&format!(
                " The user deploys with {AWS} and {}…",
                &PEM[..200]
            )),
            "The user deploys with [redacted] and [redacted]"
        );
    }
}
