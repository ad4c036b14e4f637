//! "Always in this workspace": the rule an approval proposes from its call, and the key a
//! workspace's saved answers are stored under.
//!
//! The proposal is a starting point the user sees and may edit before saving, so it leans
//! narrow: a command's name and subcommand (`run_command(cargo test *)`), a file's top folder
//! (`write_file(src/**)`) or the file itself at the top, never a whole tool whose calls take a
//! pattern.

use std::path::Path;

use serde_json::Value;

use super::{List, Origin, Rule, shell};

/// The allow rule an "always in this workspace" answer to this call would save; `None` when
/// there is no workspace, or the call's path is outside it or its command line has no command.
pub fn propose(tool: &str, input: &Value, root: Option<&Path>) -> Option<String> {
    let root = root?;
    let text = match tool {
        "run_command" => {
            let line = input.get("command").and_then(Value::as_str).unwrap_or("");
            let analysis = shell::analyse(line, Some(root));
            let words = analysis.commands.first()?;
            let first = words.first()?;
            let mut pattern = first.clone();
            if let Some(sub) = words.get(1).filter(|w| is_subcommand(w)) {
                pattern.push(' ');
                pattern.push_str(sub);
            }
            format!("{tool}({pattern} *)")
        }
        "read_file" | "write_file" | "edit_file" | "list_directory" | "search_text" => {
            let requested = input.get("path").and_then(Value::as_str).unwrap_or(".");
            let relative = super::workspace_path(Some(root), requested)?;
            let mut parts = relative.split('/').filter(|p| !p.is_empty() && *p != ".");
            match (parts.next(), parts.next()) {
                (None, _) => tool.to_string(),
                (Some(top), None) => format!("{tool}({})", globset::escape(top)),
                (Some(top), Some(_)) => format!("{tool}({}/**)", globset::escape(top)),
            }
        }
        crate::tools::web_fetch::NAME => {
            format!("{tool}({})", crate::tools::web_fetch::host_of(input)?)
        }
        _ => tool.to_string(),
    };
    // A proposal is only offered when it reads back as a rule (a command word with a `)` at
    // its end, say, might not).
    Rule::parse(&text, List::Allow, Origin::Workspace(String::new()))
        .ok()
        .map(|_| text)
}

/// A second word that names what the command does (`test` in `cargo test`), not an argument.
fn is_subcommand(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 24
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !word.starts_with('-')
}

/// The key a workspace's answers are stored under: its root with symbolic links followed, so
/// two spellings of one folder share their answers; the path as given when it cannot be
/// resolved (a folder since removed).
pub fn workspace_key(root: &Path) -> String {
    root.canonicalize()
        .unwrap_or_else(|_| root.to_path_buf())
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn proposals_name_the_command_and_subcommand_or_the_top_folder() {
        let root = Path::new("/work/project");
        let cases = [
            (
                "run_command",
                json!({"command": "cargo test --lib"}),
                Some("run_command(cargo test *)"),
            ),
            (
                "run_command",
                json!({"command": "ls -la src"}),
                Some("run_command(ls *)"),
            ),
            (
                "run_command",
                json!({"command": "git status && rm x"}),
                Some("run_command(git status *)"),
            ),
            ("run_command", json!({"command": ""}), None),
            (
                "write_file",
                json!({"path": "src/a/b.rs"}),
                Some("write_file(src/**)"),
            ),
            (
                "edit_file",
                json!({"path": "/work/project/README.md"}),
                Some("edit_file(README.md)"),
            ),
            (
                "write_file",
                json!({"path": "notes[1].md"}),
                Some("write_file(notes[[]1[]].md)"),
            ),
            ("write_file", json!({"path": "/etc/passwd"}), None),
            ("write_file", json!({"path": "../x"}), None),
            ("delegate", json!({"task": "t"}), Some("delegate")),
            (
                "mcp__github__create_issue",
                json!({}),
                Some("mcp__github__create_issue"),
            ),
        ];
        let proposed: Vec<_> = cases
            .iter()
            .map(|(tool, input, _)| propose(tool, input, Some(root)))
            .collect();
        let expected: Vec<_> = cases
            .iter()
            .map(|(_, _, want)| want.map(String::from))
            .collect();
        assert_eq!(proposed, expected);
        assert_eq!(propose("delegate", &json!({}), None), None);
    }
}
