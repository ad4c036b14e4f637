//! The daemon as a child subreaper, and the reaping that comes with it.
//!
//! On Linux the daemon sets `PR_SET_CHILD_SUBREAPER`: a process a command started whose parent
//! exits (a double fork, `setsid cmd &` from a shell that then ends) is handed to the daemon
//! instead of to init, so it stays a descendant of the daemon and can be found and killed with
//! the rest. Those adopted processes are the daemon's children once they end, and nobody else
//! will wait for them: [`start`] reaps them as `SIGCHLD` comes.
//!
//! Only adopted processes may be reaped here. The children the daemon spawns itself belong to
//! tokio, which waits for each by its pid; reaping one first would make tokio's wait fail. So
//! every process the daemon spawns goes through [`spawn`], which records it, and a zombie child
//! that is recorded is left to tokio.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::proc::{self, Stat};
use crate::util::lock;

/// The children spawned through [`spawn`], by pid and start time (`None` when it could not be
/// read), until they are gone.
static SPAWNED: Mutex<Vec<(i32, Option<u64>)>> = Mutex::new(Vec::new());

/// Whether [`become_subreaper`] succeeded: then every descendant of a command is a descendant
/// of this process, and its leftovers are looked for among them only.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Whether [`spawn`] ever started a process: until it has, this process has no descendants
/// (every process it starts goes through [`spawn`]), so none need looking for as it exits.
static EVER_SPAWNED: AtomicBool = AtomicBool::new(false);

/// How often zombies are looked for even without a `SIGCHLD` (signals of several children may
/// arrive as one).
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Makes this process the child subreaper of everything it starts (Linux only; elsewhere
/// an orphan goes to init as before). Call before spawning anything.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    match rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        Ok(()) => SUBREAPER.store(true, Ordering::SeqCst),
        Err(e) => {
            tracing::warn!(error = %e, "cannot become the subreaper of the commands' processes")
        }
    }
}

/// Whether this process adopts the orphans of what it started.
pub fn is_subreaper() -> bool {
    SUBREAPER.load(Ordering::SeqCst)
}

/// Spawns `command`, recorded as a child of tokio's (see the module's documentation). The
/// record is made before [`reap_adopted`] can look, so a child that ends at once is still
/// left to tokio.
pub fn spawn(command: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let mut spawned = lock(&SPAWNED);
    #[allow(
        clippy::disallowed_methods,
        reason = "the one place children are spawned"
    )]
    let child = command.spawn()?;
    EVER_SPAWNED.store(true, Ordering::SeqCst);
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        spawned.push((pid, proc::stat(pid).map(|s| s.start)));
    }
    Ok(child)
}

/// Whether this process has started any process (through [`spawn`]).
pub fn has_spawned() -> bool {
    EVER_SPAWNED.load(Ordering::SeqCst)
}

/// Whether `child` is one [`spawn`] recorded.
pub fn is_spawned(child: &Stat) -> bool {
    lock(&SPAWNED)
        .iter()
        .any(|&(pid, start)| pid == child.pid && start.is_none_or(|s| s == child.start))
}

/// Reaps adopted children as they end, for as long as the async runtime runs. Does nothing
/// when this process is not a subreaper (orphans then go to init, which reaps them).
pub fn start() {
    if !is_subreaper() {
        return;
    }
    let mut ended = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(ended) => ended,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch for ended children; adopted ones are reaped every few seconds");
            return start_timed();
        }
    };
    tokio::spawn(async move {
        loop {
            let _ = tokio::time::timeout(SWEEP_EVERY, ended.recv()).await;
            let _ = tokio::task::spawn_blocking(reap_adopted).await;
        }
    });
}

fn start_timed() {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            let _ = tokio::task::spawn_blocking(reap_adopted).await;
        }
    });
}

/// Reaps every ended child that [`spawn`] did not record, and forgets the recorded ones that
/// are gone. The record stays locked throughout, so no child is spawned in between.
pub fn reap_adopted() {
    let me = rustix::process::getpid();
    let mut spawned = lock(&SPAWNED);
    let children: Vec<Stat> = proc::all()
        .into_iter()
        .filter(|s| s.ppid == me.as_raw_nonzero().get())
        .collect();
    for child in children.iter().filter(|c| c.zombie) {
        let recorded = spawned
            .iter()
            .any(|&(pid, start)| pid == child.pid && start.is_none_or(|s| s == child.start));
        if !recorded && let Some(pid) = rustix::process::Pid::from_raw(child.pid) {
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
        }
    }
    spawned.retain(|&(pid, start)| {
        children
            .iter()
            .any(|c| c.pid == pid && start.is_none_or(|s| s == c.start))
    });
}
