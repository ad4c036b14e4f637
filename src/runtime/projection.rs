//! Projection of a stored transcript into what a model is sent.
//!
//! Notes and notices are dropped (never sent to a model), tool results become user-side content, empty
//! messages vanish and neighbours of the same role merge, so every provider sees alternating
//! turns that start with the user.

use crate::protocol::{Block, Role, TranscriptEntry};
use crate::provider::{ModelContent, ModelMessage, ModelRole};

/// How the model reads a message the user typed while it worked.
pub fn interjection_text(text: &str) -> String {
    format!("The user adds: {text}")
}

pub fn project(entries: &[TranscriptEntry]) -> Vec<ModelMessage> {
    let mut messages: Vec<ModelMessage> = Vec::new();
    for entry in entries {
        let role = match entry.role {
            Role::Note | Role::Notice => continue,
            Role::Assistant => ModelRole::Assistant,
            Role::User | Role::Tool => ModelRole::User,
        };
        let content: Vec<ModelContent> = entry.blocks.iter().filter_map(content).collect();
        if content.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            // A transcript never starts with the assistant; drop such a leftover.
            None if role == ModelRole::Assistant => {}
            _ => messages.push(ModelMessage { role, content }),
        }
    }
    messages
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
        Block::Notice { .. } => None,
        Block::Attachment { name, text } => Some(ModelContent::Text {
            text: format!("Attached {name}:\n{text}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{MessageStatus, ToolCallStatus};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn entry(role: Role, blocks: Vec<Block>) -> TranscriptEntry {
        TranscriptEntry {
            id: "m".into(),
            seq: 1,
            role,
            blocks,
            status: MessageStatus::Complete,
            run_id: None,
            created_at: String::new(),
        }
    }

    fn text(t: &str) -> Block {
        Block::Text { text: t.into() }
    }

    #[test]
    fn drops_notes_and_empties_and_merges_neighbours() {
        let entries = vec![
            entry(Role::User, vec![text("hi")]),
            entry(Role::Note, vec![text("cost: $0.01")]),
            entry(Role::Assistant, vec![text("")]),
            entry(Role::User, vec![text("again")]),
            entry(
                Role::Assistant,
                vec![
                    text("ok"),
                    Block::ToolCall {
                        id: "c1".into(),
                        name: "read_file".into(),
                        input: json!({}),
                    },
                ],
            ),
            entry(
                Role::Tool,
                vec![Block::ToolResult {
                    call_id: "c1".into(),
                    output: "data".into(),
                    is_error: false,
                    status: ToolCallStatus::Done,
                }],
            ),
        ];
        assert_eq!(
            project(&entries),
            vec![
                ModelMessage {
                    role: ModelRole::User,
                    content: vec![
                        ModelContent::Text { text: "hi".into() },
                        ModelContent::Text {
                            text: "again".into()
                        }
                    ]
                },
                ModelMessage {
                    role: ModelRole::Assistant,
                    content: vec![
                        ModelContent::Text { text: "ok".into() },
                        ModelContent::ToolCall {
                            id: "c1".into(),
                            name: "read_file".into(),
                            input: json!({})
                        }
                    ]
                },
                ModelMessage {
                    role: ModelRole::User,
                    content: vec![ModelContent::ToolResult {
                        call_id: "c1".into(),
                        output: "data".into(),
                        is_error: false
                    }]
                },
            ]
        );
    }
}
