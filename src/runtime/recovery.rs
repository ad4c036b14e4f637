//! Start-up repair of what a stopped daemon left behind.
//!
//! A run waiting for an approval stays suspended: the approval is still pending and answering
//! it continues the run. Any other unfinished run is closed as interrupted, and its tool calls
//! without a result get a synthetic one, so the transcript stays replayable to any provider.

use super::promotion::promoted_turn;
use super::tool_phase::result_blocks;
use super::{Inner, RuntimeResult};
use crate::protocol::{Block, FinishReason, NoticeLevel, Role};
use crate::store::{NewMessage, Store};

const INTERRUPTED_RUN: &str = "interrupted: sidechat stopped during the run";
const INTERRUPTED: &str =
    "Interrupted: sidechat stopped before this tool call finished, so its outcome is unknown.";

pub fn recover(inner: &Inner) -> RuntimeResult<()> {
    let store = &inner.store;
    for run in store.open_runs()? {
        let suspended = store
            .pending_approvals(&run.session_id)?
            .iter()
            .any(|a| a.run_id == run.id);
        if suspended {
            tracing::info!(run_id = %run.id, "run stays suspended on a pending approval");
            continue;
        }
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
            let message = NewMessage::new(
                &run.session_id,
                Some(&run.id),
                Role::Tool,
                result_blocks(&calls),
            );
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
        tracing::info!(run_id = %run.id, "closed a run interrupted by a stop of the daemon");
    }
    promote_stranded_input(store)
}

/// Input queued for a run that will never deliver it becomes the session's next user turn,
/// not run automatically: the session reports `unanswered` and `chat/resume` answers it. A run
/// still suspended on an approval keeps its queue for its own next delivery point.
fn promote_stranded_input(store: &Store) -> RuntimeResult<()> {
    for session_id in store.sessions_with_open_pending()? {
        let suspended = store.suspended_run(&session_id)?.is_some();
        if suspended {
            store.unlease_all(&session_id)?;
            continue;
        }
        let Some(message) = promoted_turn(&session_id, store.open_pending(&session_id)?) else {
            continue;
        };
        append_quietly(store, message)?;
        tracing::info!(session_id, "promoted input a stopped daemon left queued");
    }
    Ok(())
}

/// Commits without an event: no client is connected yet; the transcript tells it later. The
/// message is numbered past every `seq` the stopped daemon may have handed out.
fn append_quietly(store: &Store, mut message: NewMessage) -> RuntimeResult<()> {
    message.seq = store
        .session(&message.session_id)?
        .map_or(1, |s| s.next_free_seq());
    store.append_message(&message)?;
    Ok(())
}
