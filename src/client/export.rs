//! A session's whole stored transcript as JSON (every entry as `session/transcript` returns
//! it) or as Markdown to read.

use serde::Serialize;

use crate::protocol::{
    Block, NoticeLevel, PendingApproval, PendingInterjection, Role, Session,
    SessionTranscriptResult, TranscriptEntry,
};

/// What `sidechat sessions export --format json` writes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Export<'a> {
    pub session: &'a Session,
    pub entries: &'a [TranscriptEntry],
    pub pending_approvals: &'a [PendingApproval],
    pub pending_interjections: &'a [PendingInterjection],
}

pub fn json(session: &Session, transcript: &SessionTranscriptResult) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&Export {
        session,
        entries: &transcript.entries,
        pending_approvals: &transcript.pending_approvals,
        pending_interjections: &transcript.pending_interjections,
    })
}

/// A fence longer than any run of backticks in `text`, so the text cannot close it.
fn fence(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

fn code(out: &mut String, language: &str, text: &str) {
    let fence = fence(text);
    out.push_str(&format!(
        "{fence}{language}\n{}\n{fence}\n\n",
        text.trim_end_matches('\n')
    ));
}

pub fn markdown(session: &Session, transcript: &SessionTranscriptResult) -> String {
    let mut out = format!("# {}\n\n", session.title);
    out.push_str(&format!(
        "- session: `{}`\n- model: {} ({})\n",
        session.id, session.model, session.account
    ));
    if let Some(root) = &session.workspace_root {
        out.push_str(&format!("- folder: `{root}`\n"));
    }
    out.push_str(&format!(
        "- created: {}\n- updated: {}\n\n",
        session.created_at, session.updated_at
    ));
    for entry in &transcript.entries {
        let heading = match entry.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool results",
            Role::Note => "Note",
            Role::Notice => "Notice",
            Role::Summary => "Summary of earlier messages",
        };
        out.push_str(&format!("## {heading}\n\n"));
        for block in &entry.blocks {
            match block {
                Block::Text { text } => out.push_str(&format!("{}\n\n", text.trim_end())),
                Block::Thinking { text, .. } => out.push_str(&format!(
                    "<details><summary>Thinking</summary>\n\n{}\n\n</details>\n\n",
                    text.trim_end()
                )),
                Block::ToolCall { name, input, .. } => {
                    out.push_str(&format!("**Tool call** `{name}`\n\n"));
                    let input = serde_json::to_string_pretty(input).unwrap_or_default();
                    code(&mut out, "json", &input);
                }
                Block::ToolResult { output, status, .. } => {
                    let status = serde_json::to_value(status)
                        .ok()
                        .and_then(|s| s.as_str().map(str::to_string))
                        .unwrap_or_default();
                    out.push_str(&format!("**Result** ({status})\n\n"));
                    code(&mut out, "", output);
                }
                Block::Interjection { text, promoted, .. } => {
                    let when = match promoted {
                        true => "typed while the run worked; it started the next turn",
                        false => "typed while the run worked",
                    };
                    out.push_str(&format!("**The user added** ({when}): {text}\n\n"));
                }
                Block::Command { name, .. } => {
                    out.push_str(&format!("*(the custom command /{name})*\n\n"));
                }
                Block::Image {
                    image_id,
                    media_type,
                    width,
                    height,
                    ..
                } => out.push_str(&format!(
                    "**Image** ({media_type}, {width}×{height}, `{image_id}`)\n\n"
                )),
                Block::Attachment { name, text, .. } => {
                    out.push_str(&format!("**Attachment** `{name}`\n\n"));
                    code(&mut out, "", text);
                }
                Block::Notice { level, text } => {
                    let level = match level {
                        NoticeLevel::Info => "info",
                        NoticeLevel::Warning => "warning",
                        NoticeLevel::Error => "error",
                    };
                    out.push_str(&format!("> **{level}:** {text}\n\n"));
                }
                Block::Summary { text, messages, .. } => out.push_str(&format!(
                    "> {} messages folded: {}\n\n",
                    messages,
                    text.trim_end()
                )),
            }
        }
    }
    for approval in &transcript.pending_approvals {
        out.push_str(&format!(
            "## Waiting for approval\n\n{}\n\n",
            approval.summary
        ));
    }
    for waiting in &transcript.pending_interjections {
        out.push_str(&format!("## Waiting message\n\n{}\n\n", waiting.text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        assert_eq!(fence("plain"), "```");
        assert_eq!(fence("a ```` b"), "`````");
    }
}
