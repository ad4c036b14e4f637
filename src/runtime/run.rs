//! One agent run: model step → tool calls → approvals → results → next step, until the model
//! ends its turn, the user stops it, the step limit is reached or something fails.
//!
//! The loop works from the stored transcript, so a run suspended on an approval by a restart
//! continues exactly where it stood.

use std::sync::Arc;

use futures::StreamExt;

use super::accounting::{Precounted, count_blocks_with};
use super::events::{DeltaKind, SeqCounter};
use super::promotion::promoted_turn;
use super::registry::RunSignals;
use super::registry::claim_locked;
use super::{Inner, RuntimeError, RuntimeResult, project};
use crate::config::AccountKind;
use crate::context::{Actuals, BudgetSnapshot, StreamingCount, TokenCounter};
use crate::protocol::*;
use crate::provider::{ModelEvent, ModelRequest, ProviderError, StopReason, TokenUsage};
use crate::store::{NewMessage, PendingRow, RunRow, SessionRow, Settle, UsageRow, elapsed_ms};
use crate::util::new_id;

/// Output budget asked of the model for one step.
const MAX_OUTPUT_TOKENS: u32 = 8192;

pub enum RunStart {
    /// A fresh run answering the transcript's last user turn.
    New { session: SessionRow, run_id: String },
    /// A stored run that was suspended on an approval.
    Resume { session: SessionRow, run: RunRow },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub reason: FinishReason,
    pub error: Option<String>,
}

impl Finish {
    fn of(reason: FinishReason) -> Self {
        Self {
            reason,
            error: None,
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Self {
            reason: FinishReason::Error,
            error: Some(message.into()),
        }
    }
}

pub(super) struct RunContext {
    pub inner: Arc<Inner>,
    /// When this task began, for the session's `maxSeconds`.
    pub started: std::time::Instant,
    /// Whether the run already said its spend cap cannot be enforced.
    pub warned_unpriced: bool,
    pub session_id: String,
    pub run_id: String,
    pub signals: RunSignals,
    pub steps: u32,
}

/// Starts the run's task. The claim in the registry is already held by `signals`.
pub fn spawn_run(inner: Arc<Inner>, start: RunStart, signals: RunSignals) -> RuntimeResult<()> {
    let (session, run_id, steps) = match start {
        RunStart::New { session, run_id } => {
            if let Err(e) = inner.store.insert_run(&run_id, &session.id, &session.model) {
                inner.runs.release(&session.id, &run_id);
                return Err(e.into());
            }
            (session, run_id, 0)
        }
        RunStart::Resume { session, run } => (session, run.id, run.steps),
    };
    inner.events.emit(
        &inner.store,
        &session.id,
        Some(&run_id),
        Event::RunStarted {
            model: session.model.clone(),
        },
    );
    let mut context = RunContext {
        inner,
        started: std::time::Instant::now(),
        warned_unpriced: false,
        session_id: session.id,
        run_id,
        signals,
        steps,
    };
    tokio::spawn(async move {
        match context.drive().await {
            Ok(finish) => context.finish(finish),
            Err(RuntimeError::Suspended) => context.suspend(),
            Err(e) => context.finish(Finish::error(e.to_string())),
        }
    });
    Ok(())
}

impl RunContext {
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

    async fn drive(&mut self) -> RuntimeResult<Finish> {
        loop {
            let last = self.inner.store.last_model_message(&self.session_id)?;
            if let Some(assistant) = last.as_ref().filter(|m| m.role == Role::Assistant) {
                let has_calls = assistant
                    .blocks
                    .iter()
                    .any(|b| matches!(b, Block::ToolCall { .. }));
                if !has_calls {
                    // Resumed after the model already answered: nothing left to do.
                    return Ok(Finish::of(FinishReason::EndTurn));
                }
                self.resolve_tool_calls(assistant).await?;
            }
            if self.stopped() {
                return Ok(Finish::of(FinishReason::Stopped));
            }
            let session = self
                .inner
                .store
                .session(&self.session_id)?
                .ok_or_else(|| RuntimeError::SessionNotFound(self.session_id.clone()))?;
            if self.steps >= session.max_steps {
                return Ok(Finish::of(FinishReason::MaxIterations));
            }
            let snapshot = self.inner.budget_snapshot(&session)?;
            if let Some(limit) = self.over_budget(&session, &snapshot)? {
                return Ok(Finish {
                    reason: FinishReason::BudgetSpent,
                    error: Some(limit),
                });
            }
            self.steps += 1;
            self.inner.store.set_run_steps(&self.run_id, self.steps)?;
            // The delivery point: tool results are in and another model request follows. Nothing
            // is taken on the last allowed step: its answer could be tool calls no step follows,
            // so the model would never answer; the run's end promotes it into the next turn.
            let continuing = self.steps < session.max_steps
                && self
                    .inner
                    .store
                    .last_model_message(&self.session_id)?
                    .is_some_and(|m| m.role == Role::Tool);
            let leased = match continuing {
                true => self
                    .inner
                    .store
                    .lease_pending(&self.session_id, &self.run_id)?,
                false => Vec::new(),
            };
            self.emit(Event::Budget {
                snapshot,
                actual: None,
            });
            match self.model_step(&session, leased, snapshot).await? {
                StepEnd::ToolCalls => continue,
                StepEnd::Finished(finish) => return Ok(finish),
            }
        }
    }

