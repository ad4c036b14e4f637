//! Pure mappings from sidechat's events and transcript to ACP session updates, and from ACP
//! prompts to what the composer sends. Nothing here does I/O, so each mapping is tested whole.

use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use crate::protocol::{
    Attachment, Block, Event, FinishReason, ImageInput, NoticeLevel, Role, ToolCallStatus,
};
use crate::protocol::{Effort, PendingApproval, Plan, PlanStepStatus, TranscriptEntry};

/// The ACP kind of a built-in tool, so a client picks the right icon and treatment.
pub fn tool_kind(tool: &str) -> acp::ToolKind {
    match tool {
        "read_file" | "list_directory" => acp::ToolKind::Read,
        "write_file" | "edit_file" => acp::ToolKind::Edit,
        "search_text" => acp::ToolKind::Search,
        "run_command" => acp::ToolKind::Execute,
        crate::tools::plan::UPDATE_PLAN => acp::ToolKind::Think,
        _ => acp::ToolKind::Other,
    }
}

/// ACP has four tool states; waiting for approval is `pending`, every unsuccessful end is
/// `failed` (the output says why: denied, stopped, or an error).
pub fn tool_status(status: ToolCallStatus) -> acp::ToolCallStatus {
    match status {
        ToolCallStatus::Pending | ToolCallStatus::AwaitingApproval => acp::ToolCallStatus::Pending,
        ToolCallStatus::Running => acp::ToolCallStatus::InProgress,
        ToolCallStatus::Done => acp::ToolCallStatus::Completed,
        ToolCallStatus::Error | ToolCallStatus::Denied | ToolCallStatus::Cancelled => {
            acp::ToolCallStatus::Failed
        }
    }
}

fn str_arg<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

/// The absolute path a tool's `path` argument names, under the workspace root.
fn absolute(root: Option<&Path>, relative: &str) -> Option<PathBuf> {
    let path = Path::new(relative);
    if path.is_absolute() {
        return Some(path.to_path_buf());
    }
    let root = root?;
    Some(match relative {
        "" | "." => root.to_path_buf(),
        _ => root.join(path),
    })
}

/// The files a call touches, as absolute paths, so a client can follow along.
pub fn locations(tool: &str, input: &Value, root: Option<&Path>) -> Vec<acp::ToolCallLocation> {
    let path = match tool {
        "run_command" => return Vec::new(),
        "list_directory" | "search_text" => str_arg(input, "path").unwrap_or("."),
        _ => match str_arg(input, "path") {
            Some(path) => path,
            None => return Vec::new(),
        },
    };
    let Some(path) = absolute(root, path) else {
        return Vec::new();
    };
    let mut location = acp::ToolCallLocation::new(path);
    if tool == "read_file"
        && let Some(line) = input.get("offset").and_then(Value::as_u64)
    {
        location = location.line(u32::try_from(line).ok());
    }
    vec![location]
}

/// The change a write or an edit makes, as ACP's `diff` content. `old_file` is the file's
/// content before a write (absent for a new file); an edit shows the replaced text alone.
pub fn diff(
    tool: &str,
    input: &Value,
    root: Option<&Path>,
    old_file: Option<String>,
) -> Option<acp::ToolCallContent> {
    let path = absolute(root, str_arg(input, "path")?)?;
    let diff = match tool {
        "write_file" => acp::Diff::new(path, str_arg(input, "content")?).old_text(old_file),
        "edit_file" => acp::Diff::new(path, str_arg(input, "new_string")?)
            .old_text(str_arg(input, "old_string")?.to_string()),
        _ => return None,
    };
    Some(acp::ToolCallContent::Diff(diff))
}

/// A tool call as ACP announces it.
pub fn tool_call(
    call_id: &str,
    tool: &str,
    input: &Value,
    root: Option<&Path>,
    old_file: Option<String>,
) -> acp::ToolCall {
    acp::ToolCall::new(call_id.to_string(), crate::tools::summary(tool, input))
        .kind(tool_kind(tool))
        .status(acp::ToolCallStatus::Pending)
        .locations(locations(tool, input, root))
        .content(diff(tool, input, root, old_file).into_iter().collect())
        .raw_input(input.clone())
}

