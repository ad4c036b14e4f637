//! How events and stored entries look in the terminal: in plain words, whole lines at a time.
//!
//! Everything is drawn as complete lines handed to a [`Sink`], so a line editor can keep its
//! prompt below them and what the user is typing is never mixed into the streamed text. The
//! line a reply is streaming is held until it is complete; what shows while it streams (a
//! command's note, a waiting message's mark) goes between the reply's whole lines and never
//! ends the line being streamed.

use std::io::Write;
use std::path::PathBuf;

use serde_json::Value;

use super::markdown::Markdown;
use super::plural;
use super::style::{Paint, Style};
use crate::protocol::{
    ApprovalDecision, Block, CompactionMethod, Event, FinishReason, LineRange, MessageStatus,
    NoticeLevel, PendingApproval, Plan, PlanStepStatus, Pressure, Role, ToolCallStatus,
    TranscriptEntry,
};

/// Where drawn lines go: stdout, or above a line editor's prompt.
pub trait Sink: Send {
    /// Writes `lines`, each ending in a newline.
    fn lines(&mut self, lines: Vec<String>);
}

/// Lines straight to a writer (no prompt to keep).
pub struct Plain<W: Write + Send>(pub W);

impl<W: Write + Send> Sink for Plain<W> {
    fn lines(&mut self, lines: Vec<String>) {
        for line in lines {
            let _ = writeln!(self.0, "{line}");
        }
        let _ = self.0.flush();
    }
}

/// Draws a session: live events, and stored entries when it is reattached.
pub struct Screen {
    sink: Box<dyn Sink>,
    pub style: Style,
    show_thinking: bool,
    /// The folder the session's tools work in, to show what a write would change.
    workspace: Option<PathBuf>,
    /// The assistant message being streamed.
    text: Option<Markdown>,
    thinking: Thinking,
    /// The error last told in a notice, so the run's end does not repeat it.
    last_error: Option<String>,
    /// The run's answer failed before the model said anything: its end says how to ask again.
    unanswered: bool,
}

/// Streamed thinking: shown dimmed as it comes, or counted and folded to one line.
enum Thinking {
    None,
    Shown(Box<Markdown>),
    Folded { words: usize },
}

impl Screen {
    pub fn new(sink: Box<dyn Sink>, style: Style, show_thinking: bool) -> Self {
        Self {
            sink,
            style,
            show_thinking,
            workspace: None,
            text: None,
            thinking: Thinking::None,
            last_error: None,
            unanswered: false,
        }
    }

    pub fn set_workspace(&mut self, workspace: Option<&str>) {
        self.workspace = workspace.map(PathBuf::from);
    }

    pub fn set_sink(&mut self, sink: Box<dyn Sink>) {
        self.sink = sink;
    }

    pub fn line(&mut self, text: &str) {
        self.out(text.lines().map(str::to_string).collect());
    }

    /// A line in the given attributes.
    pub fn styled(&mut self, paints: &[Paint], text: &str) {
        let lines = text.lines().map(|l| self.style.paint(paints, l)).collect();
        self.out(lines);
    }

    pub fn lines(&mut self, lines: Vec<String>) {
        self.out(lines);
    }

    fn out(&mut self, lines: Vec<String>) {
        if !lines.is_empty() {
            self.sink.lines(lines);
        }
    }

    /// Draws what streamed so far of the message and thinking, before anything else shows.
    fn settle(&mut self) {
        let mut lines = self.close_thinking();
        if let Some(text) = self.text.as_mut() {
            lines.extend(text.finish());
        }
        self.out(lines);
    }

    fn close_thinking(&mut self) -> Vec<String> {
        match std::mem::replace(&mut self.thinking, Thinking::None) {
            Thinking::None => Vec::new(),
            Thinking::Shown(mut markdown) => self.dim_lines(markdown.finish()),
            Thinking::Folded { words } => vec![self.folded_thinking(words)],
        }
    }

    fn folded_thinking(&self, words: usize) -> String {
        self.style.paint(
            &[Paint::Dim, Paint::Italic],
            &format!(
                "  thought for {} (--show-thinking shows it)",
                plural(words as u64, "word", "words")
            ),
        )
    }

    fn dim_lines(&self, lines: Vec<String>) -> Vec<String> {
        lines
            .into_iter()
            .map(|l| self.style.paint(&[Paint::Dim], &l))
            .collect()
    }

