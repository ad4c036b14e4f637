//! The composer's methods: send, stop, resume, and answering approvals.

use super::run::{RunStart, spawn_run};
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::permissions::{List, Origin, Rule, answers};
use crate::protocol::*;
use crate::store::{Answer, ApprovalOutcome, CancelOutcome, EarlierSend, NewMessage};
use crate::util::new_id;

/// What a send found: a run at work, which queued the text, or the session claimed (and its
/// lease taken) for a new run.
enum Claimed {
    Queued(ChatSendResult),
    Run {
        run_id: String,
        signals: super::registry::RunSignals,
    },
}

/// Refuses a message over [`MAX_MESSAGE_BYTES`] (one whose texts are each within it, but not
/// together; a single text past it was refused as it was read).
fn check_size(params: &ChatSendParams) -> RuntimeResult<()> {
    let size = params.text.len()
        + params
            .attachments
            .iter()
            .map(|a| a.name.len() + a.text.len())
            .sum::<usize>();
    if size > MAX_MESSAGE_BYTES {
        return Err(RuntimeError::InvalidParams(format!(
            "the message is too large: its text and attachments hold {size} bytes, over the \
             limit of {MAX_MESSAGE_BYTES} bytes (8 MiB); send less, or attach a smaller part"
        )));
    }
    Ok(())
}

/// A custom command's turn: the block stored with the typed text, and the model its front
/// matter names for the turn, if any.
struct CommandTurn {
    block: Block,
    model: Option<String>,
}

/// How often a send decides again because the session's lease changed hands meanwhile.
const MAX_LEASE_RACES: usize = 4;

const ATTACHMENTS_WAIT: &str = "attachments wait for the next turn: a run is working, so send the text alone now \
                     and attach the files once the run has finished";

impl Runtime {
    /// The composer always sends: a new turn that starts a run, or, while a run works, an
    /// interjection queued for the run's next delivery point.
    ///
    /// The input is written by a task of its own. While that task waits for a database another
    /// program holds, the send answers `kept` (with a notice saying why) instead of waiting:
    /// the task stores the input once the database is free, however long that takes, in the
    /// order the session's input came, and a retry with the same `clientMessageId` finds it
    /// there. Nothing the user typed is dropped for a lock, and the client is told so.
    pub async fn send(&self, params: ChatSendParams) -> RuntimeResult<ChatSendResult> {
        self.send_as(params, true).await
    }

    /// [`Runtime::send`] for a caller that has no use for `kept` (ACP, whose prompt is answered
    /// when the turn that took it ends): answered once the input is stored, or refused when the
    /// database stays locked past the lock wait, saying nothing was saved.
    pub async fn send_stored(&self, params: ChatSendParams) -> RuntimeResult<ChatSendResult> {
        self.send_as(params, false).await
    }

    async fn send_as(
        &self,
        params: ChatSendParams,
        may_keep: bool,
    ) -> RuntimeResult<ChatSendResult> {
        check_size(&params)?;
        let session = self.session_row(&params.session_id)?;
        if params.text.trim().is_empty() {
            return Err(RuntimeError::InvalidParams("the message is empty".into()));
        }
        let mut custom = None;
        if let Some(command) = super::commands::parse(&params.text) {
            match self.custom_command(&session, &command) {
                Some(file) => {
                    if self.inner.runs.active_run(&session.id).is_some() {
                        return Err(RuntimeError::InvalidParams(format!(
                            "/{} waits for the next turn: a run is working, so send it once the run has finished",
                            file.name
                        )));
                    }
                    custom = Some(self.command_turn(&session, file, command.argument)?);
                }
                None => return self.command(&session, command, &params.text).await,
            }
        }
        let turn_model = custom
            .as_ref()
            .and_then(|c| c.model.as_deref())
            .unwrap_or(&session.model);
        let images = super::images::check_send(turn_model, &params.images)?;
        if !may_keep {
            let turn = self.inner.runs.send_turn(&session.id);
            let _turn = turn.lock().await;
            return self.send_now(session, params, custom, images).await;
        }
        let session_id = session.id.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        let runtime = self.clone();
        tokio::spawn(crate::store::until_free(async move {
            let turn = runtime.inner.runs.send_turn(&session.id);
            let _turn = turn.lock().await;
            let session_id = session.id.clone();
            let sent = runtime.send_now(session, params, custom, images).await;
            // The client was answered `kept` meanwhile: a failure is news to it.
            if let Err(Err(e)) = answer.send(sent) {
                runtime.tell_not_sent(&session_id, &e);
            }
        }));
        tokio::select! {
            biased;
            sent = answered => sent.map_err(|_| {
                RuntimeError::Internal("the send ended without an answer".into())
            })?,
            () = super::locked::lock_held(&self.inner.store) => {
                self.tell_locked(&session_id);
                Ok(ChatSendResult {
                    run_id: None,
                    message_id: None,
                    queued: false,
                    pending_id: None,
                    kept: true,
                })
            }
        }
    }

