//! Keeping what the model is sent inside its window.
//!
//! Before each request the projection is checked against the history's share of the window
//! and against the window itself. When it passes either, the oldest turns are folded: the
//! session's model (or the account's `summary_model`) summarises them into one `summary`
//! entry; if that fails, times out or still does not fit, they are dropped instead, whole
//! turns only, so a tool call never loses its result. A latest message too large for the
//! window on its own is refused before any request.

use futures::StreamExt;

use super::projection::Prepared;
use super::run::RunContext;
use super::run_end::RunEnd;
use super::{Inner, RuntimeError, RuntimeResult};
use crate::context::compaction::{
    self, Plan, Reason, SUMMARY_MAX_OUTPUT, SUMMARY_MIN_OUTPUT, count_user, fit_text,
};
use crate::context::projection::Stored;
use crate::context::{TokenCounter, model_window, upper_bounds};
use crate::protocol::*;
use crate::provider::{ModelContent, ModelEvent, ModelMessage, ModelRequest, ModelRole};
use crate::store::{NewMessage, PendingRow, SessionRow, UsageRow, elapsed_ms};

/// The summariser's standing instructions.
const SUMMARY_SYSTEM: &str = "You write the working memory of a coding assistant's \
conversation: faithful, specific and short. You never invent anything that is not in the \
conversation.";

/// What a compaction did.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    pub method: CompactionMethod,
    pub message_id: String,
    pub plan: Plan,
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// Why the summary was not used, when the range was dropped.
    pub fallback: Option<String>,
}

/// The exact figures of a request sent with upper bounds, counted beside its reply once the
/// tokenizer's warm-up is done or the reply's end asks for them; `None` if they could not be
/// made (the store failed: logged).
pub(super) type ExactFigures = crate::low_priority::Deferred<Option<BudgetSnapshot>>;

impl RunContext {
    /// The next request, made to fit: compacted when its history passes its share or the
    /// request its window. `Err` with how the run ends when the latest message alone cannot fit.
    ///
    /// Before the tokenizer is ready (a daemon's first request) the request is counted by its
    /// UTF-8 bytes, an upper bound of its tokens: if that fits, with nothing to compact, it is
    /// sent at once with the bounds as its snapshot, and its exact figures are counted beside
    /// (the [`ExactFigures`] returned). Only a request that could pass a limit by its bytes
    /// waits for the exact count.
    pub(super) async fn fit(
        &mut self,
        session: &SessionRow,
        leased: &[PendingRow],
    ) -> RuntimeResult<Result<(Prepared, Option<ExactFigures>), RunEnd>> {
        let texts = super::projection::leased_texts(leased);
        let run = Some(self.run_id.as_str());
        let (counted, upper) = upper_bounds(|| -> RuntimeResult<_> {
            let entries = self.inner.stored_entries(session)?;
            let prepared = self.inner.prepare_from(session, &entries, run, &texts);
            Ok((entries, prepared))
        });
        let (entries, mut prepared) = counted?;
        if upper {
            if too_large(&prepared).is_none() && needs_compaction(&prepared).is_none() {
                prepared.snapshot.estimate = BudgetEstimate::UpperBound;
                prepared.snapshot.exact = false;
                let ids = entries.iter().map(|s| s.entry.id.clone()).collect();
                let exact = self.inner.exact_figures(session, &self.run_id, texts, ids);
                return Ok(Ok((prepared, Some(exact))));
            }
            tracing::info!(
                "before the tokenizer is ready, the request could pass a limit by its bytes: it waits for its exact count"
            );
        }
        self.fit_counted(session, &texts)
            .await
            .map(|fitted| fitted.map(|prepared| (prepared, None)))
    }

    /// [`RunContext::fit`] with exact counts (waiting for the tokenizer if need be).
    pub(super) async fn fit_counted(
        &mut self,
        session: &SessionRow,
        texts: &[String],
    ) -> RuntimeResult<Result<Prepared, RunEnd>> {
        let run = Some(self.run_id.as_str());
        let entries = self.inner.stored_entries(session)?;
        let prepared = self.inner.prepare_from(session, &entries, run, texts);
        if let Some(refusal) = too_large(&prepared) {
            return Ok(Err(RunEnd::Error(refusal)));
        }
        let Some(reason) = needs_compaction(&prepared) else {
            return Ok(Ok(prepared));
        };
        if !self.inner.auto_compact(&session.id)? {
            // Nothing is folded unasked: past its share the history is sent whole; past the
            // window the request is refused, and `/compact` folds by hand.
            return Ok(match reason {
                Reason::Window => Err(RunEnd::Error(refused_without_compaction(&prepared))),
                _ => Ok(prepared),
            });
        }
        let prepared = match self
            .inner
            .compact(session, run, &entries, &prepared, reason, None)
            .await?
        {
            Some(_) => self.inner.prepare(session, run, texts)?,
            None => prepared,
        };
        match over_window(&prepared) {
            Some(refusal) => Ok(Err(RunEnd::Error(refusal))),
            None => Ok(Ok(prepared)),
        }
    }
}

