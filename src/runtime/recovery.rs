//! Start-up repair of what a stopped daemon left behind.
//!
//! A run waiting for an approval stays suspended: the approval is still pending and answering
//! it continues the run. A run whose approval was answered through another daemon, which
//! stopped before it read the answer, or whose delegated task ended before it took the
//! answer, is resumed here and acts on it. Any other unfinished run
//! is closed as interrupted, and its tool calls without a result get a synthetic one, so the
//! transcript stays replayable to any provider.
//!
//! A command a killed daemon was running is ended here: whatever it left is killed (see
//! [`crate::lifetime`]).
//!
//! Another daemon may share the database: its live runs (those with a live lease) are left
//! alone, here at start-up and on every heartbeat, when a run whose daemon was killed is
//! taken over once its lease has expired.

use std::sync::Arc;

use super::promotion::promoted_turn;
use super::run::{RunStart, spawn_run};
use super::tool_phase::result_blocks;
use super::{Inner, RuntimeError, RuntimeResult};
use crate::protocol::{Block, FinishReason, NoticeLevel, Role};
use crate::store::{LeaseClaim, NewMessage, RunRow, Store, StoreError};
use crate::util::new_id;

const INTERRUPTED_RUN: &str = "interrupted: sidechat stopped during the run";
const INTERRUPTED: &str =
    "Interrupted: sidechat stopped before this tool call finished, so its outcome is unknown.";

/// Start-up: ends what commands of killed daemons left running, and repairs every run and
/// queue no live daemon drives.
pub fn recover(inner: &Arc<Inner>) -> RuntimeResult<()> {
    end_left_commands(&inner.store)?;
    super::rewind::finish_open_rewinds(&inner.store)?;
    recover_abandoned(inner)
}

/// Kills what the commands of daemons that are gone (killed, so they could not end them
/// themselves) left running, and forgets those commands. Also on every heartbeat, for a
/// daemon killed while this one runs.
pub fn end_left_commands(store: &Store) -> RuntimeResult<()> {
    for row in store.commands_left()? {
        tracing::info!(
            pgid = row.command.pgid,
            daemon = %row.owner,
            "ending what a command of a stopped sidechat process left running"
        );
        crate::lifetime::end_left(&row.command);
        store.forget_command(&row.command.tag)?;
    }
    Ok(())
}

/// Closes the open runs nobody drives (no live lease: their daemon stopped, or was killed and
/// its lease expired) and promotes input stranded without a run. A run another daemon drives,
/// or this one, is left alone; so is a run suspended on an approval. Each repair holds the
/// session's lease while it writes, so no daemon starts a run in the middle of it.
pub fn recover_abandoned(inner: &Arc<Inner>) -> RuntimeResult<()> {
    let store = &inner.store;
    // Newest first: a delegated task's run is closed before its parent's run is looked at,
    // which waits for it only while it is open.
    for run in store.abandoned_runs()?.into_iter().rev() {
        if inner.runs.active_run(&run.session_id).is_some() {
            continue;
        }
        if is_suspended(store, &run)? {
            tracing::debug!(run_id = %run.id, "run stays suspended on a pending approval");
            continue;
        }
        if store.has_answer_not_acted_on(&run.session_id, &run.id)?
            || store.awaits_ended_child(&run.session_id, &run.id)?
        {
            if let Err(e) = resume_taken_over(inner, run) {
                tracing::debug!(error = %e, "cannot resume a run taken over yet; the next heartbeat tries again");
            }
            continue;
        }
        match store.acquire_lease(&run.session_id, &run.id)? {
            LeaseClaim::Held(_) => continue,
            LeaseClaim::Taken { .. } => {}
        }
        let closed = close_run(store, &run);
        store.expire_lease(&run.session_id, &run.id)?;
        closed?;
    }
    promote_stranded_input(inner)
}

/// Resumes a run its daemon left with something to act on: an approval answered through
/// another daemon before the owner read it, or a delegated task that ended before the run
/// took its answer. It goes on as if its daemon had not stopped. Needs the async runtime to
/// run on; without one (never so in the daemon) the run waits for the next heartbeat.
fn resume_taken_over(inner: &Arc<Inner>, run: RunRow) -> RuntimeResult<()> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(());
    }
    let session = inner
        .store
        .session(&run.session_id)?
        .ok_or_else(|| RuntimeError::SessionNotFound(run.session_id.clone()))?;
    let signals = inner.claim_run(&session.id, &run.id)?;
    tracing::info!(run_id = %run.id, "resuming a run its stopped daemon left with an answer to act on");
    spawn_run(inner.clone(), RunStart::Resume { session, run }, signals)
}