    /// The turn a custom command file makes of what was typed after it. A `model` its front
    /// matter names must be one the session's account knows: else the send is refused, naming
    /// the model and the file, before anything is stored.
    fn command_turn(
        &self,
        session: &crate::store::SessionRow,
        file: super::custom_commands::CustomCommand,
        argument: &str,
    ) -> RuntimeResult<CommandTurn> {
        if let Some(model) = &file.model
            && !self.knows_model(session, model)
        {
            return Err(RuntimeError::InvalidParams(format!(
                "model: the command file {} names the model {model:?}, which the account {} does not know (it is in neither the context window table, the price table nor the account's configuration); correct the file's front matter",
                file.path.display(),
                session.account
            )));
        }
        Ok(CommandTurn {
            block: Block::Command {
                prompt: super::custom_commands::expand(&file.body, argument),
                name: file.name,
            },
            model: file.model,
        })
    }

    /// Tells the session's clients that input they were told is kept could not be sent after
    /// all (for a reason other than the lock), with a notice.
    fn tell_not_sent(&self, session_id: &str, error: &RuntimeError) {
        tracing::error!(session_id, error = %error, "kept input could not be sent once the database was free");
        let text = format!(
            "Your message was kept while the database was locked, but could not be sent once it was free: {error}"
        );
        if let Err(e) = self
            .inner
            .notice(session_id, None, NoticeLevel::Error, text)
        {
            tracing::error!(session_id, error = %e, "cannot store the notice that kept input was not sent");
        }
    }

    /// [`Runtime::send`] itself, in the session's turn.
    async fn send_now(
        &self,
        session: crate::store::SessionRow,
        mut params: ChatSendParams,
        custom: Option<CommandTurn>,
        images: Vec<crate::images::CheckedImage>,
    ) -> RuntimeResult<ChatSendResult> {
        if params.text.trim_start().starts_with("//") {
            params.text = params.text.trim_start()[1..].to_string();
        }
        let client_id = params.client_message_id.as_deref();
        if let Some(earlier) = self.earlier_answer(&session.id, client_id)? {
            return Ok(earlier);
        }
        // Mentions are read whichever way the text goes: a new turn, or an interjection that
        // carries its attachments into the run (or into the turn it is promoted to).
        let mentioned = self.mentioned(&session, &params.text).await;
        let mentions: Vec<Block> = mentioned
            .attachments
            .into_iter()
            .map(crate::mentions::Attached::into_block)
            .collect();
        let (run_id, signals) = match self.claim_or_queue(&session, &params, &mentions)? {
            Claimed::Queued(queued) => {
                self.tell_mention_notices(&session.id, None, mentioned.notices);
                return Ok(queued);
            }
            Claimed::Run { run_id, signals } => (run_id, signals),
        };
        // A context idle past the session's rollover time starts afresh before this turn.
        if let Err(e) = self.roll_over_if_idle(&session).await {
            self.inner.give_back(&session.id, &run_id);
            return Err(e);
        }
        let mut blocks = vec![Block::Text { text: params.text }];
        let command_model = custom.as_ref().and_then(|c| c.model.clone());
        blocks.extend(custom.map(|c| c.block));
        blocks.extend(mentions);
        blocks.extend(params.attachments.into_iter().map(|a| Block::Attachment {
            name: a.name,
            text: a.text,
            range: None,
            size: None,
            hash: None,
        }));
        match self.store_images(&session.id, &images) {
            Ok(images) => blocks.extend(images),
            Err(e) => {
                self.inner.give_back(&session.id, &run_id);
                return Err(e);
            }
        }
        let mut message = NewMessage::new(&session.id, Some(&run_id), Role::User, blocks);
        message.client_message_id = params.client_message_id;
        let message = match self.inner.commit(message) {
            Ok(message) => message,
            Err(e) => {
                self.inner.give_back(&session.id, &run_id);
                return Err(e);
            }
        };
        self.tell_mention_notices(&session.id, Some(&run_id), mentioned.notices);
        let start = RunStart::answering(session, run_id.clone(), command_model);
        spawn_run(self.inner.clone(), start, signals)?;
        Ok(ChatSendResult {
            run_id: Some(run_id),
            message_id: Some(message.id),
            queued: false,
            pending_id: None,
            kept: false,
        })
    }