/// Why the prepared request must be compacted, if it must.
fn needs_compaction(prepared: &Prepared) -> Option<Reason> {
    let projection = &prepared.projection;
    if projection.tokens() > prepared.input.message_room() {
        Some(Reason::Window)
    } else if projection.history.tokens() > prepared.input.history_limit() {
        Some(Reason::Share)
    } else {
        None
    }
}

/// The refusal of a request that would pass the window, for a session whose automatic
/// compaction is off.
fn refused_without_compaction(prepared: &Prepared) -> String {
    let s = &prepared.snapshot;
    format!(
        "The request would be {} tokens, more than the {} tokens the model's window leaves for it \
         ({} window, {} kept for the reply, {} system prompt, {} tools). Automatic compaction is \
         off for this session, so nothing was folded and it was not sent; everything stays in the \
         transcript. Type /compact to fold the earlier turns, then resume (or turn autoCompact \
         back on).",
        prepared.projection.tokens(),
        prepared.input.message_room(),
        s.context_window,
        s.response_reserve,
        s.system_tokens,
        s.tool_tokens
    )
}

/// The refusal of a latest message that cannot fit the window on its own.
fn too_large(prepared: &Prepared) -> Option<String> {
    let latest = prepared.projection.latest_message.tokens;
    let room = prepared.input.message_room();
    let s = &prepared.snapshot;
    (latest > room).then(|| {
        format!(
            "The message is {latest} tokens, more than the {room} tokens the model's window leaves for it \
             ({} window, {} kept for the reply, {} system prompt and instructions, {} tools). It was not sent and stays in \
             the transcript; send a shorter one, or split it.",
            s.context_window, s.response_reserve, s.system_tokens + s.instructions_tokens, s.tool_tokens
        )
    })
}

/// The refusal of a request still over the window after every reduction: the history folded
/// as far as it goes and the current run's older tool results reduced to one line. What is
/// left too large is the current turn itself (the user's message, the run's newest tool
/// results, leased interjections), which is never cut; it stays in the transcript whole.
fn over_window(prepared: &Prepared) -> Option<String> {
    let projection = &prepared.projection;
    let room = prepared.input.message_room();
    let total = projection.tokens();
    if total <= room {
        return None;
    }
    let s = &prepared.snapshot;
    let limits = format!(
        "({} window, {} kept for the reply, {} system prompt and instructions, {} tools)",
        s.context_window,
        s.response_reserve,
        s.system_tokens + s.instructions_tokens,
        s.tool_tokens
    );
    let latest = projection.latest.tokens;
    Some(match latest > room {
        true => format!(
            "This turn is {latest} tokens (the message, this run's tool results and anything typed \
             meanwhile), more than the {room} tokens the model's window leaves for it {limits}, even \
             with the earlier history folded and older results cut to one line. It was not sent; \
             everything stays in the transcript. Ask for smaller pieces (e.g. part of a file) or \
             start a new turn."
        ),
        false => format!(
            "The request would be {total} tokens, more than the {room} tokens the model's window \
             leaves for it {limits}, and nothing more could be folded. It was not sent; everything \
             stays in the transcript. /new-context or /clear starts the model afresh."
        ),
    })
}

