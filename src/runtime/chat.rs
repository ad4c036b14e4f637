//! The composer's methods: send, stop, resume, and answering approvals.

use super::run::{RunStart, spawn_run};
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::protocol::*;
use crate::store::{ApprovalOutcome, NewMessage};
use crate::util::new_id;

impl Runtime {
    /// Stores the user's message and starts a run that answers it.
    pub async fn send(&self, params: ChatSendParams) -> RuntimeResult<ChatSendResult> {
        let session = self.session_row(&params.session_id)?;
        if params.text.trim().is_empty() {
            return Err(RuntimeError::InvalidParams("the message is empty".into()));
        }
        self.refuse_if_suspended(&session.id)?;
        self.inner.driver(&session.account)?;
        let run_id = new_id("run");
        let signals = self
            .inner
            .runs
            .claim(&session.id, &run_id)
            .map_err(|run_id| RuntimeError::Busy {
                session_id: session.id.clone(),
                run_id,
            })?;
        let committed = self.inner.events.commit(
            &self.inner.store,
            NewMessage {
                id: None,
                session_id: session.id.clone(),
                seq: 0,
                run_id: Some(run_id.clone()),
                role: Role::User,
                blocks: vec![Block::Text { text: params.text }],
                status: MessageStatus::Complete,
            },
        );
        let message = match committed {
            Ok(message) => message,
            Err(e) => {
                self.inner.runs.release(&session.id, &run_id);
                return Err(e);
            }
        };
        spawn_run(
            self.inner.clone(),
            RunStart::New {
                session,
                run_id: run_id.clone(),
            },
            signals,
        )?;
        Ok(ChatSendResult {
            run_id: Some(run_id),
            message_id: Some(message.id),
        })
    }

    /// Ends the session's run (live, or suspended on an approval after a restart).
    pub async fn stop(&self, session_id: &str) -> RuntimeResult<ChatStopResult> {
        self.session_row(session_id)?;
        if let Some((run_id, mut done)) = self.inner.runs.stop(session_id) {
            let _ = done.wait_for(|d| *d).await;
            return Ok(ChatStopResult {
                run_id: Some(run_id),
                stopped: true,
            });
        }
        if let Some(run) = self.suspended_run(session_id)? {
            let run_id = run.id.clone();
            let mut done = self.resume_suspended(run, true)?;
            let _ = done.wait_for(|d| *d).await;
            return Ok(ChatStopResult {
                run_id: Some(run_id),
                stopped: true,
            });
        }
        Ok(ChatStopResult {
            run_id: None,
            stopped: false,
        })
    }

    /// Answers a user turn that no run answered (e.g. after a crash).
    pub async fn resume(&self, session_id: &str) -> RuntimeResult<ChatResumeResult> {
        let session = self.session_row(session_id)?;
        self.refuse_if_suspended(session_id)?;
        if self.state(session_id)? != SessionState::Unanswered {
            return Err(RuntimeError::Conflict(format!(
                "session {session_id} has no unanswered turn to resume"
            )));
        }
        let run_id = new_id("run");
        let signals = self
            .inner
            .runs
            .claim(session_id, &run_id)
            .map_err(|run_id| RuntimeError::Busy {
                session_id: session_id.to_string(),
                run_id,
            })?;
        spawn_run(
            self.inner.clone(),
            RunStart::New {
                session,
                run_id: run_id.clone(),
            },
            signals,
        )?;
        Ok(ChatResumeResult { run_id })
    }

    pub async fn respond_approval(
        &self,
        params: ApprovalRespondParams,
    ) -> RuntimeResult<ApprovalRespondResult> {
        if params.decision == ApprovalDecision::Cancelled {
            return Err(RuntimeError::InvalidParams(
                "decision must be allow, allowAlways or deny; cancelled is set by chat/stop".into(),
            ));
        }
        let store = &self.inner.store;
        match store.resolve_approval(&params.approval_id, params.decision)? {
            ApprovalOutcome::NotFound => Err(RuntimeError::NotFound {
                what: "approval",
                id: params.approval_id,
            }),
            ApprovalOutcome::AlreadyResolved(decision) => Ok(ApprovalRespondResult {
                decision,
                applied: false,
                message: Some(format!(
                    "approval {} was already answered ({decision:?}); nothing changed",
                    params.approval_id
                )),
            }),
            ApprovalOutcome::Applied(row) => {
                self.inner.events.emit(
                    store,
                    &row.session_id,
                    Some(&row.run_id),
                    Event::ApprovalResolved {
                        approval_id: row.id.clone(),
                        decision: params.decision,
                    },
                );
                if !self.inner.runs.poke_approvals(&row.session_id)
                    && let Some(run) = store.run(&row.run_id)?.filter(|r| !r.finished)
                {
                    self.resume_suspended(run, false)?;
                }
                Ok(ApprovalRespondResult {
                    decision: params.decision,
                    applied: true,
                    message: None,
                })
            }
        }
    }

    /// A run left waiting for an approval by a previous daemon, with no live task.
    fn suspended_run(&self, session_id: &str) -> RuntimeResult<Option<crate::store::RunRow>> {
        if self.inner.runs.active_run(session_id).is_some() {
            return Ok(None);
        }
        let pending = self.inner.store.pending_approvals(session_id)?;
        match pending.first() {
            Some(approval) => Ok(self
                .inner
                .store
                .run(&approval.run_id)?
                .filter(|r| !r.finished)),
            None => Ok(None),
        }
    }

    fn refuse_if_suspended(&self, session_id: &str) -> RuntimeResult<()> {
        match self.suspended_run(session_id)? {
            Some(run) => Err(RuntimeError::Busy {
                session_id: session_id.to_string(),
                run_id: run.id,
            }),
            None => Ok(()),
        }
    }

    /// Continues a suspended run from the stored transcript, optionally stopping it at once.
    fn resume_suspended(
        &self,
        run: crate::store::RunRow,
        stop: bool,
    ) -> RuntimeResult<tokio::sync::watch::Receiver<bool>> {
        let session = self.session_row(&run.session_id)?;
        let signals = self
            .inner
            .runs
            .claim(&session.id, &run.id)
            .map_err(|run_id| RuntimeError::Busy {
                session_id: session.id.clone(),
                run_id,
            })?;
        if stop {
            self.inner.runs.stop(&session.id);
        }
        let done = signals.done.subscribe();
        spawn_run(
            self.inner.clone(),
            RunStart::Resume { session, run },
            signals,
        )?;
        Ok(done)
    }
}
