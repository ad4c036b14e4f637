//! Slash commands typed in the composer. They run here, write a local note (stored and shown,
//! never sent to a model) and start no run.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::protocol::*;
use crate::store::{NewMessage, SessionRow, SessionUpdate};

const HELP: &str = "Commands:
  /cost            what this session has cost so far
  /model <id>      switch the model (from the next request on); a name sidechat does not know needs /model --force <id>
  /effort [level]  how hard the model thinks: minimal, low, medium, high, or default (the account's)
  /system <text>   set the system prompt; /system alone removes it
  /clear           the model starts fresh; earlier messages stay readable here
  /compact [focus] summarise the earlier turns now (optionally: what to keep in view)
  /new-context     the model starts afresh with a short note carried over from before
  /permissions     every permission rule in force here and where it comes from
  /instructions    the instruction files (AGENTS.md) sent with every request
  /undo            take back the last turn: its file changes and its messages
  /rewind          list the turns with the files each changed
  /rewind <n>      take back the last n turns (add --force to overwrite files changed since)
  /fork            a new session with this conversation so far
  /help            this list
Start a message with // to send a literal slash.";

/// A typed slash command: its name in lower case (commands match whatever the case) and the
/// rest of the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command<'a> {
    pub name: String,
    pub argument: &'a str,
}

/// A slash command, or `None` for text meant for the model (`//` escapes a slash).
///
/// Only a first word shaped like a command name (`/` then letters, digits and `-`) is a command
/// attempt: a path such as `/usr/bin/python3 crashes` is text for the model, not an unknown
/// command.
pub fn parse(text: &str) -> Option<Command<'_>> {
    let command = text.trim_start().strip_prefix('/')?;
    let (name, argument) = command
        .split_once(char::is_whitespace)
        .unwrap_or((command, ""));
    let shaped = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '-');
    if !shaped {
        return None;
    }
    Some(Command {
        name: name.to_lowercase(),
        argument: argument.trim(),
    })
}

/// Whether `text` is a slash command attempt (known or not) rather than text for the model.
pub fn is_command(text: &str) -> bool {
    parse(text).is_some()
}

/// `/model`'s argument: the name and whether `--force` lets an unknown name through.
fn model_argument(argument: &str) -> (&str, bool) {
    match argument.split_once(char::is_whitespace) {
        Some(("--force", name)) => (name.trim(), true),
        _ if argument == "--force" => ("", true),
        _ => (argument, false),
    }
}

impl Runtime {
    /// The hold a command that changes what the model sees keeps on the session, so that no
    /// run starts meanwhile (`None` for the others); busy while a run or another such command
    /// holds it, or while a run waits for an approval.
    fn hold_for(
        &self,
        session: &SessionRow,
        command: &Command<'_>,
    ) -> RuntimeResult<Option<super::command_claim::CommandClaim>> {
        let kind = match (command.name.as_str(), command.argument.is_empty()) {
            ("compact", _) => "cmp",
            ("new-context", _) => "ctx",
            ("undo", _) | ("rewind", false) => "rwd",
            _ => return Ok(None),
        };
        self.refuse_if_suspended(&session.id)?;
        self.inner.claim_for_command(&session.id, kind).map(Some)
    }

    /// Whether `model` is a name sidechat knows: in the context window table, in the price
    /// book (built-in or configured), or the session's account's configured model.
    pub(super) fn knows_model(&self, session: &SessionRow, model: &str) -> bool {
        let in_windows =
            crate::context::model_window(model, None).source == crate::context::WindowSource::Table;
        let configured = self
            .inner
            .config
            .account(&session.account)
            .is_some_and(|a| a.default_model == model);
        in_windows || configured || self.inner.is_priced(model)
    }

