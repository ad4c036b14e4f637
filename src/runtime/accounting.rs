//! Token budgets and cost of sessions.
//!
//! Each message is counted once, when it is committed, and its count stored; a budget
//! snapshot adds up the stored counts of what the projection sends, so nothing is recounted.
//! Usage lines are facts; prices are applied when a summary is read, each line at the rates in
//! force at its own time.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use super::{Inner, RuntimeResult};
use crate::context::projection::{attachment_text, interjection_text, summary_text};
use crate::context::{
    Actuals, CorrectionTable, CountCache, Counted, Part, TokenCounter, upper_bounds,
};
use crate::cost::{PriceBook, SpendTally, UsageLine, cost_summary};
use crate::protocol::{
    Block, BudgetSnapshot, CostSummary, NoticeLevel, Reconciliation, Role, TranscriptEntry,
};
use crate::store::{NewMessage, UsageRow};
use crate::util::lock;

/// What the runtime remembers between snapshots.
pub struct Accounting {
    counts: CountCache,
    corrections: Mutex<CorrectionTable>,
    prices: PriceBook,
    /// Each session's own usage totalled through its newest line read so far, so that a
    /// spend line prices only the lines written since.
    spends: Mutex<HashMap<String, Totalled>>,
    /// Which price book the totals were priced with, as kept in the database beside them.
    prices_fingerprint: String,
}

/// A session's own usage lines totalled through line `through`.
#[derive(Debug, Clone, Copy, Default)]
struct Totalled {
    through: i64,
    tally: SpendTally,
    /// Whether the database holds it too.
    kept: bool,
}

impl From<crate::store::KeptSpend> for Totalled {
    fn from(kept: crate::store::KeptSpend) -> Self {
        Self {
            through: kept.through,
            tally: SpendTally {
                tokens: kept.tokens,
                costs: kept.cost_pico,
                priced_lines: kept.priced_lines,
                unpriced_lines: kept.unpriced_lines,
            },
            kept: true,
        }
    }
}

impl Accounting {
    pub fn new(prices: PriceBook) -> Self {
        Self {
            counts: CountCache::new(),
            corrections: Mutex::new(CorrectionTable::new()),
            prices_fingerprint: fingerprint(&prices),
            prices,
            spends: Mutex::new(HashMap::new()),
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
            Block::Attachment {
                name, text, range, ..
            } => Some(Cow::Owned(attachment_text(name, *range, text))),
            Block::Command { prompt, .. } => Some(Cow::Borrowed(prompt.as_str())),
            Block::ToolCall { .. } | Block::Notice { .. } | Block::Image { .. } => None,
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
    // Images by the provider's published formula: an estimate, as the provider's own
    // scaling may round differently.
    let formula = crate::images::ImageFormula::for_model(model);
    parts.extend(crate::context::projection::model_blocks(blocks).filter_map(
        |block| match block {
            Block::Image { width, height, .. } => Some(Part::Counted(Counted::estimated(
                crate::images::image_tokens(formula, *width, *height),
            ))),
            _ => None,
        },
    ));
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
        let mut lines: Vec<UsageLine> = self
            .store
            .usage_lines(session_id)?
            .into_iter()
            .map(|row| usage_line(row, None))
            .collect();
        for child in self.store.delegations_of_parent(session_id)? {
            lines.extend(
                self.store
                    .usage_lines(&child.child_id)?
                    .into_iter()
                    .map(|row| usage_line(row, Some(&child.child_id))),
            );
        }
        Ok(cost_summary(&lines, &self.accounting.prices))
    }

    /// The session's spend line (`.spend()`: the totals of [`Self::cost_summary`]) and its
    /// tokens of each kind (`session/get`'s `tokensByKind`), its delegated tasks' included:
    /// kept per session and brought up to date with only the lines written since the last
    /// read, so that neither grows with the session's length or the database's.
    pub(super) fn spend_tally(&self, session_id: &str) -> RuntimeResult<SpendTally> {
        let children = self.store.delegations_of_parent(session_id)?;
        let mut owners = vec![session_id];
        owners.extend(children.iter().map(|c| c.child_id.as_str()));
        Ok(self
            .own_spends(&owners)?
            .into_values()
            .fold(SpendTally::default(), |mut all, one| {
                all += one;
                all
            }))
    }

    /// Each session's own lines totalled, for a page of sessions at once: from this daemon's
    /// total, or else the one kept in the database, topped up with the lines written since.
    /// Lines another daemon on the same file wrote are found too: the store is asked for every
    /// line past the last one totalled. A few statements for the whole page, whatever its
    /// size.
    pub(super) fn own_spends(
        &self,
        session_ids: &[&str],
    ) -> RuntimeResult<HashMap<String, SpendTally>> {
        let mut ids = session_ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        // Each session's starting total, and whether this daemon held it already.
        let mut start: HashMap<&str, (Totalled, bool)> = HashMap::with_capacity(ids.len());
        {
            let spends = lock(&self.accounting.spends);
            for id in &ids {
                if let Some(known) = spends.get(*id) {
                    start.insert(id, (*known, true));
                }
            }
        }
        let unknown: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| !start.contains_key(id))
            .collect();
        if !unknown.is_empty() {
            let kept: HashMap<String, Totalled> = self
                .store
                .kept_spends(&unknown)?
                .into_iter()
                .filter(|(_, kept)| kept.prices == self.accounting.prices_fingerprint)
                .map(|(id, kept)| (id, Totalled::from(kept)))
                .collect();
            for id in unknown {
                start.insert(id, (kept.get(id).copied().unwrap_or_default(), false));
            }
        }
        let marks: Vec<(&str, i64)> = ids.iter().map(|id| (*id, start[id].0.through)).collect();
        let mut now: HashMap<&str, Totalled> =
            start.iter().map(|(id, (total, _))| (*id, *total)).collect();
        for (id, line, row) in self.store.usage_lines_after_each(&marks)? {
            if let Some(total) = now.get_mut(id.as_str()) {
                total
                    .tally
                    .add(&usage_line(row, None), &self.accounting.prices);
                total.through = total.through.max(line);
                total.kept = false;
            }
        }
        let mut spends = lock(&self.accounting.spends);
        for (id, total) in &now {
            let known = start.get(id).is_some_and(|(_, known)| *known);
            let held = spends.entry((*id).to_owned()).or_default();
            // A concurrent read may have totalled further already; keep the furthest.
            if held.through < total.through || !known {
                *held = *total;
            }
        }
        Ok(now
            .into_iter()
            .map(|(id, total)| (id.to_owned(), total.tally))
            .collect())
    }

