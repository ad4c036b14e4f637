//! The transcript on the wire: roles, the blocks of a message, statuses of messages, tool calls
//! and interjections, and `session/transcript`, which a client that missed events (or attached
//! late) reads from its last `seq`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::SessionState;

/// Who a transcript entry belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    User,
    Assistant,
    /// Results of the tool calls of the assistant message before it.
    Tool,
    /// A local annotation (e.g. `/cost` output): stored and shown, never sent to a model.
    Note,
    /// What the client was told about a run or a command (errors, retries, cut-offs, limits),
    /// kept so a client that reloads can say why a run ended; never sent to a model.
    Notice,
    /// Stands for a range of older entries the model is no longer sent (a summary of them, a
    /// marker that they were dropped, or a note carried over from an earlier context). Clients
    /// show it folded; it is never a user or assistant message.
    Summary,
}

impl Role {
    /// Whether entries of this role are part of what a model is sent (a summary is sent in
    /// place of what it folded).
    pub fn reaches_model(self) -> bool {
        matches!(
            self,
            Role::User | Role::Assistant | Role::Tool | Role::Summary
        )
    }
}

/// How a range of the transcript was folded away from what the model is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CompactionMethod {
    /// The model summarised the range.
    Summary,
    /// The range was left out whole (the summary failed or would not fit).
    Drop,
    /// A new context started; the note carries over what matters from the old one.
    CarryOver,
}

/// Why a range of the transcript was folded (a `compaction` event's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CompactionReason {
    /// The history passed its share of the window.
    Share,
    /// The next request would not fit the window.
    Window,
    /// The user asked: `/compact`, or `/new-context` (method `carryOver`).
    Command,
    /// A new turn came after the session's rollover time: a new context, method `carryOver`.
    Idle,
}

impl CompactionReason {
    /// The wire name, for log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Share => "share",
            CompactionReason::Window => "window",
            CompactionReason::Command => "command",
            CompactionReason::Idle => "idle",
        }
    }
}

/// Whether a message is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum MessageStatus {
    Complete,
    /// Cut short because the run was stopped.
    Stopped,
    /// Cut short because the run failed.
    Failed,
}

/// The state of one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ToolCallStatus {
    Pending,
    AwaitingApproval,
    Running,
    Done,
    Error,
    Denied,
    Cancelled,
}

/// Where an interjection (input typed while a run works) stands. It moves pending → leased
/// (taken into a model request) → delivered (that request was sent), or → promoted (it became
/// a user turn of its own), or → cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum InterjectionStatus {
    Pending,
    Leased,
    Delivered,
    Promoted,
    Cancelled,
}

/// One part of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Block {
    Text {
        text: String,
    },
    Thinking {
        text: String,
        /// Provider signature that lets the thinking be replayed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    ToolResult {
        call_id: String,
        output: String,
        is_error: bool,
        status: ToolCallStatus,
    },
    /// What the user typed while the run worked, in the user's own words. Delivered to the
    /// model after tool results, which reads it as "The user adds: …"; or, when the run ended
    /// before a delivery point, `promoted` into a user turn of its own, read as plain text.
    Interjection {
        pending_id: String,
        text: String,
        /// It became (part of) the next user turn instead of an aside within a run.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        promoted: bool,
    },
    /// A text attached to a user message (e.g. a file the user picked, or one an `@`-mention
    /// in the text named).
    Attachment {
        name: String,
        text: String,
        /// The lines attached, when a mention named a range (`@path:L` or `@path:L-M`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        range: Option<LineRange>,
        /// For a mention: the bytes of the file (or folder listing) as it was read, so a
        /// client can show the chip's size and tell whether the file changed since.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
        /// For a mention: the SHA-256 (lower-case hex) of the file (or listing) as read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hash: Option<String>,
    },
    /// Marks a user message typed as a custom slash command (`/NAME …`): the message's text
    /// is what was typed, shown as it was; the model reads `prompt`, the command file's
    /// expansion, instead of that text.
    Command {
        name: String,
        prompt: String,
    },
    /// The one block of a `notice` entry: what the `notice` event said.
    Notice {
        level: super::NoticeLevel,
        text: String,
    },
    /// What stands for the folded range in a `summary` entry: the text the model reads. A
    /// carry-over note deleted by `note/delete` keeps its entry with an empty `text`.
    Summary {
        method: CompactionMethod,
        text: String,
        /// The folded range, by `seq` (inclusive); nothing for a carry-over note.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_seq: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_seq: Option<u64>,
        /// How many messages the range held.
        messages: u64,
    },
    /// An image sent with a user message, by reference: `session/image` returns its bytes.
    /// The same bytes are stored once however often they are sent.
    Image {
        /// The SHA-256 of the image's bytes, in hex.
        image_id: String,
        media_type: String,
        width: u32,
        height: u32,
        /// Its size in bytes.
        bytes: u64,
    },
}