    pub fn event(&mut self, event: &Event) {
        match event {
            Event::MessageStarted {
                role: Role::Assistant,
                ..
            } => {
                self.settle();
                self.text = None;
            }
            Event::ThinkingDelta { text, .. } => {
                if matches!(self.thinking, Thinking::None) {
                    self.thinking = match self.show_thinking {
                        true => {
                            Thinking::Shown(Box::new(Markdown::new(Style::plain(self.style.width))))
                        }
                        false => Thinking::Folded { words: 0 },
                    };
                }
                let lines = match &mut self.thinking {
                    Thinking::Shown(markdown) => markdown.push(text),
                    Thinking::Folded { words } => {
                        *words += text.split_whitespace().count();
                        Vec::new()
                    }
                    Thinking::None => Vec::new(),
                };
                let lines = self.dim_lines(lines);
                self.out(lines);
            }
            Event::TextDelta { text, .. } => {
                let mut lines = self.close_thinking();
                let style = self.style;
                let markdown = self.text.get_or_insert_with(|| Markdown::new(style));
                lines.extend(markdown.push(text));
                self.out(lines);
            }
            // A note (a command's answer, typed while a reply streams) goes between the
            // reply's whole lines: the line being streamed is kept and goes on after it.
            Event::MessageCompleted { entry } if entry.role == Role::Note => {
                let lines = self.entry(entry);
                self.out(lines);
            }
            // The user's own words are on the screen as typed; what its mentions attached is
            // shown under them.
            Event::MessageCompleted { entry } if entry.role == Role::User => {
                self.settle();
                self.text = None;
                let lines = self.chip_lines(&entry.blocks);
                self.out(lines);
            }
            Event::MessageCompleted { entry } => {
                self.settle();
                self.text = None;
                self.unanswered = entry.role == Role::Assistant
                    && entry.status == MessageStatus::Failed
                    && entry.blocks.is_empty();
            }
            Event::ToolCallStarted { tool, input, .. } => {
                self.settle();
                let line = self.call_line(tool, input);
                self.out(vec![line]);
            }
            Event::ToolCallUpdated { status, output, .. } => {
                let line = self.result_line(*status, output.as_deref());
                self.out(line.into_iter().collect());
            }
            Event::ApprovalRequested { approval } => {
                self.settle();
                let lines = self.approval(approval);
                self.out(lines);
            }
            Event::ApprovalResolved { decision, .. } => {
                let said = match decision {
                    ApprovalDecision::Allow => "allowed once",
                    ApprovalDecision::AllowAlways => "allowed for the rest of this session",
                    ApprovalDecision::AllowWorkspace => "allowed, and always in this workspace",
                    ApprovalDecision::Deny => "denied",
                    ApprovalDecision::Cancelled => "no longer asked: the run ended",
                };
                self.line(&format!("    {said}"));
            }
            Event::InterjectionQueued { text, .. } => {
                let line = self.waiting_line(text);
                self.out(vec![line]);
            }
            Event::InterjectionDelivered { pending_ids, .. } => {
                let what = match pending_ids.len() {
                    1 => "your waiting message reached the model".to_string(),
                    n => format!("your {n} waiting messages reached the model"),
                };
                self.styled(&[Paint::Dim], &format!("  ↳ {what}"));
            }
            Event::InterjectionPromoted { .. } => self.styled(
                &[Paint::Dim],
                "  ↳ your waiting message starts the next turn",
            ),
            Event::InterjectionCancelled { .. } => {
                self.styled(&[Paint::Dim], "  ↳ your waiting message was withdrawn")
            }
            Event::Notice { level, message, .. } => {
                // An error ends the reply (its last words first); a warning, such as an
                // unknown command's, goes between the reply's lines like a note.
                if *level == NoticeLevel::Error {
                    self.settle();
                }
                if *level == NoticeLevel::Error {
                    self.last_error = Some(message.clone());
                }
                let line = self.notice_line(*level, message);
                self.out(vec![line]);
            }
            Event::Budget {
                snapshot,
                actual: None,
            } if snapshot.pressure != Pressure::Normal => {
                let how = match snapshot.pressure {
                    Pressure::Critical => "nearly full",
                    _ => "filling up",
                };
                let line = format!(
                    "! the context is {how} ({:.0}% used): /compact folds older turns",
                    snapshot.utilisation * 100.0
                );
                self.styled(&[Paint::Yellow], &line);
            }
            Event::Compaction {
                method,
                messages,
                tokens_before,
                tokens_after,
                ..
            } => {
                let how = match method {
                    CompactionMethod::Summary => "summarised",
                    CompactionMethod::Drop => "left out",
                    CompactionMethod::CarryOver => "carried over in a note",
                };
                let line = format!(
                    "  ({} {how} to fit the context: {tokens_before} → {tokens_after} tokens)",
                    plural(*messages, "older message", "older messages")
                );
                self.styled(&[Paint::Dim], &line);
            }
            Event::Plan { plan, .. } => {
                self.settle();
                let lines = self.plan_lines(plan);
                self.out(lines);
            }
            Event::RunFinished { reason, error } => {
                self.settle();
                self.text = None;
                let told = self.last_error.take();
                let line = match (reason, error) {
                    (FinishReason::EndTurn, _) => None,
                    (_, Some(error)) if told.as_deref() == Some(error.as_str()) => None,
                    (_, Some(error)) => Some(self.notice_line(NoticeLevel::Error, error)),
                    (reason, None) => Some(
                        self.style
                            .paint(&[Paint::Yellow], &format!("({})", finish_words(*reason))),
                    ),
                };
                let retry = std::mem::take(&mut self.unanswered).then(|| {
                    self.style.paint(
                        &[Paint::Yellow],
                        "! Your message has no answer: /resume asks again.",
                    )
                });
                self.out(line.into_iter().chain(retry).collect());
            }
            _ => {}
        }
    }

