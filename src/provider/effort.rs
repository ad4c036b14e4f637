//! A session's reasoning effort, as each provider takes it.
//!
//! Anthropic takes a budget of thinking tokens (extended thinking); OpenAI's reasoning models
//! take `reasoning_effort`. The model table (`data/context_windows.json`, `reasoning`) says
//! which a family takes; a model that takes neither gets no field at all, because providers
//! refuse fields a model does not support.
//!
//! Thinking budgets per level (Anthropic's least budget is 1,024 tokens; each stays within the
//! model's largest reply, with room for the answer after the thinking):
//!
//! | level   | budget_tokens |
//! | ------- | ------------- |
//! | minimal | 1,024         |
//! | low     | 4,096         |
//! | medium  | 16,384        |
//! | high    | 32,000        |

use serde::{Deserialize, Serialize};

use crate::context::ReasoningStyle;
use crate::protocol::Effort;

/// The least thinking budget Anthropic accepts.
pub const MIN_THINKING_BUDGET: u32 = 1_024;

/// What one request carries to set how hard the model thinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Reasoning {
    /// Anthropic's `thinking: {type: "enabled", budget_tokens}`.
    Thinking { budget_tokens: u32 },
    /// OpenAI's `reasoning_effort`.
    Effort { effort: Effort },
}

/// Which field a provider's driver can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
    /// The demo and replay models, which take no effort.
    None,
}

/// The thinking budget of a level before the model's reply limit bounds it.
pub fn thinking_budget(effort: Effort) -> u32 {
    match effort {
        Effort::Minimal => MIN_THINKING_BUDGET,
        Effort::Low => 4_096,
        Effort::Medium => 16_384,
        Effort::High => 32_000,
    }
}

/// Whether a family of `style` has the level `effort` (only `minimal` is missing somewhere).
pub fn takes(style: ReasoningStyle, effort: Effort) -> bool {
    effort != Effort::Minimal || style != ReasoningStyle::Effort
}

/// The levels a model of `style` served through `wire` takes, lowest first; none when it
/// takes no effort there. What the effort pickers offer.
pub fn levels(style: Option<ReasoningStyle>, wire: Wire) -> Vec<Effort> {
    match style {
        Some(style) if sent_through(Some(style), wire) => Effort::ALL
            .into_iter()
            .filter(|&effort| takes(style, effort))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a model of `style` served through `wire` takes an effort at all.
pub fn sent_through(style: Option<ReasoningStyle>, wire: Wire) -> bool {
    matches!(
        (style, wire),
        (Some(ReasoningStyle::Thinking), Wire::Anthropic)
            | (
                Some(ReasoningStyle::Effort | ReasoningStyle::EffortMinimal),
                Wire::OpenAi
            )
    )
}

/// One request's reasoning and output limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub reasoning: Reasoning,
    pub max_output_tokens: u32,
}

/// How a request to a model of `style` served through `wire` carries `effort`; `None` when the
/// model takes no effort there. `answer` is the output limit the request had without it, `room`
/// the most the model may write (its reply limit, within what the window leaves).
///
/// Thinking counts against `max_tokens` and must stay below it, so the limit grows by the
/// budget, and the budget shrinks to what the room leaves after the answer; a room too small
/// for the least budget sends none. A `minimal` the model lacks is sent as `low`.
pub fn plan(
    style: Option<ReasoningStyle>,
    wire: Wire,
    effort: Effort,
    answer: u32,
    room: u32,
) -> Option<Planned> {
    match (style?, wire) {
        (ReasoningStyle::Thinking, Wire::Anthropic) => {
            let budget = thinking_budget(effort).min(room.saturating_sub(answer.min(room / 2)));
            (budget >= MIN_THINKING_BUDGET).then(|| Planned {
                reasoning: Reasoning::Thinking {
                    budget_tokens: budget,
                },
                max_output_tokens: budget.saturating_add(answer).min(room),
            })
        }
        (style @ (ReasoningStyle::Effort | ReasoningStyle::EffortMinimal), Wire::OpenAi) => {
            let effort = match takes(style, effort) {
                true => effort,
                false => Effort::Low,
            };
            Some(Planned {
                reasoning: Reasoning::Effort { effort },
                max_output_tokens: answer,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn thinking_grows_the_limit_by_the_budget_within_the_room() {
        let planned = |effort, room| {
            plan(
                Some(ReasoningStyle::Thinking),
                Wire::Anthropic,
                effort,
                8_192,
                room,
            )
        };
        let thinking = |budget_tokens, max_output_tokens| {
            Some(Planned {
                reasoning: Reasoning::Thinking { budget_tokens },
                max_output_tokens,
            })
        };
        assert_eq!(planned(Effort::Low, 64_000), thinking(4_096, 12_288));
        assert_eq!(planned(Effort::High, 64_000), thinking(32_000, 40_192));
        assert_eq!(planned(Effort::High, 32_000), thinking(23_808, 32_000));
        assert_eq!(planned(Effort::Minimal, 64_000), thinking(1_024, 9_216));
        // A small room halves between thinking and answer.
        assert_eq!(planned(Effort::High, 4_000), thinking(2_000, 4_000));
        assert_eq!(planned(Effort::High, 2_000), None);
    }

    #[test]
    fn effort_goes_to_openai_models_that_take_it() {
        let effort = |style, effort| plan(Some(style), Wire::OpenAi, effort, 8_192, 100_000);
        let sent = |effort| {
            Some(Planned {
                reasoning: Reasoning::Effort { effort },
                max_output_tokens: 8_192,
            })
        };
        assert_eq!(
            effort(ReasoningStyle::EffortMinimal, Effort::Minimal),
            sent(Effort::Minimal)
        );
        assert_eq!(
            effort(ReasoningStyle::Effort, Effort::Minimal),
            sent(Effort::Low)
        );
        assert_eq!(
            effort(ReasoningStyle::Effort, Effort::High),
            sent(Effort::High)
        );
    }

    #[test]
    fn a_model_or_provider_that_takes_none_gets_nothing() {
        assert_eq!(plan(None, Wire::OpenAi, Effort::High, 8_192, 100_000), None);
        assert_eq!(
            plan(
                Some(ReasoningStyle::Thinking),
                Wire::OpenAi,
                Effort::High,
                8_192,
                100_000
            ),
            None
        );
        assert_eq!(
            plan(
                Some(ReasoningStyle::Effort),
                Wire::Anthropic,
                Effort::High,
                8_192,
                100_000
            ),
            None
        );
        assert_eq!(
            plan(
                Some(ReasoningStyle::Thinking),
                Wire::None,
                Effort::High,
                8_192,
                100_000
            ),
            None
        );
    }
}