/// One committed message of a session's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptEntry {
    pub id: String,
    pub seq: u64,
    pub role: Role,
    pub blocks: Vec<Block>,
    pub status: MessageStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub created_at: String,
    /// Taken back by `session/rewind`: kept to read (clients show it folded), never sent to a
    /// model again. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewound: bool,
}

/// Params of `note/delete`: a carry-over note (a `summary` entry of method `carryOver`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoteDeleteParams {
    pub message_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoteDeleteResult {
    /// False when the note was already deleted; nothing changed.
    pub deleted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionTranscriptParams {
    pub session_id: String,
    /// Entries with a greater `seq` are returned; 0 or absent for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Entries with a smaller `seq` are returned, the newest `limit` of them (still oldest
    /// first), so a client can show the end of a long session at once and read older pages
    /// as the user scrolls back: the newest page with any number past `lastSeq` (e.g.
    /// 9007199254740991), each older one with the `seq` of the first entry it has. With it,
    /// `hasMore` says whether older entries remain (above `afterSeq`, when that is given too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_seq: Option<u64>,
    /// Most entries to return (default 500, at most 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A tool call that waits for the user's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    pub approval_id: String,
    pub run_id: String,
    pub call_id: String,
    pub tool: String,
    pub input: serde_json::Value,
    /// One line a prompt can show, e.g. `write notes.md (3 lines)`.
    pub summary: String,
    pub created_at: String,
    /// The allow rule an "always in this workspace" answer would save, proposed from the call
    /// (e.g. `run_command(cargo test *)`, `write_file(src/**)`); the user may edit it. Absent
    /// when the session has no workspace or the call names a path outside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_rule: Option<String>,
    /// Why this call is asked although rules exist: the ask rule that forced the prompt, or
    /// what kept an allow rule from applying (e.g. a redirection writing outside the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_asked: Option<String>,
    /// For `run_command`: whether the command will run in the sandbox once allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandboxed: Option<bool>,
}

/// Input typed while a run works, not yet delivered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingInterjection {
    pub pending_id: String,
    pub text: String,
    /// `pending`, or `leased` while a model request carrying it is being sent.
    pub status: InterjectionStatus,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionTranscriptResult {
    pub session_id: String,
    pub state: SessionState,
    pub entries: Vec<TranscriptEntry>,
    /// True when `limit` cut the list: ask again after the last entry's `seq` (or, when the
    /// request gave `beforeSeq`, before the first entry's `seq`).
    pub has_more: bool,
    /// The session's highest committed `seq`.
    pub last_seq: u64,
    pub pending_approvals: Vec<PendingApproval>,
    /// Interjections waiting for the next delivery point, oldest first.
    pub pending_interjections: Vec<PendingInterjection>,
    /// Approvals this session's delegated tasks (its child sessions) wait for. Answer them
    /// with `approval/respond` and the approval's id, as any other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegated_approvals: Vec<DelegatedApproval>,
}

/// An approval a child session waits for (`approval`, in the child session), as its parent
/// lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DelegatedApproval {
    /// The child session that asks.
    pub child_session_id: String,
    /// The parent's `delegate` call the child works for.
    pub call_id: String,
    /// The task the child was given.
    pub task: String,
    pub approval: PendingApproval,
}

/// Lines of a file, from `start` to `end` inclusive, counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LineRange {
    pub start: u64,
    pub end: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasons kept the names they had when `reason` was a free string, and the log
    /// lines use the same names.
    #[test]
    fn compaction_reasons_keep_their_wire_names() {
        let reasons = [
            CompactionReason::Share,
            CompactionReason::Window,
            CompactionReason::Command,
            CompactionReason::Idle,
        ];
        pretty_assertions::assert_eq!(
            serde_json::to_value(reasons).unwrap(),
            serde_json::json!(["share", "window", "command", "idle"])
        );
        pretty_assertions::assert_eq!(
            reasons.map(CompactionReason::as_str),
            ["share", "window", "command", "idle"]
        );
    }
}
