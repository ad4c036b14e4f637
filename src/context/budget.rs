//! The token budget of the next request: how full the window is, and how that compares with what
//! the provider later reports.
//!
//! A snapshot is arithmetic over counts the caller already has: the per-message counts stored
//! with the transcript (summed incrementally in a [`HistoryTally`]), cached counts of the system
//! prompt and tools, and a count of the one new message. That keeps it O(1) however long the
//! session, so it can be recomputed on every message and streamed to the editor.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::tokens::{Counted, REPLY_PRIMING_TOKENS, TokenCounter};
use super::window::ModelWindow;
use crate::protocol::{BudgetEstimate, BudgetSnapshot, Reconciliation, Thresholds};

/// Tokens kept free for the reply unless the caller says otherwise: room for a substantial
/// answer or a few tool calls, without starving small windows.
pub const DEFAULT_RESPONSE_RESERVE: u64 = 4_096;

/// The running sum of a session's stored per-message counts.
///
/// Kept by the caller beside the transcript and updated as messages are stored or dropped
/// (by compaction), so a snapshot never re-reads or re-counts the history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryTally {
    tokens: u64,
    messages: u64,
    estimated_messages: u64,
}

impl HistoryTally {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one stored message's count. O(1).
    pub fn add(&mut self, message: Counted) {
        self.tokens = self.tokens.saturating_add(message.tokens);
        self.messages += 1;
        if !message.exact {
            self.estimated_messages += 1;
        }
    }

    /// Takes back a message added before (e.g. one that compaction replaced). O(1).
    pub fn remove(&mut self, message: Counted) {
        self.tokens = self.tokens.saturating_sub(message.tokens);
        self.messages = self.messages.saturating_sub(1);
        if !message.exact {
            self.estimated_messages = self.estimated_messages.saturating_sub(1);
        }
    }

    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Whether every message's count was exact.
    pub fn is_exact(&self) -> bool {
        self.estimated_messages == 0
    }

    pub fn as_counted(&self) -> Counted {
        Counted {
            tokens: self.tokens,
            exact: self.is_exact(),
        }
    }
}

impl Extend<Counted> for HistoryTally {
    fn extend<I: IntoIterator<Item = Counted>>(&mut self, counts: I) {
        counts.into_iter().for_each(|c| self.add(c));
    }
}

impl FromIterator<Counted> for HistoryTally {
    /// Builds a tally from stored counts, e.g. when a session is loaded.
    fn from_iter<I: IntoIterator<Item = Counted>>(counts: I) -> Self {
        let mut tally = HistoryTally::new();
        tally.extend(counts);
        tally
    }
}

/// Everything a snapshot is computed from. Start from [`BudgetInput::new`] and set the counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetInput {
    pub context_window: u64,
    /// The model's largest reply; the reserve never exceeds it.
    pub max_output: u64,
    pub response_reserve: u64,
    /// The system prompt as a message (see `CountCache::system_prompt`).
    pub system: Counted,
    /// The project instructions sent with the system prompt: like it, sent whole every time.
    pub instructions: Counted,
    pub tools: Counted,
    /// The stored messages that will be sent.
    pub history: HistoryTally,
    /// The message about to be sent that `history` does not hold yet (zero if none).
    pub latest_user: Counted,
    /// The part of `history` that is a summary of older turns.
    pub summary: Counted,
    /// The part of `history` and `latest_user` that is images.
    pub images: u64,
    /// The share of the usable window less system prompt and tools the history may fill.
    pub history_share: f64,
    /// Whether the model's text is counted with a stand-in tokenizer; only then is
    /// `correction_factor` applied.
    pub counted_by_estimate: bool,
    /// From [`CorrectionTable::factor`].
    pub correction_factor: f64,
    pub thresholds: Thresholds,
}

