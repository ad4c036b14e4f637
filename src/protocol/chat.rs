//! The composer's methods on the wire: `chat/send` (a new turn, or an interjection while a run
//! works), `chat/stop`, `chat/resume`, `interjection/cancel` and `approval/respond`.
//!
//! The message size limit lives here, beside the params it limits, so the daemon and every
//! client read the same figure.

use super::InterjectionStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most a message may hold: its text and its attachments' names and texts, in UTF-8 bytes.
/// A message is stored, counted, shown and sent to a model whole, several times over; past
/// this size it is refused with an error that names the limit, before any of that.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// Reads one text of a message, refusing it as it is read when it alone holds more than
/// [`MAX_MESSAGE_BYTES`]: such a message is refused whatever else it holds, so its text is
/// never copied out of the frame it arrived in.
fn text_within_limit<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    struct WithinLimit;
    impl serde::de::Visitor<'_> for WithinLimit {
        type Value = String;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<String, E> {
            within_limit(text.len())?;
            Ok(text.to_owned())
        }

        fn visit_string<E: serde::de::Error>(self, text: String) -> Result<String, E> {
            within_limit(text.len())?;
            Ok(text)
        }
    }
    deserializer.deserialize_string(WithinLimit)
}

fn within_limit<E: serde::de::Error>(size: usize) -> Result<(), E> {
    if size > MAX_MESSAGE_BYTES {
        return Err(E::custom(format!(
            "the message is too large: one of its texts holds {size} bytes, over the limit of \
             {MAX_MESSAGE_BYTES} bytes (8 MiB); send less, or attach a smaller part"
        )));
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatSendParams {
    pub session_id: String,
    /// What the user typed.
    #[serde(deserialize_with = "text_within_limit")]
    pub text: String,
    /// A client-chosen id that makes a retried send harmless: the first answer is returned
    /// again and nothing is stored twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_message_id: Option<String>,
    /// Texts to attach to the message (e.g. files the user picked). Only for a new turn: while
    /// a run works they wait for the next turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// Images to send with the message (e.g. a pasted screenshot): PNG, JPEG, GIF or WebP, at
    /// most 5 MiB each once decoded and 20 per message. Only for a new turn, like attachments,
    /// and only to a model that accepts images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageInput>,
}

/// One image of a message, as a client sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageInput {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`; it must be what the data is.
    pub media_type: String,
    /// The image's bytes in base64 (standard alphabet, with padding).
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub name: String,
    #[serde(deserialize_with = "text_within_limit")]
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
    /// True when the database is locked by another program: the input is kept (in memory) and
    /// stored as soon as the database is free, as a new turn or an interjection, which the
    /// session's events then announce; a `notice` says so. No other field is set then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
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
    /// Run this call and every later call of the same tool in this session. (The wire name is
    /// kept from before there was a workspace answer: it means "allow for this session".)
    AllowAlways,
    /// Run this call and save an allow rule for the session's workspace: it applies to later
    /// calls in any session of that workspace root, across restarts. The rule is
    /// `approval/respond`'s `rule`, or the approval's `proposedRule` when none is given.
    AllowWorkspace,
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
    /// With `allowWorkspace`: the rule to save (e.g. `run_command(cargo test *)`), when the user
    /// edited the approval's `proposedRule`. Checked like a rule of the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// With `deny`: why, in the user's words; the model is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn read(params: serde_json::Value) -> Result<ChatSendParams, String> {
        serde_json::from_str(&params.to_string()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_text_past_the_limit_is_refused_as_it_is_read_and_one_at_it_is_kept() {
        let at = "x".repeat(MAX_MESSAGE_BYTES);
        let over = "x".repeat(MAX_MESSAGE_BYTES + 1);
        let kept = read(json!({"sessionId": "s", "text": at})).unwrap();
        assert_eq!(kept.text.len(), MAX_MESSAGE_BYTES);
        // Escapes count as the text they stand for.
        let escaped = format!(
            r#"{{"sessionId":"s","text":"{}"}}"#,
            "\\n".repeat(MAX_MESSAGE_BYTES)
        );
        let kept: ChatSendParams = serde_json::from_str(&escaped).unwrap();
        assert_eq!(kept.text.len(), MAX_MESSAGE_BYTES);
        for params in [
            json!({"sessionId": "s", "text": over}),
            json!({"sessionId": "s", "text": "hi", "attachments": [{"name": "a", "text": over}]}),
        ] {
            let error = read(params).unwrap_err();
            assert!(
                error.contains(&format!("{} bytes", MAX_MESSAGE_BYTES + 1))
                    && error.contains(&format!("limit of {MAX_MESSAGE_BYTES} bytes (8 MiB)")),
                "{error}"
            );
        }
    }
}
