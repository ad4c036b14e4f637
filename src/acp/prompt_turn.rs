//! A `session/prompt` turn: the prompt goes to the runtime in arrival order, and its request
//! answers when the turn that took it ends. A prompt sent while a turn runs is queued as an
//! interjection; it answers with the turn that delivers it, or with the new turn it is promoted
//! into, or `cancelled` when it is withdrawn. `_session/steering` joins a running turn without
//! waiting for it; `session/cancel` stops the turn.

use std::collections::HashMap;
use std::sync::Arc;

use agent_client_protocol_schema::v1 as acp;
use serde_json::json;
use tokio::sync::oneshot;

use super::agent::{Agent, send_update};
use super::dispatch::SteeringParams;
use super::error::{AcpError, Answer, error_message, runtime_error, to_value};
use super::translate;
use crate::low_priority::Deferred;
use crate::protocol::{ChatSendParams, FinishReason};
use crate::rpc::error::{INTERNAL_ERROR, INVALID_PARAMS};
use crate::runtime::Runtime;

/// A prompt the runtime has taken, and the provisional title being given to its session
/// (its first prompt names a new session), which the prompt's answer follows.
pub struct Taken {
    accepted: Accepted,
    titling: Option<Deferred<()>>,
}

/// How the turn that took a prompt ended.
pub type Outcome = Result<acp::StopReason, AcpError>;

/// What a prompt's request waits for: how the turn that took it ended.
type Waiter = oneshot::Sender<Outcome>;

/// A prompt the runtime has taken.
pub enum Accepted {
    /// A slash command, answered by its note.
    Command,
    /// A turn (or a queued interjection) whose end answers the prompt.
    Waiting(oneshot::Receiver<Outcome>),
}

/// Which prompts wait for which turn.
#[derive(Default)]
pub struct Turns {
    /// Prompts answered when the run ends.
    by_run: HashMap<String, Vec<Waiter>>,
    /// Prompts queued as interjections, until a run takes them.
    by_pending: HashMap<String, Waiter>,
    /// Prompts promoted into a new turn, until that turn's run starts, by session.
    promoted: HashMap<String, Vec<Waiter>>,
}

impl Turns {
    /// A prompt the runtime queued as `pending_id` or started as `run_id`; `None` for a slash
    /// command, which neither queues nor runs.
    pub fn wait(&mut self, pending_id: Option<String>, run_id: Option<String>) -> Accepted {
        let (waiter, waiting) = oneshot::channel();
        match (pending_id, run_id) {
            (Some(pending_id), _) => {
                self.by_pending.insert(pending_id, waiter);
            }
            (None, Some(run_id)) => self.by_run.entry(run_id).or_default().push(waiter),
            (None, None) => return Accepted::Command,
        }
        Accepted::Waiting(waiting)
    }

    /// A run of the session started: the prompts promoted into a new turn wait for it.
    pub fn run_started(&mut self, session_id: &str, run_id: Option<String>) {
        if let (Some(waiters), Some(run_id)) = (self.promoted.remove(session_id), run_id) {
            self.by_run.entry(run_id).or_default().extend(waiters);
        }
    }

    /// Queued prompts delivered into the running turn `run_id`: they answer when it ends.
    pub fn delivered(&mut self, pending_ids: Vec<String>, run_id: Option<String>) {
        for id in pending_ids {
            if let (Some(waiter), Some(run_id)) = (self.by_pending.remove(&id), run_id.clone()) {
                self.by_run.entry(run_id).or_default().push(waiter);
            }
        }
    }

    /// Queued prompts promoted into the session's next turn, whose run has not started yet.
    pub fn promoted(&mut self, session_id: &str, pending_ids: Vec<String>) {
        for id in pending_ids {
            if let Some(waiter) = self.by_pending.remove(&id) {
                self.promoted
                    .entry(session_id.to_string())
                    .or_default()
                    .push(waiter);
            }
        }
    }

    /// A queued prompt withdrawn before any turn took it: it answers `cancelled`.
    pub fn cancelled(&mut self, pending_id: &str) {
        if let Some(waiter) = self.by_pending.remove(pending_id) {
            let _ = waiter.send(Ok(acp::StopReason::Cancelled));
        }
    }

    /// The run `run_id` ended: every prompt waiting for it answers with how it ended.
    pub fn finished(&mut self, run_id: &str, reason: FinishReason, error: Option<&str>) {
        let waiters = self.by_run.remove(run_id);
        let outcome = translate::stop_reason(reason, error)
            .map_err(|message| error_message(INTERNAL_ERROR, message));
        for waiter in waiters.into_iter().flatten() {
            let _ = waiter.send(outcome.clone());
        }
    }

