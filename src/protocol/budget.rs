//! The context budget as a client sees it: how full the model's window is before a request, and
//! how the estimate compared with what the provider reported. `context::budget` computes them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Why [`Thresholds`] were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error(
        "thresholds must satisfy 0 < high <= critical (finite); got high {high}, critical {critical}"
    )]
    Thresholds { high: f64, critical: f64 },
}

/// How close to full the window is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Pressure {
    Normal,
    /// Time to think about compacting.
    High,
    /// The next turns may not fit.
    Critical,
}

/// Utilisation levels at which pressure becomes high and critical (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", try_from = "RawThresholds")]
pub struct Thresholds {
    high: f64,
    critical: f64,
}

/// The unchecked form thresholds are read from; its schema is the wire schema.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawThresholds {
    high: f64,
    critical: f64,
}

impl TryFrom<RawThresholds> for Thresholds {
    type Error = BudgetError;

    fn try_from(raw: RawThresholds) -> Result<Self, Self::Error> {
        Thresholds::new(raw.high, raw.critical)
    }
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds::DEFAULT
    }
}

impl Thresholds {
    /// High at 70 %, critical at 90 %: late enough not to nag, early enough that compaction
    /// (itself a model call) still fits.
    pub const DEFAULT: Thresholds = Thresholds {
        high: 0.70,
        critical: 0.90,
    };

    pub fn new(high: f64, critical: f64) -> Result<Self, BudgetError> {
        let valid = high.is_finite() && critical.is_finite() && high > 0.0 && high <= critical;
        if valid {
            Ok(Thresholds { high, critical })
        } else {
            Err(BudgetError::Thresholds { high, critical })
        }
    }

    pub fn high(&self) -> f64 {
        self.high
    }

    pub fn critical(&self) -> f64 {
        self.critical
    }

    /// The pressure at `utilisation`; a level is reached when utilisation equals it.
    pub fn pressure(&self, utilisation: f64) -> Pressure {
        if utilisation >= self.critical {
            Pressure::Critical
        } else if utilisation >= self.high {
            Pressure::High
        } else {
            Pressure::Normal
        }
    }
}

/// How a [`BudgetSnapshot`]'s figures were counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BudgetEstimate {
    /// By the tokenizer (exactly, or with a stand-in's: see `exact`).
    #[default]
    Counted,
    /// Before the tokenizer was ready (a daemon's first request): each text as its UTF-8 byte
    /// size, which no token count exceeds, so the request certainly fits. The same step's
    /// figures, counted, follow in its next `budget` event.
    UpperBound,
}

/// The token budget of one request, as the editor shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSnapshot {
    pub context_window: u64,
    /// Tokens kept free for the reply.
    pub response_reserve: u64,
    /// `context_window - response_reserve`: what the prompt may fill.
    pub usable_tokens: u64,
    pub system_tokens: u64,
    /// The project instructions (AGENTS.md files) sent with the system prompt; never
    /// compacted (absent: none).
    #[serde(default)]
    pub instructions_tokens: u64,
    pub tool_tokens: u64,
    /// What is sent before the current turn, as projected (older tool results reduced, a
    /// summary in place of what it folded).
    pub history_tokens: u64,
    pub history_messages: u64,
    /// The part of `history_tokens` that is a summary of older turns.
    pub summary_tokens: u64,
    /// What the history may fill before older turns are compacted: its share of the usable
    /// window less system prompt and tools.
    pub history_limit_tokens: u64,
    /// The current turn: the user message being answered, the run's steps so far and any
    /// interjections leased into the request.
    pub latest_user_tokens: u64,
    /// Sum of the parts plus the reply priming, before correction.
    pub raw_input_tokens: u64,
    /// What we expect the provider to bill as input: `raw_input_tokens × correction_factor`.
    pub input_tokens: u64,
    /// The factor applied (1 when counts are exact).
    pub correction_factor: f64,
    /// Whether the model's text was counted with a stand-in tokenizer.
    pub counted_by_estimate: bool,
    /// Whether `input_tokens` is what the provider will bill (no stand-ins, no fixed charges).
    pub exact: bool,
    /// `usable_tokens - input_tokens`, or 0 when over.
    pub remaining_tokens: u64,
    /// `input_tokens / usable_tokens`; above 1 when over.
    pub utilisation: f64,
    pub pressure: Pressure,
    pub thresholds: Thresholds,
    /// Whether the figures are counted or upper bounds (absent: counted).
    #[serde(default)]
    pub estimate: BudgetEstimate,
    /// The part of `history_tokens` and `latest_user_tokens` that is images, by the provider's
    /// published formula (absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub image_tokens: u64,
}

/// The estimate of a request beside what the provider reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reconciliation {
    /// The snapshot's `input_tokens`.
    pub estimated_input_tokens: u64,
    pub actual_input_tokens: u64,
    pub actual_output_tokens: u64,
    /// `actual - estimated`: positive when we under-counted.
    pub difference: i64,
    /// The model's factor after this observation.
    pub correction_factor: f64,
    /// Whether this observation changed the factor.
    pub learned: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