impl BudgetInput {
    /// Defaults for a model: the default reserve and thresholds, no counts, no correction.
    pub fn new(window: &ModelWindow, counter: TokenCounter) -> Self {
        BudgetInput {
            context_window: window.context_window,
            max_output: window.max_output,
            response_reserve: DEFAULT_RESPONSE_RESERVE,
            system: Counted::ZERO,
            instructions: Counted::ZERO,
            tools: Counted::ZERO,
            history: HistoryTally::new(),
            latest_user: Counted::ZERO,
            summary: Counted::ZERO,
            images: 0,
            history_share: 1.0,
            counted_by_estimate: !counter.is_exact(),
            correction_factor: 1.0,
            thresholds: Thresholds::DEFAULT,
        }
    }

    /// The budget of the request these counts describe. O(1).
    pub fn snapshot(&self) -> BudgetSnapshot {
        let response_reserve = self.effective_reserve();
        let usable_tokens = self.context_window.saturating_sub(response_reserve);
        let parts = self.system
            + self.instructions
            + self.tools
            + self.history.as_counted()
            + self.latest_user;
        let raw_input_tokens = parts.tokens.saturating_add(REPLY_PRIMING_TOKENS);
        let correction_factor = self.applied_factor();
        let input_tokens = scale(raw_input_tokens, correction_factor);
        let utilisation = input_tokens as f64 / usable_tokens.max(1) as f64;
        BudgetSnapshot {
            summary_tokens: self.summary.tokens,
            history_limit_tokens: self.history_limit(),
            context_window: self.context_window,
            response_reserve,
            usable_tokens,
            system_tokens: self.system.tokens,
            instructions_tokens: self.instructions.tokens,
            tool_tokens: self.tools.tokens,
            history_tokens: self.history.tokens(),
            history_messages: self.history.messages(),
            latest_user_tokens: self.latest_user.tokens,
            raw_input_tokens,
            input_tokens,
            correction_factor,
            counted_by_estimate: self.counted_by_estimate,
            exact: parts.exact && !self.counted_by_estimate,
            remaining_tokens: usable_tokens.saturating_sub(input_tokens),
            utilisation,
            pressure: self.thresholds.pressure(utilisation),
            thresholds: self.thresholds,
            estimate: BudgetEstimate::Counted,
            image_tokens: self.images,
        }
    }

    /// The usable window less the system prompt, the tools and the reply priming: what the
    /// messages may fill together.
    pub fn message_room(&self) -> u64 {
        self.context_window
            .saturating_sub(self.effective_reserve())
            .saturating_sub(self.system.tokens)
            .saturating_sub(self.instructions.tokens)
            .saturating_sub(self.tools.tokens)
            .saturating_sub(REPLY_PRIMING_TOKENS)
    }

    /// What the history may fill: its share of the message room.
    pub fn history_limit(&self) -> u64 {
        (self.message_room() as f64 * self.history_share.clamp(0.0, 1.0)).floor() as u64
    }

    /// The reserve, capped at the model's largest reply (reserving more is waste) and at half
    /// the window (so a small local window still leaves room for a prompt).
    fn effective_reserve(&self) -> u64 {
        self.response_reserve
            .min(self.max_output)
            .min(self.context_window / 2)
    }

    fn applied_factor(&self) -> f64 {
        let usable = self.correction_factor.is_finite() && self.correction_factor > 0.0;
        if self.counted_by_estimate && usable {
            self.correction_factor
        } else {
            1.0
        }
    }
}

fn scale(tokens: u64, factor: f64) -> u64 {
    if factor == 1.0 {
        tokens
    } else {
        (tokens as f64 * factor).round() as u64
    }
}

/// What the provider reported for a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Actuals {
    /// Every prompt token billed, cached or not (input + cache read + cache write).
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A model's learned ratio of billed to estimated input tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Correction {
    pub factor: f64,
    pub samples: u64,
}

/// Per-model correction factors for models counted by estimate.
///
/// The factor is an exponential moving average of `actual / raw estimate`: the first
/// observation sets it, each later one moves it by [`CorrectionTable::ALPHA`] of the gap, so it
/// follows a change of tokenizer within a few requests without jumping on one odd response.
/// Ratios are compared with the *uncorrected* estimate, or the factor would chase itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorrectionTable {
    models: HashMap<String, Correction>,
}

