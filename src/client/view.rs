//! One session as a client holds it, built from `session/transcript` and `session/event`: the
//! committed entries, the messages being streamed, tool-call states, sub-agents, approvals
//! and waiting messages.
//!
//! The terminal chat keeps one to know whether a run works and which approval a key answers.
//! [`SessionView::normalised`] writes it as plain lines, the form in which the terminal, VS Code
//! and Neovim clients' tests compare what they make of the same recorded event streams
//! (`tests/fixtures/streams/`).

use std::collections::HashMap;

use serde::Serialize;

use super::render::describe_call;
use crate::protocol::{
    Block, Event, MessageStatus, PendingApproval, Role, SessionEventParams, SessionState,
    SessionTranscriptResult, ToolCallStatus, TranscriptEntry,
};

/// A message being streamed, not committed yet.
#[derive(Debug, Clone, PartialEq)]
struct Live {
    id: String,
    text: String,
}

/// A tool call as its events told it.
#[derive(Debug, Clone, PartialEq)]
struct ToolSeen {
    status: ToolCallStatus,
    output: Option<String>,
}

/// The sub-agent (child session) working on a `delegate` call, as its `delegation` events
/// told it.
#[derive(Debug, Clone, PartialEq)]
struct Delegation {
    child_seq: u64,
    /// `running`, `awaitingApproval` or the child run's finish reason, as on the wire.
    state: String,
    /// The words of its latest message.
    text: String,
}

/// How a compaction went, seen live (the transcript does not keep it).
#[derive(Debug, Clone, PartialEq)]
struct CompactionSeen {
    reason: String,
    tokens_before: u64,
    tokens_after: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SessionView {
    /// Committed entries in `seq` order.
    entries: Vec<TranscriptEntry>,
    live: Vec<Live>,
    tools: HashMap<String, ToolSeen>,
    delegations: HashMap<String, Delegation>,
    compactions: HashMap<String, CompactionSeen>,
    approvals: Vec<PendingApproval>,
    /// Interjections not delivered yet: pending id and text.
    waiting: Vec<(String, String)>,
    state: SessionState,
    last_seq: u64,
}

impl Default for SessionView {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            live: Vec::new(),
            tools: HashMap::new(),
            delegations: HashMap::new(),
            compactions: HashMap::new(),
            approvals: Vec::new(),
            waiting: Vec::new(),
            state: SessionState::Idle,
            last_seq: 0,
        }
    }
}

/// A value's name on the wire (`awaitingApproval`, `end_turn`).
fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

/// A text on one line: its line breaks written `\n`.
fn one_line(text: &str) -> String {
    text.replace('\n', "\\n")
}

impl SessionView {
    /// Starts over from a `session/transcript` (an attach, or after the daemon restarted: a
    /// restarted daemon numbers its events from the store, so nothing streamed before stays).
    pub fn load(&mut self, transcript: &SessionTranscriptResult) {
        *self = Self {
            entries: Vec::new(),
            state: transcript.state,
            approvals: transcript.pending_approvals.clone(),
            waiting: transcript
                .pending_interjections
                .iter()
                .map(|w| (w.pending_id.clone(), w.text.clone()))
                .collect(),
            last_seq: transcript.last_seq,
            ..Self::default()
        };
        for entry in &transcript.entries {
            self.commit(entry.clone());
        }
    }

    /// Whether a run works (or waits for an approval).
    pub fn running(&self) -> bool {
        matches!(
            self.state,
            SessionState::Running | SessionState::AwaitingApproval
        )
    }

    /// The approval a key answers: the one asked last (its prompt is the last drawn).
    pub fn pending_approval(&self) -> Option<&PendingApproval> {
        self.approvals.last()
    }

