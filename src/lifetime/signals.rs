//! `SIGTERM` and `SIGHUP` end the daemon the way the end of its input does: the connection's
//! input is treated as ended, so runs are stopped, commands killed and state committed before
//! the process exits, instead of the process dying mid-write with its commands left running.

use std::sync::OnceLock;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Set once a terminating signal has come; absent until [`listen`] was called.
static ENDED: OnceLock<watch::Sender<bool>> = OnceLock::new();

/// Starts listening for `SIGTERM` and `SIGHUP`, which from now on no longer kill the process
/// at once but end [`ended`]. Needs the async runtime.
pub fn listen() -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let ended = ENDED.get_or_init(|| watch::Sender::new(false)).clone();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = hangup.recv() => "SIGHUP",
        };
        tracing::info!(signal = name, "ending as asked by a signal");
        ended.send_replace(true);
    });
    Ok(())
}

/// Completes once a terminating signal has come (at once if one already has); never when
/// [`listen`] was not called, as in tests of the library.
pub async fn ended() {
    let Some(ended) = ENDED.get() else {
        return std::future::pending().await;
    };
    let mut ended = ended.subscribe();
    if ended.wait_for(|e| *e).await.is_err() {
        std::future::pending::<()>().await;
    }
}
