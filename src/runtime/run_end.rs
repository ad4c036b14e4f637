//! How a run ends: recorded, what it left open resolved, the queue handed to the next run, and
//! only then told.

use super::RuntimeError;
use super::locked::DeferredEnd;
use super::promotion::promoted_turn;
use super::registry::RunSignals;
use super::run::{RunContext, RunStart, spawn_run};
use crate::protocol::*;
use crate::util::new_id;

/// How a run ended: the reason `runFinished` gives, with the text that explains a spent budget
/// or an error.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    EndTurn,
    Stopped,
    MaxIterations,
    /// The limit the next request would have passed, named.
    BudgetSpent(String),
    CutOff,
    /// The model declined to answer (a provider's refusal or content filter).
    Refusal,
    Error(String),
}

impl RunEnd {
    pub fn reason(&self) -> FinishReason {
        match self {
            RunEnd::EndTurn => FinishReason::EndTurn,
            RunEnd::Stopped => FinishReason::Stopped,
            RunEnd::MaxIterations => FinishReason::MaxIterations,
            RunEnd::BudgetSpent(_) => FinishReason::BudgetSpent,
            RunEnd::CutOff => FinishReason::CutOff,
            RunEnd::Refusal => FinishReason::Refusal,
            RunEnd::Error(_) => FinishReason::Error,
        }
    }

    pub fn error(&self) -> Option<&str> {
        match self {
            RunEnd::BudgetSpent(text) | RunEnd::Error(text) => Some(text),
            _ => None,
        }
    }

    /// How an answer cut short by this end is stored.
    pub fn message_status(&self) -> MessageStatus {
        match self {
            RunEnd::Stopped => MessageStatus::Stopped,
            RunEnd::Error(_) => MessageStatus::Failed,
            _ => MessageStatus::Complete,
        }
    }

    /// What a client that reloads should read about the end, when the run neither simply
    /// answered nor was stopped by the user.
    fn notice(&self, steps: u32) -> Option<(NoticeLevel, String)> {
        match self {
            RunEnd::EndTurn | RunEnd::Stopped => None,
            RunEnd::MaxIterations => Some((
                NoticeLevel::Warning,
                format!(
                    "The run stopped after {steps} steps, the session's step limit (maxSteps). Send a message to let it go on."
                ),
            )),
            RunEnd::CutOff => Some((
                NoticeLevel::Warning,
                "The answer got too long and was cut off.".into(),
            )),
            RunEnd::Refusal => Some((NoticeLevel::Warning, "The model declined to answer.".into())),
            RunEnd::BudgetSpent(limit) => Some((NoticeLevel::Warning, limit.clone())),
            RunEnd::Error(error) => Some((NoticeLevel::Error, error.clone())),
        }
    }
}

impl RunContext {
    /// Leaves the registry without ending the run: its approval stays pending in the store.
    pub(super) fn suspend(self) {
        self.inner.give_back(&self.session_id, &self.run_id);
        let _ = self.signals.done.send(true);
        tracing::info!(run_id = %self.run_id, "run suspended on a pending approval");
    }

    /// Records the end, resolves what is still open, hands the queue over, leaves the
    /// registry, then says so.
    pub(super) fn finish(mut self, end: RunEnd) {
        let parent = super::delegation::claim_waiting_parent(&self.inner, &self.session_id);
        // An answer the database refused is stored before the end, so both wait together. A
        // stopped run tells its client at once: its end waits for no lock (it is recorded by
        // the heartbeat once the database is free).
        let recorded = self.unsaved.is_empty()
            && match end {
                RunEnd::Stopped => crate::store::without_waiting(|| self.record_end(&end)),
                _ => self.record_end(&end),
            };
        if !recorded {
            self.inner.defer_end(DeferredEnd {
                session_id: self.session_id.clone(),
                run_id: self.run_id.clone(),
                messages: std::mem::take(&mut self.unsaved),
                reason: end.reason(),
                error: end.error().map(str::to_string),
            });
        }
        let next = self.hand_over(recorded);
        let _ = self.signals.done.send(true);
        tracing::info!(run_id = %self.run_id, reason = ?end.reason(), error = ?end.error(), "run finished");
        self.emit(Event::RunFinished {
            reason: end.reason(),
            error: end.error().map(str::to_string),
        });
        if let Some((run_id, signals)) = next {
            self.start_next(run_id, signals);
        }
        match parent {
            Some(parent) if recorded => parent.resume(&self.inner),
            // Resumed, it would find this run still open and wait again.
            Some(parent) => parent.give_back(&self.inner),
            None => {}
        }
    }