    /// Takes one `session/event` of this session; one already seen (by `seq`) changes nothing.
    pub fn apply(&mut self, params: &SessionEventParams) {
        if params.seq <= self.last_seq {
            return;
        }
        self.last_seq = params.seq;
        match &params.event {
            Event::RunStarted { .. } => self.state = SessionState::Running,
            Event::MessageStarted {
                message_id,
                role: Role::Assistant,
            } => {
                self.live_message(message_id);
            }
            Event::TextDelta { message_id, text } => {
                self.live_message(message_id).text.push_str(text);
            }
            Event::MessageCompleted { entry } => self.commit(entry.clone()),
            Event::ToolCallStarted { call_id, .. } => {
                self.tools.insert(
                    call_id.clone(),
                    ToolSeen {
                        status: ToolCallStatus::Pending,
                        output: None,
                    },
                );
            }
            Event::ToolCallUpdated {
                call_id,
                status,
                output,
            } => {
                let seen = self.tools.entry(call_id.clone()).or_insert(ToolSeen {
                    status: *status,
                    output: None,
                });
                seen.status = *status;
                if output.is_some() {
                    seen.output.clone_from(output);
                }
            }
            Event::ApprovalRequested { approval } => {
                self.approvals
                    .retain(|a| a.approval_id != approval.approval_id);
                self.approvals.push(approval.clone());
                self.state = SessionState::AwaitingApproval;
            }
            Event::ApprovalResolved { approval_id, .. } => {
                self.approvals.retain(|a| &a.approval_id != approval_id);
                if self.approvals.is_empty() && self.state == SessionState::AwaitingApproval {
                    self.state = SessionState::Running;
                }
            }
            Event::InterjectionQueued { pending_id, text } => {
                self.waiting.retain(|(id, _)| id != pending_id);
                self.waiting.push((pending_id.clone(), text.clone()));
            }
            Event::InterjectionDelivered { pending_ids, .. }
            | Event::InterjectionPromoted { pending_ids, .. } => {
                self.waiting.retain(|(id, _)| !pending_ids.contains(id));
            }
            Event::InterjectionCancelled { pending_id } => {
                self.waiting.retain(|(id, _)| id != pending_id);
            }
            // Stored as a `notice` entry under this event's seq, as `session/transcript` gives it.
            Event::Notice {
                level,
                message,
                message_id,
            } => self.commit(TranscriptEntry {
                id: message_id.clone(),
                seq: params.seq,
                role: Role::Notice,
                blocks: vec![Block::Notice {
                    level: *level,
                    text: message.clone(),
                }],
                status: MessageStatus::Complete,
                run_id: params.run_id.clone(),
                created_at: String::new(),
                rewound: false,
            }),
            Event::Compaction {
                message_id,
                reason,
                tokens_before,
                tokens_after,
                ..
            } => {
                self.compactions.insert(
                    message_id.clone(),
                    CompactionSeen {
                        reason: wire(reason),
                        tokens_before: *tokens_before,
                        tokens_after: *tokens_after,
                    },
                );
            }
            Event::NoteDeleted { message_id } => {
                for entry in self.entries.iter_mut().filter(|e| &e.id == message_id) {
                    for block in &mut entry.blocks {
                        if let Block::Summary { text, .. } = block {
                            text.clear();
                        }
                    }
                }
            }
            Event::RunFinished { .. } => {
                self.state = SessionState::Idle;
                self.live.clear();
                self.approvals.clear();
            }
            Event::Delegation {
                call_id,
                child_seq,
                event,
                ..
            } => self.delegated(call_id, *child_seq, event),
            _ => {}
        }
    }

    fn live_message(&mut self, id: &str) -> &mut Live {
        let at = match self.live.iter().position(|m| m.id == id) {
            Some(at) => at,
            None => {
                self.live.push(Live {
                    id: id.to_string(),
                    text: String::new(),
                });
                self.live.len() - 1
            }
        };
        &mut self.live[at]
    }

    /// A committed entry: in `seq` order, replacing one of the same id; no longer streamed.
    fn commit(&mut self, entry: TranscriptEntry) {
        self.live.retain(|m| m.id != entry.id);
        self.entries.retain(|e| e.id != entry.id);
        let at = self.entries.partition_point(|e| e.seq <= entry.seq);
        self.entries.insert(at, entry);
    }

    /// One event of the sub-agent working on `call_id`.
    fn delegated(&mut self, call_id: &str, child_seq: u64, event: &Event) {
        let d = self
            .delegations
            .entry(call_id.to_string())
            .or_insert_with(|| Delegation {
                child_seq: 0,
                state: "running".into(),
                text: String::new(),
            });
        if child_seq <= d.child_seq {
            return;
        }
        d.child_seq = child_seq;
        match event {
            Event::RunStarted { .. } => d.state = "running".into(),
            Event::MessageStarted {
                role: Role::Assistant,
                ..
            } => d.text.clear(),
            Event::TextDelta { text, .. } => d.text.push_str(text),
            Event::MessageCompleted { entry } if entry.role == Role::Assistant => {
                let text = words(&entry.blocks, false);
                if !text.is_empty() {
                    d.text = text;
                }
            }
            Event::ApprovalRequested { .. } => d.state = "awaitingApproval".into(),
            Event::ApprovalResolved { .. } if d.state == "awaitingApproval" => {
                d.state = "running".into()
            }
            Event::RunFinished { reason, .. } => d.state = wire(reason),
            _ => {}
        }
    }