    /// Tells why mentions were left as typed, one warning each.
    fn tell_mention_notices(&self, session_id: &str, run_id: Option<&str>, notices: Vec<String>) {
        for why in notices {
            if let Err(e) = self
                .inner
                .notice(session_id, run_id, NoticeLevel::Warning, why)
            {
                tracing::error!(session_id, error = %e, "cannot store a mention's notice");
            }
        }
    }

    /// The files, ranges and folders the text's `@`-mentions name, read below the session's
    /// workspace root; nothing for a session without one (its mentions stay text).
    async fn mentioned(
        &self,
        session: &crate::store::SessionRow,
        text: &str,
    ) -> crate::mentions::Resolved {
        let Some(root) = session.workspace_root.as_deref() else {
            return crate::mentions::Resolved::default();
        };
        if !text.contains('@') {
            return crate::mentions::Resolved::default();
        }
        let workspace = match crate::tools::Workspace::new(std::path::Path::new(root)) {
            Ok(workspace) => workspace,
            Err(e) => {
                return crate::mentions::Resolved {
                    attachments: Vec::new(),
                    notices: vec![format!("The message's @-mentions are left as typed: {e}")],
                };
            }
        };
        let max_bytes = self.inner.config.mentions.max_bytes;
        let text = text.to_string();
        tokio::task::spawn_blocking(move || crate::mentions::resolve(&workspace, &text, max_bytes))
            .await
            .unwrap_or_else(|e| crate::mentions::Resolved {
                attachments: Vec::new(),
                notices: vec![format!("The message's @-mentions are left as typed: {e}")],
            })
    }

    /// While a run works (here, or in another daemon on the same database), queues the text as
    /// an interjection; otherwise claims the session and its lease for a new run. Decided under
    /// the session's own lock ([`super::registry::Registry::deciding`]), never the table of
    /// runs, so a write that waits for a locked database holds up no other session.
    fn claim_or_queue(
        &self,
        session: &crate::store::SessionRow,
        params: &ChatSendParams,
        mentions: &[Block],
    ) -> RuntimeResult<Claimed> {
        // A lease that ends while this send decides (its run just finished elsewhere) means the
        // session is free: decide again.
        for _ in 0..MAX_LEASE_RACES {
            let decided = self
                .inner
                .runs
                .deciding(&session.id, || self.decide_send(session, params, mentions))?;
            if let Some(claimed) = decided {
                return Ok(claimed);
            }
        }
        Err(RuntimeError::Conflict(format!(
            "session {} changed hands between sidechat processes while this message was sent; send it again",
            session.id
        )))
    }

