//! What a model is sent: a projection of the stored transcript, never the transcript itself.
//!
//! The transcript keeps everything whole and readable; the projection
//! - sends the context's carry-over note first, as its own block, until it is deleted: what
//!   compactions fold or drop starts after it;
//! - leaves out notes and notices, and every entry folded into the newest `summary` entry, which is sent
//!   in their place, after the note;
//! - reduces tool results older than the newest two tool turns to one line each (tool, key
//!   argument, ok or failed, original size), except those of the run being answered, which
//!   stay whole as long as the request fits;
//! - adds the interjections leased into the request to its last user turn.
//!
//! It is a pure function of the transcript (and the run it is for), so the same transcript
//! always gives the same request and providers' prompt caches stay warm. Its counts come from
//! the per-message counts stored with the transcript; only the one-line reductions, which are
//! short, are counted here.

use serde_json::Value;

use super::budget::HistoryTally;
use super::redact::redact;
use super::tokens::{Counted, Part, TokenCounter};
use crate::protocol::{Block, CompactionMethod, Role, TranscriptEntry};
use crate::provider::{ModelContent, ModelMessage, ModelRole};

/// How many of the newest tool turns keep their results whole.
pub const WHOLE_TOOL_TURNS: usize = 2;

/// A stored entry with its stored token count.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub entry: TranscriptEntry,
    pub tokens: Counted,
}

/// What a projection is made for.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The run the request belongs to; its tool results stay whole while they fit.
    pub current_run: Option<&'a str>,
    /// Input leased into this request, as the model reads it ([`leased_texts`]): each
    /// interjection in the user's words, followed by what its mentions attached.
    pub interjections: &'a [String],
    pub counter: TokenCounter,
    /// Room for the messages: the usable window less system prompt, tools and reply priming.
    pub room: u64,
}

/// One turn of the history: a user message and everything that answered it. Turns are the
/// unit of folding, so a tool call is never separated from its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    pub first_seq: u64,
    pub last_seq: u64,
    pub messages: u64,
    /// Tokens as projected.
    pub tokens: u64,
}

/// The projection and its counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    pub messages: Vec<ModelMessage>,
    /// Everything sent before the current turn, the summary included.
    pub history: HistoryTally,
    /// The part of `history` that is the carry-over note and the summary (or dropped-range
    /// marker) in force.
    pub summary: Counted,
    /// The part of `summary` that is the carry-over note, which no compaction folds.
    pub note: Counted,
    /// The current turn: the user message being answered, the run's own steps so far and the
    /// leased interjections. Zero when the model answered last.
    pub latest: Counted,
    /// The user message that opens the current turn, alone.
    pub latest_message: Counted,
    /// The newest summary entry in force: its `seq` range and message count, if any.
    pub summary_range: Option<FoldedRange>,
    /// The turns of the history after the summary, oldest first.
    pub turns: Vec<Turn>,
    /// Tool messages whose results were reduced to one line.
    pub reduced: usize,
}

/// A range the summary in force stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldedRange {
    pub method: CompactionMethod,
    pub from_seq: Option<u64>,
    pub to_seq: Option<u64>,
    pub messages: u64,
    pub seq: u64,
}

impl Projection {
    /// Tokens of all messages.
    pub fn tokens(&self) -> u64 {
        self.history.tokens() + self.latest.tokens
    }
}

/// How the model reads a message the user typed while it worked.
pub fn interjection_text(text: &str) -> String {
    format!("The user adds: {text}")
}

/// How the model reads a `summary` entry.
pub fn summary_text(method: CompactionMethod, text: &str, messages: u64) -> String {
    match method {
        CompactionMethod::Summary => {
            format!("Summary of the earlier conversation ({messages} messages):\n{text}")
        }
        CompactionMethod::Drop => {
            format!("[{messages} earlier messages were left out here to fit the context window.]")
        }
        CompactionMethod::CarryOver => {
            format!("Notes carried over from an earlier conversation:\n{text}")
        }
    }
}

/// The count of a `summary` entry as the model reads it.
pub fn count_summary(counter: TokenCounter, block: &Block) -> Counted {
    match block {
        Block::Summary {
            method,
            text,
            messages,
            ..
        } => counter.count_message(
            "user",
            &[Part::Text(&summary_text(*method, text, *messages))],
        ),
        _ => Counted::ZERO,
    }
}