    /// Streams one model response and commits it.
    async fn model_step(
        &mut self,
        session: &SessionRow,
        mut leased: Vec<PendingRow>,
        snapshot: BudgetSnapshot,
    ) -> RuntimeResult<StepEnd> {
        let driver = match self.inner.driver(&session.account) {
            Ok(driver) => driver,
            Err(e) => return Ok(StepEnd::Finished(Finish::error(e.to_string()))),
        };
        let entries = self.inner.store.messages_after(
            &self.session_id,
            session.context_start_seq,
            usize::MAX,
        )?;
        let request = ModelRequest {
            model: session.model.clone(),
            system: session.system_prompt.clone(),
            messages: with_interjections(project(&entries), &leased),
            tools: crate::tools::specs(),
            max_output_tokens: MAX_OUTPUT_TOKENS,
        };
        let message_id = new_id("msg");
        self.emit(Event::MessageStarted {
            message_id: message_id.clone(),
            role: Role::Assistant,
        });
        let seq = self
            .inner
            .events
            .counter(&self.inner.store, &self.session_id)?;
        let mut reply = Reply::new(TokenCounter::for_model(&session.model), seq);
        let started = std::time::Instant::now();
        let mut stream = driver.stream(request);
        let mut stop = self.signals.stop.clone();
        // Made once: a fresh wait per delta would register and unregister a waiter each time.
        let mut stopped = std::pin::pin!(stop.wait_for(|s| *s));
        let ended = loop {
            let next = tokio::select! {
                biased;
                _ = &mut stopped => break Ended::Stopped,
                next = stream.next() => next,
            };
            match next {
                None => {
                    break Ended::Failed(ProviderError::Stream(
                        "the model's stream ended before it finished".into(),
                    ));
                }
                Some(Err(e)) => break Ended::Failed(e),
                Some(Ok(event)) => {
                    // A retry notice means the request has not gone through yet.
                    if !leased.is_empty() && !matches!(event, ModelEvent::Notice(_)) {
                        self.deliver(std::mem::take(&mut leased))?;
                    }
                    match event {
                        ModelEvent::Finished(reason) => break Ended::Finished(reason),
                        event => self.apply(&message_id, &mut reply, event)?,
                    }
                }
            }
        };
        drop(stream);
        if let Some(usage) = reply.usage.take() {
            self.record_usage(session, usage, started)?;
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
        let status = match ended {
            Ended::Finished(_) => MessageStatus::Complete,
            Ended::Stopped => MessageStatus::Stopped,
            Ended::Failed(_) => MessageStatus::Failed,
        };
        // A call that never completed must not run: keep calls only from a whole response.
        let keep_calls = status == MessageStatus::Complete;
        let cut_ids: Vec<String> = reply.cut_calls.iter().map(|(id, _)| id.clone()).collect();
        let has_calls = keep_calls && !(reply.calls.is_empty() && reply.cut_calls.is_empty());
        let precounted = reply.precounted().await;
        let blocks = reply.into_blocks(keep_calls);
        let mut message = NewMessage::new(
            &self.session_id,
            Some(&self.run_id),
            Role::Assistant,
            blocks,
        );
        message.id = Some(message_id);
        message.status = status;
        message.tokens = Some(count_blocks_with(
            &session.model,
            Role::Assistant,
            &message.blocks,
            precounted,
        ));
        self.inner.commit(message)?;
        for id in cut_ids {
            let output = "This tool call was cut off by the output limit before its arguments were complete, so it was not run. Send less at once or split the work into smaller calls.";
            self.inner.store.set_tool_call_result(
                &self.session_id,
                &id,
                ToolCallStatus::Error,
                output,
                true,
            )?;
        }
        Ok(match ended {
            Ended::Stopped => StepEnd::Finished(Finish::of(FinishReason::Stopped)),
            Ended::Failed(e) => StepEnd::Finished(Finish::error(e.to_string())),
            Ended::Finished(_) if has_calls => StepEnd::ToolCalls,
            Ended::Finished(StopReason::MaxTokens) => {
                StepEnd::Finished(Finish::of(FinishReason::CutOff))
            }
            Ended::Finished(StopReason::Refusal) => {
                self.notice(NoticeLevel::Warning, "The model declined to answer.")?;
                StepEnd::Finished(Finish::of(FinishReason::EndTurn))
            }
            Ended::Finished(_) => StepEnd::Finished(Finish::of(FinishReason::EndTurn)),
        })
    }

    /// The request carrying these interjections was sent: they join the transcript, in the
    /// user's own words, in the same transaction that marks them delivered.
    fn deliver(&self, rows: Vec<PendingRow>) -> RuntimeResult<()> {
        let pending_ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let blocks = rows
            .into_iter()
            .map(|r| Block::Interjection {
                pending_id: r.id,
                text: r.text,
                promoted: false,
            })
            .collect();
        let mut message = NewMessage::new(&self.session_id, Some(&self.run_id), Role::User, blocks);
        message.settles = Some(Settle {
            pending_ids: pending_ids.clone(),
            status: "delivered",
        });
        let entry = self.inner.commit(message)?;
        self.emit(Event::InterjectionDelivered {
            pending_ids,
            step: self.steps,
            message_id: entry.id,
        });
        Ok(())
    }

    /// Turns everything still queued into one new user turn; the next run answers it.
    fn promote_queue(&self) -> RuntimeResult<bool> {
        let rows = self.inner.store.open_pending(&self.session_id)?;
        let Some(message) = promoted_turn(&self.session_id, rows) else {
            return Ok(false);
        };
        let pending_ids = message
            .settles
            .as_ref()
            .map(|s| s.pending_ids.clone())
            .unwrap_or_default();
        let entry = self.inner.commit(message)?;
        self.emit(Event::InterjectionPromoted {
            pending_ids,
            message_id: entry.id,
        });
        Ok(true)
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
            && self.started.elapsed().as_secs() >= max
        {
            return Ok(Some(format!(
                "maxSeconds: the run reached its time limit of {max} s"
            )));
        }
        let Some(cap) = session.cap_usd else {
            return Ok(None);
        };
        let spent = self
            .inner
            .cost_summary(&self.session_id)?
            .total_usd
            .unwrap_or(0.0);
        match self.inner.input_cost(&session.model, snapshot.input_tokens) {
            Some(next) if spent + next > cap => Ok(Some(format!(
                "capUsd: the next request (about ${next:.4} of input) would pass the spend cap of ${cap:.2}; ${spent:.4} spent so far"
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
        };
        self.inner.store.insert_usage(&self.session_id, &row)?;
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

    /// Leaves the registry without ending the run: its approval stays pending in the store.
    fn suspend(self) {
        self.inner.runs.release(&self.session_id, &self.run_id);
        let _ = self.signals.done.send(true);
        tracing::info!(run_id = %self.run_id, "run suspended on a pending approval");
    }

    /// What a client that reloads should read about how the run ended, when it did not simply
    /// answer or get stopped by the user.
    fn end_notice(&self, finish: &Finish) -> Option<(NoticeLevel, String)> {
        match finish.reason {
            FinishReason::EndTurn | FinishReason::Stopped => None,
            FinishReason::MaxIterations => Some((
                NoticeLevel::Warning,
                format!(
                    "The run stopped after {} steps, the session's step limit (maxSteps). Send a message to let it go on.",
                    self.steps
                ),
            )),
            FinishReason::CutOff => Some((
                NoticeLevel::Warning,
                "The answer got too long and was cut off.".into(),
            )),
            FinishReason::BudgetSpent => Some((
                NoticeLevel::Warning,
                finish.error.clone().unwrap_or_default(),
            )),
            FinishReason::Error => Some((
                NoticeLevel::Error,
                finish
                    .error
                    .clone()
                    .unwrap_or_else(|| "The run failed.".into()),
            )),
        }
    }

    /// Records the end, resolves what is still open, leaves the registry, then says so.
    fn finish(self, finish: Finish) {
        let store = &self.inner.store;
        if let Err(e) = store.finish_run(&self.run_id, finish.reason, finish.error.as_deref()) {
            tracing::error!(run_id = %self.run_id, error = %e, "cannot record the end of a run");
        }
        match store.cancel_pending_approvals(&self.run_id) {
            Ok(ids) => {
                for approval_id in ids {
                    self.emit(Event::ApprovalResolved {
                        approval_id,
                        decision: ApprovalDecision::Cancelled,
                    });
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot cancel pending approvals"),
        }
        if let Some((level, text)) = self.end_notice(&finish)
            && let Err(e) = self.notice(level, text)
        {
            tracing::error!(error = %e, "cannot store the notice of a run's end");
        }
        // A shutdown leaves the queue for the next daemon, which promotes it on start.
        let shutting_down = self
            .signals
            .suspend
            .load(std::sync::atomic::Ordering::SeqCst);
        let next = {
            // Under the registry lock, so no send can queue between the promotion and release.
            let mut runs = self.inner.runs.lock();
            let promoted = !shutting_down
                && self.promote_queue().unwrap_or_else(|e| {
                    tracing::error!(error = %e, "cannot promote queued input");
                    false
                });
            if runs
                .get(&self.session_id)
                .is_some_and(|a| a.run_id == self.run_id)
            {
                runs.remove(&self.session_id);
            }
            let run_id = new_id("run");
            promoted
                .then(|| claim_locked(&mut runs, &self.session_id, &run_id).ok())
                .flatten()
                .map(|signals| (run_id, signals))
        };
        let _ = self.signals.done.send(true);
        tracing::info!(run_id = %self.run_id, reason = ?finish.reason, error = ?finish.error, "run finished");
        self.emit(Event::RunFinished {
            reason: finish.reason,
            error: finish.error,
        });
        if let Some((run_id, signals)) = next {
            let started = match self.inner.store.session(&self.session_id) {
                Ok(Some(session)) => spawn_run(
                    self.inner.clone(),
                    RunStart::New {
                        session,
                        run_id: run_id.clone(),
                    },
                    signals,
                ),
                Ok(None) => Err(RuntimeError::SessionNotFound(self.session_id.clone())),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = started {
                self.inner.runs.release(&self.session_id, &run_id);
                tracing::error!(error = %e, "cannot start the run for promoted input");
            }
        }
    }
}

enum StepEnd {
    ToolCalls,
    Finished(Finish),
}

enum Ended {
    Finished(StopReason),
    Stopped,
    Failed(ProviderError),
}

/// The assistant message being streamed.
struct Reply {
    thinking: String,
    signature: Option<String>,
    text: String,
    calls: Vec<(String, String, serde_json::Value)>,
    cut_calls: Vec<(String, String)>,
    usage: Option<TokenUsage>,
    /// The text and the thinking, counted as they arrive so a long answer is not counted at
    /// the end; taken by [`Reply::precounted`].
    text_count: Option<StreamingCount>,
    thinking_count: Option<StreamingCount>,
    /// The session's event counter, looked up once rather than per delta.
    seq: SeqCounter,
}

impl Reply {
    fn new(counter: TokenCounter, seq: SeqCounter) -> Self {
        Self {
            seq,
            thinking: String::new(),
            signature: None,
            text: String::new(),
            calls: Vec::new(),
            cut_calls: Vec::new(),
            usage: None,
            text_count: Some(StreamingCount::new(counter)),
            thinking_count: Some(StreamingCount::new(counter)),
        }
    }

    /// The counts of the streamed text and thinking.
    async fn precounted(&mut self) -> Precounted {
        let mut precounted = Precounted::default();
        if let Some(count) = self.text_count.take() {
            precounted.text = Some(count.finish().await);
        }
        if let Some(count) = self.thinking_count.take() {
            precounted.thinking = Some(count.finish().await);
        }
        precounted
    }

    fn into_blocks(self, with_calls: bool) -> Vec<Block> {
        let mut blocks = Vec::new();
        if !self.thinking.is_empty() || self.signature.is_some() {
            blocks.push(Block::Thinking {
                text: self.thinking,
                signature: self.signature,
            });
        }
        if !self.text.is_empty() {
            blocks.push(Block::Text { text: self.text });
        }
        if with_calls {
            blocks.extend(
                self.calls
                    .into_iter()
                    .map(|(id, name, input)| Block::ToolCall { id, name, input }),
            );
            blocks.extend(
                self.cut_calls
                    .into_iter()
                    .map(|(id, name)| Block::ToolCall {
                        id,
                        name,
                        input: serde_json::json!({}),
                    }),
            );
        }
        blocks
    }
}

/// Adds leased interjections to the request's last user turn, after the tool results.
fn with_interjections(
    mut messages: Vec<crate::provider::ModelMessage>,
    leased: &[PendingRow],
) -> Vec<crate::provider::ModelMessage> {
    if leased.is_empty() {
        return messages;
    }
    let texts = leased.iter().map(|r| crate::provider::ModelContent::Text {
        text: super::projection::interjection_text(&r.text),
    });
    match messages.last_mut() {
        Some(last) if last.role == crate::provider::ModelRole::User => last.content.extend(texts),
        _ => messages.push(crate::provider::ModelMessage {
            role: crate::provider::ModelRole::User,
            content: texts.collect(),
        }),
    }
    messages
}