    /// The model's plan as a compact list: a mark per step (`✓` done, `▸` in progress, `·`
    /// pending), the step in progress in bold.
    fn plan_lines(&self, plan: &Plan) -> Vec<String> {
        let mut lines = vec![self.style.paint(
            &[Paint::Dim],
            &match &plan.explanation {
                Some(why) => format!("  plan: {why}"),
                None => "  plan:".to_string(),
            },
        )];
        for step in &plan.steps {
            let (mark, paint): (&str, &[Paint]) = match step.status {
                PlanStepStatus::Completed => ("✓", &[Paint::Dim]),
                PlanStepStatus::InProgress => ("▸", &[Paint::Bold]),
                PlanStepStatus::Pending => ("·", &[]),
            };
            lines.push(
                self.style
                    .paint(paint, &format!("    {mark} {}", step.step)),
            );
        }
        lines
    }

    fn notice_line(&self, level: NoticeLevel, message: &str) -> String {
        match level {
            NoticeLevel::Info => self.style.paint(&[Paint::Dim], &format!("i {message}")),
            NoticeLevel::Warning => self.style.paint(&[Paint::Yellow], &format!("! {message}")),
            NoticeLevel::Error => self.style.paint(&[Paint::Red], &format!("✗ {message}")),
        }
    }

    pub fn waiting_line(&self, text: &str) -> String {
        let first = text.lines().next().unwrap_or("");
        let more = if text.lines().count() > 1 { " …" } else { "" };
        self.style.paint(
            &[Paint::Dim],
            &format!("  ↳ waiting: {first}{more} (the model reads it after the current step)"),
        )
    }

    fn call_line(&self, tool: &str, input: &Value) -> String {
        format!(
            "  {} {}",
            self.style.paint(&[Paint::Cyan], "⚙"),
            describe_call(tool, input)
        )
    }

    fn result_line(&self, status: ToolCallStatus, output: Option<&str>) -> Option<String> {
        let first = output.and_then(|o| o.lines().next()).unwrap_or("");
        let first = crate::tools::truncate(first, self.style.width.saturating_sub(16).max(20));
        Some(match status {
            ToolCallStatus::Running => self.style.paint(&[Paint::Dim], "    running…"),
            ToolCallStatus::Done => {
                format!("    {} {first}", self.style.paint(&[Paint::Green], "✓"))
            }
            ToolCallStatus::Error => format!(
                "    {} {first}",
                self.style.paint(&[Paint::Red], "✗ failed:")
            ),
            ToolCallStatus::Denied => self.style.paint(&[Paint::Red], "    ✗ not run: denied"),
            ToolCallStatus::Cancelled => self.style.paint(&[Paint::Dim], "    not run: cancelled"),
            ToolCallStatus::AwaitingApproval | ToolCallStatus::Pending => return None,
        })
    }