    /// Runs a slash command for the session; `typed` is the whole line as the user typed it.
    pub(super) async fn command(
        &self,
        session: &SessionRow,
        command: Command<'_>,
        typed: &str,
    ) -> RuntimeResult<ChatSendResult> {
        let argument = command.argument;
        let found = self.inner.command_folders(session).read();
        if let Some(file) = found.shadowed.iter().find(|c| c.name == command.name) {
            self.inner.notice(
                &session.id,
                None,
                NoticeLevel::Info,
                format!(
                    "The command file {} is not used: /{} is a built-in command.",
                    file.path.display(),
                    command.name
                ),
            )?;
        }
        // Held until the command's note is in: input sent meanwhile is queued, and follows
        // the note as the next turn.
        let _held = self.hold_for(session, &command)?;
        let note = match command.name.as_str() {
            "help" => help(&found),
            "instructions" => self.inner.describe_instructions(session),
            "cost" => describe_cost(&self.inner.cost_summary(&session.id)?, session.cap_usd),
            "model" if argument.is_empty() => format!(
                "The model is {} (account {}). Type /model <id> to switch.",
                session.model, session.account
            ),
            "model" => {
                let (model, forced) = model_argument(argument);
                if model.is_empty() {
                    return Err(RuntimeError::InvalidParams(
                        "/model --force needs a model name".into(),
                    ));
                }
                if !forced && !self.knows_model(session, model) {
                    return Err(RuntimeError::InvalidParams(format!(
                        "sidechat does not know the model {model:?} (it is in neither the context window table, the price table nor the account's configuration); check the spelling, or type /model --force {model} to use it anyway"
                    )));
                }
                self.update_session(SessionUpdateParams {
                    session_id: session.id.clone(),
                    model: Some(model.to_string()),
                    ..SessionUpdateParams::default()
                })?;
                format!("Model set to {model}; it answers from the next request on.")
            }
            "effort" => self.effort_command(session, argument)?,
            "system" => {
                let update = SessionUpdate {
                    system_prompt: Some(Some(argument.to_string()).filter(|a| !a.is_empty())),
                    ..SessionUpdate::default()
                };
                self.inner.store.update_session(&session.id, &update)?;
                // Other views of the session (another window, the header) show the prompt.
                self.announce_session(&session.id)?;
                match argument.is_empty() {
                    true => "System prompt removed.".to_string(),
                    false => format!("System prompt set: {argument}"),
                }
            }
            "compact" => self.compact_command(session, argument).await?,
            "new-context" => self.new_context_command(session).await?,
            "permissions" => self.describe_permissions(session)?,
            "undo" => self.rewind_command(session, "1", argument)?,
            "rewind" if argument.is_empty() => self.turns_note(session)?,
            "rewind" => {
                let (count, rest) = argument
                    .split_once(char::is_whitespace)
                    .unwrap_or((argument, ""));
                self.rewind_command(session, count, rest)?
            }
            "fork" => self.fork_command(session)?,
            "clear" => {
                // A run, live or suspended on an approval after a restart, still needs the
                // transcript it stands on: its next request must start with its own tool call.
                if let Some(run_id) = self.inner.runs.active_run(&session.id) {
                    return Err(RuntimeError::Busy {
                        session_id: session.id.clone(),
                        run_id,
                    });
                }
                self.refuse_if_suspended(&session.id)?;
                self.inner.store.clear_context(&session.id)?;
                "Context cleared: the model starts fresh from the next message. Earlier messages stay here to read.".to_string()
            }
            other => {
                // Stored with what was typed, so nothing the user wrote vanishes.
                let entry = self.inner.notice(
                    &session.id,
                    None,
                    NoticeLevel::Warning,
                    format!(
                        "Unknown command /{other}; nothing was sent to the model. Type /help for the list, or start with // to send a slash. You typed: {typed}"
                    ),
                )?;
                return Ok(ChatSendResult {
                    run_id: None,
                    message_id: Some(entry.id),
                    queued: false,
                    pending_id: None,
                    kept: false,
                });
            }
        };
        let entry = self.inner.commit(NewMessage::new(
            &session.id,
            None,
            Role::Note,
            vec![Block::Text { text: note }],
        ))?;
        Ok(ChatSendResult {
            run_id: None,
            message_id: Some(entry.id),
            queued: false,
            pending_id: None,
            kept: false,
        })
    }
}