/// Projects `entries` (everything after the session's context start, oldest first).
pub fn project(entries: &[Stored], request: Request<'_>) -> Projection {
    let note = entries
        .iter()
        .rfind(|s| is_carry_over(&s.entry))
        .filter(|s| !is_deleted(&s.entry));
    let summary = entries
        .iter()
        .rfind(|s| s.entry.role == Role::Summary && !is_carry_over(&s.entry));
    let folded_to = summary
        .and_then(|s| folded(&s.entry))
        .and_then(|r| r.to_seq);
    let body: Vec<&Stored> = entries
        .iter()
        .filter(|s| matches!(s.entry.role, Role::User | Role::Assistant | Role::Tool))
        .filter(|s| folded_to.is_none_or(|to| s.entry.seq > to))
        .collect();

    // Turns: each starts at a user message the user typed (not an interjection delivered
    // inside a run).
    let mut starts: Vec<usize> = body
        .iter()
        .enumerate()
        .filter(|(_, s)| opens_turn(&s.entry))
        .map(|(i, _)| i)
        .collect();
    if starts.first() != Some(&0) && !body.is_empty() {
        starts.insert(0, 0);
    }
    let answered = body.last().is_some_and(|s| s.entry.role == Role::Assistant);
    let current_from = match (request.current_run.is_some() || !answered, starts.last()) {
        (true, Some(&start)) => start,
        _ => body.len(),
    };

    // Which tool messages are reduced: all but the newest two, outside the current turn.
    let tool_positions: Vec<usize> = (0..body.len())
        .filter(|&i| body[i].entry.role == Role::Tool)
        .collect();
    let whole_from = tool_positions.len().saturating_sub(WHOLE_TOOL_TURNS);
    let mut reduce = vec![false; body.len()];
    for &i in &tool_positions[..whole_from] {
        reduce[i] = i < current_from;
    }
    let calls = call_index(&body);
    let counter = request.counter;
    let brief_count = |i: usize| -> Counted {
        let lines: Vec<String> = brief_results(&body[i].entry, &calls);
        let parts: Vec<Part<'_>> = lines.iter().map(|l| Part::Text(l)).collect();
        counter.count_message("tool", &parts)
    };
    let mut counts: Vec<Counted> = (0..body.len())
        .map(|i| match reduce[i] {
            true => brief_count(i),
            false => body[i].tokens,
        })
        .collect();

    let interjections: Vec<String> = request.interjections.to_vec();
    let leased = interjections
        .iter()
        .map(|t| counter.count_message("user", &[Part::Text(t)]))
        .fold(Counted::ZERO, |a, b| a + b);
    let note_count = note.map_or(Counted::ZERO, |s| s.tokens);
    let summary_count = summary.map_or(Counted::ZERO, |s| s.tokens) + note_count;
    let total = |counts: &[Counted]| -> u64 {
        summary_count.tokens + counts.iter().map(|c| c.tokens).sum::<u64>() + leased.tokens
    };
    // The current turn's own older results give way, oldest first, only when it does not fit.
    for &i in &tool_positions[..whole_from] {
        if total(&counts) <= request.room {
            break;
        }
        if i >= current_from && !reduce[i] {
            reduce[i] = true;
            counts[i] = brief_count(i);
        }
    }

    let mut history = HistoryTally::new();
    for stood_for in [note, summary].into_iter().flatten() {
        history.add(stood_for.tokens);
    }
    counts[..current_from].iter().for_each(|c| history.add(*c));
    let latest = counts[current_from..].iter().fold(leased, |a, b| a + *b);
    let latest_message = match body.get(current_from) {
        Some(s) if opens_turn(&s.entry) => counts[current_from],
        _ => Counted::ZERO,
    };
    let turns = starts
        .iter()
        .enumerate()
        .map(|(n, &start)| (start, starts.get(n + 1).copied().unwrap_or(body.len())))
        .filter(|&(start, _)| start < current_from)
        .map(|(start, end)| Turn {
            first_seq: body[start].entry.seq,
            last_seq: body[end - 1].entry.seq,
            messages: (end - start) as u64,
            tokens: counts[start..end].iter().map(|c| c.tokens).sum(),
        })
        .collect();

    let mut messages = Vec::new();
    for stood_for in [note, summary].into_iter().flatten() {
        if let Some(Block::Summary {
            method,
            text,
            messages: folded,
            ..
        }) = stood_for.entry.blocks.first()
        {
            push(
                &mut messages,
                ModelRole::User,
                vec![ModelContent::Text {
                    text: summary_text(*method, text, *folded),
                }],
            );
        }
    }
    for (i, stored) in body.iter().enumerate() {
        let entry = &stored.entry;
        let role = match entry.role {
            Role::Assistant => ModelRole::Assistant,
            _ => ModelRole::User,
        };
        let content: Vec<ModelContent> = match reduce[i] {
            true => entry
                .blocks
                .iter()
                .filter_map(|block| match block {
                    Block::ToolResult {
                        call_id,
                        output,
                        is_error,
                        ..
                    } => Some(ModelContent::ToolResult {
                        call_id: call_id.clone(),
                        output: brief_line(calls.get(call_id.as_str()), output, *is_error),
                        is_error: *is_error,
                    }),
                    other => content(other),
                })
                .collect(),
            false => model_blocks(&entry.blocks).filter_map(content).collect(),
        };
        push(&mut messages, role, content);
    }
    if !interjections.is_empty() {
        let texts = interjections
            .into_iter()
            .map(|text| ModelContent::Text { text })
            .collect();
        push(&mut messages, ModelRole::User, texts);
    }
    Projection {
        messages,
        history,
        summary: summary_count,
        note: note_count,
        latest,
        latest_message,
        summary_range: summary.and_then(|s| folded(&s.entry)),
        turns,
        reduced: reduce.iter().filter(|r| **r).count(),
    }
}

