//! A session's reasoning effort: its own setting (`session/create`, `session/update`,
//! `/effort`), else its account's `effort`, put on each turn request in the shape its provider
//! takes (`provider::effort`). A model that takes none is sent nothing, and the session is
//! told once per model, so the setting never fails a request.

use super::{Inner, RuntimeError, RuntimeResult};
use crate::context::{ReasoningStyle, model_window, reasoning_style};
use crate::protocol::{BudgetSnapshot, Effort, NoticeLevel};
use crate::provider::effort::{self, Wire};
use crate::provider::{ModelContent, ModelRequest, ModelRole};
use crate::store::SessionRow;

/// Refuses a level the model lacks (`minimal` where only `low` and up exist), naming both.
pub(super) fn check_effort(model: &str, effort: Effort) -> RuntimeResult<()> {
    match reasoning_style(model) {
        Some(style) if !effort::takes(style, effort) => Err(RuntimeError::InvalidParams(format!(
            "effort {:?} is not a level of the model {model}; use low, medium or high",
            effort.name()
        ))),
        _ => Ok(()),
    }
}

/// Anthropic refuses thinking on a request whose last assistant turn made tool calls without
/// thinking (an effort set in the middle of a run): that request goes without, the next turn
/// thinks.
fn unthought_tool_turn(request: &ModelRequest) -> bool {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == ModelRole::Assistant)
        .is_some_and(|m| {
            m.content
                .iter()
                .any(|c| matches!(c, ModelContent::ToolCall { .. }))
                && !m
                    .content
                    .iter()
                    .any(|c| matches!(c, ModelContent::Thinking { .. }))
        })
}

/// How the session's current model is told an effort, in words for `/effort`.
pub(super) fn describe_style(model: &str) -> String {
    match reasoning_style(model) {
        Some(ReasoningStyle::Thinking) => format!(
            "{model} takes it as a thinking budget: minimal {}, low {}, medium {}, high {} tokens.",
            effort::thinking_budget(Effort::Minimal),
            effort::thinking_budget(Effort::Low),
            effort::thinking_budget(Effort::Medium),
            effort::thinking_budget(Effort::High)
        ),
        Some(ReasoningStyle::EffortMinimal) => {
            format!("{model} takes it as reasoning_effort: minimal, low, medium or high.")
        }
        Some(ReasoningStyle::Effort) => {
            format!("{model} takes it as reasoning_effort: low, medium or high.")
        }
        None => format!("{model} takes no reasoning effort; the setting is ignored for it."),
    }
}

impl Inner {
    /// The session's effort: its own, else its account's default.
    pub(super) fn effort(&self, session: &SessionRow) -> RuntimeResult<Option<Effort>> {
        Ok(self.effort_with_source(session)?.0)
    }

    /// The levels the session's model takes through its account (none for the demo and
    /// replay models, and for a model whose provider does not speak its field).
    pub(super) fn effort_levels(&self, session: &SessionRow) -> Vec<Effort> {
        let wire = self
            .config
            .account(&session.account)
            .map_or(Wire::None, |a| a.kind.effort_wire());
        effort::levels(reasoning_style(&session.model), wire)
    }

    /// [`Inner::effort`], and whether it is the account's default (the session sets none).
    pub(super) fn effort_with_source(
        &self,
        session: &SessionRow,
    ) -> RuntimeResult<(Option<Effort>, bool)> {
        let own = self
            .store
            .session_effort(&session.id)?
            .and_then(|name| Effort::parse(&name));
        Ok(match own {
            Some(effort) => (Some(effort), false),
            None => {
                let default = self.config.account(&session.account).and_then(|a| a.effort);
                (default, default.is_some())
            }
        })
    }

    /// Puts the session's effort on a turn request (and raises its output limit by a thinking
    /// budget), or tells the session once that its model takes none.
    pub(super) fn apply_effort(
        &self,
        session: &SessionRow,
        run_id: &str,
        snapshot: &BudgetSnapshot,
        request: &mut ModelRequest,
    ) -> RuntimeResult<()> {
        let Some(level) = self.effort(session)? else {
            return Ok(());
        };
        let account = self.config.account(&session.account);
        let style = reasoning_style(&session.model);
        let wire = account.map_or(Wire::None, |a| a.kind.effort_wire());
        let window = model_window(&session.model, account.and_then(|a| a.context_window));
        let room = snapshot
            .context_window
            .saturating_sub(snapshot.input_tokens)
            .min(window.max_output)
            .min(u64::from(u32::MAX)) as u32;
        let Some(planned) = effort::plan(style, wire, level, request.max_output_tokens, room)
        else {
            if !effort::sent_through(style, wire) {
                self.tell_no_effort(session, run_id, level)?;
            }
            return Ok(());
        };
        if matches!(planned.reasoning, effort::Reasoning::Thinking { .. })
            && unthought_tool_turn(request)
        {
            return Ok(());
        }
        request.reasoning = Some(planned.reasoning);
        request.max_output_tokens = planned.max_output_tokens;
        Ok(())
    }

    /// Tells the session, once per model for this daemon, that its effort is ignored.
    fn tell_no_effort(
        &self,
        session: &SessionRow,
        run_id: &str,
        level: Effort,
    ) -> RuntimeResult<()> {
        let first = crate::util::lock(&self.effort_notices)
            .insert((session.id.clone(), session.model.clone()));
        if !first {
            return Ok(());
        }
        self.notice(
            &session.id,
            Some(run_id),
            NoticeLevel::Info,
            format!(
                "The model {} takes no reasoning effort here, so the effort {} is not sent to it.",
                session.model,
                level.name()
            ),
        )?;
        Ok(())
    }
}
