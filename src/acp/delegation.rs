//! A delegated task as ACP shows it: the parent's `delegate` call is a `tool_call` whose
//! content follows the sub-agent's progress, one line per step it takes, until the call's
//! result replaces it. The child session itself is never shown as a session of its own (the
//! client did not open it); its permission requests are asked in the parent's session, about
//! the `delegate` call.

use agent_client_protocol_schema::v1 as acp;

use crate::protocol::{Block, Event, PendingApproval, Role, ToolCallStatus};

/// How many of the sub-agent's latest steps the call's content shows.
pub const PROGRESS_LINES: usize = 8;

/// Longest line of progress, in bytes.
const LINE: usize = 200;

fn first_line(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(crate::tools::truncate(line, LINE))
}

/// One line of progress for an event of the sub-agent; `None` for events that show nothing.
pub fn progress(event: &Event) -> Option<String> {
    match event {
        Event::ToolCallStarted { summary, .. } => Some(format!("→ {summary}")),
        Event::ToolCallUpdated {
            status: ToolCallStatus::Error | ToolCallStatus::Denied,
            output: Some(output),
            ..
        } => first_line(output).map(|line| format!("✗ {line}")),
        Event::MessageCompleted { entry } if entry.role == Role::Assistant => {
            let text: String = entry
                .blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            first_line(&text)
        }
        _ => None,
    }
}

/// The `delegate` call's content: the latest lines of progress.
pub fn update(call_id: &str, lines: &[String]) -> acp::ToolCallUpdate {
    let fields = acp::ToolCallUpdateFields::new()
        .content(vec![acp::ToolCallContent::from(lines.join("\n"))]);
    acp::ToolCallUpdate::new(call_id.to_string(), fields)
}

/// A sub-agent's approval as the parent session asks it: about the `delegate` call, the
/// title saying it is the delegated task that asks. Its id stays the child's, so the answer
/// is the same decision.
pub fn approval_in_parent(approval: &PendingApproval, call_id: &str) -> PendingApproval {
    PendingApproval {
        call_id: call_id.to_string(),
        summary: format!("{} (delegated task)", approval.summary),
        ..approval.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn steps_show_as_lines_and_the_rest_as_nothing() {
        let started = Event::ToolCallStarted {
            call_id: "c".into(),
            tool: "read_file".into(),
            input: json!({"path": "a.md"}),
            summary: "read a.md".into(),
        };
        let failed = Event::ToolCallUpdated {
            call_id: "c".into(),
            status: ToolCallStatus::Error,
            output: Some("no such file\nmore".into()),
        };
        let running = Event::ToolCallUpdated {
            call_id: "c".into(),
            status: ToolCallStatus::Running,
            output: None,
        };
        assert_eq!(progress(&started).as_deref(), Some("→ read a.md"));
        assert_eq!(progress(&failed).as_deref(), Some("✗ no such file"));
        assert_eq!(progress(&running), None);
        let wire = serde_json::to_value(update("call_d", &["a".into(), "b".into()])).unwrap();
        assert_eq!(
            wire,
            json!({"toolCallId": "call_d", "content": [{"type": "content", "content": {"type": "text", "text": "a\nb"}}]})
        );
    }
}