    /// Ends the wait of every prompt: no turn will answer them on this connection.
    pub fn clear(&mut self) {
        self.by_run.clear();
        self.by_pending.clear();
        self.promoted.clear();
    }
}

/// The answer of a prompt whose wait ended: its stop reason, the turn's error, or an internal
/// error when the wait was dropped (`None`: the agent is shutting down).
fn answer(outcome: Option<Outcome>) -> Answer {
    match outcome {
        Some(Ok(reason)) => to_value(&acp::PromptResponse::new(reason)),
        Some(Err(e)) => Err(e),
        None => Err(error_message(
            INTERNAL_ERROR,
            "the turn ended without an outcome: the agent is shutting down",
        )),
    }
}

/// What `_session/steering` answers: whether the prompt joined a running turn.
fn steering_outcome(queued: bool) -> serde_json::Value {
    let outcome = match queued {
        true => "injected",
        false => "startedNewTurn",
    };
    json!({"outcome": outcome})
}

impl Agent {
    /// Takes a prompt: sends it to the runtime now, in the order requests arrived, so a cancel
    /// or a list sent after it sees it started or queued. What it then waits for is returned.
    pub(super) async fn accept_prompt(
        &self,
        params: acp::PromptRequest,
    ) -> Result<Taken, AcpError> {
        let session_id = params.session_id.0.to_string();
        let session = self.usable_session(&session_id).await?;
        let translate::Prompt {
            text,
            attachments,
            images,
        } = translate::prompt_text(&params.prompt)
            .map_err(|e| error_message(INVALID_PARAMS, e.0))?;
        let runtime = self.runtime().await?;
        let titling = (session.title == "New chat" && !crate::runtime::is_command(&text))
            .then(|| self.retitle(runtime, &session_id, &text));
        // Held while sending, so the run's end cannot be handled before its waiter is in.
        let mut state = self.state.lock().await;
        let sent = runtime
            .send_stored(ChatSendParams {
                session_id: session_id.clone(),
                text,
                client_message_id: None,
                attachments,
                images,
            })
            .await
            .map_err(runtime_error)?;
        tracing::debug!(session_id, run_id = ?sent.run_id, queued = sent.queued, "prompt taken");
        Ok(Taken {
            accepted: state.turns.wait(sent.pending_id, sent.run_id),
            titling,
        })
    }

    /// The answer of an accepted prompt, once the turn that took it has ended (and the
    /// provisional title it gave its session has been told).
    pub(super) async fn finish_prompt(&self, taken: Taken) -> Answer {
        let answer = match taken.accepted {
            Accepted::Command => {
                // After the note's update, which was published before `send` returned.
                self.sink.barrier().await;
                to_value(&acp::PromptResponse::new(acp::StopReason::EndTurn))
            }
            Accepted::Waiting(waiting) => answer(waiting.await.ok()),
        };
        // Asked for only now: asking starts the title at once, and on a fresh process it
        // would compile the redaction patterns at full priority beside the turn's request.
        if let Some(titling) = taken.titling {
            titling.result().await;
        }
        answer
    }

