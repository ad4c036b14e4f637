//! Tab completion at the prompt: `/` at the start of the line completes the commands (the
//! daemon's built-in and custom ones from `session/commands`, and the chat's own), `@`
//! completes the workspace's files from `workspace/files`.
//!
//! The line editor runs on a thread of its own and asks synchronously; the daemon is reached
//! through the chat's loop, which owns the connection: the editor sends an [`Question`] and waits
//! for its answer. The chat is idle whenever the editor reads a line, so the answer comes at
//! once; [`ANSWER_WAIT`] only keeps a stuck daemon from freezing the prompt.

use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::{Hint, Hinter};
use rustyline::validate::Validator;
use rustyline::{Context, Helper};
use tokio::sync::mpsc;

use crate::protocol::{CommandInfo, CommandSource};
use crate::util::lock;

/// How long the prompt waits for the daemon's answer before it completes nothing.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// How many files one `@` completion offers.
const FILES_OFFERED: u32 = 50;

/// The chat's own commands (handled by the terminal client, not sent to the daemon).
const CHAT_COMMANDS: &[(&str, &str, &str)] = &[
    (
        "sessions",
        "[N]",
        "this folder's chats; /sessions N switches",
    ),
    ("title", "TEXT", "renames this chat"),
    ("account", "[NAME]", "lists the accounts, or switches"),
    ("stop", "", "stops the run"),
    ("resume", "", "answers a last message no run answered"),
    ("image", "PATH", "attaches an image to your next message"),
    ("quit", "", "leaves"),
];

/// A question the editor asks the daemon, with where to answer.
pub enum Question {
    /// `session/commands` of the chat's session.
    Commands(std_mpsc::Sender<Vec<CommandInfo>>),
    /// `workspace/files` of the chat's session for `query`.
    Files {
        query: String,
        answer: std_mpsc::Sender<Vec<String>>,
    },
}

impl Question {
    /// The params of `workspace/files` for `query` in `session_id`.
    pub fn files_params(session_id: &str, query: &str) -> crate::protocol::WorkspaceFilesParams {
        crate::protocol::WorkspaceFilesParams {
            session_id: session_id.to_string(),
            query: query.to_string(),
            limit: Some(FILES_OFFERED),
        }
    }
}

/// What the cursor is completing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target<'a> {
    /// A command name: the line starts with `/` and the cursor is in its first word.
    Command { typed: &'a str },
    /// An `@`-mention starting at byte `start`; `query` is what follows `@` (and an opening
    /// quote).
    File { start: usize, query: &'a str },
}

/// What the text before `pos` is completing, if anything.
fn target(line: &str, pos: usize) -> Option<Target<'_>> {
    let before = line.get(..pos)?;
    if let Some(typed) = before.strip_prefix('/')
        && !typed.contains(char::is_whitespace)
    {
        return Some(Target::Command { typed });
    }
    // The last `@` that starts a word: at the line's start or after whitespace.
    let start = before
        .char_indices()
        .filter(|&(i, c)| {
            c == '@'
                && before[..i]
                    .chars()
                    .next_back()
                    .is_none_or(char::is_whitespace)
        })
        .map(|(i, _)| i)
        .next_back()?;
    let mention = &before[start + 1..];
    match mention.strip_prefix('"') {
        // A quoted path may hold spaces until its closing quote.
        Some(quoted) if !quoted.contains('"') => Some(Target::File {
            start,
            query: quoted,
        }),
        Some(_) => None,
        None if mention.contains(char::is_whitespace) => None,
        None => Some(Target::File {
            start,
            query: mention,
        }),
    }
}

/// The `@`-mention of `path`: quoted when it holds whitespace.
fn mention(path: &str) -> String {
    match path.contains(char::is_whitespace) {
        true => format!("@\"{path}\""),
        false => format!("@{path}"),
    }
}

/// The commands whose names start with `typed` (whatever the case), as completions showing
/// their argument hint and description.
fn command_pairs(commands: &[CommandInfo], typed: &str) -> Vec<Pair> {
    let typed = typed.to_lowercase();
    commands
        .iter()
        .filter(|c| c.name.starts_with(&typed))
        .map(|c| {
            let usage = match &c.argument_hint {
                Some(hint) => format!("/{} {hint}", c.name),
                None => format!("/{}", c.name),
            };
            Pair {
                display: format!("{usage:<24} {}", c.description),
                replacement: format!("/{} ", c.name),
            }
        })
        .collect()
}

/// The daemon's commands followed by the chat's own that it does not have.
fn with_chat_commands(mut commands: Vec<CommandInfo>) -> Vec<CommandInfo> {
    for (name, hint, description) in CHAT_COMMANDS {
        if !commands.iter().any(|c| c.name == *name) {
            commands.push(CommandInfo {
                name: name.to_string(),
                description: description.to_string(),
                argument_hint: Some(hint.to_string()).filter(|h| !h.is_empty()),
                source: CommandSource::Builtin,
                path: None,
            });
        }
    }
    commands
}