    /// One decision of [`Runtime::claim_or_queue`]; `None` when the lease changed hands
    /// meanwhile. A run ending promotes the queue under the same session lock, so a row is
    /// either queued before that promotion or finds no run and starts one. A queued row keeps
    /// the attachments its `mentions` made.
    fn decide_send(
        &self,
        session: &crate::store::SessionRow,
        params: &ChatSendParams,
        mentions: &[Block],
    ) -> RuntimeResult<Option<Claimed>> {
        let client_id = params.client_message_id.as_deref();
        let store = &self.inner.store;
        let active = self.inner.runs.active_run(&session.id);
        if active.is_none()
            && let Some(lease) = store.foreign_lease(&session.id)?
        {
            return Ok(self
                .queue_elsewhere(&session.id, &lease, params, mentions)?
                .map(Claimed::Queued));
        }
        let working = match active {
            Some(run_id) => Some(run_id),
            None => match store.suspended_run(&session.id)? {
                Some(run) => Some(run.id),
                // A run here that ended while the database was locked keeps its lease until
                // its end is recorded, which hands its queue over to the next run.
                None => match store.lease(&session.id)? {
                    Some(lease)
                        if lease.owner == store.owner()
                            && store.run(&lease.run_id)?.is_some_and(|r| !r.finished) =>
                    {
                        Some(lease.run_id)
                    }
                    _ => None,
                },
            },
        };
        if let Some(working) = working {
            if !params.attachments.is_empty() || !params.images.is_empty() {
                return Err(RuntimeError::InvalidParams(ATTACHMENTS_WAIT.into()));
            }
            let row = match self.inner.queue_announced(&session.id, || {
                store.insert_pending_with(&session.id, &working, client_id, &params.text, mentions)
            }) {
                Ok(row) => row,
                Err(e) => {
                    // A concurrent retry with the same client id got there first.
                    return Ok(Some(Claimed::Queued(
                        self.earlier_answer(&session.id, client_id)?.ok_or(e)?,
                    )));
                }
            };
            self.inner.events.emit(
                store,
                &session.id,
                None,
                Event::InterjectionQueued {
                    pending_id: row.id.clone(),
                    text: row.text,
                },
            );
            return Ok(Some(Claimed::Queued(ChatSendResult {
                run_id: Some(working),
                message_id: None,
                queued: true,
                pending_id: Some(row.id),
                kept: false,
            })));
        }
        self.inner.driver(&session.account)?;
        self.refuse_if_cap_spent(session)?;
        let run_id = new_id("run");
        let signals = self
            .inner
            .runs
            .claim(&session.id, &run_id)
            .map_err(RuntimeError::busy(&session.id))?;
        match self.inner.take_lease(&session.id, &run_id) {
            Ok(Ok(())) => Ok(Some(Claimed::Run { run_id, signals })),
            Ok(Err(lease)) => {
                self.inner.runs.release(&session.id, &run_id);
                Ok(self
                    .queue_elsewhere(&session.id, &lease, params, mentions)?
                    .map(Claimed::Queued))
            }
            Err(e) => {
                self.inner.runs.release(&session.id, &run_id);
                Err(e)
            }
        }
    }

    /// Queues the text for the run another daemon drives, which delivers it (and tells its
    /// clients); `None` when that daemon's lease ended meanwhile. Attachments wait for a new
    /// turn, which the other daemon's run stands in the way of: the refusal names it.
    fn queue_elsewhere(
        &self,
        session_id: &str,
        lease: &crate::store::LeaseRow,
        params: &ChatSendParams,
        mentions: &[Block],
    ) -> RuntimeResult<Option<ChatSendResult>> {
        if !params.attachments.is_empty() || !params.images.is_empty() {
            return Err(RuntimeError::elsewhere(lease));
        }
        let client_id = params.client_message_id.as_deref();
        let row = match self.inner.store.insert_pending_if_leased(
            session_id,
            &lease.run_id,
            client_id,
            &params.text,
            mentions,
        ) {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(None),
            Err(e) => {
                return self
                    .earlier_answer(session_id, client_id)?
                    .ok_or(e.into())
                    .map(Some);
            }
        };
        tracing::info!(session_id, run_id = %lease.run_id, owner = %lease.owner, "queued input for a run another sidechat process drives");
        self.inner.events.emit(
            &self.inner.store,
            session_id,
            None,
            Event::InterjectionQueued {
                pending_id: row.id.clone(),
                text: row.text,
            },
        );
        Ok(Some(ChatSendResult {
            run_id: Some(lease.run_id.clone()),
            message_id: None,
            queued: true,
            pending_id: Some(row.id),
            kept: false,
        }))
    }

    /// A new turn on a session whose spend cap is used up waits until the cap is raised.
    fn refuse_if_cap_spent(&self, session: &crate::store::SessionRow) -> RuntimeResult<()> {
        let Some(cap) = session.cap_usd else {
            return Ok(());
        };
        // Usage without a price cannot count against the cap.
        let cost = self.inner.cost_summary(&session.id)?;
        let spent = cost.total_usd.unwrap_or(0.0);
        if spent >= cap {
            let spent = super::accounting::spent_words(&cost);
            return Err(RuntimeError::BudgetExhausted(format!(
                "the session's spend cap of ${cap:.2} is used up ({spent}); raise capUsd with session/update to continue"
            )));
        }
        Ok(())
    }