    /// An approval prompt: what the call would do (the command, or the change as a diff) and
    /// the answers.
    pub fn approval(&self, approval: &PendingApproval) -> Vec<String> {
        let mut lines = vec![format!(
            "  {} {}",
            self.style.paint(&[Paint::Yellow, Paint::Bold], "?"),
            self.style.paint(
                &[Paint::Bold],
                &format!("allow: {}", describe_call(&approval.tool, &approval.input))
            )
        )];
        lines.extend(self.change_preview(&approval.tool, &approval.input));
        if let Some(sandboxed) = approval.sandboxed {
            let how = match sandboxed {
                true => "will run in the sandbox (sidechat doctor says what it may reach)",
                false => "will run outside the sandbox, unconfined",
            };
            lines.push(format!("    {}", self.style.paint(&[Paint::Dim], how)));
        }
        if let Some(why) = &approval.why_asked {
            lines.push(format!("    {}", self.style.paint(&[Paint::Dim], why)));
        }
        let workspace = match &approval.proposed_rule {
            Some(rule) => format!(
                "{} always in this workspace: {}",
                self.style.paint(&[Paint::Bold], "[w]"),
                self.style.paint(&[Paint::Bold], rule)
            ),
            None => format!(
                "{} always in this workspace",
                self.style.paint(&[Paint::Bold], "[w RULE]")
            ),
        };
        lines.push(format!(
            "    {} allow once · {} for this session · {workspace} · {} deny",
            self.style.paint(&[Paint::Bold], "[a]"),
            self.style.paint(&[Paint::Bold], "[s]"),
            self.style.paint(&[Paint::Bold], "[d]"),
        ));
        lines.push(format!(
            "    {}",
            self.style.paint(
                &[Paint::Dim],
                "(w RULE saves another rule, e.g. w run_command(cargo *); d REASON tells the model why)"
            )
        ));
        lines
    }

    /// The command a call runs, or the lines a write or edit changes, coloured.
    fn change_preview(&self, tool: &str, input: &Value) -> Vec<String> {
        let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or("");
        let mut lines = Vec::new();
        match tool {
            "run_command" => {
                for line in text("command").lines() {
                    lines.push(format!("    $ {}", self.style.paint(&[Paint::Bold], line)));
                }
            }
            "write_file" => {
                let path = text("path");
                let before = self
                    .workspace
                    .as_ref()
                    .and_then(|w| std::fs::read_to_string(w.join(path)).ok())
                    .unwrap_or_default();
                lines.extend(self.diff(&before, text("content")));
            }
            "edit_file" => lines.extend(self.diff(text("old_string"), text("new_string"))),
            _ => {}
        }
        lines
    }

    /// A line diff, removed lines red and added ones green, at most 40 lines shown.
    fn diff(&self, before: &str, after: &str) -> Vec<String> {
        const SHOWN: usize = 40;
        let diff = similar::TextDiff::from_lines(before, after);
        let mut lines = Vec::new();
        for change in diff.iter_all_changes() {
            let text = change.value().trim_end_matches(['\n', '\r']);
            let line = match change.tag() {
                similar::ChangeTag::Delete => {
                    self.style.paint(&[Paint::Red], &format!("    - {text}"))
                }
                similar::ChangeTag::Insert => {
                    self.style.paint(&[Paint::Green], &format!("    + {text}"))
                }
                similar::ChangeTag::Equal => {
                    self.style.paint(&[Paint::Dim], &format!("      {text}"))
                }
            };
            lines.push(line);
        }
        if lines.len() > SHOWN {
            let hidden = lines.len() - SHOWN;
            lines.truncate(SHOWN);
            lines.push(self.style.paint(
                &[Paint::Dim],
                &format!("    … {} more", plural(hidden as u64, "line", "lines")),
            ));
        }
        lines
    }

    /// One chip line per run of attachments in `blocks` (a message's, or each interjection's).
    fn chip_lines(&self, blocks: &[Block]) -> Vec<String> {
        let mut lines = Vec::new();
        for i in 0..blocks.len() {
            if starts_chips(blocks, i) {
                lines.push(self.chip_line(&blocks[i..]));
            }
        }
        lines
    }

