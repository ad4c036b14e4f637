use super::InterjectionStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatSendParams {
    pub session_id: String,
    /// What the user typed.
    pub text: String,
    /// A client-chosen id that makes a retried send harmless: the first answer is returned
    /// again and nothing is stored twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_message_id: Option<String>,
    /// Texts to attach to the message (e.g. files the user picked). Only for a new turn: while
    /// a run works they wait for the next turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub name: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatSendResult {
    /// The run that answers the message; when `queued`, the run that took it and will deliver
    /// it at its next delivery point (or promote it into the next turn when it ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The stored user message, or for a slash command the note or notice it wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// True when a run was working: the text was queued as an interjection.
    pub queued: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterjectionCancelParams {
    pub pending_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterjectionCancelResult {
    /// False when it was too late: the interjection was already on its way or settled.
    pub cancelled: bool,
    /// Its state after the call: `cancelled`, `leased`, `delivered` or `promoted`.
    pub status: InterjectionStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatStopResult {
    /// The run that was stopped; absent when none was running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub stopped: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatResumeResult {
    pub run_id: String,
}

/// How the user answered an approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalDecision {
    /// Run this call.
    Allow,
    /// Run this call and every later call of the same tool in this session.
    AllowAlways,
    /// Do not run it; the model is told it was denied.
    Deny,
    /// Resolved by `chat/stop` or by the run ending; never sent by a client.
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRespondParams {
    pub approval_id: String,
    pub decision: ApprovalDecision,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRespondResult {
    /// The decision in force: this answer's, or the earlier one if it was already resolved.
    pub decision: ApprovalDecision,
    /// False when the approval had already been resolved; nothing changed.
    pub applied: bool,
    /// Why nothing changed, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