/// A state change of a call. The output of a finished call becomes its content, except for a
/// successful write or edit, whose diff stays what the client shows.
pub fn tool_call_update(
    call_id: &str,
    tool: Option<&str>,
    status: ToolCallStatus,
    output: Option<&str>,
) -> acp::ToolCallUpdate {
    let mut fields = acp::ToolCallUpdateFields::new().status(tool_status(status));
    let keeps_diff = status == ToolCallStatus::Done
        && tool.is_some_and(|t| matches!(t, "write_file" | "edit_file"));
    if let Some(output) = output.filter(|_| !keeps_diff) {
        fields = fields.content(vec![acp::ToolCallContent::from(output.to_string())]);
    }
    acp::ToolCallUpdate::new(call_id.to_string(), fields)
}

/// The tool call a permission request is about.
pub fn permission_subject(approval: &PendingApproval, root: Option<&Path>) -> acp::ToolCallUpdate {
    let fields = acp::ToolCallUpdateFields::new()
        .title(permission_title(approval))
        .kind(tool_kind(&approval.tool))
        .status(acp::ToolCallStatus::Pending)
        .locations(locations(&approval.tool, &approval.input, root))
        .raw_input(approval.input.clone());
    acp::ToolCallUpdate::new(approval.call_id.clone(), fields)
}

/// The prompt's title: the call's summary, and for a command whether it will run in the
/// sandbox, which is what the user weighs before allowing it (ACP has no field for it).
fn permission_title(approval: &PendingApproval) -> String {
    match approval.sandboxed {
        Some(true) => format!("{} (runs sandboxed)", approval.summary),
        Some(false) => format!("{} (runs outside the sandbox)", approval.summary),
        None => approval.summary.clone(),
    }
}

fn chunk(message_id: &str, text: &str) -> acp::ContentChunk {
    acp::ContentChunk::new(acp::ContentBlock::from(text.to_string()))
        .message_id(acp::MessageId::new(message_id))
}

/// A notice (an error, a retry, a cut-off, a limit, a refusal) as ACP can show it: ACP has no
/// update of its own for one, so it is an agent message of its own (`messageId` is the notice's
/// entry), its text led by its level, and marked in `_meta.sidechat.notice` with the level so a
/// client that knows sidechat can draw it apart. Blank lines around the text keep it apart from
/// the answer in a client that joins every chunk into one message.
pub fn notice(message_id: &str, level: NoticeLevel, text: &str) -> acp::SessionUpdate {
    let label = match level {
        NoticeLevel::Info => "Note",
        NoticeLevel::Warning => "Warning",
        NoticeLevel::Error => "Error",
    };
    let mut meta = serde_json::Map::new();
    meta.insert(
        "sidechat".into(),
        serde_json::json!({"notice": {"level": level}}),
    );
    acp::SessionUpdate::AgentMessageChunk(
        chunk(message_id, &format!("\n\n{label}: {text}\n\n")).meta(meta),
    )
}