/// What a session's command files looked like: each file's path, size and modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandStamp(Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>)>);

/// The `/help` note: the built-in commands, then the custom ones.
impl Runtime {
    /// `/effort`: says the session's effort and how its model takes it; `/effort LEVEL` sets
    /// it, `/effort default` goes back to the account's.
    fn effort_command(&self, session: &SessionRow, argument: &str) -> RuntimeResult<String> {
        let style = super::effort::describe_style(&session.model);
        if argument.is_empty() {
            let own = self.inner.store.session_effort(&session.id)?;
            let said = match (own, self.inner.effort(session)?) {
                (Some(_), Some(level)) => format!("The reasoning effort is {}.", level.name()),
                (None, Some(level)) => format!(
                    "The reasoning effort is {} (the account {}'s default).",
                    level.name(),
                    session.account
                ),
                (_, None) => {
                    "No reasoning effort is set: the provider's default applies.".to_string()
                }
            };
            return Ok(format!(
                "{said} {style} Type /effort minimal|low|medium|high, or /effort default."
            ));
        }
        let effort = match argument.to_ascii_lowercase().as_str() {
            "default" => None,
            name => Some(Effort::parse(name).ok_or_else(|| {
                RuntimeError::InvalidParams(format!(
                    "/effort takes minimal, low, medium, high or default, not {argument:?}"
                ))
            })?),
        };
        let updated = self.update_session(SessionUpdateParams {
            session_id: session.id.clone(),
            effort: Some(effort),
            ..SessionUpdateParams::default()
        })?;
        // The session's effort in force: its own, or after `default` the account's.
        Ok(match (effort, updated.effort) {
            (Some(level), _) => format!(
                "Reasoning effort set to {}; it applies from the next request on. {style}",
                level.name()
            ),
            (None, Some(level)) => {
                format!("Effort is back to the account's default, {}.", level.name())
            }
            (None, None) => "Effort is back to the account's default; the account has no default: the model decides.".to_string(),
        })
    }
}

fn help(found: &super::custom_commands::Found) -> String {
    let mut text = HELP.to_string();
    if !found.commands.is_empty() {
        text.push_str("\nCustom commands:");
        for info in super::custom_commands::infos(found)
            .into_iter()
            .filter(|c| c.source != CommandSource::Builtin)
        {
            let name = match &info.argument_hint {
                Some(hint) => format!("/{} {hint}", info.name),
                None => format!("/{}", info.name),
            };
            text.push_str(&format!("\n  {name:<16} {}", info.description));
        }
    }
    text
}

impl super::Inner {
    /// Where the session's custom commands are: its workspace's and the user's folders.
    pub(super) fn command_folders(&self, session: &SessionRow) -> super::custom_commands::Folders {
        super::custom_commands::Folders {
            project: session
                .workspace_root
                .as_deref()
                .map(|root| super::custom_commands::project_dir(std::path::Path::new(root))),
            user: self
                .config
                .user_dir
                .as_deref()
                .map(super::custom_commands::user_dir),
        }
    }
}

impl Runtime {
    /// `session/commands`: the built-in and custom commands the session's composer offers.
    pub fn commands(&self, session_id: &str) -> RuntimeResult<SessionCommandsResult> {
        let session = self.session_row(session_id)?;
        let found = self.inner.command_folders(&session).read();
        Ok(SessionCommandsResult {
            session_id: session.id,
            commands: super::custom_commands::infos(&found),
        })
    }

    /// The stamp of the session's command files: changes when a file is added, removed or
    /// edited.
    pub fn command_stamp(&self, session_id: &str) -> RuntimeResult<CommandStamp> {
        let session = self.session_row(session_id)?;
        Ok(CommandStamp(self.inner.command_folders(&session).stamp()))
    }

