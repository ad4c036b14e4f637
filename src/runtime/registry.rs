//! The runs in flight, at most one per session.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// Handles to one live run.
pub struct ActiveRun {
    pub run_id: String,
    /// Set to true to stop the run.
    pub stop: watch::Sender<bool>,
    /// Bumped whenever one of the run's approvals is answered.
    pub approvals: watch::Sender<u64>,
    /// Becomes true once the run has left the registry.
    pub done: watch::Receiver<bool>,
    /// Set with `stop` when the daemon shuts down: a run waiting for an approval is left
    /// suspended (still pending in the store) instead of being cancelled.
    pub suspend: Arc<AtomicBool>,
}

/// Receivers the run task itself holds.
pub struct RunSignals {
    pub stop: watch::Receiver<bool>,
    pub approvals: watch::Receiver<u64>,
    pub done: watch::Sender<bool>,
    pub suspend: Arc<AtomicBool>,
}

pub type Runs<'a> = std::sync::MutexGuard<'a, HashMap<String, ActiveRun>>;

#[derive(Default)]
pub struct Registry {
    /// Held only to look or change, never across a store write: reads (`session/get`), stops
    /// and other sessions' runs take it too, and must not wait for a database another program
    /// holds.
    runs: Mutex<HashMap<String, ActiveRun>>,
    /// One lock per session for [`Registry::deciding`].
    gates: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// One queue per session for [`Registry::send_turn`].
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Registry {
    /// The table itself, to look at or change at once. Never held across a store write (see
    /// [`Registry::deciding`] for decisions that write).
    pub fn lock(&self) -> Runs<'_> {
        crate::util::lock(&self.runs)
    }

    /// Runs `decide` under the session's own lock, for decisions that must not interleave with
    /// the session's run starting or ending, and that write to the store (queueing input for
    /// the run versus the run's end promoting the queue; taking the lease for a new run). Only
    /// the same session's decisions wait for it, off the async worker, so a write that waits
    /// for a locked database holds up nothing else.
    pub fn deciding<R>(&self, session_id: &str, decide: impl FnOnce() -> R) -> R {
        let gate = crate::util::lock(&self.gates)
            .entry(session_id.to_string())
            .or_default()
            .clone();
        let _decision = crate::util::lock_off_worker(&gate);
        decide()
    }

    /// The session's turn for input: held by a send while it is written, so sends of one
    /// session are written in the order they came (a fair lock), even while a locked
    /// database keeps one waiting.
    pub fn send_turn(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        crate::util::lock(&self.turns)
            .entry(session_id.to_string())
            .or_default()
            .clone()
    }

    /// Hands the session from the run `old` to a new run `run_id` in one step, so no other
    /// claim comes between; `Err(run_id)` of a run that is not `old`.
    pub fn replace(&self, session_id: &str, old: &str, run_id: &str) -> Result<RunSignals, String> {
        let mut runs = self.lock();
        if runs.get(session_id).is_some_and(|a| a.run_id == old) {
            runs.remove(session_id);
        }
        claim_locked(&mut runs, session_id, run_id)
    }

    /// Claims the session for a new run; `Err(run_id)` of the run already there.
    pub fn claim(&self, session_id: &str, run_id: &str) -> Result<RunSignals, String> {
        claim_locked(&mut self.lock(), session_id, run_id)
    }

    pub fn release(&self, session_id: &str, run_id: &str) {
        let mut runs = self.lock();
        if runs.get(session_id).is_some_and(|a| a.run_id == run_id) {
            runs.remove(session_id);
        }
    }

    /// Every live run: `(session id, run id)`.
    pub fn active(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .map(|(session_id, active)| (session_id.clone(), active.run_id.clone()))
            .collect()
    }

    /// The receiver that turns true once the session's live run has left the registry.
    pub fn done(&self, session_id: &str) -> Option<watch::Receiver<bool>> {
        self.lock().get(session_id).map(|a| a.done.clone())
    }

    pub fn active_run(&self, session_id: &str) -> Option<String> {
        self.lock().get(session_id).map(|a| a.run_id.clone())
    }

    /// Asks a session's run to stop; the receiver tells when it has left the registry.
    pub fn stop(&self, session_id: &str) -> Option<(String, watch::Receiver<bool>)> {
        let runs = self.lock();
        let active = runs.get(session_id)?;
        let _ = active.stop.send(true);
        Some((active.run_id.clone(), active.done.clone()))
    }

    /// Stops every run for a shutdown; runs waiting for an approval stay suspended.
    pub fn suspend_all(&self) -> Vec<watch::Receiver<bool>> {
        self.lock()
            .values()
            .map(|active| {
                active.suspend.store(true, Ordering::SeqCst);
                let _ = active.stop.send(true);
                active.done.clone()
            })
            .collect()
    }

    /// Wakes a run waiting for an approval; false when the session has no live run.
    pub fn poke_approvals(&self, session_id: &str) -> bool {
        match self.lock().get(session_id) {
            Some(active) => {
                active.approvals.send_modify(|n| *n += 1);
                true
            }
            None => false,
        }
    }
}

/// [`Registry::claim`] with the table already locked.
pub fn claim_locked(
    runs: &mut Runs<'_>,
    session_id: &str,
    run_id: &str,
) -> Result<RunSignals, String> {
    if let Some(active) = runs.get(session_id) {
        return Err(active.run_id.clone());
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let (approvals_tx, approvals_rx) = watch::channel(0);
    let (done_tx, done_rx) = watch::channel(false);
    let suspend = Arc::new(AtomicBool::new(false));
    runs.insert(
        session_id.to_string(),
        ActiveRun {
            run_id: run_id.to_string(),
            stop: stop_tx,
            approvals: approvals_tx,
            done: done_rx,
            suspend: suspend.clone(),
        },
    );
    Ok(RunSignals {
        stop: stop_rx,
        approvals: approvals_rx,
        done: done_tx,
        suspend,
    })
}