/// The updates a live event shows, beyond what needs the session's state (tool calls need
/// the file before a write, approvals a request, usage the cost): text and thinking deltas,
/// tool state changes, local notes and notices.
pub fn live_update(event: &Event) -> Option<acp::SessionUpdate> {
    match event {
        Event::TextDelta { message_id, text } => Some(acp::SessionUpdate::AgentMessageChunk(
            chunk(message_id, text),
        )),
        Event::ThinkingDelta { message_id, text } => Some(acp::SessionUpdate::AgentThoughtChunk(
            chunk(message_id, text),
        )),
        Event::ToolCallUpdated {
            call_id,
            status,
            output,
        } => Some(acp::SessionUpdate::ToolCallUpdate(tool_call_update(
            call_id,
            None,
            *status,
            output.as_deref(),
        ))),
        Event::Notice {
            level,
            message,
            message_id,
        } => Some(notice(message_id, *level, message)),
        Event::Plan { plan, .. } => Some(acp::SessionUpdate::Plan(plan_update(plan))),
        // A slash command's answer is a note: the client shows it as the agent's message.
        // The daemon titled the session after its first answer, or a setting changed.
        Event::SessionUpdated { title, .. } => Some(acp::SessionUpdate::SessionInfoUpdate(
            acp::SessionInfoUpdate::new().title(title.clone()),
        )),
        Event::MessageCompleted { entry } if entry.role == Role::Note => {
            let text = note_text(entry);
            Some(acp::SessionUpdate::AgentMessageChunk(chunk(
                &entry.id, &text,
            )))
        }
        _ => None,
    }
}

/// The model's plan as ACP's checklist. The protocol's steps have no priority; every entry is
/// sent as `medium`, and the explanation rides in `_meta`.
pub fn plan_update(plan: &Plan) -> acp::Plan {
    let entries = plan
        .steps
        .iter()
        .map(|s| {
            let status = match s.status {
                PlanStepStatus::Pending => acp::PlanEntryStatus::Pending,
                PlanStepStatus::InProgress => acp::PlanEntryStatus::InProgress,
                PlanStepStatus::Completed => acp::PlanEntryStatus::Completed,
            };
            acp::PlanEntry::new(s.step.clone(), acp::PlanEntryPriority::Medium, status)
        })
        .collect();
    let update = acp::Plan::new(entries);
    match &plan.explanation {
        Some(explanation) => {
            let mut meta = serde_json::Map::new();
            meta.insert(
                "sidechat".into(),
                serde_json::json!({"explanation": explanation}),
            );
            update.meta(meta)
        }
        None => update,
    }
}

fn note_text(entry: &TranscriptEntry) -> String {
    entry
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Replays one stored message as the updates that showed it live. `tools` finds the tool and
/// input of a result's call among the messages replayed before.
pub fn replay(
    entry: &TranscriptEntry,
    root: Option<&Path>,
    tools: &mut std::collections::HashMap<String, (String, Value)>,
) -> Vec<acp::SessionUpdate> {
    let mut updates = Vec::new();
    for block in &entry.blocks {
        let update = match (entry.role, block) {
            (Role::User, Block::Text { text }) | (Role::User, Block::Interjection { text, .. }) => {
                acp::SessionUpdate::UserMessageChunk(chunk(&entry.id, text))
            }
            (Role::User, Block::Attachment { name, text, .. }) => {
                let resource = acp::EmbeddedResourceResource::TextResourceContents(
                    acp::TextResourceContents::new(text.clone(), name.clone()),
                );
                acp::SessionUpdate::UserMessageChunk(
                    acp::ContentChunk::new(acp::ContentBlock::Resource(
                        acp::EmbeddedResource::new(resource),
                    ))
                    .message_id(acp::MessageId::new(entry.id.as_str())),
                )
            }
            (Role::Assistant, Block::Thinking { text, .. }) if !text.is_empty() => {
                acp::SessionUpdate::AgentThoughtChunk(chunk(&entry.id, text))
            }
            (Role::Assistant, Block::Text { text }) => {
                acp::SessionUpdate::AgentMessageChunk(chunk(&entry.id, text))
            }
            (Role::Assistant, Block::ToolCall { id, name, input }) => {
                tools.insert(id.clone(), (name.clone(), input.clone()));
                acp::SessionUpdate::ToolCall(tool_call(id, name, input, root, None))
            }
            (
                Role::Tool,
                Block::ToolResult {
                    call_id,
                    output,
                    status,
                    ..
                },
            ) => {
                let tool = tools.get(call_id).map(|(name, _)| name.as_str());
                acp::SessionUpdate::ToolCallUpdate(tool_call_update(
                    call_id,
                    tool,
                    *status,
                    Some(output),
                ))
            }
            (Role::Note, Block::Text { text }) => {
                acp::SessionUpdate::AgentMessageChunk(chunk(&entry.id, text))
            }
            (Role::Notice, Block::Notice { level, text }) => notice(&entry.id, *level, text),
            _ => continue,
        };
        updates.push(update);
    }
    updates
}

/// How a prompt turn ended, for `session/prompt`'s answer; `Err` carries the message of the
/// JSON-RPC error a failed or over-budget run answers with.
pub fn stop_reason(reason: FinishReason, error: Option<&str>) -> Result<acp::StopReason, String> {
    match reason {
        FinishReason::EndTurn => Ok(acp::StopReason::EndTurn),
        FinishReason::Stopped => Ok(acp::StopReason::Cancelled),
        FinishReason::MaxIterations => Ok(acp::StopReason::MaxTurnRequests),
        FinishReason::CutOff => Ok(acp::StopReason::MaxTokens),
        FinishReason::Refusal => Ok(acp::StopReason::Refusal),
        FinishReason::BudgetSpent => Err(format!(
            "The session's budget is spent: {}. Raise the limit to continue.",
            error.unwrap_or("a limit was reached")
        )),
        FinishReason::Error => Err(format!(
            "The model request failed: {}",
            error.unwrap_or("no reason was given")
        )),
    }
}

/// Why a prompt's content cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PromptError(pub String);

/// An ACP prompt as the composer's parts: its text, attachments and images.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub text: String,
    pub attachments: Vec<Attachment>,
    pub images: Vec<ImageInput>,
}

