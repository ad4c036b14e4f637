//! Expiry of delegated approvals.
//!
//! A sub-agent's approval waits for a person who may have moved on; left open, it would keep
//! the parent's run suspended for ever. A sweep denies, as expired, every approval a child
//! session has waited on for longer than the configured time (`delegated_approval_expiry`,
//! default one hour), on a thread of its own like the lease heartbeat. The child then ends, and
//! the parent's `delegate` call fails with the expiry as its reason. The sweep marks the
//! approval `resolved_by = "expired"`, which is how the child's end tells an expiry from a
//! person's denial.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::super::run::{RunStart, spawn_run};
use super::super::{Inner, RuntimeError, RuntimeResult};
use crate::protocol::{ApprovalDecision, Event};

/// How often the sweep looks: a quarter of the expiry, within these bounds.
const MIN_SWEEP: Duration = Duration::from_millis(250);
const MAX_SWEEP: Duration = Duration::from_secs(60);

/// Starts the sweep, unless expiry is off. It ends with the runtime.
pub(in crate::runtime) fn start_sweep(inner: &Arc<Inner>) {
    let Some(expiry) = inner.config.budget.delegated_approval_expiry else {
        return;
    };
    let every = (expiry / 4).clamp(MIN_SWEEP, MAX_SWEEP);
    let weak: Weak<Inner> = Arc::downgrade(inner);
    // Children resumed to take their expiry run on the runtime the daemon serves from.
    let handle = tokio::runtime::Handle::try_current().ok();
    let started = std::thread::Builder::new()
        .name("sidechat-expiry".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let _entered = handle.as_ref().map(|h| h.enter());
                if let Err(e) = sweep(&inner, expiry) {
                    tracing::warn!(error = %e, "cannot expire delegated approvals");
                }
            }
        });
    if let Err(e) = started {
        tracing::error!(error = %e, "cannot start the sweep of delegated approvals");
    }
}

/// Denies, as expired, the delegated approvals older than `expiry`, and wakes (or resumes)
/// the child runs that wait for them.
fn sweep(inner: &Arc<Inner>, expiry: Duration) -> RuntimeResult<()> {
    let before = crate::util::now_ms() - expiry.as_millis() as i64;
    for row in inner.store.expire_delegated_approvals(before)? {
        tracing::info!(approval_id = %row.id, session_id = %row.session_id, "a delegated approval expired");
        if inner.runs.poke_approvals(&row.session_id) {
            // The live run tells its clients when it reads the answer.
            continue;
        }
        inner.events.emit(
            &inner.store,
            &row.session_id,
            Some(&row.run_id),
            Event::ApprovalResolved {
                approval_id: row.id.clone(),
                decision: ApprovalDecision::Deny,
            },
        );
        if let Err(e) = resume(inner, &row.session_id, &row.run_id) {
            tracing::error!(run_id = %row.run_id, error = %e, "cannot resume a child run whose approval expired");
        }
    }
    Ok(())
}

/// Resumes a child run suspended on the approval that expired (a restart came while it waited).
fn resume(inner: &Arc<Inner>, session_id: &str, run_id: &str) -> RuntimeResult<()> {
    let Some(run) = inner.store.run(run_id)?.filter(|r| !r.finished) else {
        return Ok(());
    };
    let session = inner
        .store
        .session(session_id)?
        .ok_or_else(|| RuntimeError::SessionNotFound(session_id.to_string()))?;
    let signals = super::claim(inner, session_id, run_id)?;
    spawn_run(inner.clone(), RunStart::Resume { session, run }, signals)
}
