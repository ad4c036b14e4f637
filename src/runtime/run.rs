//! One agent run: model step → tool calls → approvals → results → next step, until the model
//! ends its turn, the user stops it, the step limit is reached or something fails.
//!
//! The loop works from the stored transcript, so a run suspended on an approval by a restart
//! continues exactly where it stood. A model step streams the answer, commits it, then decides
//! whether the run goes on; how a run ends is in `run_end`.

use std::ops::ControlFlow;
use std::sync::Arc;

use futures::StreamExt;

use super::accounting::count_blocks_with;
use super::compaction::ExactFigures;
use super::events::SeqCounter;
use super::projection::Prepared;
use super::registry::RunSignals;
use super::reply::Reply;
use super::run_end::RunEnd;
use super::{Inner, RuntimeError, RuntimeResult};
use crate::config::AccountKind;
use crate::context::{Actuals, TokenCounter};
use crate::protocol::TokenUsage;
use crate::protocol::*;
use crate::provider::{ModelDriver, ModelEvent, ModelRequest, ProviderError, StopReason};
use crate::store::{
    NewMessage, PendingRow, RunRow, SessionRow, Settle, Settled, UsageRow, elapsed_ms,
};
use crate::util::new_id;

/// Output budget asked of the model for one step.
const MAX_OUTPUT_TOKENS: u32 = 8192;

/// Why a run ended when the database would not take its answer.
const UNSAVED: &str = "The database cannot store the answer now (another program holds it, or the disk is full); it is kept and stored as soon as the database takes it.";

/// Why the output limit's victims were not run, as the model reads it.
const CUT_CALL: &str = "This tool call was cut off by the output limit before its arguments were complete, so it was not run. Send less at once or split the work into smaller calls.";

pub enum RunStart {
    /// A fresh run answering the transcript's last user turn.
    New { session: SessionRow, run_id: String },
    /// A fresh run answering a custom command whose front matter names `model`: every step
    /// of it runs on that model of the session's account; the session's own is unchanged.
    Command {
        session: SessionRow,
        run_id: String,
        model: String,
    },
    /// A stored run that was suspended on an approval.
    Resume { session: SessionRow, run: RunRow },
}

impl RunStart {
    /// A fresh run answering the last user turn: on the model a custom command named for it,
    /// if one did, else on the session's.
    pub fn answering(session: SessionRow, run_id: String, command_model: Option<String>) -> Self {
        match command_model {
            Some(model) => Self::Command {
                session,
                run_id,
                model,
            },
            None => Self::New { session, run_id },
        }
    }
}

/// One streamed answer, before it is committed.
struct Streamed {
    message_id: String,
    reply: Reply,
    /// When the request went out, for the usage line's duration.
    started: std::time::Instant,
}

/// How a model's stream ended: the model finished for its reason, or the run ends here
/// (stopped, or the stream failed).
type StreamEnd = Result<StopReason, RunEnd>;

pub(super) struct RunContext {
    pub inner: Arc<Inner>,
    /// When the turn began (the run's stored start, in milliseconds since the epoch), for the
    /// session's `maxSeconds`: a run resumed after a restart keeps counting from there.
    pub turn_started_ms: i64,
    /// Whether the run already said its spend cap cannot be enforced.
    pub warned_unpriced: bool,
    pub session_id: String,
    pub run_id: String,
    /// The model a custom command gave this run, in place of the session's.
    pub command_model: Option<String>,
    pub signals: RunSignals,
    pub steps: u32,
    /// Answers the database refused for now (locked by another program, or a full disk),
    /// stored with the run's end once it takes them.
    pub unsaved: Vec<NewMessage>,
}