/// An ACP prompt as the composer's text, attachments and images: text blocks and links join
/// the text, embedded text resources become attachments, image blocks images (checked by the
/// daemon like any other). Audio and binary resources are refused, as `initialize` does not
/// offer them.
pub fn prompt_text(prompt: &[acp::ContentBlock]) -> Result<Prompt, PromptError> {
    let mut parts: Vec<String> = Vec::new();
    let mut attachments = Vec::new();
    let mut images = Vec::new();
    for (index, block) in prompt.iter().enumerate() {
        match block {
            acp::ContentBlock::Text(text) => parts.push(text.text.clone()),
            acp::ContentBlock::ResourceLink(link) => parts.push(format!("@{}", link.uri)),
            acp::ContentBlock::Resource(resource) => match &resource.resource {
                acp::EmbeddedResourceResource::TextResourceContents(contents) => {
                    attachments.push(Attachment {
                        name: contents.uri.clone(),
                        text: contents.text.clone(),
                    })
                }
                _ => {
                    return Err(PromptError(format!(
                        "prompt block {index} is a binary resource; sidechat takes text resources only"
                    )));
                }
            },
            acp::ContentBlock::Image(image) => images.push(ImageInput {
                media_type: image.mime_type.clone(),
                data: image.data.clone(),
            }),
            acp::ContentBlock::Audio(_) => {
                return Err(PromptError(format!(
                    "prompt block {index} is audio; sidechat does not take audio (promptCapabilities.audio is false)"
                )));
            }
            _ => {
                return Err(PromptError(format!(
                    "prompt block {index} has a content type sidechat does not know"
                )));
            }
        }
    }
    let text = parts.join("\n");
    if text.trim().is_empty() {
        return Err(PromptError(
            "the prompt has no text; send at least one non-empty text block".into(),
        ));
    }
    Ok(Prompt {
        text,
        attachments,
        images,
    })
}

/// A session's provisional title from the first prompt: its first line, redacted, at most
/// 60 characters (`context::title::from_words`). The daemon's own title replaces it after the
/// first answer.
pub fn title_from(text: &str) -> String {
    crate::context::title::from_words(text)
}