    /// The attachments at the start of `blocks` as one compact line of chips:
    /// `  ⧉ [src/lib.rs:12-40 · 1.2 KiB] [docs/ · 120 B]`.
    fn chip_line(&self, blocks: &[Block]) -> String {
        let chips: Vec<String> = blocks
            .iter()
            .map_while(|b| match b {
                Block::Attachment {
                    name, range, size, ..
                } => Some(chip(name, *range, *size)),
                _ => None,
            })
            .collect();
        self.style
            .paint(&[Paint::Dim], &format!("  ⧉ {}", chips.join(" ")))
    }

    /// A stored entry as the live events drew it.
    pub fn entry(&self, entry: &TranscriptEntry) -> Vec<String> {
        let mut lines = Vec::new();
        for (i, block) in entry.blocks.iter().enumerate() {
            match (entry.role, block) {
                (Role::User, Block::Text { text }) => {
                    lines.push(String::new());
                    for line in text.lines() {
                        lines.push(self.style.paint(&[Paint::Bold], &format!("> {line}")));
                    }
                }
                (_, Block::Text { text }) if entry.role == Role::Assistant => {
                    lines.extend(Markdown::render(self.style, text));
                }
                (_, Block::Text { text }) => {
                    lines.extend(text.lines().map(str::to_string));
                }
                (_, Block::Thinking { text, .. }) => match self.show_thinking {
                    true => lines.extend(
                        self.dim_lines(Markdown::render(Style::plain(self.style.width), text)),
                    ),
                    false => lines.push(self.folded_thinking(text.split_whitespace().count())),
                },
                (_, Block::ToolCall { name, input, .. }) => lines.push(self.call_line(name, input)),
                (_, Block::ToolResult { output, status, .. }) => {
                    lines.extend(self.result_line(*status, Some(output)))
                }
                (_, Block::Interjection { text, .. }) => {
                    let first = text.lines().next().unwrap_or("");
                    lines.push(
                        self.style
                            .paint(&[Paint::Dim], &format!("  ↳ you added: {first}")),
                    );
                }
                (_, Block::Command { name, .. }) => lines.push(
                    self.style
                        .paint(&[Paint::Dim], &format!("  (custom command /{name})")),
                ),
                // A run of attachments is one chip line, drawn at its first.
                (_, Block::Attachment { .. }) => {
                    if starts_chips(&entry.blocks, i) {
                        lines.push(self.chip_line(&entry.blocks[i..]));
                    }
                }
                (
                    _,
                    Block::Image {
                        media_type,
                        width,
                        height,
                        bytes,
                        ..
                    },
                ) => lines.push(self.style.paint(
                    &[Paint::Dim],
                    &format!("  (image {media_type}, {width}×{height}, {bytes} bytes)"),
                )),
                (_, Block::Notice { level, text }) => lines.push(self.notice_line(*level, text)),
                (_, Block::Summary { messages, .. }) => lines.push(self.style.paint(
                    &[Paint::Dim],
                    &format!(
                        "  ({} folded away from the model's context)",
                        plural(*messages, "earlier message", "earlier messages")
                    ),
                )),
            }
        }
        lines
    }
}

/// Whether `blocks[i]` is an attachment that follows none: the first of a chip line.
fn starts_chips(blocks: &[Block], i: usize) -> bool {
    matches!(blocks.get(i), Some(Block::Attachment { .. }))
        && !matches!(
            i.checked_sub(1).and_then(|p| blocks.get(p)),
            Some(Block::Attachment { .. })
        )
}

/// One attachment's chip: its name, the lines attached, and the size of what was read.
fn chip(name: &str, range: Option<LineRange>, size: Option<u64>) -> String {
    let mut chip = format!("[{name}");
    match range {
        Some(LineRange { start, end }) if start == end => chip.push_str(&format!(":{start}")),
        Some(LineRange { start, end }) => chip.push_str(&format!(":{start}-{end}")),
        None => {}
    }
    if let Some(size) = size {
        chip.push_str(&format!(" · {}", byte_size(size)));
    }
    chip.push(']');
    chip
}

/// A size in bytes as people read it: `120 B`, `1.2 KiB`, `3.4 MiB`.
fn byte_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    match bytes {
        b if b < KIB => format!("{b} B"),
        b if b < KIB * KIB => format!("{:.1} KiB", b as f64 / KIB as f64),
        b => format!("{:.1} MiB", b as f64 / (KIB * KIB) as f64),
    }
}

