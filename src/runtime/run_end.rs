//! How a run ends: recorded, what it left open resolved, the queue handed to the next run, the
//! run that waited for it (a delegated task's parent) resumed, and only then told.
//!
//! One path for every end ([`Inner::end_run`]): the run's own as it ends
//! ([`RunContext::finish`]), and the heartbeat's for an end the database refused then, recorded
//! once it is free (`locked`).

use std::sync::Arc;

use super::promotion::promoted_turn;
use super::registry::RunSignals;
use super::run::{RunContext, RunStart, spawn_run};
use super::{Inner, RuntimeError, RuntimeResult};
use crate::protocol::*;
use crate::store::{NewMessage, RunRow, SessionRow};
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

/// A run's end that could not be recorded yet, with the answer it could not store; the
/// heartbeat records it once the database takes it (`locked`).
pub struct DeferredEnd {
    pub session_id: String,
    pub run_id: String,
    /// Messages to store first, in order (the answer streamed when the database refused it).
    pub messages: Vec<NewMessage>,
    pub reason: FinishReason,
    pub error: Option<String>,
}

/// The run whose end [`Inner::end_run`] records.
pub(super) struct Ending<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    /// The daemon shuts down: queued input is left for the next daemon, which promotes it on
    /// start.
    pub shutting_down: bool,
}

impl Inner {
    /// The one path of a run's end, whoever records it (the run as it ends, or the heartbeat
    /// once the database takes an end it refused):
    /// 1. claims the parent's run if it is suspended on this one (a delegated task's), before
    ///    the end is recorded, so that no recovery finds the parent no longer waiting and
    ///    closes it as interrupted before it is resumed;
    /// 2. records the end with `record`, which answers false when the database refused it;
    /// 3. once recorded, promotes queued input into the next user turn and hands the session
    ///    to the run that answers it, or gives the lease back (an end not recorded keeps the
    ///    lease and the queue until it is);
    /// 4. `told` tells whoever waits for the end (it runs before the next run starts, so its
    ///    events come first);
    /// 5. starts the next run, and resumes the parent; or, with the end not recorded, gives the
    ///    parent back: resumed, it would find this run still open and wait again.
    ///
    /// Whether the end was recorded.
    pub(super) fn end_run(
        self: &Arc<Self>,
        ending: Ending<'_>,
        record: impl FnOnce() -> bool,
        told: impl FnOnce(),
    ) -> bool {
        let parent = self.claim_waiting_parent(ending.session_id);
        let recorded = record();
        let next = self.hand_over(&ending, recorded);
        told();
        if let Some((run_id, signals)) = next {
            self.start_next(ending.session_id, run_id, signals);
        }
        match parent {
            Some(parent) if recorded => parent.resume(self),
            Some(parent) => parent.give_back(self),
            None => {}
        }
        recorded
    }

    /// As a child's run ends, before its end is recorded: claims the parent's run if it is
    /// suspended on this child, for this daemon (registry and lease) until it is resumed.
    fn claim_waiting_parent(&self, child_id: &str) -> Option<WaitingParent> {
        let claimed = (|| -> RuntimeResult<Option<WaitingParent>> {
            let Some(link) = self.store.delegation_of_child(child_id)? else {
                return Ok(None);
            };
            if self.runs.active_run(&link.parent_id).is_some() {
                // A live task awaits the child; it reads the end itself.
                return Ok(None);
            }
            let Some(run) = self.store.run(&link.parent_run_id)?.filter(|r| !r.finished) else {
                return Ok(None);
            };
            let session = self
                .store
                .session(&link.parent_id)?
                .ok_or_else(|| RuntimeError::SessionNotFound(link.parent_id.clone()))?;
            let signals = self.claim_run(&session.id, &run.id)?;
            Ok(Some(WaitingParent {
                session,
                run,
                signals,
            }))
        })();
        claimed.unwrap_or_else(|e| {
            tracing::error!(child_id, error = %e, "cannot resume the run that delegated the task");
            None
        })
    }