/// A hint after a command name typed in part: the rest of the name (what Right-arrow
/// inserts), then its argument hint and description, shown dimmed.
pub struct CommandHint {
    shown: String,
    rest: String,
}

impl Hint for CommandHint {
    fn display(&self) -> &str {
        &self.shown
    }

    fn completion(&self) -> Option<&str> {
        Some(&self.rest)
    }
}

/// The prompt's helper: completion, hints and their dimming.
pub struct Completion {
    asks: mpsc::UnboundedSender<Question>,
    /// The commands as last asked, for hints (asked again at each Tab).
    commands: Mutex<Option<Vec<CommandInfo>>>,
    /// Whether hints are dimmed (the terminal takes colour).
    color: bool,
}

impl Completion {
    pub fn new(asks: mpsc::UnboundedSender<Question>, color: bool) -> Self {
        Self {
            asks,
            commands: Mutex::new(None),
            color,
        }
    }

    /// The commands, asked of the daemon when `fresh` or never asked yet.
    fn commands(&self, fresh: bool) -> Vec<CommandInfo> {
        if !fresh && let Some(known) = lock(&self.commands).as_ref() {
            return known.clone();
        }
        let (answer, answered) = std_mpsc::channel();
        if self.asks.send(Question::Commands(answer)).is_err() {
            return Vec::new();
        }
        match answered.recv_timeout(ANSWER_WAIT) {
            Ok(commands) => {
                let commands = with_chat_commands(commands);
                *lock(&self.commands) = Some(commands.clone());
                commands
            }
            Err(_) => Vec::new(),
        }
    }

    fn files(&self, query: &str) -> Vec<String> {
        let (answer, answered) = std_mpsc::channel();
        let ask = Question::Files {
            query: query.to_string(),
            answer,
        };
        if self.asks.send(ask).is_err() {
            return Vec::new();
        }
        answered.recv_timeout(ANSWER_WAIT).unwrap_or_default()
    }
}

impl Completer for Completion {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        Ok(match target(line, pos) {
            Some(Target::Command { typed }) => (0, command_pairs(&self.commands(true), typed)),
            Some(Target::File { start, query }) => {
                let pairs = self
                    .files(query)
                    .into_iter()
                    .map(|path| Pair {
                        replacement: format!("{} ", mention(&path)),
                        display: path,
                    })
                    .collect();
                (start, pairs)
            }
            None => (pos, Vec::new()),
        })
    }
}

impl Hinter for Completion {
    type Hint = CommandHint;

    fn hint(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> Option<CommandHint> {
        if pos < line.len() {
            return None;
        }
        let Some(Target::Command { typed }) = target(line, pos) else {
            return None;
        };
        if typed.is_empty() {
            return None;
        }
        let typed = typed.to_lowercase();
        let commands = self.commands(false);
        let mut matching = commands.iter().filter(|c| c.name.starts_with(&typed));
        let (Some(only), None) = (matching.next(), matching.next()) else {
            return None;
        };
        let rest = format!("{} ", &only.name[typed.len()..]);
        let shown = match &only.argument_hint {
            Some(hint) => format!("{rest}{hint}  {}", only.description),
            None => format!("{rest} {}", only.description),
        };
        Some(CommandHint { shown, rest })
    }
}

impl Highlighter for Completion {
    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        match self.color {
            true => Cow::Owned(format!("\x1b[2m{hint}\x1b[0m")),
            false => Cow::Borrowed(hint),
        }
    }
}

impl Validator for Completion {}

impl Helper for Completion {}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn the_cursor_completes_a_command_or_a_mention() {
        assert_eq!(target("/rev", 4), Some(Target::Command { typed: "rev" }));
        assert_eq!(target("/review src", 11), None);
        assert_eq!(
            target("look at @src/li", 15),
            Some(Target::File {
                start: 8,
                query: "src/li"
            })
        );
        assert_eq!(
            target("@\"docs/my no", 12),
            Some(Target::File {
                start: 0,
                query: "docs/my no"
            })
        );
        assert_eq!(target("mail bob@example", 16), None);
        assert_eq!(target("@src/lib.rs and more", 20), None);
        assert_eq!(target("plain words", 11), None);
    }

    #[test]
    fn paths_with_spaces_are_quoted() {
        assert_eq!(mention("src/lib.rs"), "@src/lib.rs");
        assert_eq!(mention("docs/my notes.md"), "@\"docs/my notes.md\"");
    }

    #[test]
    fn commands_complete_by_prefix_with_their_description() {
        let commands = with_chat_commands(vec![CommandInfo {
            name: "review".into(),
            description: "Review a file".into(),
            argument_hint: Some("<path>".into()),
            source: CommandSource::Project,
            path: None,
        }]);
        let pairs: Vec<(String, String)> = command_pairs(&commands, "RE")
            .into_iter()
            .map(|p| (p.display, p.replacement))
            .collect();
        assert_eq!(
            pairs,
            vec![
                (
                    format!("{:<24} Review a file", "/review <path>"),
                    "/review ".to_string()
                ),
                (
                    format!("{:<24} answers a last message no run answered", "/resume"),
                    "/resume ".to_string()
                ),
            ]
        );
    }
}