/// A tool call in plain words, counts spelled right.
pub fn describe_call(tool: &str, input: &Value) -> String {
    let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or("");
    let lines = |key: &str| text(key).lines().count() as u64;
    let path = match text("path") {
        "" => ".",
        path => path,
    };
    match tool {
        "write_file" => format!(
            "write {path} ({})",
            plural(lines("content"), "line", "lines")
        ),
        "edit_file" => format!(
            "edit {path} (replace {} with {})",
            plural(lines("old_string"), "line", "lines"),
            plural(lines("new_string"), "line", "lines")
        ),
        _ => crate::tools::summary(tool, input),
    }
}

/// Why a run ended, for people.
pub fn finish_words(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::EndTurn => "done",
        FinishReason::Stopped => "stopped",
        FinishReason::MaxIterations => "stopped: the run used all the steps it may take",
        FinishReason::BudgetSpent => "stopped: the spend cap is reached",
        FinishReason::CutOff => "cut off: the reply reached the model's output limit",
        FinishReason::Error => "failed",
        FinishReason::Refusal => "the model declined to answer",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<String>>>);

    impl Sink for Recorded {
        fn lines(&mut self, lines: Vec<String>) {
            self.0.lock().unwrap().extend(lines);
        }
    }

    fn attachment(name: &str, range: Option<(u64, u64)>, size: Option<u64>) -> Block {
        Block::Attachment {
            name: name.into(),
            text: String::new(),
            range: range.map(|(start, end)| LineRange { start, end }),
            size,
            hash: None,
        }
    }

    fn user(blocks: Vec<Block>) -> TranscriptEntry {
        TranscriptEntry {
            id: "u".into(),
            seq: 1,
            role: Role::User,
            blocks,
            status: crate::protocol::MessageStatus::Complete,
            run_id: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            rewound: false,
        }
    }

    #[test]
    fn attachments_are_one_chip_line_under_their_message_live_and_replayed() {
        let entry = user(vec![
            Block::Text {
                text: "compare @src/lib.rs:2-3 @docs/ @a.md:4".into(),
            },
            attachment("src/lib.rs", Some((2, 3)), Some(2048)),
            attachment("docs/", None, Some(120)),
            attachment("a.md", Some((4, 4)), Some(3 * 1024 * 1024)),
            Block::Interjection {
                pending_id: "inj_1".into(),
                text: "and this".into(),
                promoted: true,
            },
            attachment("picked.txt", None, None),
        ]);
        let chips = [
            "  ⧉ [src/lib.rs:2-3 · 2.0 KiB] [docs/ · 120 B] [a.md:4 · 3.0 MiB]",
            "  ⧉ [picked.txt]",
        ];
        let recorded = Recorded::default();
        let mut screen = Screen::new(Box::new(recorded.clone()), Style::plain(80), false);
        assert_eq!(
            screen.entry(&entry),
            [
                "",
                "> compare @src/lib.rs:2-3 @docs/ @a.md:4",
                chips[0],
                "  ↳ you added: and this",
                chips[1],
            ]
        );
        screen.event(&Event::MessageCompleted { entry });
        assert_eq!(*recorded.0.lock().unwrap(), chips);
    }

    #[test]
    fn calls_are_described_in_words_with_counts_right() {
        assert_eq!(
            describe_call("write_file", &json!({"path": "a.md", "content": "x\n"})),
            "write a.md (1 line)"
        );
        assert_eq!(
            describe_call(
                "edit_file",
                &json!({"path": "a.md", "old_string": "x", "new_string": "y\nz"})
            ),
            "edit a.md (replace 1 line with 2 lines)"
        );
    }

    #[test]
    fn a_plan_is_a_compact_list() {
        use crate::protocol::PlanStep;
        let recorded = Recorded::default();
        let mut screen = Screen::new(Box::new(recorded.clone()), Style::plain(80), false);
        screen.event(&Event::Plan {
            call_id: "c".into(),
            plan: Plan {
                explanation: Some("tests first".into()),
                steps: vec![
                    PlanStep {
                        step: "Write the test".into(),
                        status: PlanStepStatus::Completed,
                    },
                    PlanStep {
                        step: "Fix the bug".into(),
                        status: PlanStepStatus::InProgress,
                    },
                    PlanStep {
                        step: "Run the suite".into(),
                        status: PlanStepStatus::Pending,
                    },
                ],
            },
        });
        assert_eq!(
            *recorded.0.lock().unwrap(),
            [
                "  plan: tests first",
                "    ✓ Write the test",
                "    ▸ Fix the bug",
                "    · Run the suite"
            ]
        );
    }

    /// A command's prompt says whether it will run in the sandbox; other tools' say nothing
    /// of it.
    #[test]
    fn a_command_prompt_says_whether_it_runs_sandboxed() {
        let approval = |tool: &str, input: Value, sandboxed: Option<bool>| PendingApproval {
            approval_id: "a".into(),
            run_id: "r".into(),
            call_id: "c".into(),
            tool: tool.into(),
            input,
            summary: String::new(),
            created_at: String::new(),
            proposed_rule: None,
            why_asked: None,
            sandboxed,
        };
        let screen = Screen::new(Box::new(Recorded::default()), Style::plain(80), false);
        let said = |a: PendingApproval| -> Vec<String> {
            screen
                .approval(&a)
                .into_iter()
                .filter(|l| l.contains("sandbox"))
                .collect()
        };
        let ls = || json!({"command": "ls"});
        assert_eq!(
            said(approval("run_command", ls(), Some(true))),
            ["    will run in the sandbox (sidechat doctor says what it may reach)"]
        );
        assert_eq!(
            said(approval("run_command", ls(), Some(false))),
            ["    will run outside the sandbox, unconfined"]
        );
        let write = json!({"path": "a.md", "content": "x"});
        assert_eq!(
            said(approval("write_file", write, None)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_failed_run_tells_its_error_once() {
        let recorded = Recorded::default();
        let mut screen = Screen::new(Box::new(recorded.clone()), Style::plain(80), false);
        screen.event(&Event::Notice {
            level: NoticeLevel::Error,
            message: "upstream said no".into(),
            message_id: "m".into(),
        });
        screen.event(&Event::RunFinished {
            reason: FinishReason::Error,
            error: Some("upstream said no".into()),
        });
        screen.event(&Event::RunFinished {
            reason: FinishReason::Stopped,
            error: None,
        });
        assert_eq!(
            *recorded.0.lock().unwrap(),
            ["✗ upstream said no", "(stopped)"]
        );
    }

    #[test]
    fn a_note_while_a_reply_streams_leaves_the_streamed_line_whole() {
        let recorded = Recorded::default();
        let mut screen = Screen::new(Box::new(recorded.clone()), Style::plain(80), false);
        let delta = |text: &str| Event::TextDelta {
            message_id: "m".into(),
            text: text.into(),
        };
        screen.event(&delta("First line.\nSecond li"));
        screen.event(&Event::MessageCompleted {
            entry: TranscriptEntry {
                id: "n".into(),
                seq: 3,
                role: Role::Note,
                blocks: vec![Block::Text {
                    text: "Cost of this session: nothing yet".into(),
                }],
                status: crate::protocol::MessageStatus::Complete,
                run_id: None,
                created_at: "2026-01-01T00:00:00Z".into(),
                rewound: false,
            },
        });
        screen.event(&Event::InterjectionQueued {
            pending_id: "p".into(),
            text: "and more".into(),
        });
        screen.event(&Event::Notice {
            level: NoticeLevel::Warning,
            message: "Unknown command /x".into(),
            message_id: "w".into(),
        });
        screen.event(&delta("ne, whole.\nThird"));
        screen.event(&Event::RunFinished {
            reason: FinishReason::EndTurn,
            error: None,
        });
        assert_eq!(
            *recorded.0.lock().unwrap(),
            [
                "First line.",
                "Cost of this session: nothing yet",
                "  ↳ waiting: and more (the model reads it after the current step)",
                "! Unknown command /x",
                "Second line, whole.",
                "Third"
            ]
        );
    }

    #[test]
    fn thinking_folds_to_one_line() {
        let recorded = Recorded::default();
        let mut screen = Screen::new(Box::new(recorded.clone()), Style::plain(80), false);
        let id = || "m".to_string();
        screen.event(&Event::MessageStarted {
            message_id: id(),
            role: Role::Assistant,
        });
        screen.event(&Event::ThinkingDelta {
            message_id: id(),
            text: "let me see".into(),
        });
        screen.event(&Event::TextDelta {
            message_id: id(),
            text: "Hi **there**\nbye".into(),
        });
        screen.event(&Event::RunFinished {
            reason: FinishReason::EndTurn,
            error: None,
        });
        assert_eq!(
            *recorded.0.lock().unwrap(),
            [
                "  thought for 3 words (--show-thinking shows it)",
                "Hi there",
                "bye"
            ]
        );
    }
}