/// The slash commands a client may offer in its composer: the built-in ones, then the
/// session's custom commands (`custom`: `session/commands`' custom entries).
pub fn available_commands(custom: &[crate::protocol::CommandInfo]) -> acp::AvailableCommandsUpdate {
    let hint = |text: &str| {
        Some(acp::AvailableCommandInput::Unstructured(
            acp::UnstructuredCommandInput::new(text),
        ))
    };
    let mut commands = vec![
        acp::AvailableCommand::new("cost", "What this session has cost so far"),
        acp::AvailableCommand::new("model", "Show or switch the model").input(hint("model id")),
        acp::AvailableCommand::new("system", "Set the system prompt; alone, remove it")
            .input(hint("system prompt")),
        acp::AvailableCommand::new(
            "clear",
            "The model starts fresh; earlier messages stay readable",
        ),
        acp::AvailableCommand::new("compact", "Summarise the earlier turns now")
            .input(hint("what the summary should focus on")),
        acp::AvailableCommand::new("new-context", "Start afresh with a short note carried over"),
        acp::AvailableCommand::new(
            "instructions",
            "The instruction files (AGENTS.md) sent with every request",
        ),
        acp::AvailableCommand::new(
            "undo",
            "Take back the last turn: its file changes and its messages",
        ),
        acp::AvailableCommand::new(
            "rewind",
            "List the turns with their changed files; with n, take back the last n",
        )
        .input(hint("number of turns")),
        acp::AvailableCommand::new("fork", "A new session with this conversation so far"),
        acp::AvailableCommand::new("help", "The list of commands"),
    ];
    commands.extend(
        custom
            .iter()
            .filter(|c| c.source != crate::protocol::CommandSource::Builtin)
            .map(|c| {
                let command = acp::AvailableCommand::new(c.name.clone(), c.description.clone());
                match &c.argument_hint {
                    Some(text) => command.input(hint(text)),
                    None => command,
                }
            }),
    );
    acp::AvailableCommandsUpdate::new(commands)
}

/// The model selector: the session's model, and its account's default beside it.
pub fn model_option(current: &str, account_default: &str) -> acp::SessionConfigOption {
    let mut models = vec![current.to_string()];
    if account_default != current {
        models.push(account_default.to_string());
    }
    let options: Vec<acp::SessionConfigSelectOption> = models
        .into_iter()
        .map(|m| acp::SessionConfigSelectOption::new(m.clone(), m))
        .collect();
    acp::SessionConfigOption::select("model", "Model", current.to_string(), options)
        .category(acp::SessionConfigOptionCategory::Model)
        .description("The model that answers from the next request on".to_string())
}

/// The value of the thought-level option that goes back to the account's default effort.
pub const DEFAULT_EFFORT: &str = "default";

