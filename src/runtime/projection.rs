//! The projection of a session's transcript for its next request, and the budget describing
//! exactly that projection.
//!
//! The pure part lives in `context::projection`; this reads what it needs from the store and
//! the configuration.

use std::sync::Arc;

use super::accounting::count_blocks;
use super::compaction::ExactFigures;
use super::{Inner, RuntimeResult};
use crate::context::instructions::Assembled;
use crate::context::projection::{self, Projection, Request, Stored};
use crate::context::{BudgetInput, Counted, TokenCounter, model_window, tracking_bounds};
use crate::protocol::{BudgetSnapshot, TranscriptEntry};
use crate::store::{PendingRow, SessionRow};

/// The leased rows as the model reads them in the request that carries them.
pub(super) fn leased_texts(leased: &[PendingRow]) -> Vec<String> {
    let blocks: Vec<_> = leased
        .iter()
        .cloned()
        .flat_map(|row| row.into_blocks(false))
        .collect();
    projection::leased_texts(&blocks)
}

/// A request's messages and their budget.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub projection: Projection,
    pub snapshot: BudgetSnapshot,
    /// The counts the snapshot was made from, for planning a compaction.
    pub input: BudgetInput,
    /// The tool definitions the request sends (and the snapshot counts).
    pub tools: Vec<crate::provider::ToolSpec>,
    /// The project instructions the request sends with the system prompt.
    pub instructions: Arc<Assembled>,
}

impl Inner {
    /// The budget counts of the session's model that do not depend on the messages.
    pub(super) fn budget_input(
        &self,
        session: &SessionRow,
        tools: &[crate::provider::ToolSpec],
        instructions: &Assembled,
    ) -> BudgetInput {
        let account = self.config.account(&session.account);
        let window = model_window(&session.model, account.and_then(|a| a.context_window));
        let counter = TokenCounter::for_model(&session.model);
        let mut input = BudgetInput::new(&window, counter);
        input.response_reserve = self.config.budget.response_reserve;
        input.thresholds = self.config.budget.thresholds;
        input.history_share = account
            .and_then(|a| a.history_share)
            .unwrap_or(self.config.budget.history_share);
        if let Some(prompt) = &session.system_prompt {
            input.system = self.accounting.counts().system_prompt(counter, prompt);
        }
        if !instructions.text.is_empty() {
            input.instructions = self
                .accounting
                .counts()
                .instructions(counter, &instructions.text);
        }
        let definitions = serde_json::to_string(tools).unwrap_or_default();
        input.tools = self
            .accounting
            .counts()
            .tool_definitions(counter, &definitions);
        input.correction_factor = self.accounting.factor(&session.model);
        input
    }

    /// The entries of the session's context with their stored counts: its carry-over note, if
    /// any, and what follows the newest summary's range. The few stored without one (committed
    /// before the tokenizer was ready) are counted, and their exact counts stored.
    pub(super) fn stored_entries(&self, session: &SessionRow) -> RuntimeResult<Vec<Stored>> {
        Ok(self
            .store
            .context_entries(&session.id, session.context_start_seq)?
            .into_iter()
            .map(|(entry, tokens)| Stored {
                tokens: tokens.unwrap_or_else(|| self.count_unstored(session, &entry)),
                entry,
            })
            .collect())
    }

    /// Counts an entry stored without a count, storing the count when it is exact (not an
    /// upper bound) without waiting for a locked database: the next look tries again.
    fn count_unstored(&self, session: &SessionRow, entry: &TranscriptEntry) -> Counted {
        let (counted, bounded) =
            tracking_bounds(|| count_blocks(&session.model, entry.role, &entry.blocks));
        if !bounded
            && entry.role.reaches_model()
            && let Err(e) =
                crate::store::without_waiting(|| self.store.fill_message_tokens(&entry.id, counted))
        {
            tracing::debug!(error = %e, "cannot store a message's count yet");
        }
        counted
    }

    /// What the session's next request sends, and its budget: for the run `current_run`, with
    /// `interjections` leased into it.
    pub(super) fn prepare(
        &self,
        session: &SessionRow,
        current_run: Option<&str>,
        interjections: &[String],
    ) -> RuntimeResult<Prepared> {
        let entries = self.stored_entries(session)?;
        Ok(self.prepare_from(session, &entries, current_run, interjections))
    }

    pub(super) fn prepare_from(
        &self,
        session: &SessionRow,
        entries: &[Stored],
        current_run: Option<&str>,
        interjections: &[String],
    ) -> Prepared {
        let tools = self.tool_specs(&session.id);
        let instructions = Arc::new(self.instructions(session));
        let mut input = self.budget_input(session, &tools, &instructions);
        let projection = projection::project(
            entries,
            Request {
                current_run,
                interjections,
                counter: TokenCounter::for_model(&session.model),
                room: input.message_room(),
            },
        );
        input.history = projection.history;
        input.summary = projection.summary;
        input.latest_user = projection.latest;
        input.images =
            crate::images::tokens::request_image_tokens(&session.model, &projection.messages);
        Prepared {
            snapshot: input.snapshot(),
            projection,
            input,
            tools,
            instructions,
        }
    }

    /// Counts, once the tokenizer is ready, the exact figures of a request of the run `run_id`
    /// that went out with upper bounds: the same entries (`ids`) and interjections, their
    /// counts stored on the way.
    pub(super) fn exact_figures(
        self: &Arc<Self>,
        session: &SessionRow,
        run_id: &str,
        interjections: Vec<String>,
        ids: Vec<String>,
    ) -> ExactFigures {
        let inner = self.clone();
        let encoding = TokenCounter::for_model(&session.model).encoding();
        let session = session.clone();
        let run_id = run_id.to_string();
        let warm_up = move || crate::context::Tokenizers::wait_for_warm_up(encoding);
        ExactFigures::spawn(warm_up, move || {
            let counted = (|| -> RuntimeResult<BudgetSnapshot> {
                let entries: Vec<Stored> = inner
                    .stored_entries(&session)?
                    .into_iter()
                    .filter(|s| ids.contains(&s.entry.id))
                    .collect();
                Ok(inner
                    .prepare_from(&session, &entries, Some(&run_id), &interjections)
                    .snapshot)
            })();
            counted
                .map_err(|e| tracing::warn!(error = %e, "cannot count a request's exact figures"))
                .ok()
        })
    }

    /// How full the model's context is for the session's next request.
    pub(super) fn budget_snapshot(&self, session: &SessionRow) -> RuntimeResult<BudgetSnapshot> {
        Ok(self.prepare(session, None, &[])?.snapshot)
    }
}