/// Whether the run waits for an approval (and so stays open until it is answered): its own,
/// or one its delegated task waits for.
pub fn is_suspended(store: &Store, run: &RunRow) -> RuntimeResult<bool> {
    Ok(store
        .suspended_run(&run.session_id)?
        .is_some_and(|r| r.id == run.id))
}

/// Closes a run nobody drives as interrupted: each tool call without a result gets a
/// synthetic one, so the transcript stays replayable. The caller holds the session's lease.
pub fn close_run(store: &Store, run: &RunRow) -> RuntimeResult<()> {
    if let Some(last) = store.last_model_message(&run.session_id)?
        && last.role == Role::Assistant
        && last
            .blocks
            .iter()
            .any(|b| matches!(b, Block::ToolCall { .. }))
    {
        for call in store.tool_calls_of_message(&last.id)? {
            if call.output.is_none() {
                store.set_tool_call_result(
                    &run.session_id,
                    &call.id,
                    crate::protocol::ToolCallStatus::Error,
                    INTERRUPTED,
                    true,
                )?;
            }
        }
        let calls = store.tool_calls_of_message(&last.id)?;
        let mut blocks = result_blocks(&calls);
        // An image a finished call read (`read_file`) stays the model's to see.
        blocks.extend(store.tool_call_images(&last.id)?);
        let message = NewMessage::new(&run.session_id, Some(&run.id), Role::Tool, blocks);
        append_quietly(store, message)?;
    }
    let notice = NewMessage::new(
        &run.session_id,
        Some(&run.id),
        Role::Notice,
        vec![Block::Notice {
            level: NoticeLevel::Error,
            text: INTERRUPTED_RUN.into(),
        }],
    );
    append_quietly(store, notice)?;
    store.finish_run(&run.id, FinishReason::Error, Some(INTERRUPTED_RUN))?;
    tracing::info!(run_id = %run.id, "closed a run interrupted by a stop of its daemon");
    Ok(())
}

/// Input queued for a run that will never deliver it becomes the session's next user turn,
/// not run automatically: the session reports `unanswered` and `chat/resume` answers it. A run
/// still suspended on an approval keeps its queue for its own next delivery point, and a run
/// a daemon still drives delivers its own.
fn promote_stranded_input(inner: &Inner) -> RuntimeResult<()> {
    let store = &inner.store;
    for session_id in store.sessions_with_open_pending()? {
        if inner.runs.active_run(&session_id).is_some()
            || store.lease(&session_id)?.is_some_and(|l| l.is_live())
        {
            continue;
        }
        let suspended = store.suspended_run(&session_id)?.is_some();
        if suspended {
            store.unlease_all(&session_id)?;
            continue;
        }
        let claim = new_id("rcv");
        match store.acquire_lease(&session_id, &claim)? {
            LeaseClaim::Held(_) => continue,
            LeaseClaim::Taken { .. } => {}
        }
        let promoted = match promoted_turn(&session_id, store.open_pending(&session_id)?) {
            Some(message) => append_quietly(store, message).map(|()| true),
            None => Ok(false),
        };
        store.release_lease(&session_id, &claim, false)?;
        if promoted? {
            tracing::info!(session_id, "promoted input a stopped daemon left queued");
        }
    }
    Ok(())
}

/// Commits without an event: no client is connected yet; the transcript tells it later. The
/// message is numbered past every `seq` the stopped daemon may have handed out.
fn append_quietly(store: &Store, mut message: NewMessage) -> RuntimeResult<()> {
    // Another daemon's commit can take the number first; a few tries settle it.
    let mut tries = 0;
    loop {
        message.seq = store
            .session(&message.session_id)?
            .map_or(1, |s| s.next_free_seq());
        match store.append_message(&message) {
            Err(StoreError::StaleSeq(_)) if tries < 8 => tries += 1,
            written => return written.map(|_| ()).map_err(Into::into),
        }
    }
}