    /// Promotes the queue into the next user turn and leaves the registry, under the session's
    /// lock so no send can queue between the two; the claim for the run that answers the
    /// promoted turn, if any, which keeps the session's lease. Otherwise the lease is given
    /// back, but only with the queue empty: input another daemon queued since is promoted too.
    fn hand_over(&self, ending: &Ending<'_>, recorded: bool) -> Option<(String, RunSignals)> {
        let (session_id, run_id) = (ending.session_id, ending.run_id);
        // An end not yet recorded keeps the lease and the queue until the heartbeat records it:
        // the run only leaves the table, without waiting for a send that waits for the store.
        if !recorded {
            self.runs.release(session_id, run_id);
            return None;
        }
        self.runs.deciding(session_id, || {
            let next = self.promote_or_release(ending);
            if next.is_none() {
                self.runs.release(session_id, run_id);
            }
            next
        })
    }

    /// The writes of [`Inner::hand_over`]; a live run stays in the table meanwhile, so no
    /// other claim comes between, and is replaced by the next run in one step.
    fn promote_or_release(&self, ending: &Ending<'_>) -> Option<(String, RunSignals)> {
        let (session_id, ended) = (ending.session_id, ending.run_id);
        let store = &self.store;
        // A run another daemon took over leaves the session to that daemon.
        if let Ok(Some(lease)) = store.lease(session_id)
            && lease.owner != store.owner()
        {
            return None;
        }
        for _ in 0..4 {
            let promoted = !ending.shutting_down
                && self
                    .promote_queue(ending.session_id, Some(ending.run_id))
                    .unwrap_or_else(|e| {
                        tracing::error!(error = %e, "cannot promote queued input");
                        false
                    });
            if promoted {
                let run_id = new_id("run");
                let moved = store.transfer_lease(session_id, ended, &run_id);
                if !matches!(moved, Ok(true)) {
                    tracing::warn!(run_id = %ended, "the run's lease is gone; the promoted turn waits for chat/resume");
                    return None;
                }
                return match self.runs.replace(session_id, ended, &run_id) {
                    Ok(signals) => Some((run_id, signals)),
                    Err(_) => {
                        let _ = store.release_lease(session_id, &run_id, false);
                        None
                    }
                };
            }
            match store.release_lease(session_id, ended, !ending.shutting_down) {
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

    /// Turns everything still queued into one new user turn; the next run answers it. The
    /// event names the run that ended (`None` after a command's claim, which is no run).
    pub(super) fn promote_queue(
        &self,
        session_id: &str,
        ended: Option<&str>,
    ) -> RuntimeResult<bool> {
        let rows = self.store.open_pending(session_id)?;
        let Some(message) = promoted_turn(session_id, rows) else {
            return Ok(false);
        };
        let pending_ids = message
            .settles
            .as_ref()
            .map(|s| s.pending_ids.clone())
            .unwrap_or_default();
        let entry = self.commit(message)?;
        self.events.emit(
            &self.store,
            session_id,
            ended,
            Event::InterjectionPromoted {
                pending_ids,
                message_id: entry.id,
            },
        );
        Ok(true)
    }

    /// Starts the run that answers the promoted turn, or gives its claim back.
    pub(super) fn start_next(
        self: &Arc<Self>,
        session_id: &str,
        run_id: String,
        signals: RunSignals,
    ) {
        let started = match self.store.session(session_id) {
            Ok(Some(session)) => spawn_run(
                self.clone(),
                RunStart::New {
                    session,
                    run_id: run_id.clone(),
                },
                signals,
            ),
            Ok(None) => Err(RuntimeError::SessionNotFound(session_id.to_string())),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = started {
            self.give_back(session_id, &run_id);
            tracing::error!(error = %e, "cannot start the run for promoted input");
        }
    }
}

/// The parent's run suspended on a child (a restart came while the child waited), claimed
/// for this daemon (registry and lease) until it is resumed.
struct WaitingParent {
    session: SessionRow,
    run: RunRow,
    signals: RunSignals,
}

impl WaitingParent {
    /// When the child's end could not be recorded yet: the claim is given back, and the
    /// heartbeat that records the end claims and resumes the parent then.
    fn give_back(self, inner: &Inner) {
        inner.give_back(&self.session.id, &self.run.id);
    }

    /// Once the child's end is recorded: the parent's run resumes and takes the child's answer.
    fn resume(self, inner: &Arc<Inner>) {
        tracing::info!(run_id = %self.run.id, "resuming the run that waited for its delegated task");
        let start = RunStart::Resume {
            session: self.session,
            run: self.run,
        };
        if let Err(e) = spawn_run(inner.clone(), start, self.signals) {
            tracing::error!(error = %e, "cannot resume the run that delegated the task");
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

    /// Ends the run by [`Inner::end_run`]: records the end (or keeps it for the heartbeat),
    /// resolves what is still open, hands the queue over, leaves the registry, then says so.
    pub(super) fn finish(mut self, end: RunEnd) {
        let unsaved = std::mem::take(&mut self.unsaved);
        let ending = Ending {
            session_id: &self.session_id,
            run_id: &self.run_id,
            shutting_down: self
                .signals
                .suspend
                .load(std::sync::atomic::Ordering::SeqCst),
        };
        let recorded = self.inner.end_run(
            ending,
            || self.record_or_defer(&end, unsaved),
            || self.told(&end),
        );
        if recorded && end.reason() == FinishReason::EndTurn {
            self.inner.title_after_answer(&self.session_id);
        }
    }

    /// Records the end, or keeps it (with the answers the database refused, stored first) for
    /// the heartbeat; whether it was recorded. An answer the database refused is stored
    /// before the end, so both wait together. A stopped run tells its client at once: its end
    /// waits for no lock (it is recorded by the heartbeat once the database is free).
    fn record_or_defer(&self, end: &RunEnd, unsaved: Vec<NewMessage>) -> bool {
        let recorded = unsaved.is_empty()
            && match end {
                RunEnd::Stopped => crate::store::without_waiting(|| self.record_end(end)),
                _ => self.record_end(end),
            };
        if !recorded {
            self.inner.defer_end(DeferredEnd {
                session_id: self.session_id.clone(),
                run_id: self.run_id.clone(),
                messages: unsaved,
                reason: end.reason(),
                error: end.error().map(str::to_string),
            });
        }
        recorded
    }

    /// Tells the run's clients, then its waiters, that it ended: a delegated task's parent
    /// waits for `done`, so the sub-agent's forwarded `runFinished` comes before the parent's
    /// call takes its answer.
    fn told(&self, end: &RunEnd) {
        tracing::info!(run_id = %self.run_id, reason = ?end.reason(), error = ?end.error(), "run finished");
        self.emit(Event::RunFinished {
            reason: end.reason(),
            error: end.error().map(str::to_string),
        });
        let _ = self.signals.done.send(true);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{EventSink, Runtime};
    use crate::store::{DelegationRow, NewSession, Store, ToolSet};
    use crate::util::lock;
    use pretty_assertions::assert_eq;
    use std::sync::Mutex;

    /// The kinds of the events published, by session, in order, with `told` where the end
    /// was told.
    #[derive(Default)]
    struct Seen(Mutex<Vec<(String, String)>>);

    impl EventSink for Seen {
        fn emit(&self, event: &SessionEventParams) {
            let kind = serde_json::to_value(&event.event).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_string();
            lock(&self.0).push((event.session_id.clone(), kind));
        }
    }

    impl Seen {
        fn of(&self, session_id: &str) -> Vec<String> {
            lock(&self.0)
                .iter()
                .filter(|(id, _)| id == session_id)
                .map(|(_, kind)| kind.clone())
                .collect()
        }
    }

    /// A runtime over a database file in `dir`, its events seen by the returned sink.
    fn runtime(dir: &tempfile::TempDir) -> (Arc<Inner>, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        let store = Store::open(&dir.path().join("db.sqlite")).unwrap();
        let runtime = Runtime::new(store, crate::config::Config::from_env(), seen.clone()).unwrap();
        (runtime.inner, seen)
    }

    fn session(inner: &Inner) -> String {
        inner
            .store
            .insert_session(&NewSession {
                title: "t".into(),
                account: "demo".into(),
                model: "demo".into(),
                system_prompt: None,
                workspace_root: None,
                max_steps: 10,
                cap_usd: None,
                max_seconds: None,
                rollover_secs: None,
            })
            .unwrap()
            .id
    }

    /// A run of a new session, claimed (registry and lease) as a live run is: (session, run).
    fn live_run(inner: &Inner) -> (String, String) {
        let session_id = session(inner);
        let run_id = new_id("run");
        inner
            .store
            .insert_run(&run_id, &session_id, "demo")
            .unwrap();
        // The signals are dropped: nothing drives the run, the test ends it.
        inner.claim_run(&session_id, &run_id).unwrap();
        (session_id, run_id)
    }

    /// A parent session whose run is suspended on the delegated `child` session: (parent
    /// session, parent run).
    fn waiting_parent(inner: &Inner, child_id: &str) -> (String, String) {
        let parent_id = session(inner);
        let run_id = new_id("run");
        inner.store.insert_run(&run_id, &parent_id, "demo").unwrap();
        inner
            .store
            .insert_delegation(&DelegationRow {
                child_id: child_id.to_string(),
                parent_id: parent_id.clone(),
                parent_run_id: run_id.clone(),
                call_id: "call_1".into(),
                tools: ToolSet::ReadOnly,
                task: "look".into(),
                created_at: crate::util::now_ms(),
            })
            .unwrap();
        (parent_id, run_id)
    }

    fn ending<'a>(session_id: &'a str, run_id: &'a str) -> Ending<'a> {
        Ending {
            session_id,
            run_id,
            shutting_down: false,
        }
    }

    fn finish(inner: &Inner, run_id: &str) -> bool {
        inner
            .store
            .finish_run(run_id, FinishReason::EndTurn, None)
            .is_ok()
    }

    /// Who holds the session: (its live run here, its lease's run).
    fn holder(inner: &Inner, session_id: &str) -> (Option<String>, Option<String>) {
        (
            inner.runs.active_run(session_id),
            inner.store.lease(session_id).unwrap().map(|l| l.run_id),
        )
    }

    fn told(seen: &Seen, session_id: &str) -> impl FnOnce() {
        move || lock(&seen.0).push((session_id.to_string(), "told".into()))
    }

    #[tokio::test]
    async fn a_recorded_end_promotes_the_queue_into_the_turn_the_next_run_answers() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, seen) = runtime(&dir);
        let (session_id, run_id) = live_run(&inner);
        let queued = inner
            .store
            .insert_pending(&session_id, &run_id, None, "and this")
            .unwrap();

        let recorded = inner.end_run(
            ending(&session_id, &run_id),
            || finish(&inner, &run_id),
            told(&seen, &session_id),
        );

        assert!(recorded);
        assert_eq!(
            inner.store.run_end(&run_id).unwrap(),
            Some((Some(FinishReason::EndTurn), None))
        );
        let entries = inner.store.messages_after(&session_id, 0, 10).unwrap();
        let turn: Vec<_> = entries.iter().map(|e| (e.role, e.blocks.clone())).collect();
        assert_eq!(
            turn,
            vec![(
                Role::User,
                vec![Block::Interjection {
                    pending_id: queued.id,
                    text: "and this".into(),
                    promoted: true,
                }]
            )]
        );
        assert!(inner.store.open_pending(&session_id).unwrap().is_empty());
        // The next run holds the session, here and in the store, and started after the end
        // was told.
        let (live, leased) = holder(&inner, &session_id);
        assert!(
            live.as_ref().is_some_and(|next| next != &run_id),
            "{live:?}"
        );
        assert_eq!(leased, live);
        assert_eq!(
            seen.of(&session_id),
            [
                "messageCompleted",
                "interjectionPromoted",
                "told",
                "runStarted"
            ]
        );
    }

    #[tokio::test]
    async fn a_recorded_end_without_a_queue_gives_the_session_back() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, seen) = runtime(&dir);
        let (session_id, run_id) = live_run(&inner);

        let recorded = inner.end_run(
            ending(&session_id, &run_id),
            || finish(&inner, &run_id),
            told(&seen, &session_id),
        );

        assert!(recorded);
        assert_eq!(holder(&inner, &session_id), (None, None));
        assert_eq!(seen.of(&session_id), ["told"]);
    }

    #[tokio::test]
    async fn a_shutdown_leaves_the_queue_for_the_next_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, seen) = runtime(&dir);
        let (session_id, run_id) = live_run(&inner);
        inner
            .store
            .insert_pending(&session_id, &run_id, None, "later")
            .unwrap();

        let shutdown = Ending {
            shutting_down: true,
            ..ending(&session_id, &run_id)
        };
        assert!(inner.end_run(
            shutdown,
            || finish(&inner, &run_id),
            told(&seen, &session_id)
        ));

        assert_eq!(holder(&inner, &session_id), (None, None));
        let open: Vec<String> = inner
            .store
            .open_pending(&session_id)
            .unwrap()
            .into_iter()
            .map(|row| row.text)
            .collect();
        assert_eq!(open, ["later"]);
        assert_eq!(seen.of(&session_id), ["told"]);
    }

    #[tokio::test]
    async fn a_recorded_end_of_a_delegated_task_resumes_the_parent_waiting_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, seen) = runtime(&dir);
        let (child_id, child_run) = live_run(&inner);
        let (parent_id, parent_run) = waiting_parent(&inner, &child_id);