    /// The custom command `command` names, expanded: what the model reads instead of what was
    /// typed. `None` for a built-in command or no command file.
    pub(super) fn custom_command(
        &self,
        session: &SessionRow,
        command: &Command<'_>,
    ) -> Option<super::custom_commands::CustomCommand> {
        if super::custom_commands::BUILTINS
            .iter()
            .any(|(name, ..)| *name == command.name)
        {
            return None;
        }
        let found = self.inner.command_folders(session).read();
        found.commands.into_iter().find(|c| c.name == command.name)
    }
}

/// The `/cost` note: totals, per model, per kind, and what has no price.
pub fn describe_cost(cost: &CostSummary, cap_usd: Option<f64>) -> String {
    let mut lines = Vec::new();
    let total = match (cost.total_usd, cost.partial) {
        (None, _) if cost.unpriced.lines > 0 => "unpriced".to_string(),
        (None, _) => "nothing yet".to_string(),
        (Some(total), true) => format!("at least ${total:.4}"),
        (Some(total), false) => format!("${total:.4}"),
    };
    lines.push(format!(
        "Cost of this session: {total} (prices as of {})",
        cost.prices_as_of
    ));
    for model in &cost.by_model {
        lines.push(format!(
            "  {} {}: {} requests, {} in / {} out → ${:.4}",
            model.provider,
            model.model,
            model.lines,
            model.tokens.input + model.tokens.cache_read + model.tokens.cache_write,
            model.tokens.output,
            model.total_usd
        ));
    }
    // Amounts only where something was priced: unpriced usage is never $0.
    if let Some(kinds) = &cost.by_kind {
        lines.push(format!(
            "  input ${:.4} · output ${:.4} · cache read ${:.4} · cache write ${:.4}",
            kinds.input, kinds.output, kinds.cache_read, kinds.cache_write
        ));
    }
    if cost.unpriced.lines > 0 {
        let tokens = &cost.unpriced.tokens;
        lines.push(format!(
            "  unpriced: {} requests of {} ({} tokens), not included",
            cost.unpriced.lines,
            cost.unpriced.models.join(", "),
            tokens.input + tokens.cache_read + tokens.cache_write + tokens.output
        ));
    }
    if let Some(cap) = cap_usd {
        lines.push(format!("  spend cap: ${cap:.2}"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command<'a>(name: &str, argument: &'a str) -> Option<Command<'a>> {
        Some(Command {
            name: name.into(),
            argument,
        })
    }

    #[test]
    fn parses_commands_whatever_their_case_and_escapes() {
        assert_eq!(parse("/model gpt-4o"), command("model", "gpt-4o"));
        assert_eq!(parse("/clear"), command("clear", ""));
        assert_eq!(parse("/COST"), command("cost", ""));
        assert_eq!(parse("  /Model GPT-4o "), command("model", "GPT-4o"));
        assert_eq!(parse("//not a command"), None);
        assert_eq!(parse("hello /cost"), None);
        assert_eq!(parse("/new-context"), command("new-context", ""));
        assert_eq!(parse("/nosuch thing"), command("nosuch", "thing"));
    }

    #[test]
    fn a_first_word_not_shaped_like_a_command_is_text() {
        let texts = [
            "/usr/bin/python3 crashes when I run it",
            "/a/b",
            "/",
            "/ cost",
            "/cost.",
            "/tmp/x.log is empty",
        ];
        let parsed: Vec<_> = texts.iter().map(|t| parse(t)).collect();
        assert_eq!(parsed, vec![None; texts.len()]);
    }

    #[test]
    fn model_takes_a_force_flag() {
        assert_eq!(model_argument("gpt-4o"), ("gpt-4o", false));
        assert_eq!(model_argument("--force  my-model"), ("my-model", true));
        assert_eq!(model_argument("--force"), ("", true));
    }
}
