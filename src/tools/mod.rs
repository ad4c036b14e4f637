//! Built-in workspace tools, their approval policy and one-line summaries.
//!
//! Every tool works inside the session's workspace root ([`Workspace`]); reading is allowed
//! without asking, writing, editing and commands wait for the user's approval.

mod command;
mod confined;
mod files;
mod paths;
pub mod plan;
#[cfg(test)]
mod race_tests;
mod replace;
mod search;
pub mod web_fetch;

use serde_json::{Value, json};

pub use confined::{OpenError, OpenedFolder, OpenedParent};
pub use files::{folder_names, listing, numbered};
pub use paths::{PathError, Workspace, shown};
pub use replace::replace_in;

use crate::protocol::ChangedFile;
use crate::provider::ToolSpec;

/// The result of running one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// What the model is shown.
    pub output: String,
    pub is_error: bool,
    /// The file a successful write or edit changed.
    pub changed: Option<ChangedFile>,
    /// That file's text before and after, for a diff.
    pub snapshot: Option<FileSnapshot>,
    /// An image the tool read (`read_file` on an image), sent to the model with the result
    /// when the model reads images.
    pub image: Option<crate::images::CheckedImage>,
}

/// A changed file's text before and after one write or edit.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSnapshot {
    /// `None` when the file did not exist.
    pub before: Option<String>,
    pub after: String,
}

impl ToolOutcome {
    pub fn ok(output: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            is_error: false,
            changed: None,
            snapshot: None,
            image: None,
        }
    }

    pub fn error(output: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            is_error: true,
            changed: None,
            snapshot: None,
            image: None,
        }
    }
}

/// The tool that runs shell commands, the one the sandbox applies to.
pub const RUN_COMMAND: &str = "run_command";

/// Where a file tool keeps a file's content before changing it, so that the change can be
/// taken back (`session/rewind`).
pub trait Checkpoints: Send + Sync {
    /// Keeps `path`'s content and permissions (`None`: there is no such file) before a tool
    /// writes `after` there. An error stops the tool before it writes: a change that could not
    /// be taken back is not made.
    fn keep(&self, path: &str, before: Option<(&[u8], u32)>, after: &[u8]) -> Result<(), String>;
}

/// Keeps nothing: for tools run outside a daemon (tests of the tools).
pub struct NoCheckpoints;

impl Checkpoints for NoCheckpoints {
    fn keep(&self, _: &str, _: Option<(&[u8], u32)>, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

/// Whether a tool changes anything, and so needs the user's approval.
pub fn needs_approval(tool: &str) -> bool {
    !matches!(
        tool,
        "read_file" | "list_directory" | "search_text" | plan::UPDATE_PLAN
    )
}

/// The definitions the model is given.
pub fn specs() -> Vec<ToolSpec> {
    let spec = |name: &str, description: &str, input_schema: Value| ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        input_schema,
    };
    vec![
        spec(
            "read_file",
            "Read a text file of the workspace. Lines are numbered from 1.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace root"},
                "offset": {"type": "integer", "description": "First line to return (1-based)"},
                "limit": {"type": "integer", "description": "Most lines to return"}
            }, "required": ["path"]}),
        ),
        spec(
            "list_directory",
            "List the entries of a workspace folder; folders end with '/'.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Folder relative to the workspace root; '.' for the root"}
            }}),
        ),
        spec(
            "search_text",
            "Search the workspace's files for a regular expression, skipping files that .gitignore excludes.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "description": "Folder to search in; the root when absent"}
            }, "required": ["pattern"]}),
        ),
        spec(
            "write_file",
            "Create or overwrite a file with the given content. Needs the user's approval.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}
            }, "required": ["path", "content"]}),
        ),
        spec(
            "edit_file",
            "Replace one exact, unique occurrence of old_string with new_string in a file. Needs the user's approval.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"}
            }, "required": ["path", "old_string", "new_string"]}),
        ),
        spec(
            "run_command",
            "Run a shell command in the workspace root. Needs the user's approval.",
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout_seconds": {"type": "integer", "description": "Default 120, at most 600"},
                "sandbox": {"type": "boolean", "description": "false runs the command outside the sandbox, after asking the user; only when a sandboxed run was refused"}
            }, "required": ["command"]}),
        ),
        plan::spec(),
        web_fetch::spec(),
    ]
}

/// What an "allow for this session" answer to a call allows: the tool, or for `web_fetch` the
/// tool on the call's host only (`web_fetch(host)`).
pub fn session_key(tool: &str, input: &Value) -> String {
    match tool {
        web_fetch::NAME => format!("{tool}({})", web_fetch::host_of(input).unwrap_or_default()),
        _ => tool.to_string(),
    }
}

fn str_arg<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