impl Inner {
    /// Folds the oldest turns of `prepared`'s history: summarised, else dropped. `None` when
    /// there is nothing to fold.
    pub(super) async fn compact(
        &self,
        session: &SessionRow,
        run_id: Option<&str>,
        entries: &[Stored],
        prepared: &Prepared,
        reason: Reason,
        focus: Option<&str>,
    ) -> RuntimeResult<Option<Compacted>> {
        let projection = &prepared.projection;
        let room = prepared.input.message_room();
        // The carry-over note stays whatever is folded: the summary and the kept turns share
        // what it leaves.
        let note = projection.note.tokens;
        let target = prepared
            .input
            .history_limit()
            .min(room.saturating_sub(projection.latest.tokens))
            .saturating_sub(note);
        let tokens_before = projection.history.tokens();
        let summarised =
            match compaction::plan(projection, target, CompactionMethod::Summary, reason) {
                Some(plan) => Some((plan, self.summarise(session, entries, &plan, focus).await)),
                None => None,
            };
        let (method, plan, text, fallback) = match summarised {
            Some((plan, Ok(text))) => (CompactionMethod::Summary, plan, text, None),
            failed => {
                let Some(plan) =
                    compaction::plan(projection, target, CompactionMethod::Drop, reason)
                else {
                    return Ok(None);
                };
                let why = failed.and_then(|(_, r)| r.err());
                (CompactionMethod::Drop, plan, String::new(), why)
            }
        };
        let block = Block::Summary {
            method,
            text,
            from_seq: Some(plan.from_seq),
            to_seq: Some(plan.to_seq),
            messages: plan.messages,
        };
        let mut message = NewMessage::new(&session.id, run_id, Role::Summary, vec![block.clone()]);
        message.tokens = Some(crate::context::projection::count_summary(
            TokenCounter::for_model(&session.model),
            &block,
        ));
        let summary_tokens = message.tokens.map_or(0, |c| c.tokens);
        // The folded range stays in the context (a carry-over note before it must be read
        // still); the projection leaves out what the newest summary folded.
        let entry = self.commit(message)?;
        let tokens_after = note + summary_tokens + plan.kept_tokens;
        tracing::info!(
            session_id = %session.id,
            method = ?method,
            reason = CompactionReason::from(reason).as_str(),
            from_seq = plan.from_seq,
            to_seq = plan.to_seq,
            tokens_before,
            tokens_after,
            limit = plan.target,
            fallback = ?fallback,
            "compacted the history"
        );
        self.events.emit(
            &self.store,
            &session.id,
            run_id,
            Event::Compaction {
                method,
                message_id: entry.id.clone(),
                from_seq: plan.from_seq,
                to_seq: plan.to_seq,
                messages: plan.messages,
                tokens_before,
                tokens_after,
                reason: reason.into(),
            },
        );
        if let Some(why) = &fallback {
            self.notice(
                &session.id,
                run_id,
                NoticeLevel::Warning,
                format!(
                    "The oldest {} messages were left out of what the model is sent: summarising them failed ({why}).",
                    plan.messages
                ),
            )?;
        }
        Ok(Some(Compacted {
            method,
            message_id: entry.id,
            plan,
            tokens_before,
            tokens_after,
            fallback,
        }))
    }

    /// Asks the summariser for a summary of the planned range that fits beside the kept
    /// turns; the reason it could not, otherwise.
    async fn summarise(
        &self,
        session: &SessionRow,
        entries: &[Stored],
        plan: &Plan,
        focus: Option<&str>,
    ) -> Result<String, String> {
        let account = self.config.account(&session.account);
        let model = self.summary_model(session);
        let counter = TokenCounter::for_model(&model);
        let session_counter = TokenCounter::for_model(&session.model);
        let room_for_summary = plan.target.saturating_sub(plan.kept_tokens);
        let max_output = SUMMARY_MAX_OUTPUT.min(room_for_summary.saturating_sub(64));
        if max_output < SUMMARY_MIN_OUTPUT {
            return Err(format!(
                "only {room_for_summary} tokens are left for a summary"
            ));
        }
        let window = model_window(&model, account.and_then(|a| a.context_window));
        let instructions = compaction::instructions(focus, max_output * 3 / 5);
        let fixed = count_user(counter, &instructions).tokens
            + count_user(counter, SUMMARY_SYSTEM).tokens
            + max_output.min(window.max_output)
            + 64;
        let source_room = window.context_window.saturating_sub(fixed);
        let source = fit_text(
            counter,
            &compaction::source_text(entries, plan),
            source_room,
        );
        if source.is_empty() {
            return Err("the summariser's window is too small for the messages".into());
        }
        let request = ModelRequest {
            model: model.clone(),
            system: Some(SUMMARY_SYSTEM.into()),
            messages: vec![ModelMessage {
                role: ModelRole::User,
                content: vec![ModelContent::Text {
                    text: format!("{instructions}\n\n<conversation>\n{source}\n</conversation>"),
                }],
            }],
            tools: Vec::new(),
            max_output_tokens: max_output.min(window.max_output) as u32,
            delegated: false,
            reasoning: None,
        };
        let text = compaction::finish_summary(&self.ask_summariser(session, request).await?);
        let block = Block::Summary {
            method: CompactionMethod::Summary,
            text: text.clone(),
            from_seq: None,
            to_seq: None,
            messages: plan.messages,
        };
        let tokens = crate::context::projection::count_summary(session_counter, &block).tokens;
        if tokens > room_for_summary {
            return Err(format!(
                "the summary is {tokens} tokens, more than the {room_for_summary} left for it"
            ));
        }
        Ok(text)
    }

    /// The model that writes summaries and carry-over notes for the session: the account's
    /// `summary_model`, else the session's own.
    pub(super) fn summary_model(&self, session: &SessionRow) -> String {
        self.config
            .account(&session.account)
            .and_then(|a| a.summary_model.clone())
            .unwrap_or_else(|| session.model.clone())
    }