/// The reasoning-effort selector (category `thought_level`): "default" (the account's, named
/// when it has one) and the levels the session's model takes; `None` for a model that takes
/// none, whose session offers no such option.
pub fn thought_level_option(
    current: Option<Effort>,
    own: bool,
    account_default: Option<Effort>,
    levels: &[Effort],
) -> Option<acp::SessionConfigOption> {
    if levels.is_empty() {
        return None;
    }
    let default_name = match account_default {
        Some(effort) => format!("Default ({})", effort.name()),
        None => "Default (the model's)".to_string(),
    };
    let mut options = vec![acp::SessionConfigSelectOption::new(
        DEFAULT_EFFORT,
        default_name,
    )];
    options.extend(
        levels
            .iter()
            .map(|e| acp::SessionConfigSelectOption::new(e.name(), capitalised(e.name()))),
    );
    let value = match current {
        Some(effort) if own => effort.name(),
        _ => DEFAULT_EFFORT,
    };
    Some(
        acp::SessionConfigOption::select("effort", "Effort", value.to_string(), options)
            .category(acp::SessionConfigOptionCategory::ThoughtLevel)
            .description("How hard the model thinks, from the next request on".to_string()),
    )
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn wire<T: serde::Serialize>(value: &T) -> Value {
        serde_json::to_value(value).unwrap()
    }

    /// The permission prompt's title tells whether a command will run in the sandbox.
    #[test]
    fn a_command_permission_title_says_whether_it_runs_sandboxed() {
        let approval = |sandboxed: Option<bool>| PendingApproval {
            approval_id: "a".into(),
            run_id: "r".into(),
            call_id: "c".into(),
            tool: "run_command".into(),
            input: json!({"command": "ls"}),
            summary: "run ls".into(),
            created_at: String::new(),
            proposed_rule: None,
            why_asked: None,
            sandboxed,
        };
        let title =
            |sandboxed| wire(&permission_subject(&approval(sandboxed), None))["title"].clone();
        assert_eq!(
            [title(Some(true)), title(Some(false)), title(None)],
            [
                json!("run ls (runs sandboxed)"),
                json!("run ls (runs outside the sandbox)"),
                json!("run ls")
            ]
        );
    }

    #[test]
    fn a_plan_becomes_a_plan_update_with_every_entry() {
        use crate::protocol::PlanStep;
        let event = Event::Plan {
            call_id: "call_1".into(),
            plan: Plan {
                explanation: Some("two left".into()),
                steps: vec![
                    PlanStep {
                        step: "Read".into(),
                        status: PlanStepStatus::Completed,
                    },
                    PlanStep {
                        step: "Fix".into(),
                        status: PlanStepStatus::InProgress,
                    },
                    PlanStep {
                        step: "Test".into(),
                        status: PlanStepStatus::Pending,
                    },
                ],
            },
        };
        assert_eq!(
            wire(&live_update(&event).unwrap()),
            json!({
                "sessionUpdate": "plan",
                "entries": [
                    {"content": "Read", "priority": "medium", "status": "completed"},
                    {"content": "Fix", "priority": "medium", "status": "in_progress"},
                    {"content": "Test", "priority": "medium", "status": "pending"}
                ],
                "_meta": {"sidechat": {"explanation": "two left"}}
            })
        );
    }

    #[test]
    fn deltas_become_message_and_thought_chunks() {
        let text = Event::TextDelta {
            message_id: "msg_1".into(),
            text: "Hello".into(),
        };
        assert_eq!(
            wire(&live_update(&text).unwrap()),
            json!({"sessionUpdate": "agent_message_chunk", "messageId": "msg_1",
                   "content": {"type": "text", "text": "Hello"}})
        );
        let thinking = Event::ThinkingDelta {
            message_id: "msg_1".into(),
            text: "hmm".into(),
        };
        assert_eq!(
            wire(&live_update(&thinking).unwrap()),
            json!({"sessionUpdate": "agent_thought_chunk", "messageId": "msg_1",
                   "content": {"type": "text", "text": "hmm"}})
        );
    }

    #[test]
    fn a_notice_is_an_agent_message_of_its_own_marked_with_its_level() {
        let live = Event::Notice {
            level: NoticeLevel::Warning,
            message: "The answer got too long and was cut off.".into(),
            message_id: "msg_n".into(),
        };
        let expected = json!({
            "sessionUpdate": "agent_message_chunk",
            "messageId": "msg_n",
            "content": {"type": "text", "text": "\n\nWarning: The answer got too long and was cut off.\n\n"},
            "_meta": {"sidechat": {"notice": {"level": "warning"}}},
        });
        assert_eq!(wire(&live_update(&live).unwrap()), expected);
        let stored = TranscriptEntry {
            id: "msg_n".into(),
            seq: 4,
            role: Role::Notice,
            blocks: vec![Block::Notice {
                level: NoticeLevel::Warning,
                text: "The answer got too long and was cut off.".into(),
            }],
            status: crate::protocol::MessageStatus::Complete,
            run_id: None,
            created_at: String::new(),
            rewound: false,
        };
        let replayed: Vec<Value> = replay(&stored, None, &mut Default::default())
            .iter()
            .map(wire)
            .collect();
        assert_eq!(replayed, vec![expected]);
        let error = notice("msg_e", NoticeLevel::Error, "HTTP 500");
        assert_eq!(
            wire(&error)["content"]["text"],
            json!("\n\nError: HTTP 500\n\n")
        );
    }

    #[test]
    fn a_write_is_an_edit_with_a_diff_and_an_absolute_location() {
        let input = json!({"path": "notes/a.md", "content": "new\n"});
        let call = tool_call(
            "call_1",
            "write_file",
            &input,
            Some(Path::new("/ws")),
            Some("old\n".into()),
        );
        assert_eq!(
            wire(&acp::SessionUpdate::ToolCall(call)),
            json!({
                "sessionUpdate": "tool_call",
                "toolCallId": "call_1",
                "title": "write notes/a.md (1 line)",
                "kind": "edit",
                "content": [{"type": "diff", "path": "/ws/notes/a.md", "oldText": "old\n", "newText": "new\n"}],
                "locations": [{"path": "/ws/notes/a.md"}],
                "rawInput": input,
            })
        );
    }

    #[test]
    fn a_command_is_execute_and_its_output_is_content() {
        let input = json!({"command": "ls"});
        let call = wire(&tool_call(
            "c",
            "run_command",
            &input,
            Some(Path::new("/ws")),
            None,
        ));
        assert_eq!(call["kind"], "execute");
        // No files: the empty list is left out, as is the default `pending` status.
        assert_eq!(call.get("locations"), None);
        assert_eq!(call.get("status"), None);
        let done = tool_call_update("c", Some("run_command"), ToolCallStatus::Done, Some("a\nb"));
        assert_eq!(
            wire(&done),
            json!({"toolCallId": "c", "status": "completed",
                   "content": [{"type": "content", "content": {"type": "text", "text": "a\nb"}}]})
        );
    }

    #[test]
    fn a_finished_edit_keeps_its_diff_and_a_denied_one_says_why() {
        let done = tool_call_update("e", Some("edit_file"), ToolCallStatus::Done, Some("edited"));
        assert_eq!(
            wire(&done),
            json!({"toolCallId": "e", "status": "completed"})
        );
        let denied = tool_call_update("e", Some("edit_file"), ToolCallStatus::Denied, Some("no"));
        assert_eq!(
            wire(&denied),
            json!({"toolCallId": "e", "status": "failed",
                   "content": [{"type": "content", "content": {"type": "text", "text": "no"}}]})
        );
    }

    #[test]
    fn kinds_and_states_cover_every_tool_and_status() {
        let kinds: Vec<Value> = [
            "read_file",
            "list_directory",
            "search_text",
            "write_file",
            "edit_file",
            "run_command",
            "mcp__x__y",
        ]
        .iter()
        .map(|t| wire(&tool_kind(t)))
        .collect();
        assert_eq!(
            kinds,
            vec![
                json!("read"),
                json!("read"),
                json!("search"),
                json!("edit"),
                json!("edit"),
                json!("execute"),
                json!("other")
            ]
        );
        use ToolCallStatus::*;
        let states: Vec<Value> = [
            Pending,
            AwaitingApproval,
            Running,
            Done,
            Error,
            Denied,
            Cancelled,
        ]
        .iter()
        .map(|s| wire(&tool_status(*s)))
        .collect();
        assert_eq!(
            states,
            vec![
                json!("pending"),
                json!("pending"),
                json!("in_progress"),
                json!("completed"),
                json!("failed"),
                json!("failed"),
                json!("failed")
            ]
        );
    }

    #[test]
    fn finish_reasons_map_to_stop_reasons_or_errors() {
        let reasons: Vec<Result<Value, String>> = [
            (FinishReason::EndTurn, None),
            (FinishReason::Stopped, None),
            (FinishReason::MaxIterations, None),
            (FinishReason::CutOff, None),
            (FinishReason::Refusal, None),
            (FinishReason::BudgetSpent, Some("capUsd: over")),
            (FinishReason::Error, Some("503 from upstream")),
        ]
        .into_iter()
        .map(|(r, e)| stop_reason(r, e).map(|s| wire(&s)))
        .collect();
        assert_eq!(
            reasons,
            vec![
                Ok(json!("end_turn")),
                Ok(json!("cancelled")),
                Ok(json!("max_turn_requests")),
                Ok(json!("max_tokens")),
                Ok(json!("refusal")),
                Err(
                    "The session's budget is spent: capUsd: over. Raise the limit to continue."
                        .into()
                ),
                Err("The model request failed: 503 from upstream".into()),
            ]
        );
    }

    #[test]
    fn a_transcript_replays_in_order_with_final_tool_states() {
        let entry = |id: &str, role, blocks| TranscriptEntry {
            id: String::from(id),
            seq: 1,
            role,
            blocks,
            status: crate::protocol::MessageStatus::Complete,
            run_id: None,
            created_at: String::new(),
            rewound: false,
        };
        let entries = [
            entry("u1", Role::User, vec![Block::Text { text: "hi".into() }]),
            entry(
                "a1",
                Role::Assistant,
                vec![
                    Block::Thinking {
                        text: "think".into(),
                        signature: None,
                    },
                    Block::Text { text: "ok".into() },
                    Block::ToolCall {
                        id: "c1".into(),
                        name: "run_command".into(),
                        input: json!({"command": "ls"}),
                    },
                ],
            ),
            entry(
                "t1",
                Role::Tool,
                vec![Block::ToolResult {
                    call_id: "c1".into(),
                    output: "a".into(),
                    is_error: false,
                    status: ToolCallStatus::Done,
                }],
            ),
        ];
        let mut tools = Default::default();
        let kinds: Vec<Value> = entries
            .iter()
            .flat_map(|e| replay(e, Some(Path::new("/ws")), &mut tools))
            .map(|u| {
                let u = wire(&u);
                json!([u["sessionUpdate"], u["status"]])
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                json!(["user_message_chunk", null]),
                json!(["agent_thought_chunk", null]),
                json!(["agent_message_chunk", null]),
                json!(["tool_call", null]),
                json!(["tool_call_update", "completed"]),
            ]
        );
    }

    #[test]
    fn prompts_become_text_attachments_and_images_and_bad_blocks_are_refused() {
        let prompt: Vec<acp::ContentBlock> = serde_json::from_value(json!([
            {"type": "text", "text": "Look at"},
            {"type": "resource_link", "name": "a.rs", "uri": "file:///ws/a.rs"},
            {"type": "resource", "resource": {"uri": "file:///ws/b.rs", "text": "fn b() {}"}}
        ]))
        .unwrap();
        assert_eq!(
            prompt_text(&prompt),
            Ok(Prompt {
                text: "Look at\n@file:///ws/a.rs".to_string(),
                attachments: vec![Attachment {
                    name: "file:///ws/b.rs".into(),
                    text: "fn b() {}".into()
                }],
                images: Vec::new(),
            })
        );
        let image: Vec<acp::ContentBlock> = serde_json::from_value(json!([
            {"type": "text", "text": "What is this?"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        ]))
        .unwrap();
        assert_eq!(
            prompt_text(&image),
            Ok(Prompt {
                text: "What is this?".to_string(),
                attachments: Vec::new(),
                images: vec![ImageInput {
                    media_type: "image/png".into(),
                    data: "AAAA".into()
                }],
            })
        );
        let audio: Vec<acp::ContentBlock> = serde_json::from_value(json!([
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}
        ]))
        .unwrap();
        assert!(prompt_text(&audio).is_err());
        assert!(prompt_text(&[]).is_err());
    }

    #[test]
    fn titles_come_from_the_first_line() {
        assert_eq!(title_from("\n  Fix the build  \nplease"), "Fix the build");
        assert_eq!(title_from(&"x".repeat(70)), format!("{}…", "x".repeat(59)));
        // Redacted before the cut: a key across it is not left as a prefix.
        assert_eq!(
            title_from(&format!("{} AKIAIOSFODNN7EXAMPLE", "x".repeat(45))),
            format!("{} [redacted]", "x".repeat(45))
        );
    }
}
