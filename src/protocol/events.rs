//! `session/event`: everything a session publishes while it works, numbered by the session's
//! `seq`, and how a run finished.
//!
//! A streamed delta also has a borrowed form ([`Delta`]), written by hand into the output
//! (`rpc::delta_frame`) because deltas are nearly all of what a run sends; both forms describe
//! the same JSON.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    ApprovalDecision, CompactionMethod, CompactionReason, PendingApproval, Role, ToolCallStatus,
    TranscriptEntry,
};

/// The `session/event` notification: one event of one session, numbered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionEventParams {
    pub session_id: String,
    /// Increases by one per event of this session; a gap means events were missed and
    /// `session/transcript` fills it.
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub event: Event,
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    EndTurn,
    Stopped,
    MaxIterations,
    BudgetSpent,
    CutOff,
    /// The model declined to answer: a provider's refusal or content filter.
    Refusal,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NoticeLevel {
    Info,
    Warning,
    Error,
}

/// What happened in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Event {
    RunStarted {
        model: String,
    },
    MessageStarted {
        message_id: String,
        role: Role,
    },
    TextDelta {
        message_id: String,
        text: String,
    },
    ThinkingDelta {
        message_id: String,
        text: String,
    },
    /// The message is committed; `entry` is what `session/transcript` returns for it.
    MessageCompleted {
        entry: TranscriptEntry,
    },
    ToolCallStarted {
        call_id: String,
        tool: String,
        input: serde_json::Value,
        summary: String,
    },
    ToolCallUpdated {
        call_id: String,
        status: ToolCallStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
    },
    ApprovalRequested {
        approval: PendingApproval,
    },
    ApprovalResolved {
        approval_id: String,
        decision: ApprovalDecision,
    },
    /// A message typed while the run works was stored and waits for the next delivery point.
    InterjectionQueued {
        pending_id: String,
        text: String,
    },
    /// Queued messages went to the model with the tool results of the step before `step`.
    InterjectionDelivered {
        pending_ids: Vec<String>,
        step: u32,
        message_id: String,
    },
    /// Queued messages became the next user turn (the run ended before delivering them).
    InterjectionPromoted {
        pending_ids: Vec<String>,
        message_id: String,
    },
    InterjectionCancelled {
        pending_id: String,
    },
    /// Something the user should know (an error, a retry, a cut-off, a limit). It is stored
    /// first as the transcript entry `messageId` (role `notice`), whose `seq` is this event's.
    Notice {
        level: NoticeLevel,
        message: String,
        message_id: String,
    },
    /// The context budget: before each model request, and again with the provider's actual
    /// counts once it answered.
    Budget {
        snapshot: super::BudgetSnapshot,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        actual: Option<super::Reconciliation>,
    },
    /// Older entries were folded so that what the model is sent fits its window: `method` says
    /// whether they were summarised or dropped, and the `summary` entry stands for them. Method
    /// `carryOver`: a new context started, and the entry is the note carried over from the
    /// range (`fromSeq`–`toSeq`), which stays in the transcript but is no longer sent.
    Compaction {
        method: CompactionMethod,
        /// The `summary` entry that now stands for the range.
        message_id: String,
        from_seq: u64,
        to_seq: u64,
        /// Messages folded.
        messages: u64,
        /// The history's tokens as sent before and after.
        tokens_before: u64,
        tokens_after: u64,
        reason: CompactionReason,
    },
    /// A carry-over note was deleted (`note/delete`): its entry's text is now empty and it is
    /// never sent to a model again.
    NoteDeleted {
        message_id: String,
    },
    /// Token counts the provider reported for one model request (facts, no prices).
    Usage {
        provider: String,
        model: String,
        input: u64,
        output: u64,
        cache_read: u64,
        cache_write: u64,
        reasoning: u64,
        duration_ms: u64,
    },
    RunFinished {
        reason: FinishReason,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// One event of a child session working on this session's `delegate` call `callId`, as
    /// the child published it (`childSeq` is its number in the child's own sequence, so a gap
    /// there is filled from the child's `session/transcript`).
    Delegation {
        call_id: String,
        child_session_id: String,
        child_seq: u64,
        event: Box<Event>,
    },
    /// The session changed: the daemon titled it after its first answer (a title the user set
    /// is never replaced), or `session/update` (also a slash command or ACP) changed its
    /// title, model, effort, auto-compaction or other settings. It carries the whole session,
    /// as `session/get` gives it, so every client showing the session follows, not only the
    /// one that asked. Clients redraw the session's name from `title`.
    SessionUpdated {
        title: String,
        session: Box<super::Session>,
    },
    /// The model gave its plan (`update_plan`): the whole plan, which replaces the one before.
    Plan {
        call_id: String,
        plan: super::Plan,
    },
    /// `session/rewind` took the session back to just before the user message `messageId`:
    /// the files it lists are back, and (unless only files were restored) the entries from
    /// that message on are now marked rewound.
    Rewound {
        message_id: String,
        restore: super::RewindRestore,
        restored: Vec<super::RewoundFile>,
        skipped: Vec<super::SkippedFile>,
        rewound_messages: u64,
    },
}

impl Event {
    /// Every `kind` of `session/event`, in declaration order, as `initialize` advertises them.
    /// A constant, so start-up does not generate the schema to learn them; a test checks that
    /// it lists exactly the kinds of the schema generated from the enum above.
    pub const KINDS: &'static [&'static str] = &[
        "runStarted",
        "messageStarted",
        "textDelta",
        "thinkingDelta",
        "messageCompleted",
        "toolCallStarted",
        "toolCallUpdated",
        "approvalRequested",
        "approvalResolved",
        "interjectionQueued",
        "interjectionDelivered",
        "interjectionPromoted",
        "interjectionCancelled",
        "notice",
        "budget",
        "compaction",
        "noteDeleted",
        "usage",
        "runFinished",
        "delegation",
        "sessionUpdated",
        "plan",
        "rewound",
    ];
}

/// Which streamed text a [`Delta`] adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaKind {
    Text,
    Thinking,
}

/// A `textDelta` or `thinkingDelta` event, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta<'a> {
    pub session_id: &'a str,
    pub seq: u64,
    pub run_id: Option<&'a str>,
    pub kind: DeltaKind,
    pub message_id: &'a str,
    pub text: &'a str,
}

impl Delta<'_> {
    /// The event as every other event is published.
    pub fn to_event(&self) -> SessionEventParams {
        let message_id = self.message_id.to_string();
        let text = self.text.to_string();
        SessionEventParams {
            session_id: self.session_id.to_string(),
            seq: self.seq,
            run_id: self.run_id.map(str::to_string),
            event: match self.kind {
                DeltaKind::Text => Event::TextDelta { message_id, text },
                DeltaKind::Thinking => Event::ThinkingDelta { message_id, text },
            },
        }
    }
}