    /// Names a new session after its first prompt, and tells the client, beside the prompt's
    /// turn: the title is redacted, and a fresh process may still be compiling the redaction
    /// patterns, which the prompt's request to the model must not wait for. It is titled once
    /// they are compiled, or at the turn's end, whichever comes first.
    fn retitle(&self, runtime: &Runtime, session_id: &str, text: &str) -> Deferred<()> {
        let (runtime, peer) = (runtime.clone(), self.peer.clone());
        let (session_id, text) = (session_id.to_string(), text.to_string());
        Deferred::spawn(crate::context::redact::wait_for_warm_up, move || {
            let title = translate::title_from(&text);
            if title.is_empty() {
                return;
            }
            // Provisional: the daemon's title after the first answer replaces it (and reaches
            // the client as a `sessionUpdated` event, forwarded as a session info update).
            let session = match runtime.set_provisional_title(&session_id, &title) {
                Ok(Some(session)) => session,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(session_id, error = %e, "cannot title the session from its first prompt");
                    return;
                }
            };
            send_update(
                &peer,
                &session_id,
                acp::SessionUpdate::SessionInfoUpdate(
                    acp::SessionInfoUpdate::new()
                        .title(session.title)
                        .updated_at(session.updated_at),
                ),
            );
        })
    }

    /// `_session/steering`: the prompt joins the running turn, or starts one when none runs.
    pub(super) async fn steer(&self, params: SteeringParams) -> Answer {
        let session_id = params.session_id;
        self.usable_session(&session_id).await?;
        let translate::Prompt {
            text,
            attachments,
            images,
        } = translate::prompt_text(&params.prompt)
            .map_err(|e| error_message(INVALID_PARAMS, e.0))?;
        let sent = self
            .runtime()
            .await?
            .send_stored(ChatSendParams {
                session_id,
                text,
                client_message_id: None,
                attachments,
                images,
            })
            .await
            .map_err(runtime_error)?;
        Ok(steering_outcome(sent.queued))
    }

    /// `session/cancel`: stops the session's turn; its prompts answer `cancelled`.
    pub(super) async fn cancel(&self, session_id: &str) {
        let Ok(runtime) = self.runtime().await else {
            return;
        };
        if let Err(e) = runtime.stop(session_id).await {
            tracing::warn!(session_id, error = %e, "session/cancel could not stop the turn");
        }
    }

    /// Cancels a session's turn on its own task, as `session/cancel` asks.
    pub(super) fn cancel_later(self: &Arc<Self>, session_id: String) {
        let this = self.clone();
        tokio::spawn(async move { this.cancel(&session_id).await });
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// What each wait received so far: `None` while it still waits.
    fn received(waits: &mut [Accepted]) -> Vec<Option<Answer>> {
        waits
            .iter_mut()
            .map(|accepted| match accepted {
                Accepted::Command => Some(to_value(&acp::PromptResponse::new(
                    acp::StopReason::EndTurn,
                ))),
                Accepted::Waiting(waiting) => match waiting.try_recv() {
                    Ok(outcome) => Some(answer(Some(outcome))),
                    Err(oneshot::error::TryRecvError::Empty) => None,
                    Err(oneshot::error::TryRecvError::Closed) => Some(answer(None)),
                },
            })
            .collect()
    }

    fn stopped(reason: &str) -> Option<Answer> {
        Some(Ok(json!({"stopReason": reason})))
    }

    /// A prompt that started a run answers when that run ends, with the run's stop reason;
    /// a slash command answers at once.
    #[test]
    fn a_prompt_answers_when_its_run_ends() {
        let mut turns = Turns::default();
        let mut waits = vec![
            turns.wait(None, Some("r1".into())),
            turns.wait(None, None),
            turns.wait(None, Some("r2".into())),
        ];
        turns.finished("r1", FinishReason::MaxIterations, None);
        assert_eq!(
            received(&mut waits),
            vec![stopped("max_turn_requests"), stopped("end_turn"), None]
        );
    }

    /// A queued prompt answers with the turn that delivered it, or with the new turn it was
    /// promoted into once that turn's run ends, or `cancelled` when withdrawn.
    #[test]
    fn queued_prompts_follow_the_turn_that_takes_them() {
        let mut turns = Turns::default();
        let mut waits = vec![
            turns.wait(None, Some("r1".into())),
            turns.wait(Some("p1".into()), None),
            turns.wait(Some("p2".into()), None),
            turns.wait(Some("p3".into()), None),
        ];
        turns.delivered(vec!["p1".into()], Some("r1".into()));
        turns.promoted("s1", vec!["p2".into()]);
        turns.cancelled("p3");
        turns.finished("r1", FinishReason::EndTurn, None);
        assert_eq!(
            received(&mut waits),
            vec![
                stopped("end_turn"),
                stopped("end_turn"),
                None,
                stopped("cancelled")
            ]
        );
        turns.run_started("s1", Some("r2".into()));
        turns.finished("r2", FinishReason::Stopped, None);
        assert_eq!(received(&mut waits)[2], stopped("cancelled"));
    }

    /// A run that ends in an error answers its prompts with the error; a wait dropped by the
    /// shutdown answers that the agent is shutting down.
    #[test]
    fn failed_runs_and_a_shutdown_answer_with_errors() {
        let mut turns = Turns::default();
        let mut waits = vec![
            turns.wait(None, Some("r1".into())),
            turns.wait(Some("p1".into()), None),
        ];
        turns.finished("r1", FinishReason::Error, Some("overloaded"));
        turns.clear();
        assert_eq!(
            received(&mut waits),
            vec![
                Some(Err(error_message(
                    INTERNAL_ERROR,
                    "The model request failed: overloaded"
                ))),
                Some(Err(error_message(
                    INTERNAL_ERROR,
                    "the turn ended without an outcome: the agent is shutting down"
                ))),
            ]
        );
    }

    #[test]
    fn steering_says_whether_the_prompt_joined_a_turn() {
        assert_eq!(
            (steering_outcome(true), steering_outcome(false)),
            (
                json!({"outcome": "injected"}),
                json!({"outcome": "startedNewTurn"})
            )
        );
    }
}