/// Starts the run's task. The claim in the registry is already held by `signals`, and the
/// session's lease by this daemon.
pub fn spawn_run(inner: Arc<Inner>, start: RunStart, signals: RunSignals) -> RuntimeResult<()> {
    let (session, run_id, steps, turn_started_ms, command_model) = match start {
        RunStart::New { session, run_id } => {
            let started = crate::util::now_ms();
            if let Err(e) = inner.store.insert_run(&run_id, &session.id, &session.model) {
                inner.give_back(&session.id, &run_id);
                return Err(e.into());
            }
            (session, run_id, 0, started, None)
        }
        RunStart::Command {
            session,
            run_id,
            model,
        } => {
            let started = crate::util::now_ms();
            let stored =
                inner
                    .store
                    .insert_command_run(&run_id, &session.id, &session.model, Some(&model));
            if let Err(e) = stored {
                inner.give_back(&session.id, &run_id);
                return Err(e.into());
            }
            (session, run_id, 0, started, Some(model))
        }
        RunStart::Resume { session, run } => (
            session,
            run.id,
            run.steps,
            run.started_at,
            run.command_model,
        ),
    };
    // A run is a need for the session's MCP servers: start those not running.
    inner.need_mcp(&session.id);
    inner.events.emit(
        &inner.store,
        &session.id,
        Some(&run_id),
        Event::RunStarted {
            model: command_model
                .clone()
                .unwrap_or_else(|| session.model.clone()),
        },
    );
    let mut context = RunContext {
        inner,
        turn_started_ms,
        warned_unpriced: false,
        session_id: session.id,
        run_id,
        command_model,
        signals,
        steps,
        unsaved: Vec::new(),
    };
    tokio::spawn(async move {
        match context.drive().await {
            Ok(end) => context.finish(end),
            Err(RuntimeError::Suspended) => context.suspend(),
            Err(e) => context.finish(RunEnd::Error(e.to_string())),
        }
    });
    Ok(())
}

impl RunContext {
    /// Whole seconds since the turn began, suspensions and restarts included.
    pub fn turn_seconds(&self) -> u64 {
        (crate::util::now_ms() - self.turn_started_ms).max(0) as u64 / 1000
    }

    /// The session as this run sees it, read afresh (a `/model` typed meanwhile applies from
    /// the next step on), with the model a custom command gave the run in place of its own.
    pub fn session(&self) -> RuntimeResult<SessionRow> {
        let mut session = self
            .inner
            .store
            .session(&self.session_id)?
            .ok_or_else(|| RuntimeError::SessionNotFound(self.session_id.clone()))?;
        if let Some(model) = &self.command_model {
            session.model = model.clone();
        }
        Ok(session)
    }

    pub fn stopped(&self) -> bool {
        *self.signals.stop.borrow()
    }

    pub fn emit(&self, event: Event) {
        self.inner.events.emit(
            &self.inner.store,
            &self.session_id,
            Some(&self.run_id),
            event,
        );
    }

    /// Stores a notice in the transcript and tells the client.
    pub fn notice(&self, level: NoticeLevel, text: impl Into<String>) -> RuntimeResult<()> {
        self.inner
            .notice(&self.session_id, Some(&self.run_id), level, text)?;
        Ok(())
    }

    fn emit_delta(&self, seq: &SeqCounter, kind: DeltaKind, message_id: &str, text: &str) {
        self.inner.events.emit_delta(
            seq,
            &self.session_id,
            Some(&self.run_id),
            kind,
            message_id,
            text,
        );
    }

    pub fn commit(
        &self,
        id: Option<String>,
        role: Role,
        blocks: Vec<Block>,
        status: MessageStatus,
    ) -> RuntimeResult<TranscriptEntry> {
        let mut message = NewMessage::new(&self.session_id, Some(&self.run_id), role, blocks);
        message.id = id;
        message.status = status;
        self.inner.commit(message)
    }

    async fn drive(&mut self) -> RuntimeResult<RunEnd> {
        loop {
            if let Some(end) = self.resolve_open_calls().await? {
                return Ok(end);
            }
            if self.stopped() {
                return Ok(RunEnd::Stopped);
            }
            let session = self.session()?;
            if self.steps >= session.max_steps {
                return Ok(RunEnd::MaxIterations);
            }
            self.steps += 1;
            let leased = self.lease_at_delivery_point(&session)?;
            // The budget and the spend check describe the request as sent, leased input in.
            let (mut prepared, mut exact) = match self.fit(&session, &leased).await? {
                Ok(fitted) => fitted,
                Err(end) => return Ok(end),
            };
            if let Some(limit) = self.over_budget(&session, &prepared.snapshot)? {
                // Upper bounds passing the spend cap: only the exact count decides.
                if exact.take().is_none() {
                    return Ok(RunEnd::BudgetSpent(limit));
                }
                let texts = super::projection::leased_texts(&leased);
                prepared = match self.fit_counted(&session, &texts).await? {
                    Ok(prepared) => prepared,
                    Err(end) => return Ok(end),
                };
                if let Some(limit) = self.over_budget(&session, &prepared.snapshot)? {
                    return Ok(RunEnd::BudgetSpent(limit));
                }
            }
            self.inner.tell_instruction_notices(
                &self.session_id,
                Some(&self.run_id),
                &prepared.instructions,
            )?;
            self.inner.store.set_run_steps(&self.run_id, self.steps)?;
            self.emit(Event::Budget {
                snapshot: prepared.snapshot,
                actual: None,
            });
            let step = self.model_step(&session, leased, prepared, exact).await?;
            if let ControlFlow::Break(end) = step {
                return Ok(end);
            }
        }
    }