        let recorded = inner.end_run(
            ending(&child_id, &child_run),
            || {
                // The parent is claimed before the end is recorded.
                assert_eq!(
                    holder(&inner, &parent_id),
                    (Some(parent_run.clone()), Some(parent_run.clone()))
                );
                finish(&inner, &child_run)
            },
            told(&seen, &child_id),
        );

        assert!(recorded);
        assert_eq!(holder(&inner, &child_id), (None, None));
        // Resumed: its run is started again, holding the parent session.
        assert_eq!(
            holder(&inner, &parent_id),
            (Some(parent_run.clone()), Some(parent_run))
        );
        assert_eq!(seen.of(&parent_id), ["runStarted"]);
    }

    #[tokio::test]
    async fn an_end_not_recorded_keeps_the_lease_and_the_queue_and_gives_the_parent_back() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, seen) = runtime(&dir);
        let (child_id, child_run) = live_run(&inner);
        let (parent_id, parent_run) = waiting_parent(&inner, &child_id);
        inner
            .store
            .insert_pending(&child_id, &child_run, None, "kept")
            .unwrap();

        let recorded = inner.end_run(
            ending(&child_id, &child_run),
            || false,
            told(&seen, &child_id),
        );

        assert!(!recorded);
        // The run leaves the table but keeps its lease and its queue until its end is
        // recorded; the parent, claimed, is given back and stays suspended.
        assert_eq!(holder(&inner, &child_id), (None, Some(child_run.clone())));
        assert_eq!(inner.store.open_pending(&child_id).unwrap().len(), 1);
        assert_eq!(inner.store.run_end(&child_run).unwrap(), Some((None, None)));
        assert_eq!(holder(&inner, &parent_id), (None, None));
        assert_eq!(
            inner.store.run_end(&parent_run).unwrap(),
            Some((None, None))
        );
        assert_eq!(seen.of(&child_id), ["told"]);
        assert_eq!(seen.of(&parent_id), Vec::<String>::new());
    }

    #[tokio::test]
    async fn the_heartbeat_records_a_kept_end_by_the_same_path() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, seen) = runtime(&dir);
        let (child_id, child_run) = live_run(&inner);
        let (parent_id, parent_run) = waiting_parent(&inner, &child_id);
        inner
            .store
            .insert_pending(&child_id, &child_run, None, "next")
            .unwrap();
        // The run ended while the database refused its answer and its end.
        let answer = NewMessage::new(
            &child_id,
            Some(&child_run),
            Role::Assistant,
            vec![Block::Text {
                text: "found it".into(),
            }],
        );
        assert!(!inner.end_run(ending(&child_id, &child_run), || false, || {}));
        inner.defer_end(DeferredEnd {
            session_id: child_id.clone(),
            run_id: child_run.clone(),
            messages: vec![answer],
            reason: FinishReason::Stopped,
            error: None,
        });

        inner.record_deferred_ends();

        assert!(lock(&inner.deferred_ends).is_empty());
        assert_eq!(
            inner.store.run_end(&child_run).unwrap(),
            Some((Some(FinishReason::Stopped), None))
        );
        let roles: Vec<Role> = inner
            .store
            .messages_after(&child_id, 0, 10)
            .unwrap()
            .into_iter()
            .map(|e| e.role)
            .collect();
        assert_eq!(roles, [Role::Assistant, Role::User]);
        let (live, leased) = holder(&inner, &child_id);
        assert!(
            live.as_ref().is_some_and(|next| next != &child_run),
            "{live:?}"
        );
        assert_eq!(leased, live);
        assert_eq!(
            holder(&inner, &parent_id),
            (Some(parent_run.clone()), Some(parent_run))
        );
        // The kept answer, then the promoted turn and the run that answers it, each also
        // forwarded to the parent's clients; then the parent resumes.
        let child_events = [
            "messageCompleted",
            "messageCompleted",
            "interjectionPromoted",
            "runStarted",
        ];
        assert_eq!(seen.of(&child_id), child_events);
        assert_eq!(
            seen.of(&parent_id),
            [
                "delegation",
                "delegation",
                "delegation",
                "delegation",
                "runStarted"
            ]
        );
    }

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
