//! Token budgets and cost of sessions.
//!
//! Each message is counted once, when it is committed, and its count stored; a budget
//! snapshot adds up the stored counts of what the projection sends, so nothing is recounted. Usage lines are facts; prices are applied when a summary is read, so a changed
//! price re-prices history.

use std::borrow::Cow;
use std::sync::Mutex;

use super::{Inner, RuntimeResult};
use crate::context::projection::{interjection_text, summary_text};
use crate::context::{
    Actuals, CorrectionTable, CountCache, Counted, Part, TokenCounter, upper_bounds,
};
use crate::cost::{PriceBook, UsageLine, cost_summary};
use crate::protocol::{
    Block, BudgetSnapshot, CostSummary, NoticeLevel, Reconciliation, Role, TranscriptEntry,
};
use crate::store::NewMessage;
use crate::util::lock;

/// What the runtime remembers between snapshots.
pub struct Accounting {
    counts: CountCache,
    corrections: Mutex<CorrectionTable>,
    prices: PriceBook,
}

impl Accounting {
    pub fn new(prices: PriceBook) -> Self {
        Self {
            counts: CountCache::new(),
            corrections: Mutex::new(CorrectionTable::new()),
            prices,
        }
    }

    /// Cached counts of system prompts and tool definitions.
    pub fn counts(&self) -> &CountCache {
        &self.counts
    }

    /// The correction learned for a model counted by estimate.
    pub fn factor(&self, model: &str) -> f64 {
        lock(&self.corrections).factor(model)
    }
}

/// Counts of an answer's text and thinking, taken while they streamed in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Precounted {
    pub text: Option<Counted>,
    pub thinking: Option<Counted>,
}

/// Counts one message as the model will see it.
/// What a session has spent, in words for a message: the priced total, never an amount for
/// usage nothing priced (unpriced is not $0).
pub(super) fn spent_words(cost: &CostSummary) -> String {
    match (cost.total_usd, cost.unpriced.lines > 0) {
        (Some(usd), false) => format!("${usd:.4} spent"),
        (Some(usd), true) => format!("${usd:.4} spent, plus unpriced usage"),
        (None, true) => "only unpriced usage so far".to_string(),
        (None, false) => "nothing spent yet".to_string(),
    }
}

pub fn count_blocks(model: &str, role: Role, blocks: &[Block]) -> Counted {
    count_blocks_with(model, role, blocks, Precounted::default())
}

/// Counts one message, taking the counts of its text and thinking from `precounted` where given
/// (an answer has at most one block of each).
pub fn count_blocks_with(
    model: &str,
    role: Role,
    blocks: &[Block],
    precounted: Precounted,
) -> Counted {
    let counter = TokenCounter::for_model(model);
    let texts: Vec<Cow<'_, str>> = crate::context::projection::model_blocks(blocks)
        .filter_map(|block| match block {
            Block::Text { text } if precounted.text.is_none() => Some(Cow::Borrowed(text.as_str())),
            Block::Thinking { text, .. } if precounted.thinking.is_none() => {
                Some(Cow::Borrowed(text.as_str()))
            }
            Block::Text { .. } | Block::Thinking { .. } => None,
            Block::ToolResult { output, .. } => Some(Cow::Borrowed(output.as_str())),
            Block::Interjection {
                text,
                promoted: true,
                ..
            } => Some(Cow::Borrowed(text.as_str())),
            Block::Interjection { text, .. } => Some(Cow::Owned(interjection_text(text))),
            Block::Summary {
                method,
                text,
                messages,
                ..
            } => Some(Cow::Owned(summary_text(*method, text, *messages))),
            Block::Attachment { name, text } => {
                Some(Cow::Owned(format!("Attached {name}:\n{text}")))
            }
            Block::Command { prompt, .. } => Some(Cow::Borrowed(prompt.as_str())),
            Block::ToolCall { .. } | Block::Notice { .. } => None,
        })
        .collect();
    let arguments: Vec<(&str, String)> = blocks
        .iter()
        .filter_map(|block| match block {
            Block::ToolCall { name, input, .. } => Some((name.as_str(), input.to_string())),
            _ => None,
        })
        .collect();
    let has = |wanted: fn(&Block) -> bool| blocks.iter().any(wanted);
    let mut parts: Vec<Part<'_>> = texts.iter().map(|t| Part::Text(t)).collect();
    if let Some(counted) = precounted
        .thinking
        .filter(|_| has(|b| matches!(b, Block::Thinking { .. })))
    {
        parts.push(Part::Counted(counted));
    }
    if let Some(counted) = precounted
        .text
        .filter(|_| has(|b| matches!(b, Block::Text { .. })))
    {
        parts.push(Part::Counted(counted));
    }
    parts.extend(
        arguments
            .iter()
            .map(|(name, arguments)| Part::ToolCall { name, arguments }),
    );
    let role = match role {
        Role::Assistant => "assistant",
        Role::Tool => "tool",
        Role::User | Role::Note | Role::Notice | Role::Summary => "user",
    };
    counter.count_message(role, &parts)
}

