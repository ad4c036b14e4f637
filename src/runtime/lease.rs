//! Run leases at work: taking one before a run starts, and the heartbeat that keeps this
//! daemon's leases alive and carries what other daemons handed over through the database.
//!
//! Another daemon on the same file never touches a run this one drives: it queues input in
//! `pending_input`, answers approvals in `approvals`, and asks for a stop on the lease row. The
//! heartbeat (four times per lease) renews the leases, tells this daemon's clients of input
//! queued elsewhere, wakes runs waiting for an approval so they read answers given elsewhere,
//! stops runs asked to stop, and takes over runs whose daemon died (their lease expired).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::periodic::spawn_periodic;
use super::registry::RunSignals;
use super::{Inner, RuntimeError, RuntimeResult, recovery};
use crate::protocol::{Event, InterjectionStatus};
use crate::store::{CancelOutcome, LeaseClaim, LeaseRow, PendingRow};
use crate::util::lock;

/// Input queued for this daemon's runs that its clients were told of, by session.
pub type Announced = std::sync::Mutex<HashMap<String, HashSet<String>>>;

impl Inner {
    /// Takes the session's lease for `run_id`, which this daemon is about to drive; `Err` with
    /// the lease of the daemon that drives the session now. A run left by a daemon whose lease
    /// expired is closed as interrupted first.
    pub(super) fn take_lease(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> RuntimeResult<Result<(), LeaseRow>> {
        let displaced = match self.store.acquire_lease(session_id, run_id)? {
            LeaseClaim::Held(lease) => return Ok(Err(lease)),
            LeaseClaim::Taken { displaced } => displaced,
        };
        if let Some(displaced) = displaced.filter(|d| d.run_id != run_id)
            && let Some(run) = self.store.run(&displaced.run_id)?.filter(|r| !r.finished)
            && !recovery::is_suspended(&self.store, &run)?
        {
            tracing::info!(run_id = %run.id, owner = %displaced.owner, "taking over a run whose daemon stopped renewing its lease");
            if let Err(e) = recovery::close_run(&self.store, &run) {
                self.store.release_lease(session_id, run_id, false)?;
                return Err(e);
            }
        }
        Ok(Ok(()))
    }

    /// Claims the session for `run_id` in the registry and takes its lease, or gives both back
    /// and names the daemon that drives the session when another one does.
    pub(super) fn claim_run(&self, session_id: &str, run_id: &str) -> RuntimeResult<RunSignals> {
        let signals = self
            .runs
            .claim(session_id, run_id)
            .map_err(RuntimeError::busy(session_id))?;
        match self.take_lease(session_id, run_id) {
            Ok(Ok(())) => Ok(signals),
            Ok(Err(lease)) => {
                self.runs.release(session_id, run_id);
                Err(RuntimeError::elsewhere(&lease))
            }
            Err(e) => {
                self.runs.release(session_id, run_id);
                Err(e)
            }
        }
    }

    /// Gives up a claim and its lease for a run that did not start.
    pub(super) fn give_back(&self, session_id: &str, run_id: &str) {
        self.runs.release(session_id, run_id);
        if let Err(e) = self.store.release_lease(session_id, run_id, false) {
            tracing::warn!(session_id, error = %e, "cannot give back a run's lease");
        }
    }

    /// Queues input through this daemon (`queue` writes the row) and remembers it as announced
    /// to this daemon's clients under one lock: the heartbeat announces rows it has not seen,
    /// and between the write and the remembering it would announce this one a second time.
    pub(super) fn queue_announced<E>(
        &self,
        session_id: &str,
        queue: impl FnOnce() -> Result<PendingRow, E>,
    ) -> Result<PendingRow, E> {
        let mut announced = lock(&self.announced);
        let row = queue()?;
        announced
            .entry(session_id.to_string())
            .or_default()
            .insert(row.id.clone());
        Ok(row)
    }

    /// Tells this daemon's clients of queued input they have not heard of (queued through
    /// another daemon), before the run delivers it.
    pub(super) fn announce_unseen(&self, session_id: &str, rows: &[PendingRow]) {
        let fresh: Vec<PendingRow> = {
            let mut announced = lock(&self.announced);
            let seen = announced.entry(session_id.to_string()).or_default();
            rows.iter()
                .filter(|row| seen.insert(row.id.clone()))
                .cloned()
                .collect()
        };
        self.tell_queued(session_id, fresh);
    }

    /// Brings this daemon's clients up to date with the input of its run: rows queued through
    /// another daemon are announced, and rows they heard of that were cancelled through another
    /// daemon are announced as cancelled, as a cancel made here is. Read under the memory of
    /// announced rows, which a cancel made here holds while it cancels, so no cancel is
    /// announced twice.
    fn sync_announced(&self, session_id: &str) -> RuntimeResult<()> {
        let (fresh, cancelled) = {
            let mut announced = lock(&self.announced);
            let open = self.store.open_pending(session_id)?;
            let seen = announced.entry(session_id.to_string()).or_default();
            let gone: Vec<String> = seen
                .iter()
                .filter(|id| !open.iter().any(|row| &row.id == *id))
                .cloned()
                .collect();
            let mut cancelled = Vec::new();
            for id in &gone {
                if self.store.pending_status(id)? == Some(InterjectionStatus::Cancelled) {
                    cancelled.push(id.clone());
                }
            }
            seen.retain(|id| !gone.contains(id));
            let fresh: Vec<PendingRow> = open
                .into_iter()
                .filter(|row| seen.insert(row.id.clone()))
                .collect();
            (fresh, cancelled)
        };
        self.tell_queued(session_id, fresh);
        for pending_id in cancelled {
            self.events.emit(
                &self.store,
                session_id,
                None,
                Event::InterjectionCancelled { pending_id },
            );
        }
        Ok(())
    }

    fn tell_queued(&self, session_id: &str, rows: Vec<PendingRow>) {
        for row in rows {
            self.events.emit(
                &self.store,
                session_id,
                None,
                Event::InterjectionQueued {
                    pending_id: row.id,
                    text: row.text,
                },
            );
        }
    }

    /// Cancels queued input through this daemon, forgetting it among the announced rows under
    /// the same lock, so the heartbeat does not announce this cancel a second time.
    pub(super) fn cancel_pending(&self, pending_id: &str) -> RuntimeResult<CancelOutcome> {
        let mut announced = lock(&self.announced);
        let outcome = self.store.cancel_pending(pending_id)?;
        if let CancelOutcome::Cancelled(row) = &outcome
            && let Some(seen) = announced.get_mut(&row.session_id)
        {
            seen.remove(&row.id);
        }
        Ok(outcome)
    }

    /// One heartbeat. Failures are logged: the next beat tries again.
    fn heartbeat(self: &Arc<Self>) {
        self.store_deferred_notices();
        self.record_deferred_ends();
        let held = match self.store.renew_leases() {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew run leases");
                return;
            }
        };
        for lease in held.iter().filter(|l| l.stop_requested) {
            if self.runs.active_run(&lease.session_id).as_deref() == Some(lease.run_id.as_str()) {
                tracing::info!(run_id = %lease.run_id, "another sidechat process asked to stop this run");
                self.runs.stop(&lease.session_id);
            }
        }
        for (session_id, run_id) in self.runs.active() {
            if let Err(e) = self.look_after(&session_id, &run_id) {
                tracing::warn!(session_id, error = %e, "cannot check the run's lease");
            }
        }
        if let Err(e) = recovery::recover_abandoned(self) {
            tracing::warn!(error = %e, "cannot take over runs whose daemon stopped");
        }
        if let Err(e) = recovery::end_left_commands(&self.store) {
            tracing::warn!(error = %e, "cannot end the commands of a stopped sidechat process");
        }
        self.keep_spends();
    }

    /// For one run this daemon drives: stops it if another daemon took it over, announces
    /// input queued through another daemon, and wakes it to read approvals answered there.
    fn look_after(&self, session_id: &str, run_id: &str) -> RuntimeResult<()> {
        if let Some(lease) = self.store.lease(session_id)?
            && lease.owner != self.store.owner()
        {
            tracing::error!(run_id, owner = %lease.owner, "lost the run's lease to another sidechat process; stopping the run");
            self.runs.stop(session_id);
            return Ok(());
        }
        self.sync_announced(session_id)?;
        self.runs.poke_approvals(session_id);
        Ok(())
    }
}

/// Starts the heartbeat on a thread of its own, so a busy async worker never delays it (a
/// late heartbeat could let another daemon take a live run over). It ends with the runtime.
pub(super) fn start_heartbeat(inner: &Arc<Inner>) {
    let every = inner.store.lease_duration() / 4;
    spawn_periodic("sidechat-lease", every, inner, |inner| inner.heartbeat());
}