    /// Makes a summariser's request (a summary, or a carry-over note) and collects its text,
    /// within the summary time limit; its usage is a line of kind `summary`. Why there is no
    /// text, otherwise.
    pub(super) async fn ask_summariser(
        &self,
        session: &SessionRow,
        request: ModelRequest,
    ) -> Result<String, String> {
        self.ask_for_text(session, request, UsageKind::Summary)
            .await
    }

    /// Makes one request of the daemon's own (not a turn's) and collects its text, within the
    /// summary time limit; its usage is a line of `kind`. Why there is no text, otherwise.
    pub(super) async fn ask_for_text(
        &self,
        session: &SessionRow,
        request: ModelRequest,
        kind: UsageKind,
    ) -> Result<String, String> {
        let model = request.model.clone();
        let driver = self.driver(&session.account).map_err(|e| e.to_string())?;
        let started = std::time::Instant::now();
        let mut stream = driver.stream(request);
        let mut text = String::new();
        let mut usage = None;
        let outcome = tokio::time::timeout(self.config.budget.summary_timeout, async {
            while let Some(event) = stream.next().await {
                match event.map_err(|e| e.to_string())? {
                    ModelEvent::TextDelta(delta) => text.push_str(&delta),
                    ModelEvent::Usage(tokens) => usage = Some(tokens),
                    ModelEvent::Finished(_) => return Ok(()),
                    _ => {}
                }
            }
            Err("the summariser's stream ended early".to_string())
        })
        .await;
        drop(stream);
        if let Some(tokens) = usage {
            self.record_request_usage(session, &model, tokens, started, kind);
        }
        match outcome {
            Err(_) => {
                return Err(format!(
                    "no answer within {} s",
                    self.config.budget.summary_timeout.as_secs_f64()
                ));
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(())) => {}
        }
        let text = text.trim().to_string();
        if text.is_empty() {
            return Err(format!("the {} came back empty", kind.as_str()));
        }
        Ok(text)
    }

    /// A daemon request's usage line (kind `summary` or `title`), counted in the session's
    /// cost and against its spend cap like any other.
    fn record_request_usage(
        &self,
        session: &SessionRow,
        model: &str,
        tokens: TokenUsage,
        started: std::time::Instant,
        kind: UsageKind,
    ) {
        let provider = self
            .config
            .account(&session.account)
            .map_or("unknown", |a| a.kind.name())
            .to_string();
        let row = UsageRow {
            run_id: String::new(),
            provider: provider.clone(),
            model: model.to_string(),
            tokens,
            at: crate::util::now_ms(),
            duration_ms: elapsed_ms(started),
            kind,
        };
        if let Err(e) = self.store.insert_usage(&session.id, &row) {
            tracing::error!(error = %e, kind = kind.as_str(), "cannot record a request's usage");
            return;
        }
        self.events.emit(
            &self.store,
            &session.id,
            None,
            Event::Usage {
                provider,
                model: row.model,
                input: tokens.input,
                output: tokens.output,
                cache_read: tokens.cache_read,
                cache_write: tokens.cache_write,
                reasoning: tokens.reasoning,
                duration_ms: row.duration_ms,
            },
        );
    }
}

/// `/compact [focus]`: folds the whole history now. Runs with the session claimed, so no run
/// starts meanwhile.
impl super::Runtime {
    pub(super) async fn compact_command(
        &self,
        session: &SessionRow,
        focus: &str,
    ) -> RuntimeResult<String> {
        let inner = &self.inner;
        let entries = inner.stored_entries(session)?;
        let prepared = inner.prepare_from(session, &entries, None, &[]);
        let focus = Some(focus).filter(|f| !f.is_empty());
        let done = inner
            .compact(session, None, &entries, &prepared, Reason::Command, focus)
            .await?;
        match done {
            None => Err(RuntimeError::Conflict(
                "nothing to compact: the model is sent no earlier turns to fold".into(),
            )),
            Some(done) => Ok(describe(&done)),
        }
    }
}

/// The note `/compact` leaves.
fn describe(done: &Compacted) -> String {
    let how = match (done.method, &done.fallback) {
        (CompactionMethod::Summary, _) => "summarised them".to_string(),
        (_, Some(why)) => format!("left them out, because summarising failed ({why})"),
        _ => "left them out".to_string(),
    };
    format!(
        "Compacted {} messages (seq {}–{}): {how}. The history the model is sent went from {} to {} tokens.",
        done.plan.messages,
        done.plan.from_seq,
        done.plan.to_seq,
        done.tokens_before,
        done.tokens_after
    )
}