    /// The first answer to a send with this client id, if there was one.
    fn earlier_answer(
        &self,
        session_id: &str,
        client_id: Option<&str>,
    ) -> RuntimeResult<Option<ChatSendResult>> {
        let Some(client_id) = client_id else {
            return Ok(None);
        };
        Ok(self
            .inner
            .store
            .earlier_send(session_id, client_id)?
            .map(|earlier| match earlier {
                EarlierSend::Queued { pending_id, run_id } => ChatSendResult {
                    run_id,
                    message_id: None,
                    queued: true,
                    pending_id: Some(pending_id),
                    kept: false,
                },
                EarlierSend::Sent { message_id, run_id } => ChatSendResult {
                    run_id,
                    message_id: Some(message_id),
                    queued: false,
                    pending_id: None,
                    kept: false,
                },
            }))
    }

    /// Withdraws an interjection that has not yet been taken into a model request.
    pub fn cancel_interjection(&self, pending_id: &str) -> RuntimeResult<InterjectionCancelResult> {
        match self.inner.cancel_pending(pending_id)? {
            CancelOutcome::NotFound => Err(RuntimeError::NotFound {
                what: "interjection",
                id: pending_id.to_string(),
            }),
            CancelOutcome::Settled(status) => Ok(InterjectionCancelResult {
                cancelled: status == InterjectionStatus::Cancelled,
                status,
            }),
            CancelOutcome::Cancelled(row) => {
                self.inner.events.emit(
                    &self.inner.store,
                    &row.session_id,
                    None,
                    Event::InterjectionCancelled { pending_id: row.id },
                );
                Ok(InterjectionCancelResult {
                    cancelled: true,
                    status: InterjectionStatus::Cancelled,
                })
            }
        }
    }