impl Inner {
    /// Counts, commits and announces a message.
    pub(super) fn commit(&self, mut message: NewMessage) -> RuntimeResult<TranscriptEntry> {
        let session_id = message.session_id.clone();
        let reaches_model = message.role.reaches_model();
        if reaches_model && message.tokens.is_none() {
            let model = self
                .store
                .session(&session_id)?
                .map(|s| s.model)
                .unwrap_or_default();
            // Before the tokenizer is ready a message is stored without a count rather than
            // wait for it: the first request goes out at once, and its exact figures fill the
            // count in (`Inner::fill_counts`).
            let (counted, bounded) =
                upper_bounds(|| count_blocks(&model, message.role, &message.blocks));
            message.tokens = (!bounded).then_some(counted);
        }
        self.events.commit(&self.store, message)
    }

    /// Stores a notice as a transcript entry (never sent to a model), then announces it.
    pub(super) fn notice(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        level: NoticeLevel,
        text: impl Into<String>,
    ) -> RuntimeResult<TranscriptEntry> {
        let block = Block::Notice {
            level,
            text: text.into(),
        };
        self.commit(NewMessage::new(
            session_id,
            run_id,
            Role::Notice,
            vec![block],
        ))
    }

    /// Compares the provider's counts with the snapshot sent, learning a correction for models
    /// counted by estimate.
    pub(super) fn reconcile(
        &self,
        model: &str,
        snapshot: &BudgetSnapshot,
        actuals: Actuals,
    ) -> Reconciliation {
        lock(&self.accounting.corrections).reconcile(model, snapshot, actuals)
    }

    /// The session's usage, priced now, with the usage of its delegated tasks (each child
    /// session's lines, marked with the child's id).
    pub(super) fn cost_summary(&self, session_id: &str) -> RuntimeResult<CostSummary> {
        let line = |row: crate::store::UsageRow, delegated_to: Option<&str>| UsageLine {
            provider: row.provider,
            model: row.model,
            tokens: row.tokens,
            at: row.at,
            duration_ms: row.duration_ms,
            kind: row.kind,
            delegated_to: delegated_to.map(str::to_string),
        };
        let mut lines: Vec<UsageLine> = self
            .store
            .usage_lines(session_id)?
            .into_iter()
            .map(|row| line(row, None))
            .collect();
        for child in self.store.delegations_of_parent(session_id)? {
            lines.extend(
                self.store
                    .usage_lines(&child.child_id)?
                    .into_iter()
                    .map(|row| line(row, Some(&child.child_id))),
            );
        }
        Ok(cost_summary(&lines, &self.accounting.prices))
    }

    /// Whether the price book (built-in or configured) has a price for `model`.
    pub(super) fn is_priced(&self, model: &str) -> bool {
        self.accounting.prices.lookup(model).is_some()
    }

    /// What sending `input_tokens` to `model` would cost as plain input, if it has a price.
    pub(super) fn input_cost(&self, model: &str, input_tokens: u64) -> Option<f64> {
        let price = self.accounting.prices.lookup(model)?;
        let rates = price.rates_for(input_tokens);
        Some(rates.input as f64 * input_tokens as f64 / 1e12)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn a_message_counts_its_text_and_tool_calls() {
        let blocks = vec![
            Block::Text {
                text: "hello world".into(),
            },
            Block::ToolCall {
                id: "c".into(),
                name: "read_file".into(),
                input: json!({"path": "a"}),
            },
        ];
        let counted = count_blocks("gpt-4o", Role::Assistant, &blocks);
        let counter = TokenCounter::for_model("gpt-4o");
        let expected = counter.count_message(
            "assistant",
            &[
                Part::Text("hello world"),
                Part::ToolCall {
                    name: "read_file",
                    arguments: r#"{"path":"a"}"#,
                },
            ],
        );
        assert_eq!(counted, expected);
        assert!(counted.exact);
        assert!(!count_blocks("claude-sonnet-4-5", Role::User, &blocks[..1]).exact);
    }

    #[test]
    fn precounted_text_and_thinking_replace_counting_them() {
        let blocks = vec![
            Block::Thinking {
                text: "let me think".into(),
                signature: Some("sig".into()),
            },
            Block::Text {
                text: "hello world".into(),
            },
            Block::ToolCall {
                id: "c".into(),
                name: "read_file".into(),
                input: json!({"path": "a"}),
            },
        ];
        let counter = TokenCounter::for_model("gpt-4o");
        let precounted = Precounted {
            text: Some(counter.count_text("hello world")),
            thinking: Some(counter.count_text("let me think")),
        };
        assert_eq!(
            count_blocks_with("gpt-4o", Role::Assistant, &blocks, precounted),
            count_blocks("gpt-4o", Role::Assistant, &blocks)
        );
        // A count is used for its own kind of block only, and only when that block is there.
        let odd = Precounted {
            text: Some(Counted::exact(1_000)),
            thinking: Some(Counted::exact(2_000)),
        };
        assert_eq!(
            count_blocks_with("gpt-4o", Role::Assistant, &blocks[1..2], odd),
            count_blocks("gpt-4o", Role::Assistant, &[]) + Counted::exact(1_000)
        );
        assert_eq!(
            count_blocks_with("gpt-4o", Role::Assistant, &blocks[2..], odd),
            count_blocks("gpt-4o", Role::Assistant, &blocks[2..])
        );
    }
}
