//! Work the runtime does at intervals on a thread of its own (the lease heartbeat, the expiry
//! sweep of delegated approvals), so a busy async worker never delays it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Inner;

/// Runs `step` every `every` on a thread named `name`, until the runtime is dropped. Each
/// step runs inside the async runtime the caller runs on (when there is one), so it can start
/// runs there: runs taken over, promoted or resumed.
pub(super) fn spawn_periodic(
    name: &str,
    every: Duration,
    inner: &Arc<Inner>,
    step: impl Fn(&Arc<Inner>) + Send + 'static,
) {
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let handle = tokio::runtime::Handle::try_current().ok();
    let started = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let _entered = handle.as_ref().map(|h| h.enter());
                step(&inner);
            }
        });
    if let Err(e) = started {
        tracing::error!(thread = name, error = %e, "cannot start a periodic thread");
    }
}