impl CorrectionTable {
    /// Weight of the newest observation.
    pub const ALPHA: f64 = 0.25;
    /// Estimates smaller than this say little about a tokenizer (the provider's hidden framing
    /// dominates them), so they are not learned from.
    pub const MIN_ESTIMATE: u64 = 64;
    /// Ratios outside this range are clamped: they mean a bad estimate (or a provider counting
    /// something we cannot see), not a tokenizer difference.
    pub const RATIO_RANGE: (f64, f64) = (0.25, 4.0);

    pub fn new() -> Self {
        Self::default()
    }

    /// The factor for `model`; 1 until something was learned.
    pub fn factor(&self, model: &str) -> f64 {
        self.models.get(&model_key(model)).map_or(1.0, |c| c.factor)
    }

    pub fn get(&self, model: &str) -> Option<Correction> {
        self.models.get(&model_key(model)).copied()
    }

    /// Learns from one request; returns the new factor. Ignores estimates below
    /// [`MIN_ESTIMATE`](Self::MIN_ESTIMATE).
    pub fn observe(&mut self, model: &str, raw_estimate: u64, actual: u64) -> f64 {
        if raw_estimate < Self::MIN_ESTIMATE {
            return self.factor(model);
        }
        let (low, high) = Self::RATIO_RANGE;
        let ratio = (actual as f64 / raw_estimate as f64).clamp(low, high);
        let entry = self
            .models
            .entry(model_key(model))
            .and_modify(|c| {
                c.factor += Self::ALPHA * (ratio - c.factor);
                c.samples += 1;
            })
            .or_insert(Correction {
                factor: ratio,
                samples: 1,
            });
        entry.factor
    }

    /// Compares a request's snapshot with the provider's report, and learns from it when the
    /// snapshot was counted by estimate (exact counts need no correction).
    pub fn reconcile(
        &mut self,
        model: &str,
        snapshot: &BudgetSnapshot,
        actuals: Actuals,
    ) -> Reconciliation {
        let learned =
            snapshot.counted_by_estimate && snapshot.raw_input_tokens >= Self::MIN_ESTIMATE;
        if learned {
            self.observe(model, snapshot.raw_input_tokens, actuals.input_tokens);
        }
        Reconciliation {
            estimated_input_tokens: snapshot.input_tokens,
            actual_input_tokens: actuals.input_tokens,
            actual_output_tokens: actuals.output_tokens,
            difference: signed_difference(actuals.input_tokens, snapshot.input_tokens),
            correction_factor: self.factor(model),
            learned,
        }
    }
}

fn model_key(model: &str) -> String {
    model.trim().to_ascii_lowercase()
}