    /// Resolves the tool calls of the transcript's last answer, if they are still open; the
    /// run's end when that answer already ended the turn (a run resumed after it).
    async fn resolve_open_calls(&mut self) -> RuntimeResult<Option<RunEnd>> {
        let last = self.inner.store.last_model_message(&self.session_id)?;
        let Some(assistant) = last.filter(|m| m.role == Role::Assistant) else {
            return Ok(None);
        };
        // A run that failed before the model said anything answered nothing: asked again.
        if assistant.status == MessageStatus::Failed && assistant.blocks.is_empty() {
            return Ok(None);
        }
        let has_calls = assistant
            .blocks
            .iter()
            .any(|b| matches!(b, Block::ToolCall { .. }));
        if !has_calls {
            return Ok(Some(RunEnd::EndTurn));
        }
        self.resolve_tool_calls(&assistant).await?;
        self.child_end_after_calls(&assistant.id)
    }

    /// The delivery point: tool results are in and another model request follows, so every
    /// waiting interjection is taken into it. Nothing is taken on the last allowed step: its
    /// answer could be tool calls no step follows, so the model would never answer; the
    /// run's end promotes the queue into the next turn instead.
    fn lease_at_delivery_point(&self, session: &SessionRow) -> RuntimeResult<Vec<PendingRow>> {
        let continuing = self.steps < session.max_steps
            && self
                .inner
                .store
                .last_model_message(&self.session_id)?
                .is_some_and(|m| m.role == Role::Tool);
        if !continuing {
            return Ok(Vec::new());
        }
        let rows = self
            .inner
            .store
            .lease_pending(&self.session_id, &self.run_id)?;
        // Input queued through another daemon is news to this daemon's clients.
        self.inner.announce_unseen(&self.session_id, &rows);
        Ok(rows)
    }

    /// How a failed request is told. A refused key (HTTP 401) names the account, where its
    /// key comes from and `sidechat doctor`, so the user knows what to fix.
    fn failure(&self, error: &ProviderError, account: &str) -> String {
        let source = match error {
            ProviderError::Http { status: 401, .. } => self
                .inner
                .config
                .account(account)
                .and_then(|a| a.key_source()),
            _ => None,
        };
        match source {
            Some(source) => format!(
                "{error}. The account {account}'s key was refused: it comes from {source}. `sidechat doctor` checks the accounts."
            ),
            None => error.to_string(),
        }
    }

    /// One model request: stream the answer, commit it, decide whether the run goes on.
    async fn model_step(
        &mut self,
        session: &SessionRow,
        leased: Vec<PendingRow>,
        prepared: Prepared,
        exact: Option<ExactFigures>,
    ) -> RuntimeResult<ControlFlow<RunEnd>> {
        let driver = match self.inner.driver(&session.account) {
            Ok(driver) => driver,
            Err(e) => return Ok(ControlFlow::Break(RunEnd::Error(e.to_string()))),
        };
        let snapshot = prepared.snapshot;
        let delegated = self
            .inner
            .store
            .delegation_of_child(&self.session_id)?
            .is_some();
        let mut request = request(session, prepared, delegated);
        self.inner
            .apply_effort(session, &self.run_id, &snapshot, &mut request)?;
        self.inner.fill_images(&mut request);
        let (streamed, end) = self
            .stream(driver.as_ref(), request, leased, &session.account)
            .await?;
        let status = match &end {
            Ok(_) => MessageStatus::Complete,
            Err(end) => end.message_status(),
        };
        let has_calls = self
            .commit_reply(session, (snapshot, exact), streamed, status)
            .await?;
        if !self.unsaved.is_empty() {
            return Ok(ControlFlow::Break(match end {
                Err(end) => end,
                Ok(_) => RunEnd::Error(UNSAVED.into()),
            }));
        }
        self.decide(end, has_calls)
    }