/// Appends a message, merging it into the previous one of the same role; a transcript never
/// starts with the assistant, so such a leftover is dropped.
fn push(messages: &mut Vec<ModelMessage>, role: ModelRole, content: Vec<ModelContent>) {
    if content.is_empty() {
        return;
    }
    match messages.last_mut() {
        Some(last) if last.role == role => last.content.extend(content),
        None if role == ModelRole::Assistant => {}
        _ => messages.push(ModelMessage { role, content }),
    }
}

/// Whether a user message opens a turn (rather than carrying interjections, with the files
/// their mentions attached, into a run).
fn opens_turn(entry: &TranscriptEntry) -> bool {
    entry.role == Role::User
        && entry.blocks.iter().any(|b| {
            !matches!(
                b,
                Block::Interjection {
                    promoted: false,
                    ..
                } | Block::Attachment { .. }
            )
        })
}

/// Whether an entry is a carry-over note (deleted or not).
fn is_carry_over(entry: &TranscriptEntry) -> bool {
    entry.role == Role::Summary
        && matches!(
            entry.blocks.first(),
            Some(Block::Summary {
                method: CompactionMethod::CarryOver,
                ..
            })
        )
}

/// A carry-over note the user deleted: never sent again.
fn is_deleted(entry: &TranscriptEntry) -> bool {
    matches!(entry.blocks.first(), Some(Block::Summary { method: CompactionMethod::CarryOver, text, .. }) if text.is_empty())
}

/// The range a summary entry stands for.
pub fn folded(entry: &TranscriptEntry) -> Option<FoldedRange> {
    match entry.blocks.first() {
        Some(Block::Summary {
            method,
            from_seq,
            to_seq,
            messages,
            ..
        }) if entry.role == Role::Summary => Some(FoldedRange {
            method: *method,
            from_seq: *from_seq,
            to_seq: *to_seq,
            messages: *messages,
            seq: entry.seq,
        }),
        _ => None,
    }
}

type Calls<'a> = std::collections::HashMap<&'a str, (&'a str, &'a Value)>;

fn call_index<'a>(body: &[&'a Stored]) -> Calls<'a> {
    body.iter()
        .flat_map(|s| s.entry.blocks.iter())
        .filter_map(|b| match b {
            Block::ToolCall { id, name, input } => Some((id.as_str(), (name.as_str(), input))),
            _ => None,
        })
        .collect()
}

