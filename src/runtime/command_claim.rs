//! A command's hold on a session while it changes what the model sees: a rewind, a
//! compaction, a new context.
//!
//! No run starts while the command works, so a send meanwhile is queued for the hold as it
//! would be for a run (stored at once, shown as queued). A hold is no run, though: nothing
//! delivers its queue between tool results. When the hold ends, whether the command succeeded
//! or not, what was queued becomes the next user turn and a run answers it, as a run's end
//! promotes its queue. Without this the input stayed queued for a run that never was, and
//! nothing ever answered it.

use std::sync::Arc;

use super::registry::RunSignals;
use super::{Inner, RuntimeError, RuntimeResult};
use crate::util::new_id;

/// The session, held for one command until dropped. Dropped after the command's own note is
/// in the transcript, so input sent meanwhile follows it.
pub(super) struct CommandClaim {
    inner: Arc<Inner>,
    session_id: String,
    id: String,
}

impl Inner {
    /// Holds the session for a command whose claim ids start with `kind`; busy while a run or
    /// another command holds it.
    pub(super) fn claim_for_command(
        self: &Arc<Self>,
        session_id: &str,
        kind: &str,
    ) -> RuntimeResult<CommandClaim> {
        let id = new_id(kind);
        self.runs
            .claim(session_id, &id)
            .map_err(RuntimeError::busy(session_id))?;
        Ok(CommandClaim {
            inner: self.clone(),
            session_id: session_id.to_string(),
            id,
        })
    }

    /// Under the session's lock, so a send either queued for the hold before this, and is
    /// promoted here, or finds the session free and starts its own turn.
    fn end_command_claim(self: &Arc<Self>, session_id: &str, claim: &str) {
        let next = self.runs.deciding(session_id, || {
            let next = self.promote_after_command(session_id, claim);
            if next.is_none() {
                self.runs.release(session_id, claim);
            }
            next
        });
        if let Some((run_id, signals)) = next {
            self.start_next(session_id, run_id, signals);
        }
    }

    /// Promotes what was queued during the hold into a turn, claimed (registry and lease) for
    /// the run that answers it; `None` when nothing was queued, or when the turn cannot be
    /// started here (the rows then stay queued: another daemon's run, or the next start-up's
    /// recovery, promotes them).
    fn promote_after_command(&self, session_id: &str, claim: &str) -> Option<(String, RunSignals)> {
        match self.store.open_pending(session_id) {
            Ok(rows) if rows.is_empty() => return None,
            Ok(_) => {}
            Err(e) => {
                tracing::error!(session_id, error = %e, "cannot read the input queued during a command");
                return None;
            }
        }
        let run_id = new_id("run");
        match self.take_lease(session_id, &run_id) {
            Ok(Ok(())) => {}
            Ok(Err(lease)) => {
                tracing::info!(session_id, owner = %lease.owner, "input queued during a command waits for the run another sidechat process drives");
                return None;
            }
            Err(e) => {
                tracing::error!(session_id, error = %e, "cannot claim the session for input queued during a command");
                return None;
            }
        }
        let promoted = self.promote_queue(session_id, None).unwrap_or_else(|e| {
            tracing::error!(session_id, error = %e, "cannot promote input queued during a command");
            false
        });
        if promoted && let Ok(signals) = self.runs.replace(session_id, claim, &run_id) {
            return Some((run_id, signals));
        }
        if let Err(e) = self.store.release_lease(session_id, &run_id, false) {
            tracing::warn!(session_id, error = %e, "cannot give back the lease taken for queued input");
        }
        None
    }
}

impl Drop for CommandClaim {
    fn drop(&mut self) {
        self.inner.end_command_claim(&self.session_id, &self.id);
    }
}