    /// Stores how the run ended, cancels its approvals and keeps a notice of the end; false
    /// when the end itself could not be stored (the heartbeat stores it later).
    fn record_end(&self, end: &RunEnd) -> bool {
        let store = &self.inner.store;
        if let Err(e) = store.finish_run(&self.run_id, end.reason(), end.error()) {
            tracing::error!(run_id = %self.run_id, error = %e, "cannot record the end of a run yet; the heartbeat retries");
            return false;
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
        if let Some((level, text)) = end.notice(self.steps)
            && let Err(e) = self.notice(level, text)
        {
            tracing::error!(error = %e, "cannot store the notice of a run's end");
        }
        true
    }

    /// Promotes the queue into the next user turn and leaves the registry, under the session's
    /// lock so no send can queue between the two; the claim for the run that answers the
    /// promoted turn, if any, which keeps the session's lease. Otherwise the lease is given
    /// back, but only with the queue empty: input another daemon queued since is promoted too.
    fn hand_over(&self, recorded: bool) -> Option<(String, RunSignals)> {
        // An end not yet recorded keeps the lease and the queue until the heartbeat records it:
        // the run only leaves the table, without waiting for a send that waits for the store.
        if !recorded {
            self.inner.runs.release(&self.session_id, &self.run_id);
            return None;
        }
        self.inner.runs.deciding(&self.session_id, || {
            let next = self.promote_or_release();
            if next.is_none() {
                self.inner.runs.release(&self.session_id, &self.run_id);
            }
            next
        })
    }

    /// The writes of [`RunContext::hand_over`]; the run stays in the table meanwhile, so no
    /// other claim comes between, and is replaced by the next run in one step.
    fn promote_or_release(&self) -> Option<(String, RunSignals)> {
        // A shutdown leaves the queue for the next daemon, which promotes it on start.
        let shutting_down = self
            .signals
            .suspend
            .load(std::sync::atomic::Ordering::SeqCst);
        let store = &self.inner.store;
        // A run another daemon took over leaves the session to that daemon.
        if let Ok(Some(lease)) = store.lease(&self.session_id)
            && lease.owner != store.owner()
        {
            return None;
        }
        for _ in 0..4 {
            let promoted = !shutting_down
                && self.promote_queue().unwrap_or_else(|e| {
                    tracing::error!(error = %e, "cannot promote queued input");
                    false
                });
            if promoted {
                let run_id = new_id("run");
                let moved = store.transfer_lease(&self.session_id, &self.run_id, &run_id);
                if !matches!(moved, Ok(true)) {
                    tracing::warn!(run_id = %self.run_id, "the run's lease is gone; the promoted turn waits for chat/resume");
                    return None;
                }
                return match self
                    .inner
                    .runs
                    .replace(&self.session_id, &self.run_id, &run_id)
                {
                    Ok(signals) => Some((run_id, signals)),
                    Err(_) => {
                        let _ = store.release_lease(&self.session_id, &run_id, false);
                        None
                    }
                };
            }
            match store.release_lease(&self.session_id, &self.run_id, !shutting_down) {
                Ok(true) => return None,
                // Another daemon queued input since: promote it as well.
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot give back the run's lease; it expires");
                    return None;
                }
            }
        }
        None
    }

    /// Turns everything still queued into one new user turn; the next run answers it.
    fn promote_queue(&self) -> super::RuntimeResult<bool> {
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

    /// Starts the run that answers the promoted turn, or gives its claim back.
    fn start_next(&self, run_id: String, signals: RunSignals) {
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
            self.inner.give_back(&self.session_id, &run_id);
            tracing::error!(error = %e, "cannot start the run for promoted input");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn each_end_says_its_reason_error_message_status_and_notice() {
        let ends = [
            RunEnd::EndTurn,
            RunEnd::Stopped,
            RunEnd::MaxIterations,
            RunEnd::BudgetSpent("capUsd: spent".into()),
            RunEnd::CutOff,
            RunEnd::Refusal,
            RunEnd::Error("HTTP 500".into()),
        ];
        let described: Vec<_> = ends
            .iter()
            .map(|end| {
                (
                    end.reason(),
                    end.error().map(str::to_string),
                    end.message_status(),
                    end.notice(3).map(|(level, _)| level),
                )
            })
            .collect();
        use FinishReason as F;
        use MessageStatus as M;
        use NoticeLevel as N;
        assert_eq!(
            described,
            vec![
                (F::EndTurn, None, M::Complete, None),
                (F::Stopped, None, M::Stopped, None),
                (F::MaxIterations, None, M::Complete, Some(N::Warning)),
                (
                    F::BudgetSpent,
                    Some("capUsd: spent".into()),
                    M::Complete,
                    Some(N::Warning)
                ),
                (F::CutOff, None, M::Complete, Some(N::Warning)),
                (F::Refusal, None, M::Complete, Some(N::Warning)),
                (F::Error, Some("HTTP 500".into()), M::Failed, Some(N::Error)),
            ]
        );
        assert_eq!(
            RunEnd::MaxIterations.notice(3).map(|(_, text)| text),
            Some("The run stopped after 3 steps, the session's step limit (maxSteps). Send a message to let it go on.".into())
        );
    }
}