    /// Writes the totals the database does not hold yet, in one transaction; called off the
    /// request path (the heartbeat, shutdown), so no client waits for it.
    pub(super) fn keep_spends(&self) {
        let fresh: Vec<(String, crate::store::KeptSpend)> = lock(&self.accounting.spends)
            .iter()
            .filter(|(_, t)| !t.kept && t.through > 0)
            .map(|(id, t)| {
                let kept = crate::store::KeptSpend {
                    through: t.through,
                    prices: self.accounting.prices_fingerprint.clone(),
                    tokens: t.tally.tokens,
                    cost_pico: t.tally.costs,
                    priced_lines: t.tally.priced_lines,
                    unpriced_lines: t.tally.unpriced_lines,
                };
                (id.clone(), kept)
            })
            .collect();
        if fresh.is_empty() {
            return;
        }
        if let Err(e) = self.store.keep_spends(&fresh) {
            tracing::warn!(error = %e, "cannot keep the sessions' spend totals; they are kept in memory");
            return;
        }
        let mut spends = lock(&self.accounting.spends);
        for (id, kept) in fresh {
            if let Some(t) = spends.get_mut(&id)
                && t.through == kept.through
            {
                t.kept = true;
            }
        }
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

/// A short name for the price book's contents: a total kept in the database is used only by a
/// daemon with the same prices (a changed price or override re-prices from the lines). A
/// fingerprint that changes for another reason (another build) only costs one re-pricing.
fn fingerprint(prices: &PriceBook) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    format!("{prices:?}").hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// A stored usage row as the cost module reads it.
fn usage_line(row: UsageRow, delegated_to: Option<&str>) -> UsageLine {
    UsageLine {
        provider: row.provider,
        model: row.model,
        tokens: row.tokens,
        at: row.at,
        duration_ms: row.duration_ms,
        kind: row.kind,
        delegated_to: delegated_to.map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SessionSpend;
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

    /// The spend line kept per session and topped up with newer lines says what pricing every
    /// line afresh says, also for lines another daemon on the same file wrote.
    #[test]
    fn a_kept_spend_line_agrees_with_pricing_every_line_afresh() {
        use crate::protocol::{TokenUsage, UsageKind};
        use crate::store::{NewSession, Store, UsageRow};
        use std::sync::Arc;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let runtime = crate::runtime::Runtime::new(
            Store::open(&path).unwrap(),
            crate::config::Config::from_env(),
            Arc::new(crate::runtime::events::NoClient),
        )
        .unwrap();
        let inner = &runtime.inner;
        let session = |store: &Store| {
            store
                .insert_session(&NewSession {
                    title: "t".into(),
                    account: "demo".into(),
                    model: "gpt-4o".into(),
                    system_prompt: None,
                    workspace_root: None,
                    max_steps: 10,
                    cap_usd: None,
                    max_seconds: None,
                    rollover_secs: None,
                })
                .unwrap()
                .id
        };
        let line = |store: &Store, session_id: &str, model: &str, input: u64| {
            store
                .insert_usage(
                    session_id,
                    &UsageRow {
                        run_id: "run".into(),
                        provider: "openai".into(),
                        model: model.into(),
                        tokens: TokenUsage {
                            input,
                            output: 40,
                            cache_read: 10,
                            ..TokenUsage::default()
                        },
                        at: crate::clock::now_ms(),
                        duration_ms: 5,
                        kind: UsageKind::Turn,
                    },
                )
                .unwrap();
        };
        let afresh = |session_id: &str| {
            let cost = inner.cost_summary(session_id).unwrap();
            SessionSpend {
                tokens: cost.by_model.iter().map(|m| m.tokens.total()).sum::<u64>()
                    + cost.unpriced.tokens.total(),
                cost_usd: cost.total_usd,
                unpriced_requests: cost.unpriced.lines,
            }
        };
        // The tokens of each kind, as `session/cost` sums them.
        let kinds_afresh = |session_id: &str| {
            let cost = inner.cost_summary(session_id).unwrap();
            let mut kinds = cost.unpriced.tokens;
            for model in &cost.by_model {
                kinds += model.tokens;
            }
            kinds
        };
        let id = session(&inner.store);
        let other = session(&inner.store);
        assert_eq!(
            inner.spend_tally(&id).unwrap().spend(),
            SessionSpend::default()
        );

        line(&inner.store, &id, "no-such-model", 1_000);
        let unpriced = inner.spend_tally(&id).unwrap().spend();
        assert_eq!(
            unpriced.cost_usd, None,
            "nothing priced is unpriced, not $0"
        );
        assert_eq!(unpriced, afresh(&id));

        line(&inner.store, &id, "gpt-4o", 120_000);
        line(&inner.store, &other, "gpt-4o", 7);
        assert_eq!(inner.spend_tally(&id).unwrap().spend(), afresh(&id));
        // Lines written through another connection to the file, as another daemon would.
        let elsewhere = Store::open(&path).unwrap();
        line(&elsewhere, &id, "gpt-4o", 3_000);
        line(&elsewhere, &id, "no-such-model", 9);
        let topped_up = inner.spend_tally(&id).unwrap().spend();
        assert_eq!(topped_up, afresh(&id));
        assert_eq!(topped_up.unpriced_requests, 2);
        assert_eq!(
            inner.spend_tally(&id).unwrap().tokens,
            kinds_afresh(&id),
            "tokens of each kind, topped up as the spend is"
        );
        assert_eq!(inner.spend_tally(&other).unwrap().spend(), afresh(&other));
        // Read again with nothing new: the same line.
        assert_eq!(inner.spend_tally(&id).unwrap().spend(), topped_up);

        // Kept in the database, a total is where a new daemon starts from: marked here by a
        // figure no line holds, which the new daemon reports with the line written since.
        inner.keep_spends();
        let marked = 1_000_000;
        let set = |sql: &str| {
            elsewhere.hold_writer().execute(sql, [&id]).unwrap();
        };
        set(&format!(
            "UPDATE session_spend SET input = input + {marked} WHERE session_id = ?1"
        ));
        line(&elsewhere, &id, "gpt-4o", 50);
        let fresh = |path: &std::path::Path| {
            crate::runtime::Runtime::new(
                Store::open(path).unwrap(),
                crate::config::Config::from_env(),
                Arc::new(crate::runtime::events::NoClient),
            )
            .unwrap()
        };
        let next = fresh(&path);
        let expected = afresh(&id);
        assert_eq!(
            next.inner.spend_tally(&id).unwrap().spend(),
            SessionSpend {
                tokens: expected.tokens + marked,
                ..expected.clone()
            }
        );
        // A total priced with another price book is not used.
        set("UPDATE session_spend SET prices = 'another book' WHERE session_id = ?1");
        assert_eq!(
            fresh(&path).inner.spend_tally(&id).unwrap().spend(),
            expected
        );
    }
}