    /// Streams the answer to the client as it arrives, until the model finishes, the user
    /// stops the run or the stream fails. The leased interjections join the transcript once
    /// the request has gone through.
    async fn stream(
        &self,
        driver: &dyn ModelDriver,
        request: ModelRequest,
        mut leased: Vec<PendingRow>,
        account: &str,
    ) -> RuntimeResult<(Streamed, StreamEnd)> {
        let message_id = new_id("msg");
        self.emit(Event::MessageStarted {
            message_id: message_id.clone(),
            role: Role::Assistant,
        });
        let seq = self
            .inner
            .events
            .counter(&self.inner.store, &self.session_id)?;
        let mut reply = Reply::new(TokenCounter::for_model(&request.model), seq);
        let started = std::time::Instant::now();
        let mut stream = driver.stream(request);
        let mut stop = self.signals.stop.clone();
        // Made once: a fresh wait per delta would register and unregister a waiter each time.
        let mut stopped = std::pin::pin!(stop.wait_for(|s| *s));
        let end = loop {
            if !self.inner.events.has_room() {
                // The client has stopped reading: read no more of the answer until it has
                // caught up, and let the provider's socket hold the rest.
                tokio::select! {
                    biased;
                    _ = &mut stopped => break Err(RunEnd::Stopped),
                    _ = self.inner.events.room() => continue,
                }
            }
            let next = tokio::select! {
                biased;
                _ = &mut stopped => break Err(RunEnd::Stopped),
                next = stream.next() => next,
            };
            let event = match next {
                None => {
                    break Err(RunEnd::Error(
                        "the model's stream ended before it finished".into(),
                    ));
                }
                Some(Err(e)) => break Err(RunEnd::Error(self.failure(&e, account))),
                Some(Ok(event)) => event,
            };
            // A retry notice means the request has not gone through yet.
            if !leased.is_empty() && !matches!(event, ModelEvent::Notice(_)) {
                self.deliver(std::mem::take(&mut leased))?;
            }
            match event {
                ModelEvent::Finished(reason) => break Ok(reason),
                event => self.apply(&message_id, &mut reply, event)?,
            }
        };
        let streamed = Streamed {
            message_id,
            reply,
            started,
        };
        Ok((streamed, end))
    }