fn signed_difference(actual: u64, estimated: u64) -> i64 {
    let difference = i128::from(actual) - i128::from(estimated);
    difference.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::window::model_window;
    use crate::protocol::{BudgetError, Pressure};
    use pretty_assertions::assert_eq;

    /// A window of 14,096 with the default 4,096 reserve leaves exactly 10,000 usable tokens.
    fn input_for(prompt_tokens: u64) -> BudgetInput {
        let window = ModelWindow {
            context_window: 14_096,
            max_output: 8_192,
            source: crate::context::WindowSource::Override,
            family: None,
        };
        let mut input = BudgetInput::new(&window, TokenCounter::for_model("gpt-4o"));
        // Everything but the reply priming goes into the history.
        input
            .history
            .add(Counted::exact(prompt_tokens - REPLY_PRIMING_TOKENS));
        input
    }

    #[test]
    fn snapshot_adds_the_parts_and_the_reply_priming() {
        let window = model_window("gpt-4o", None);
        let mut input = BudgetInput::new(&window, TokenCounter::for_model("gpt-4o"));
        input.system = Counted::exact(1_200);
        input.instructions = Counted::exact(400);
        input.tools = Counted::estimated(2_500);
        input.history = [Counted::exact(10_000), Counted::exact(20_000)]
            .into_iter()
            .collect();
        input.latest_user = Counted::exact(297);
        input.summary = Counted::exact(10_000);
        input.images = 1_590;
        input.history_share = 0.5;
        // 1,200 + 400 + 2,500 + 30,000 + 297 + 3 priming = 34,400 of 128,000 - 4,096 = 123,904.
        // The history may fill half of 123,904 - 1,200 - 400 - 2,500 - 3 = 119,801.
        assert_eq!(
            input.snapshot(),
            BudgetSnapshot {
                context_window: 128_000,
                response_reserve: 4_096,
                usable_tokens: 123_904,
                system_tokens: 1_200,
                instructions_tokens: 400,
                tool_tokens: 2_500,
                history_tokens: 30_000,
                history_messages: 2,
                summary_tokens: 10_000,
                history_limit_tokens: 59_900,
                latest_user_tokens: 297,
                raw_input_tokens: 34_400,
                input_tokens: 34_400,
                correction_factor: 1.0,
                counted_by_estimate: false,
                exact: false,
                remaining_tokens: 89_504,
                utilisation: 34_400.0 / 123_904.0,
                pressure: Pressure::Normal,
                thresholds: Thresholds::DEFAULT,
                estimate: BudgetEstimate::Counted,
                image_tokens: 1_590,
            }
        );
    }

    #[test]
    fn pressure_changes_exactly_at_the_thresholds() {
        let at = |tokens| {
            let snapshot = input_for(tokens).snapshot();
            (tokens, snapshot.utilisation, snapshot.pressure)
        };
        assert_eq!(
            [
                at(6_999),
                at(7_000),
                at(8_999),
                at(9_000),
                at(10_000),
                at(12_000)
            ],
            [
                (6_999, 0.6999, Pressure::Normal),
                (7_000, 0.70, Pressure::High),
                (8_999, 0.8999, Pressure::High),
                (9_000, 0.90, Pressure::Critical),
                (10_000, 1.0, Pressure::Critical),
                (12_000, 1.2, Pressure::Critical),
            ]
        );
        assert_eq!(input_for(12_000).snapshot().remaining_tokens, 0);
    }

    #[test]
    fn thresholds_are_settable_and_validated() {
        let mut input = input_for(5_000);
        input.thresholds = Thresholds::new(0.5, 0.8).unwrap_or_default();
        assert_eq!(input.snapshot().pressure, Pressure::High);
        assert_eq!(
            Thresholds::new(0.9, 0.7),
            Err(BudgetError::Thresholds {
                high: 0.9,
                critical: 0.7
            })
        );
        assert!(Thresholds::new(0.0, 0.5).is_err());
        assert!(Thresholds::new(f64::NAN, 0.5).is_err());
        let parsed: Result<Thresholds, _> = serde_json::from_str(r#"{"high":0.8,"critical":0.6}"#);
        assert!(parsed.is_err());
    }

    #[test]
    fn the_reserve_is_capped_by_max_output_and_half_the_window() {
        let mut input = input_for(1_000);
        input.max_output = 1_024;
        assert_eq!(input.snapshot().response_reserve, 1_024);
        let small = ModelWindow {
            context_window: 4_096,
            max_output: 4_096,
            source: crate::context::WindowSource::Table,
            family: Some("llama".to_owned()),
        };
        let snapshot = BudgetInput::new(&small, TokenCounter::for_model("llama2")).snapshot();
        assert_eq!(
            (snapshot.response_reserve, snapshot.usable_tokens),
            (2_048, 2_048)
        );
    }

    #[test]
    fn history_tally_adds_and_removes_in_constant_time() {
        let mut tally = HistoryTally::new();
        tally.add(Counted::exact(10));
        tally.add(Counted::estimated(20));
        assert_eq!(
            (tally.tokens(), tally.messages(), tally.is_exact()),
            (30, 2, false)
        );
        tally.remove(Counted::estimated(20));
        assert_eq!(tally.as_counted(), Counted::exact(10));
        tally.remove(Counted::exact(50));
        assert_eq!(tally, HistoryTally::new());
    }

    #[test]
    fn correction_factor_is_an_ema_of_actual_over_raw_estimate() {
        let mut table = CorrectionTable::new();
        assert_eq!(table.factor("claude-sonnet-4-5"), 1.0);
        // First observation sets the factor: 1,500 / 1,000 = 1.5.
        assert_eq!(table.observe("claude-sonnet-4-5", 1_000, 1_500), 1.5);
        // Then 1.5 + 0.25 × (1.0 − 1.5) = 1.375.
        assert_eq!(table.observe("Claude-Sonnet-4-5", 2_000, 2_000), 1.375);
        // A wild ratio (10×) is clamped to 4: 1.375 + 0.25 × (4 − 1.375) = 2.03125.
        assert_eq!(table.observe("claude-sonnet-4-5", 100, 1_000), 2.031_25);
        // Tiny estimates teach nothing.
        assert_eq!(table.observe("claude-sonnet-4-5", 10, 1_000), 2.031_25);
        assert_eq!(
            table.get("claude-sonnet-4-5"),
            Some(Correction {
                factor: 2.031_25,
                samples: 3
            })
        );
        assert_eq!(table.factor("gemini-2.5-pro"), 1.0);
    }

    #[test]
    fn estimated_models_are_corrected_and_reconciled() {
        let model = "claude-sonnet-4-5";
        let window = model_window(model, None);
        let mut table = CorrectionTable::new();
        let mut input = BudgetInput::new(&window, TokenCounter::for_model(model));
        input.history.add(Counted::estimated(9_997));

        // Before anything is learned: raw 10,000, reported 12,000 → +2,000, factor 1.2.
        let first = input.snapshot();
        assert_eq!(
            (first.raw_input_tokens, first.input_tokens),
            (10_000, 10_000)
        );
        let actuals = Actuals {
            input_tokens: 12_000,
            output_tokens: 350,
        };
        assert_eq!(
            table.reconcile(model, &first, actuals),
            Reconciliation {
                estimated_input_tokens: 10_000,
                actual_input_tokens: 12_000,
                actual_output_tokens: 350,
                difference: 2_000,
                correction_factor: 1.2,
                learned: true,
            }
        );

        // Later estimates are scaled: 10,000 × 1.2 = 12,000, reported in the snapshot.
        input.correction_factor = table.factor(model);
        let second = input.snapshot();
        assert_eq!(
            (
                second.raw_input_tokens,
                second.input_tokens,
                second.correction_factor,
                second.exact
            ),
            (10_000, 12_000, 1.2, false)
        );
        // Reported 11,000 against 12,000 shown → −1,000; factor 1.2 + 0.25 × (1.1 − 1.2) = 1.175.
        let third = table.reconcile(
            model,
            &second,
            Actuals {
                input_tokens: 11_000,
                output_tokens: 10,
            },
        );
        assert_eq!(third.difference, -1_000);
        assert!((third.correction_factor - 1.175).abs() < 1e-12);
    }

    #[test]
    fn exactly_counted_models_are_not_corrected() {
        let mut input = input_for(1_000);
        input.correction_factor = 1.5;
        let snapshot = input.snapshot();
        assert_eq!(
            (snapshot.input_tokens, snapshot.correction_factor),
            (1_000, 1.0)
        );
        let mut table = CorrectionTable::new();
        let reconciliation = table.reconcile(
            "gpt-4o",
            &snapshot,
            Actuals {
                input_tokens: 1_010,
                output_tokens: 5,
            },
        );
        assert_eq!(
            (reconciliation.difference, reconciliation.learned),
            (10, false)
        );
        assert_eq!(table, CorrectionTable::new());
    }

    #[test]
    fn snapshot_serialises_in_camel_case() {
        let json = serde_json::to_value(input_for(7_000).snapshot()).unwrap_or_default();
        assert_eq!(json["pressure"], "high");
        assert_eq!(json["remainingTokens"], 3_000);
        assert_eq!(json["thresholds"]["critical"], 0.9);
    }
}