    /// Ends the session's run (live, or suspended on an approval after a restart).
    pub async fn stop(&self, session_id: &str) -> RuntimeResult<ChatStopResult> {
        self.session_row(session_id)?;
        if let Some((run_id, mut done)) = self.inner.runs.stop(session_id) {
            // The run stops at once; when recording its end waits for a database another
            // program holds, the answer does not: the end is recorded once the lock clears.
            tokio::select! {
                _ = done.wait_for(|d| *d) => {}
                _ = super::locked::lock_held(&self.inner.store) => {
                    tracing::info!(%run_id, "stopped; the run's end is recorded once the database is free");
                }
            }
            return Ok(ChatStopResult {
                run_id: Some(run_id),
                stopped: true,
            });
        }
        if let Some(lease) = self.inner.store.foreign_lease(session_id)? {
            return self.stop_elsewhere(lease).await;
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

    /// Hands a stop over to the daemon driving the run, through its lease, and waits until
    /// that run has recorded its end; if that daemon dies first, its run is taken over here
    /// once the lease expires.
    async fn stop_elsewhere(&self, lease: crate::store::LeaseRow) -> RuntimeResult<ChatStopResult> {
        let store = &self.inner.store;
        let stopped = ChatStopResult {
            run_id: Some(lease.run_id.clone()),
            stopped: true,
        };
        if !store.request_stop(&lease.session_id, &lease.run_id)? {
            // The lease ended meanwhile: the run finished, or its daemon is gone.
            super::recovery::recover_abandoned(&self.inner)?;
            return Ok(stopped);
        }
        let beat = store.lease_duration() / 4;
        // The owner stops at its next heartbeat; a few leases' time is plenty for a live one.
        for _ in 0..16 {
            tokio::time::sleep(beat).await;
            if store.run(&lease.run_id)?.is_none_or(|r| r.finished) {
                return Ok(stopped);
            }
            if !store.lease(&lease.session_id)?.is_some_and(|l| l.is_live()) {
                super::recovery::recover_abandoned(&self.inner)?;
                if store.run(&lease.run_id)?.is_none_or(|r| r.finished) {
                    return Ok(stopped);
                }
            }
        }
        Err(RuntimeError::Conflict(format!(
            "asked {} to stop run {} of session {}, and it has not stopped yet; it will at its next step",
            lease.describe_owner(),
            lease.run_id,
            lease.session_id
        )))
    }

    /// Answers a user turn that no run answered (e.g. after a crash).
    pub async fn resume(&self, session_id: &str) -> RuntimeResult<ChatResumeResult> {
        let session = self.session_row(session_id)?;
        self.refuse_if_suspended(session_id)?;
        if self.state(&session)? != SessionState::Unanswered {
            return Err(RuntimeError::Conflict(format!(
                "session {session_id} has no unanswered turn to resume"
            )));
        }
        // A custom command's turn runs on the model its front matter named, as its first run
        // did.
        let command_model = match self.inner.store.last_model_message(session_id)? {
            Some(turn) => match turn.run_id {
                Some(run) => self.inner.store.run(&run)?.and_then(|r| r.command_model),
                None => None,
            },
            None => None,
        };
        let run_id = new_id("run");
        let signals = self.inner.claim_run(session_id, &run_id)?;
        let start = RunStart::answering(session, run_id.clone(), command_model);
        spawn_run(self.inner.clone(), start, signals)?;
        Ok(ChatResumeResult { run_id })
    }

    pub async fn respond_approval(
        &self,
        params: ApprovalRespondParams,
    ) -> RuntimeResult<ApprovalRespondResult> {
        if params.decision == ApprovalDecision::Cancelled {
            return Err(RuntimeError::InvalidParams(
                "decision must be allow, allowAlways, allowWorkspace or deny; cancelled is set by chat/stop".into(),
            ));
        }
        let answer = self.answer_of(&params)?;
        let store = &self.inner.store;
        let answering = crate::util::lock_off_worker(&self.inner.answering);
        match store.resolve_approval(&params.approval_id, &answer)? {
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
                drop(answering);
                // A run another daemon drives reads the answer on that daemon's next heartbeat.
                if !self.inner.runs.poke_approvals(&row.session_id)
                    && store.foreign_lease(&row.session_id)?.is_none()
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

    /// The answer `approval/respond` records: a deny's reason, and for `allowWorkspace` the
    /// rule to save (the one sent, or else the one proposed), checked like a config file's.
    fn answer_of(&self, params: &ApprovalRespondParams) -> RuntimeResult<Answer> {
        let reason = params
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        if reason.is_some() && params.decision != ApprovalDecision::Deny {
            return Err(RuntimeError::InvalidParams(
                "reason: only a deny takes a reason (it tells the model why)".into(),
            ));
        }
        let mut answer = Answer::plain(params.decision);
        answer.reason = reason.map(String::from);
        if params.decision != ApprovalDecision::AllowWorkspace {
            if params.rule.is_some() {
                return Err(RuntimeError::InvalidParams(
                    "rule: only allowWorkspace takes a rule (the one to save for the workspace)"
                        .into(),
                ));
            }
            return Ok(answer);
        }
        let store = &self.inner.store;
        let Some((session_id, proposed)) = store.approval_proposal(&params.approval_id)? else {
            return Err(RuntimeError::NotFound {
                what: "approval",
                id: params.approval_id.clone(),
            });
        };
        let session = self.session_row(&session_id)?;
        let Some(root) = session.workspace_root.as_deref() else {
            return Err(RuntimeError::InvalidParams(format!(
                "decision: allowWorkspace needs a workspace, and session {session_id} has none; answer allow or allowAlways"
            )));
        };
        let Some(text) = params.rule.clone().or(proposed) else {
            return Err(RuntimeError::InvalidParams(
                "rule: this call proposes no rule (its path is outside the workspace); give the rule to save".into(),
            ));
        };
        let rule = Rule::parse(&text, List::Allow, Origin::Workspace(String::new()))
            .map_err(|e| RuntimeError::InvalidParams(format!("rule: {e}")))?;
        answer.workspace_rule = Some((
            answers::workspace_key(std::path::Path::new(root)),
            rule.text().to_string(),
        ));
        Ok(answer)
    }

    /// A run left waiting for an approval by a previous daemon, with no live task here or in
    /// another daemon.
    fn suspended_run(&self, session_id: &str) -> RuntimeResult<Option<crate::store::RunRow>> {
        if self.inner.runs.active_run(session_id).is_some()
            || self.inner.store.foreign_lease(session_id)?.is_some()
        {
            return Ok(None);
        }
        Ok(self.inner.store.suspended_run(session_id)?)
    }

    /// Refuses work that needs the session to itself while a run waits for an approval, or
    /// while another daemon drives one (the refusal names it).
    pub(super) fn refuse_if_suspended(&self, session_id: &str) -> RuntimeResult<()> {
        if let Some(lease) = self.inner.store.foreign_lease(session_id)? {
            return Err(RuntimeError::elsewhere(&lease));
        }
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
        let signals = self.inner.claim_run(&session.id, &run.id)?;
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