    /// Stores what the answer used, commits the answer with `status`, and gives each call the
    /// output limit cut an error result. Whether the committed answer holds calls to resolve:
    /// only a whole answer keeps its calls, since a call that never completed must not run.
    ///
    /// A request sent with upper bounds (`budget.1`, its exact figures being counted) is told
    /// again with its exact figures here, in the step's `budget` event beside the usage, or
    /// alone when the provider reported none; the correction learns from exact figures only.
    async fn commit_reply(
        &mut self,
        session: &SessionRow,
        budget: (BudgetSnapshot, Option<ExactFigures>),
        streamed: Streamed,
        status: MessageStatus,
    ) -> RuntimeResult<bool> {
        let Streamed {
            message_id,
            mut reply,
            started,
        } = streamed;
        let (snapshot, exact) = match budget {
            (snapshot, None) => (snapshot, false),
            (bounds, Some(figures)) => match figures.result().await.flatten() {
                Some(counted) => (counted, true),
                None => (bounds, false),
            },
        };
        if exact && reply.usage.is_none() {
            self.emit(Event::Budget {
                snapshot,
                actual: None,
            });
        }
        if let Some(usage) = reply.usage.take() {
            match status {
                MessageStatus::Stopped => {
                    crate::store::without_waiting(|| self.record_usage(session, usage, started))?
                }
                _ => self.record_usage(session, usage, started)?,
            }
            let actuals = Actuals {
                input_tokens: usage.input + usage.cache_read + usage.cache_write,
                output_tokens: usage.output,
            };
            let actual = self.inner.reconcile(&session.model, &snapshot, actuals);
            self.emit(Event::Budget {
                snapshot,
                actual: Some(actual),
            });
        }
        let keep_calls = status == MessageStatus::Complete;
        let has_calls = keep_calls && reply.has_calls();
        let cut_ids: Vec<String> = reply.cut_calls.iter().map(|(id, _)| id.clone()).collect();
        let precounted = reply.precounted().await;
        let mut message = NewMessage::new(
            &self.session_id,
            Some(&self.run_id),
            Role::Assistant,
            reply.into_blocks(keep_calls),
        );
        message.id = Some(message_id);
        message.status = status;
        message.tokens = Some(count_blocks_with(
            &session.model,
            Role::Assistant,
            &message.blocks,
            precounted,
        ));
        // A stopped answer is stored without waiting for a lock, so the run ends at once; the
        // database's refusal keeps it for later, as below.
        let committed = match status {
            MessageStatus::Stopped => {
                crate::store::without_waiting(|| self.inner.commit(message.clone()))
            }
            _ => self.inner.commit(message.clone()),
        };
        match committed {
            Ok(_) => {}
            Err(RuntimeError::Store(e)) if e.is_unavailable() => {
                // Kept, and stored with the run's end when the database takes it again. Its
                // calls never run: the answer is kept as far as it is text.
                tracing::error!(run_id = %self.run_id, error = %e, "the database refused the answer; keeping it to store later");
                message
                    .blocks
                    .retain(|b| !matches!(b, Block::ToolCall { .. }));
                if message.status == MessageStatus::Complete && has_calls {
                    message.status = MessageStatus::Failed;
                }
                self.unsaved.push(message);
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        for id in cut_ids {
            self.inner.store.set_tool_call_result(
                &self.session_id,
                &id,
                ToolCallStatus::Error,
                CUT_CALL,
                true,
            )?;
        }
        Ok(has_calls)
    }

    /// Whether the run goes on after a committed answer: on to its tool calls, or to its end.
    fn decide(&self, end: StreamEnd, has_calls: bool) -> RuntimeResult<ControlFlow<RunEnd>> {
        let end = match end {
            Err(end) => end,
            Ok(_) if has_calls => return Ok(ControlFlow::Continue(())),
            Ok(StopReason::MaxTokens) => RunEnd::CutOff,
            Ok(StopReason::Refusal) => RunEnd::Refusal,
            Ok(_) => RunEnd::EndTurn,
        };
        Ok(ControlFlow::Break(end))
    }

    /// The request carrying these interjections was sent: they join the transcript, in the
    /// user's own words with the files their mentions attached, in the same transaction that
    /// marks them delivered.
    fn deliver(&self, rows: Vec<PendingRow>) -> RuntimeResult<()> {
        let pending_ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let blocks = rows
            .into_iter()
            .flat_map(|r| r.into_blocks(false))
            .collect();
        let mut message = NewMessage::new(&self.session_id, Some(&self.run_id), Role::User, blocks);
        message.settles = Some(Settle {
            pending_ids: pending_ids.clone(),
            status: Settled::Delivered,
        });
        let entry = self.inner.commit(message)?;
        self.emit(Event::InterjectionDelivered {
            pending_ids,
            step: self.steps,
            message_id: entry.id,
        });
        Ok(())
    }

    /// Folds one streamed event into the reply and forwards what the client shows.
    fn apply(&self, message_id: &str, reply: &mut Reply, event: ModelEvent) -> RuntimeResult<()> {
        match event {
            ModelEvent::TextDelta(text) => {
                reply.text.push_str(&text);
                if let Some(count) = &mut reply.text_count {
                    count.push(&text);
                }
                self.emit_delta(&reply.seq, DeltaKind::Text, message_id, &text);
            }
            ModelEvent::ThinkingDelta(text) => {
                reply.thinking.push_str(&text);
                if let Some(count) = &mut reply.thinking_count {
                    count.push(&text);
                }
                self.emit_delta(&reply.seq, DeltaKind::Thinking, message_id, &text);
            }
            ModelEvent::ThinkingSignature(signature) => reply.signature = Some(signature),
            ModelEvent::ToolCall { id, name, input } => reply.calls.push((id, name, input)),
            ModelEvent::ToolCallCutOff { id, name } => reply.cut_calls.push((id, name)),
            ModelEvent::Usage(usage) => reply.usage = Some(usage),
            ModelEvent::Notice(message) => self.notice(NoticeLevel::Warning, message)?,
            ModelEvent::Finished(_) => {}
        }
        Ok(())
    }

    /// The limit the next request would pass, named, if any: the run's time limit or the
    /// session's spend cap (spent so far plus the next request's input).
    fn over_budget(
        &mut self,
        session: &SessionRow,
        snapshot: &BudgetSnapshot,
    ) -> RuntimeResult<Option<String>> {
        if let Some(max) = session.max_seconds
            && self.turn_seconds() >= max
        {
            return Ok(Some(format!(
                "maxSeconds: the run reached its time limit of {max} s"
            )));
        }
        let Some(cap) = session.cap_usd else {
            return Ok(None);
        };
        let cost = self.inner.cost_summary(&self.session_id)?;
        let spent = cost.total_usd.unwrap_or(0.0);
        match self.inner.input_cost(&session.model, snapshot.input_tokens) {
            Some(next) if spent + next > cap => Ok(Some(format!(
                "capUsd: the next request (about ${next:.4} of input) would pass the spend cap of ${cap:.2}; {} so far",
                super::accounting::spent_words(&cost)
            ))),
            Some(_) => Ok(None),
            None if self.warned_unpriced => Ok(None),
            None => {
                self.warned_unpriced = true;
                self.notice(
                    NoticeLevel::Warning,
                    format!(
                        "The spend cap cannot be enforced: model {} has no price. Add one under [prices] in the config.",
                        session.model
                    ),
                )?;
                Ok(None)
            }
        }
    }

    /// Stores the request's usage line, then tells the client.
    fn record_usage(
        &self,
        session: &SessionRow,
        tokens: TokenUsage,
        started: std::time::Instant,
    ) -> RuntimeResult<()> {
        let kind = self.inner.config.account(&session.account).map(|a| &a.kind);
        let provider = kind.map_or("unknown", |k| k.name()).to_string();
        // The demo answers as itself whatever model the session names, so its usage is the
        // demo's and never priced as the named model.
        let model = match kind {
            Some(AccountKind::Demo { .. }) => "demo".to_string(),
            _ => session.model.clone(),
        };
        let row = UsageRow {
            run_id: self.run_id.clone(),
            provider: provider.clone(),
            model,
            tokens,
            at: crate::util::now_ms(),
            duration_ms: elapsed_ms(started),
            kind: UsageKind::Turn,
        };
        match self.inner.store.insert_usage(&self.session_id, &row) {
            Ok(()) => {}
            // Kept for the heartbeat, so the answer that came with it is still stored.
            Err(e) if e.is_unavailable() => {
                tracing::error!(run_id = %self.run_id, error = %e, "the database refused a usage line; keeping it to store later");
                self.inner.defer_usage(&self.session_id, row.clone());
            }
            Err(e) => return Err(e.into()),
        }
        self.emit(Event::Usage {
            provider,
            model: row.model,
            input: tokens.input,
            output: tokens.output,
            cache_read: tokens.cache_read,
            cache_write: tokens.cache_write,
            reasoning: tokens.reasoning,
            duration_ms: row.duration_ms,
        });
        Ok(())
    }
}

/// What the model is sent: the projection made for this step, leased interjections in, asking
/// for no more output than the window leaves after the prompt. `delegated` when the session
/// is a delegated task's.
fn request(session: &SessionRow, prepared: Prepared, delegated: bool) -> ModelRequest {
    let snapshot = prepared.snapshot;
    ModelRequest {
        model: session.model.clone(),
        system: crate::context::instructions::system_prompt(
            session.system_prompt.as_deref(),
            &prepared.instructions,
        ),
        messages: prepared.projection.messages,
        tools: prepared.tools,
        max_output_tokens: snapshot
            .context_window
            .saturating_sub(snapshot.input_tokens)
            .clamp(1, MAX_OUTPUT_TOKENS as u64) as u32,
        delegated,
        reasoning: None,
    }
}