fn brief_results(entry: &TranscriptEntry, calls: &Calls<'_>) -> Vec<String> {
    entry
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } => Some(brief_line(calls.get(call_id.as_str()), output, *is_error)),
            _ => None,
        })
        .collect()
}

/// The arguments that say what a call was about, in order of preference.
const KEY_ARGUMENTS: &[&str] = &["path", "command", "pattern", "query", "url", "name"];

/// Longest key argument kept in a one-line result, in characters.
const KEY_ARGUMENT_CHARS: usize = 120;

/// One line standing for an older tool result.
pub fn brief_line(call: Option<&(&str, &Value)>, output: &str, is_error: bool) -> String {
    let (name, input) = call.map_or(("tool", &Value::Null), |(n, i)| (*n, *i));
    let key = KEY_ARGUMENTS
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(|v| {
            // Redacted before the cut, so that the cut leaves no part of a key.
            let one_line = redact(&v.replace(['\n', '\r'], " "));
            match one_line.chars().count() > KEY_ARGUMENT_CHARS {
                true => format!(
                    " {}…",
                    one_line
                        .chars()
                        .take(KEY_ARGUMENT_CHARS)
                        .collect::<String>()
                ),
                false => format!(" {one_line}"),
            }
        })
        .unwrap_or_default();
    let outcome = if is_error { "failed" } else { "ok" };
    format!(
        "[earlier result of {name}{key}: {outcome}, {} bytes; left out to save context, call the tool again to see it]",
        thousands(output.len())
    )
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What the model reads for an attachment: its name (and the lines, for a range), then its text.
pub fn attachment_text(
    name: &str,
    range: Option<crate::protocol::LineRange>,
    text: &str,
) -> String {
    match range {
        Some(r) if r.start == r.end => format!("Attached {name} (line {}):\n{text}", r.start),
        Some(r) => format!("Attached {name} (lines {}-{}):\n{text}", r.start, r.end),
        None => format!("Attached {name}:\n{text}"),
    }
}

/// The blocks of a message the model reads: all of them, except the typed text of a custom
/// command's message, whose `Command` block stands for it.
pub fn model_blocks(blocks: &[Block]) -> impl Iterator<Item = &Block> {
    let command = blocks.iter().any(|b| matches!(b, Block::Command { .. }));
    blocks
        .iter()
        .filter(move |b| !(command && matches!(b, Block::Text { .. })))
}

/// How the model reads input leased into a request: the texts its blocks (each interjection,
/// then its attachments) give once delivered into the transcript, so the request that carries
/// them and every later one read the same.
pub fn leased_texts(blocks: &[Block]) -> Vec<String> {
    blocks
        .iter()
        .filter_map(content)
        .filter_map(|c| match c {
            ModelContent::Text { text } => Some(text),
            _ => None,
        })
        .collect()
}

fn content(block: &Block) -> Option<ModelContent> {
    match block {
        Block::Text { text } if text.trim().is_empty() => None,
        Block::Text { text } => Some(ModelContent::Text { text: text.clone() }),
        Block::Thinking { text, signature } => Some(ModelContent::Thinking {
            text: text.clone(),
            signature: signature.clone(),
        }),
        Block::ToolCall { id, name, input } => Some(ModelContent::ToolCall {
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
        }),
        Block::ToolResult {
            call_id,
            output,
            is_error,
            ..
        } => Some(ModelContent::ToolResult {
            call_id: call_id.clone(),
            output: output.clone(),
            is_error: *is_error,
        }),
        // A promoted interjection is the user's turn, not an aside.
        Block::Interjection {
            text,
            promoted: true,
            ..
        } => Some(ModelContent::Text { text: text.clone() }),
        Block::Interjection { text, .. } => Some(ModelContent::Text {
            text: interjection_text(text),
        }),
        Block::Attachment {
            name, text, range, ..
        } => Some(ModelContent::Text {
            text: attachment_text(name, *range, text),
        }),
        Block::Command { prompt, .. } => Some(ModelContent::Text {
            text: prompt.clone(),
        }),
        Block::Image {
            image_id,
            media_type,
            width,
            height,
            ..
        } => Some(ModelContent::Image {
            image_id: image_id.clone(),
            media_type: media_type.clone(),
            width: *width,
            height: *height,
            data: String::new(),
        }),
        Block::Notice { .. } | Block::Summary { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{MessageStatus, ToolCallStatus};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    const MODEL: &str = "gpt-4o";

    /// Builds a transcript; each entry counted as the runtime counts it when committing.
    struct Transcript {
        entries: Vec<Stored>,
    }

    impl Transcript {
        fn new() -> Self {
            Self {
                entries: Vec::new(),
            }
        }

        fn push(&mut self, role: Role, run: Option<&str>, blocks: Vec<Block>) -> &mut Self {
            let seq = self.entries.len() as u64 + 1;
            let tokens = crate::runtime::count_blocks(MODEL, role, &blocks);
            self.entries.push(Stored {
                entry: TranscriptEntry {
                    id: format!("m{seq}"),
                    seq,
                    role,
                    blocks,
                    status: MessageStatus::Complete,
                    run_id: run.map(str::to_string),
                    created_at: String::new(),
                    rewound: false,
                },
                tokens,
            });
            self
        }

        fn user(&mut self, text: &str) -> &mut Self {
            self.push(Role::User, None, vec![text_block(text)])
        }

        fn note(&mut self, text: &str) -> &mut Self {
            self.push(Role::Note, None, vec![text_block(text)])
        }

        /// One tool step of `run`: the call, then its result.
        fn tool_step(&mut self, run: &str, id: &str, path: &str, output: &str) -> &mut Self {
            self.push(
                Role::Assistant,
                Some(run),
                vec![Block::ToolCall {
                    id: id.into(),
                    name: "read_file".into(),
                    input: json!({"path": path}),
                }],
            );
            self.push(
                Role::Tool,
                Some(run),
                vec![Block::ToolResult {
                    call_id: id.into(),
                    output: output.into(),
                    is_error: false,
                    status: ToolCallStatus::Done,
                }],
            )
        }

        fn answer(&mut self, run: &str, text: &str) -> &mut Self {
            self.push(Role::Assistant, Some(run), vec![text_block(text)])
        }

        fn summary(&mut self, method: CompactionMethod, text: &str, to: u64) -> &mut Self {
            self.push(
                Role::Summary,
                None,
                vec![Block::Summary {
                    method,
                    text: text.into(),
                    from_seq: Some(1),
                    to_seq: Some(to),
                    messages: to,
                }],
            )
        }
    }

    fn text_block(t: &str) -> Block {
        Block::Text { text: t.into() }
    }

    fn request<'a>(run: Option<&'a str>, interjections: &'a [String]) -> Request<'a> {
        Request {
            current_run: run,
            interjections,
            counter: TokenCounter::for_model(MODEL),
            room: 100_000,
        }
    }

    /// A session of two earlier runs that read files, a note, and a current run with an
    /// interjection delivered and one leased.
    fn long_session() -> Transcript {
        let mut t = Transcript::new();
        t.user("Read the three config files and tell me which sets the port.")
            .tool_step("r1", "c1", "config/a.toml", &"port = 1\n".repeat(400))
            .tool_step("r1", "c2", "config/b.toml", &"host = \"x\"\n".repeat(300))
            .tool_step("r1", "c3", "config/c.toml", "")
            .answer("r1", "config/a.toml sets the port.")
            .note("Cost of this session: $0.0100")
            .user("Now check the tests.")
            .tool_step("r2", "c4", "tests/port.rs", &"#[test]\n".repeat(50))
            .answer("r2", "The tests cover it.")
            .user("Change the port to 8080 in all of them.")
            .tool_step("r3", "c5", "config/a.toml", "port = 1")
            .tool_step("r3", "c6", "config/b.toml", "host = \"x\"")
            .push(
                Role::User,
                Some("r3"),
                vec![Block::Interjection {
                    pending_id: "p1".into(),
                    text: "and in the README".into(),
                    promoted: false,
                }],
            )
            .tool_step("r3", "c7", "README.md", &"Port: 1\n".repeat(20));
        t
    }

    #[test]
    fn old_tool_results_become_one_line_and_the_current_run_stays_whole() {
        let t = long_session();
        let leased = vec![interjection_text("also the docs")];
        let projection = project(&t.entries, request(Some("r3"), &leased));
        insta::assert_json_snapshot!("projection_long_session", projection.messages);
        // r1's results and r2's are older than the newest two tool turns; r3's stay whole.
        assert_eq!(projection.reduced, 4);
        // The history is everything before the current turn, notes left out.
        assert_eq!(projection.turns.len(), 2);
        assert_eq!(
            projection.history.tokens(),
            projection.turns.iter().map(|t| t.tokens).sum::<u64>()
        );
    }

    #[test]
    fn the_same_transcript_gives_the_same_projection() {
        let t = long_session();
        let a = project(&t.entries, request(Some("r3"), &[]));
        let b = project(&t.entries.clone(), request(Some("r3"), &[]));
        assert_eq!(a, b);
    }

    #[test]
    fn counts_add_up_to_a_count_of_what_is_sent() {
        let t = long_session();
        let leased = vec![interjection_text("also the docs")];
        let projection = project(&t.entries, request(Some("r3"), &leased));
        // Every projected message counted on its own, as the entries and leased input are.
        let counter = TokenCounter::for_model(MODEL);
        let mut reduced_lines = 0;
        for message in &projection.messages {
            for content in &message.content {
                if let ModelContent::ToolResult { output, .. } = content
                    && output.starts_with("[earlier result of")
                {
                    reduced_lines += 1;
                    assert!(counter.count_text(output).tokens < 40, "{output}");
                }
            }
        }
        assert_eq!(reduced_lines, 4);
        let whole: u64 = t
            .entries
            .iter()
            .filter(|s| s.entry.role != Role::Note)
            .map(|s| s.tokens.tokens)
            .sum();
        assert!(
            projection.tokens() < whole / 3,
            "{} of {whole}",
            projection.tokens()
        );
        assert_eq!(
            projection.latest.tokens,
            t.entries[13..].iter().map(|s| s.tokens.tokens).sum::<u64>()
                + counter
                    .count_message("user", &[Part::Text("The user adds: also the docs")])
                    .tokens
        );
    }

    #[test]
    fn the_current_runs_older_results_give_way_only_when_it_does_not_fit() {
        let mut t = Transcript::new();
        t.user("Read everything.");
        for i in 0..5 {
            t.tool_step(
                "r1",
                &format!("c{i}"),
                &format!("f{i}.rs"),
                &"x = 1;\n".repeat(2_000),
            );
        }
        let whole = project(&t.entries, request(Some("r1"), &[]));
        assert_eq!(whole.reduced, 0);
        let mut tight = request(Some("r1"), &[]);
        tight.room = whole.tokens() / 2;
        let fitted = project(&t.entries, tight);
        assert!(fitted.tokens() <= tight.room);
        // Oldest first, and only as many as needed: here three of the five.
        assert_eq!(fitted.reduced, 3);
    }

    #[test]
    fn a_summary_stands_for_what_it_folded() {
        let mut t = long_session();
        t.answer("r3", "Done: the port is 8080 everywhere.");
        // Folds the first two turns (seq 1 to 13); a note after it stays out.
        t.summary(
            CompactionMethod::Summary,
            "The user asked \"which sets the port\": config/a.toml. Tests cover it.",
            13,
        )
        .note("a note")
        .user("Thanks. Anything else?");
        let projection = project(&t.entries, request(None, &[]));
        insta::assert_json_snapshot!("projection_with_summary", projection.messages);
        assert_eq!(
            projection.summary_range.map(|r| (r.from_seq, r.to_seq)),
            Some((Some(1), Some(13)))
        );
        assert_eq!(projection.summary, t.entries[22].tokens);
    }

    /// A carry-over note opens its context and is sent first, as a block of its own, after
    /// any compaction of what followed it, by summary or by drop; deleted, it is not sent.
    #[test]
    fn a_carry_over_note_is_sent_first_whatever_is_folded_after_it() {
        let note = |t: &mut Transcript, text: &str| {
            t.push(
                Role::Summary,
                None,
                vec![Block::Summary {
                    method: CompactionMethod::CarryOver,
                    text: text.into(),
                    from_seq: None,
                    to_seq: None,
                    messages: 4,
                }],
            );
        };
        let folded = |t: &mut Transcript, method: CompactionMethod, text: &str| {
            t.push(
                Role::Summary,
                None,
                vec![Block::Summary {
                    method,
                    text: text.into(),
                    from_seq: Some(2),
                    to_seq: Some(5),
                    messages: 4,
                }],
            );
        };
        let sent = |t: &Transcript| -> (Vec<String>, Projection) {
            let projection = project(&t.entries, request(None, &[]));
            let first = projection.messages[0]
                .content
                .iter()
                .filter_map(|c| match c {
                    ModelContent::Text { text } => Some(text.clone()),
                    _ => None,
                })
                .collect();
            (first, projection)
        };
        for (method, marker) in [
            (
                CompactionMethod::Summary,
                "Summary of the earlier conversation (4 messages):\nThey counted.",
            ),
            (
                CompactionMethod::Drop,
                "[4 earlier messages were left out here to fit the context window.]",
            ),
        ] {
            let mut t = Transcript::new();
            note(&mut t, "Counting from one.");
            t.user("two")
                .answer("r1", "2")
                .user("three")
                .answer("r2", "3");
            folded(&mut t, method, "They counted.");
            t.user("four");
            let (first, projection) = sent(&t);
            assert_eq!(
                first,
                vec![
                    "Notes carried over from an earlier conversation:\nCounting from one."
                        .to_string(),
                    marker.to_string(),
                    "four".to_string()
                ],
                "{method:?}"
            );
            assert_eq!(projection.messages.len(), 1);
            assert_eq!(projection.note, t.entries[0].tokens);
            assert_eq!(
                projection.summary,
                t.entries[0].tokens + t.entries[5].tokens
            );
            assert_eq!(projection.history.tokens(), projection.summary.tokens);
            // The range to fold further is the summary's, never the note.
            assert_eq!(
                projection.summary_range.map(|r| (r.method, r.seq)),
                Some((method, 6))
            );

            // Deleted: only the summary (or marker) stands for what came before.
            if let Block::Summary { text, .. } = &mut t.entries[0].entry.blocks[0] {
                text.clear();
            }
            let (first, projection) = sent(&t);
            assert_eq!(first, vec![marker.to_string(), "four".to_string()]);
            assert_eq!(projection.note, Counted::ZERO);
        }
    }

    #[test]
    fn a_dropped_range_is_marked_and_a_deleted_note_never_sent() {
        let mut t = Transcript::new();
        t.user("first")
            .answer("r1", "one")
            .user("second")
            .answer("r2", "two")
            .summary(CompactionMethod::Drop, "", 2)
            .user("third");
        let projection = project(&t.entries, request(None, &[]));
        insta::assert_json_snapshot!("projection_with_dropped_range", projection.messages);

        let mut t = Transcript::new();
        t.summary(CompactionMethod::CarryOver, "", 0)
            .user("fresh start");
        let projection = project(&t.entries, request(None, &[]));
        assert_eq!(
            projection.messages,
            vec![ModelMessage {
                role: ModelRole::User,
                content: vec![ModelContent::Text {
                    text: "fresh start".into()
                }]
            }]
        );
        assert_eq!(projection.summary, Counted::ZERO);
    }

    /// A key argument is cut at KEY_ARGUMENT_CHARS: a key across that cut is removed whole.
    #[test]
    fn a_brief_line_keeps_nothing_of_a_key_across_its_cut() {
        use crate::context::redact::fixtures::{AWS, leaks};
        let command = format!("{} {AWS} deploy", "x".repeat(KEY_ARGUMENT_CHARS - 20));
        let input = json!({ "command": command });
        let line = brief_line(Some(&("run_command", &input)), "ok", false);
        assert_eq!(leaks(&line), Vec::<String>::new(), "{line}");
        assert!(line.contains(" [redacted] deploy: ok"), "{line}");
    }

    #[test]
    fn brief_lines_name_the_tool_its_argument_outcome_and_size() {
        let input = json!({"command": "cargo test\n--all", "timeout": 5});
        assert_eq!(
            brief_line(Some(&("run_command", &input)), &"x".repeat(12_345), true),
            "[earlier result of run_command cargo test --all: failed, 12,345 bytes; left out to save context, call the tool again to see it]"
        );
        assert_eq!(
            brief_line(None, "", false),
            "[earlier result of tool: ok, 0 bytes; left out to save context, call the tool again to see it]"
        );
    }
}
