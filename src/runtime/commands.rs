//! Slash commands typed in the composer. They run here, write a local note (stored and shown,
//! never sent to a model) and start no run.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::cost::CostSummary;
use crate::protocol::*;
use crate::store::{NewMessage, SessionRow, SessionUpdate};

const HELP: &str = "Commands:
  /cost            what this session has cost so far
  /model <id>      switch the model (from the next request on)
  /system <text>   set the system prompt; /system alone removes it
  /clear           the model starts fresh; earlier messages stay readable here
  /help            this list
Start a message with // to send a literal slash.";

/// A slash command, or `None` for text meant for the model (`//` escapes a slash).
pub fn parse(text: &str) -> Option<(&str, &str)> {
    let command = text.trim_start().strip_prefix('/')?;
    if command.starts_with('/') {
        return None;
    }
    let (name, argument) = command
        .split_once(char::is_whitespace)
        .unwrap_or((command, ""));
    Some((name, argument.trim()))
}

impl Runtime {
    /// Runs a slash command for the session.
    pub(super) fn command(
        &self,
        session: &SessionRow,
        name: &str,
        argument: &str,
    ) -> RuntimeResult<ChatSendResult> {
        let note = match name {
            "help" => HELP.to_string(),
            "cost" => describe_cost(&self.inner.cost_summary(&session.id)?, session.cap_usd),
            "model" if argument.is_empty() => format!(
                "The model is {} (account {}). Type /model <id> to switch.",
                session.model, session.account
            ),
            "model" => {
                self.update_session(SessionUpdateParams {
                    session_id: session.id.clone(),
                    model: Some(argument.to_string()),
                    ..SessionUpdateParams::default()
                })?;
                format!("Model set to {argument}; it answers from the next request on.")
            }
            "system" => {
                let update = SessionUpdate {
                    system_prompt: Some(Some(argument.to_string()).filter(|a| !a.is_empty())),
                    ..SessionUpdate::default()
                };
                self.inner.store.update_session(&session.id, &update)?;
                match argument.is_empty() {
                    true => "System prompt removed.".to_string(),
                    false => format!("System prompt set: {argument}"),
                }
            }
            "clear" => {
                if let Some(run_id) = self.inner.runs.active_run(&session.id) {
                    return Err(RuntimeError::Busy {
                        session_id: session.id.clone(),
                        run_id,
                    });
                }
                self.inner.store.clear_context(&session.id)?;
                self.inner.forget_tally(&session.id);
                "Context cleared: the model starts fresh from the next message. Earlier messages stay here to read.".to_string()
            }
            other => {
                self.inner.events.emit(
                    &self.inner.store,
                    &session.id,
                    None,
                    Event::Notice {
                        level: NoticeLevel::Warning,
                        message: format!("Unknown command /{other}. Type /help for the list; nothing was sent to the model."),
                    },
                );
                return Ok(ChatSendResult {
                    run_id: None,
                    message_id: None,
                    queued: false,
                    pending_id: None,
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
        })
    }
}

/// The `/cost` note: totals, per model, per kind, and what has no price.
pub fn describe_cost(cost: &CostSummary, cap_usd: Option<f64>) -> String {
    let mut lines = Vec::new();
    let total = match cost.partial {
        true => format!("at least ${:.4}", cost.total_usd),
        false => format!("${:.4}", cost.total_usd),
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
    let kinds = &cost.by_kind;
    lines.push(format!(
        "  input ${:.4} · output ${:.4} · cache read ${:.4} · cache write ${:.4}",
        kinds.input, kinds.output, kinds.cache_read, kinds.cache_write
    ));
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

    #[test]
    fn parses_commands_and_escapes() {
        assert_eq!(parse("/model gpt-4o"), Some(("model", "gpt-4o")));
        assert_eq!(parse("/clear"), Some(("clear", "")));
        assert_eq!(parse("//not a command"), None);
        assert_eq!(parse("hello /cost"), None);
    }
}
