//! Start-up repair of what a stopped daemon left behind.
//!
//! A run waiting for an approval stays suspended: the approval is still pending and answering
//! it continues the run. Any other unfinished run is closed as interrupted, and its tool calls
//! without a result get a synthetic one, so the transcript stays replayable to any provider.

use super::tool_phase::result_blocks;
use super::{Inner, RuntimeResult};
use crate::protocol::{Block, FinishReason, MessageStatus, Role};
use crate::store::NewMessage;

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
            let session = store.session(&run.session_id)?;
            let seq = session.map(|s| s.last_seq).unwrap_or(0) + 1;
            // No client is connected yet: commit quietly; the transcript tells it later.
            store.append_message(&NewMessage {
                id: None,
                session_id: run.session_id.clone(),
                seq,
                run_id: Some(run.id.clone()),
                role: Role::Tool,
                blocks: result_blocks(&calls),
                status: MessageStatus::Complete,
            })?;
        }
        store.finish_run(
            &run.id,
            FinishReason::Error,
            Some("interrupted: sidechat stopped during the run"),
        )?;
        tracing::info!(run_id = %run.id, "closed a run interrupted by a stop of the daemon");
    }
    Ok(())
}
