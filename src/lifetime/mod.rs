//! Nothing a command started outlives its stop, or the daemon (design invariant 9).
//!
//! - [`reaper`]: on Linux the daemon is the child subreaper of everything it starts, so what a
//!   command double-forks or moves into a session of its own (`setsid`) stays its descendant;
//!   the daemon reaps those adopted processes once they end.
//! - [`sweep`]: finding a command's processes (its process group, the tag in their
//!   environment, their descendants) and killing them, whether this daemon started the command
//!   or a daemon that was killed did.
//! - [`signals`]: `SIGTERM` and `SIGHUP` end the daemon the way the end of its input does.
//!
//! Every command this daemon runs is recorded in the store ([`CommandLedger`]) while it runs,
//! so the next daemon on the database can end what a killed one left.

pub mod proc;
pub mod reaper;
pub mod signals;
pub mod sweep;

pub use sweep::{COMMAND_VAR, Tracked, end_command, end_descendants, end_left};

/// Where a daemon records the commands it runs, so that what a killed daemon left can be found.
pub trait CommandLedger: Send + Sync {
    /// `command` has started. A failure is logged, never the command's: it runs unrecorded.
    fn started(&self, command: &Tracked);
    /// `command` has ended and nothing of it is left.
    fn ended(&self, command: &Tracked);
}

/// Records nothing: for commands run outside a daemon (tests of the tools).
pub struct NoLedger;

impl CommandLedger for NoLedger {
    fn started(&self, _: &Tracked) {}
    fn ended(&self, _: &Tracked) {}
}

/// Before anything is spawned: the daemon becomes the subreaper of what it starts.
pub fn begin() {
    reaper::become_subreaper();
}

/// Inside the async runtime, before the connection is served: terminating signals end the
/// input, and adopted processes are reaped.
pub fn watch() {
    if let Err(e) = signals::listen() {
        tracing::warn!(error = %e, "cannot listen for SIGTERM and SIGHUP; they kill the daemon at once");
    }
    reaper::start();
}
