//! Expiry of delegated approvals.
//!
//! A sub-agent's approval waits for a person who may have moved on; left open, it would keep
//! the parent's run suspended for ever. A sweep denies, as expired, every approval a child
//! session has waited on for longer than the configured time (`delegated_approval_expiry`,
//! default one hour), on a thread of its own like the lease heartbeat. The child then ends, and
//! the parent's `delegate` call fails with the expiry as its reason. The sweep marks the
//! approval `resolved_by = "expired"`, which is how the child's end tells an expiry from a
//! person's denial.

use std::sync::Arc;
use std::time::Duration;

use super::super::periodic::spawn_periodic;
use super::super::run::{RunStart, spawn_run};
use super::super::{Inner, RuntimeError, RuntimeResult};
use crate::protocol::{ApprovalDecision, Event};
use crate::store::ApprovalRow;

/// How often the sweep looks: a quarter of the expiry, within these bounds.
const MIN_SWEEP: Duration = Duration::from_millis(250);
const MAX_SWEEP: Duration = Duration::from_secs(60);

/// Starts the sweep, unless expiry is off. It ends with the runtime.
pub(in crate::runtime) fn start_sweep(inner: &Arc<Inner>) {
    let Some(expiry) = inner.config.budget.delegated_approval_expiry else {
        return;
    };
    let every = (expiry / 4).clamp(MIN_SWEEP, MAX_SWEEP);
    spawn_periodic("sidechat-expiry", every, inner, move |inner| {
        if let Err(e) = sweep(inner, expiry) {
            tracing::warn!(error = %e, "cannot expire delegated approvals");
        }
    });
}

/// Denies, as expired, the delegated approvals older than `expiry` whose runs can take the
/// answer now; the others stay pending for a later sweep.
fn sweep(inner: &Arc<Inner>, expiry: Duration) -> RuntimeResult<()> {
    let before = crate::util::now_ms() - expiry.as_millis() as i64;
    for row in inner.store.expirable_delegated_approvals(before)? {
        if let Err(e) = expire(inner, &row) {
            tracing::debug!(approval_id = %row.id, error = %e, "cannot expire a delegated approval yet; the next sweep tries again");
        }
    }
    Ok(())
}

/// Expires one approval where the run waiting for it takes the answer:
/// - a run of this daemon waits live: it is woken, reads the answer and tells its clients;
/// - another daemon drives the session: nothing here (that daemon's own sweep expires it, and
///   a daemon that died holding the lease leaves it pending until the lease ends);
/// - the run is suspended (a restart came while it waited, or it expired while no daemon
///   ran): the session's run and lease are taken first, then the answer is written and the
///   run resumed. Taking them first means the heartbeat's recovery never finds the run no
///   longer waiting and closes it as interrupted, and when they cannot be had the approval
///   stays pending, so the next sweep tries again.
fn expire(inner: &Arc<Inner>, row: &ApprovalRow) -> RuntimeResult<()> {
    if inner.runs.active_run(&row.session_id).is_some() {
        if inner.store.expire_approval(&row.id)? {
            tracing::info!(approval_id = %row.id, session_id = %row.session_id, "a delegated approval expired");
            inner.runs.poke_approvals(&row.session_id);
        }
        return Ok(());
    }
    if inner.store.foreign_lease(&row.session_id)?.is_some() {
        return Ok(());
    }
    let Some(run) = inner.store.run(&row.run_id)?.filter(|r| !r.finished) else {
        // No run waits for it any more: it only needs closing.
        inner.store.expire_approval(&row.id)?;
        return Ok(());
    };
    let session = inner
        .store
        .session(&row.session_id)?
        .ok_or_else(|| RuntimeError::SessionNotFound(row.session_id.clone()))?;
    let signals = inner.claim_run(&row.session_id, &run.id)?;
    let expired = match inner.store.expire_approval(&row.id) {
        Ok(expired) => expired,
        Err(e) => {
            inner.give_back(&row.session_id, &run.id);
            return Err(e.into());
        }
    };
    if expired {
        tracing::info!(approval_id = %row.id, session_id = %row.session_id, "a delegated approval expired while its run was suspended");
        inner.events.emit(
            &inner.store,
            &row.session_id,
            Some(&row.run_id),
            Event::ApprovalResolved {
                approval_id: row.id.clone(),
                decision: ApprovalDecision::Deny,
            },
        );
    }
    // Expired now, or answered just before: the resumed run reads the answer either way.
    spawn_run(inner.clone(), RunStart::Resume { session, run }, signals)
}
