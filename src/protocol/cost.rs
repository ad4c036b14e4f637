//! What a session's usage cost, as a client sees it. `cost::usage` computes it from usage lines
//! and the price book.

use std::ops::AddAssign;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tokens of one request by kind. The kinds are disjoint except `reasoning`.
///
/// - `input`: prompt tokens billed at the plain input price (for OpenAI, `prompt_tokens` minus
///   the cached ones; for Anthropic, `input_tokens` as reported).
/// - `cache_read`, `cache_write`: prompt tokens read from or written to a prompt cache.
/// - `output`: every generated token, reasoning included (Gemini reports thoughts apart; add
///   them in), since all are billed at the output price.
/// - `reasoning`: the part of `output` that was reasoning, for display only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
}

impl TokenUsage {
    /// Every prompt token, cached or not: what long-context tiers are judged by.
    pub fn prompt_tokens(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// Prompt and output tokens.
    pub fn total(&self) -> u64 {
        self.prompt_tokens().saturating_add(self.output)
    }
}

impl AddAssign for TokenUsage {
    fn add_assign(&mut self, other: TokenUsage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.reasoning = self.reasoning.saturating_add(other.reasoning);
    }
}

/// Which table a price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PriceSource {
    Override,
    Builtin,
}

/// USD by token kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KindCosts {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// The cost of one model's priced lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCost {
    pub provider: String,
    pub model: String,
    pub lines: u64,
    pub tokens: TokenUsage,
    pub by_kind: KindCosts,
    pub total_usd: f64,
    /// Whether the price came from the user's configuration or the built-in table.
    pub price_source: PriceSource,
    /// The child session (a delegated task) whose requests these are, priced at its model;
    /// absent for the session's own requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_to: Option<String>,
}

/// Usage that no price applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnpricedUsage {
    pub lines: u64,
    pub tokens: TokenUsage,
    /// The models without a price, sorted.
    pub models: Vec<String>,
}

/// The cost of a set of usage lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostSummary {
    /// USD of the priced lines; with `partial`, a lower bound. Absent when no line is priced:
    /// usage without a price is unpriced, never $0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_usd: Option<f64>,
    /// USD of the priced lines by token kind; absent when no line is priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_kind: Option<KindCosts>,
    /// One entry per provider and model, sorted.
    pub by_model: Vec<ModelCost>,
    pub priced_lines: u64,
    pub unpriced: UnpricedUsage,
    /// Some lines have no price, so `total_usd` leaves them out.
    pub partial: bool,
    /// The date of the built-in prices.
    pub prices_as_of: String,
    /// Per kind of request (a turn's steps, summaries), in that order; kinds without lines
    /// are left out.
    pub by_request: Vec<RequestKindCost>,
}

/// What a model request was for.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum UsageKind {
    /// A step of a run answering the user.
    #[default]
    Turn,
    /// Summarising older turns (compaction) or writing a carry-over note.
    Summary,
    /// Naming the session after its first answer.
    Title,
}

impl UsageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageKind::Turn => "turn",
            UsageKind::Summary => "summary",
            UsageKind::Title => "title",
        }
    }

    /// The stored spelling; anything unknown is a turn.
    pub fn from_stored(text: &str) -> Self {
        match text {
            "summary" => UsageKind::Summary,
            "title" => UsageKind::Title,
            _ => UsageKind::Turn,
        }
    }
}

/// What the requests of one kind used and cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestKindCost {
    pub kind: UsageKind,
    pub lines: u64,
    pub tokens: TokenUsage,
    /// USD of the priced lines of this kind; absent when none of them is priced (unpriced
    /// usage is never $0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_usd: Option<f64>,
    /// Some lines of this kind have no price.
    pub partial: bool,
}