    /// A tool call's status and output: its committed result, else what its events said, else
    /// whether an approval waits for it.
    fn tool_status(&self, call_id: &str) -> (ToolCallStatus, Option<&str>) {
        let committed = self
            .entries
            .iter()
            .flat_map(|e| &e.blocks)
            .find_map(|b| match b {
                Block::ToolResult {
                    call_id: id,
                    status,
                    output,
                    ..
                } if id == call_id => Some((*status, Some(output.as_str()))),
                _ => None,
            });
        if let Some(found) = committed {
            return found;
        }
        if self.approvals.iter().any(|a| a.call_id == call_id) {
            return (ToolCallStatus::AwaitingApproval, None);
        }
        match self.tools.get(call_id) {
            Some(seen) => (seen.status, seen.output.as_deref()),
            None => (ToolCallStatus::Pending, None),
        }
    }

    /// The session as plain lines, one per thing shown, in order (see
    /// `tests/fixtures/streams/README.md`): the clients' common reading of an event stream.
    pub fn normalised(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for entry in &self.entries {
            self.entry_lines(entry, &mut lines);
        }
        for live in &self.live {
            lines.push(format!("assistant (streaming): {}", one_line(&live.text)));
        }
        lines.push(format!("state: {}", wire(&self.state)));
        for (_, text) in &self.waiting {
            lines.push(format!("waiting: {}", one_line(text)));
        }
        for approval in &self.approvals {
            lines.push(format!("approval: {}", approval.summary));
        }
        lines
    }

    fn entry_lines(&self, entry: &TranscriptEntry, lines: &mut Vec<String>) {
        for block in &entry.blocks {
            if let Block::Interjection {
                text,
                promoted: false,
                ..
            } = block
            {
                lines.push(format!("user (interjection): {}", one_line(text)));
            }
        }
        match entry.role {
            Role::User => {
                let text = words(&entry.blocks, true);
                if !text.is_empty() {
                    lines.push(format!("user: {}", one_line(&text)));
                }
            }
            Role::Assistant => {
                let text = words(&entry.blocks, false);
                if !text.is_empty() {
                    let status = match entry.status {
                        MessageStatus::Complete => String::new(),
                        other => format!(" ({})", wire(&other)),
                    };
                    lines.push(format!("assistant{status}: {}", one_line(&text)));
                }
                for block in &entry.blocks {
                    if let Block::ToolCall { id, name, input } = block {
                        let (status, output) = self.tool_status(id);
                        let first = output
                            .and_then(|o| o.lines().next())
                            .map(|l| format!(" → {l}"))
                            .unwrap_or_default();
                        lines.push(format!(
                            "tool: {} [{}]{first}",
                            describe_call(name, input),
                            wire(&status)
                        ));
                        if let Some(d) = self.delegations.get(id) {
                            lines.push(format!("  sub-agent [{}]: {}", d.state, one_line(&d.text)));
                        }
                    }
                }
            }
            Role::Tool => {}
            Role::Notice => {
                for block in &entry.blocks {
                    if let Block::Notice { level, text } = block {
                        lines.push(format!("notice {}: {}", wire(level), one_line(text)));
                    }
                }
            }
            Role::Note => lines.push(format!("note: {}", one_line(&words(&entry.blocks, false)))),
            Role::Summary => {
                for block in &entry.blocks {
                    let Block::Summary {
                        method,
                        text,
                        messages,
                        ..
                    } = block
                    else {
                        continue;
                    };
                    // A deleted carry-over note stays stored, emptied: nothing to show.
                    if wire(method) == "carryOver" && text.is_empty() {
                        continue;
                    }
                    let how = match self.compactions.get(&entry.id) {
                        Some(c) => format!(
                            " ({}: {} → {} tokens)",
                            c.reason, c.tokens_before, c.tokens_after
                        ),
                        None => String::new(),
                    };
                    lines.push(format!(
                        "summary {} of {messages} messages{how}: {}",
                        wire(method),
                        one_line(text)
                    ));
                }
            }
        }
    }
}

/// The words of a message: its text blocks and, for a user turn, the interjections promoted
/// into it.
fn words(blocks: &[Block], promoted: bool) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            Block::Interjection {
                text,
                promoted: true,
                ..
            } if promoted => Some(text.as_str()),
            _ => None,
        })
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}