/// One line an approval prompt or a tool-call row can show.
pub fn summary(tool: &str, input: &Value) -> String {
    let path = str_arg(input, "path").unwrap_or(".");
    let lines = |key: &str| {
        let count = str_arg(input, key).map(|t| t.lines().count()).unwrap_or(0);
        format!("{count} {}", if count == 1 { "line" } else { "lines" })
    };
    match tool {
        "read_file" => format!("read {path}"),
        "list_directory" => format!("list {path}"),
        "search_text" => format!("search for {:?}", str_arg(input, "pattern").unwrap_or("")),
        "write_file" => format!("write {path} ({})", lines("content")),
        "edit_file" => format!(
            "edit {path} (replace {} with {})",
            lines("old_string"),
            lines("new_string")
        ),
        "run_command" => {
            let command = str_arg(input, "command").unwrap_or("");
            let first = command.lines().next().unwrap_or("");
            let more = if command.lines().count() > 1 {
                " …"
            } else {
                ""
            };
            format!("run `{first}`{more}")
        }
        plan::UPDATE_PLAN => {
            let steps = input
                .get("steps")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            format!(
                "plan ({steps} {})",
                if steps == 1 { "step" } else { "steps" }
            )
        }
        web_fetch::NAME => format!(
            "fetch {}",
            crate::tools::truncate(str_arg(input, "url").unwrap_or(""), 120)
        ),
        "delegate" => {
            let task = str_arg(input, "task").unwrap_or("");
            format!(
                "delegate {:?}",
                crate::tools::truncate(task.lines().next().unwrap_or(""), 80)
            )
        }
        other => format!("{other} {}", crate::tools::truncate(&input.to_string(), 80)),
    }
}

/// Runs one tool call. Unknown tools and bad input are tool errors the model can read. A
/// command is recorded in `ledger` while it runs; a file's content is kept in `checkpoints`
/// before a tool changes it.
pub async fn execute(
    workspace: Option<&Workspace>,
    tool: &str,
    input: &Value,
    ledger: &dyn crate::lifetime::CommandLedger,
    checkpoints: &dyn Checkpoints,
) -> ToolOutcome {
    let Some(workspace) = workspace else {
        return ToolOutcome::error(
            "This session has no workspace root, so tools cannot touch files. Ask the user to open a folder.",
        );
    };
    let outcome = match tool {
        "read_file" => files::read(workspace, input).await,
        "list_directory" => files::list(workspace, input).await,
        "write_file" => files::write(workspace, input, checkpoints).await,
        "edit_file" => files::edit(workspace, input, checkpoints).await,
        "search_text" => search::search(workspace, input).await,
        "run_command" => command::run_in(workspace, input, ledger, None).await,
        other => Err(format!("There is no tool named {other:?}.")),
    };
    outcome.unwrap_or_else(ToolOutcome::error)
}

/// Runs a `run_command` call inside the sandbox with `settings` ([`crate::sandbox`]).
pub async fn execute_sandboxed(
    workspace: Option<&Workspace>,
    input: &Value,
    ledger: &dyn crate::lifetime::CommandLedger,
    settings: &crate::sandbox::Settings,
) -> ToolOutcome {
    let Some(workspace) = workspace else {
        return execute(None, "run_command", input, ledger, &NoCheckpoints).await;
    };
    command::run_in(workspace, input, ledger, Some(settings))
        .await
        .unwrap_or_else(ToolOutcome::error)
}

/// Whether a `run_command` call asks to run outside the sandbox (`"sandbox": false`).
pub fn wants_outside_sandbox(input: &Value) -> bool {
    input.get("sandbox").and_then(Value::as_bool) == Some(false)
}

/// Cuts `text` to at most `max` bytes on a character boundary, saying so.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} more bytes]", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reading_tools_run_without_approval() {
        let asking: Vec<_> = specs()
            .into_iter()
            .map(|s| s.name)
            .filter(|n| needs_approval(n))
            .collect();
        assert_eq!(
            asking,
            vec!["write_file", "edit_file", "run_command", "web_fetch"]
        );
    }

    #[test]
    fn summaries_are_one_line() {
        assert_eq!(
            summary("write_file", &json!({"path": "a.md", "content": "x\ny\n"})),
            "write a.md (2 lines)"
        );
        assert_eq!(
            summary("write_file", &json!({"path": "a.md", "content": "x\n"})),
            "write a.md (1 line)"
        );
        assert_eq!(
            summary(
                "edit_file",
                &json!({"path": "a.md", "old_string": "x", "new_string": "y\nz"})
            ),
            "edit a.md (replace 1 line with 2 lines)"
        );
        assert_eq!(
            summary("run_command", &json!({"command": "ls\npwd"})),
            "run `ls` …"
        );
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h… [cut: 5 more bytes]");
    }
}
