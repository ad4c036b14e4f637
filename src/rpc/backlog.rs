//! What waits for a client that may have stopped reading, and a wait for room.
//!
//! Output to a client is bounded (DESIGN.md, invariant 10): whatever produces a client's
//! output in volume (a run streaming its provider's answer) checks [`Backlog::has_room`] before
//! producing more and, when there is none, waits in [`Backlog::room`] until the client has read
//! enough. Nothing is dropped: what is queued stays queued, and what would follow stays where it
//! came from (the provider's socket) until there is room.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A count of queued units (bytes, or items) with a cap, and a wait for the count to drop
/// below it.
pub struct Backlog {
    queued: AtomicUsize,
    cap: usize,
    /// Nobody drains the queue any more (the client is gone): there is always room, as what
    /// is sent is dropped.
    closed: AtomicBool,
    /// Signalled when the count drops below the cap, or on close.
    drained: Notify,
}

impl Backlog {
    pub fn new(cap: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            cap,
            closed: AtomicBool::new(false),
            drained: Notify::new(),
        }
    }

    /// `n` more units are queued.
    pub fn add(&self, n: usize) {
        self.queued.fetch_add(n, Ordering::SeqCst);
    }

    /// `n` queued units are gone (written, or handed on); wakes those waiting for room when
    /// that makes some.
    pub fn remove(&self, n: usize) {
        let before = self.queued.fetch_sub(n, Ordering::SeqCst);
        if before >= self.cap && before.saturating_sub(n) < self.cap {
            self.drained.notify_waiters();
        }
    }

    /// The units queued now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// The most units queued before producers wait.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Whether more may be queued without waiting.
    pub fn has_room(&self) -> bool {
        self.queued() < self.cap || self.closed.load(Ordering::SeqCst)
    }

    /// Resolves once there is room (at once when there is).
    pub async fn room(&self) {
        loop {
            let drained = self.drained.notified();
            let mut drained = std::pin::pin!(drained);
            // Registered before the check, so a drain between the check and the wait wakes it.
            drained.as_mut().enable();
            if self.has_room() {
                return;
            }
            drained.await;
        }
    }

    /// The queue is no longer drained: nobody waits for room again.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.drained.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_full_backlog_waits_until_it_drops_below_its_cap() {
        let backlog = Arc::new(Backlog::new(10));
        backlog.add(9);
        assert!(backlog.has_room());
        backlog.room().await;
        backlog.add(3);
        assert!(!backlog.has_room());
        let waiting = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.room().await }
        });
        tokio::task::yield_now().await;
        backlog.remove(1);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "11 of 10 queued: still full");
        backlog.remove(5);
        tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
            .await
            .expect("room was made")
            .unwrap();
        assert_eq!(backlog.queued(), 6);
    }

    #[tokio::test]
    async fn a_closed_backlog_always_has_room() {
        let backlog = Arc::new(Backlog::new(1));
        backlog.add(5);
        let waiting = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.room().await }
        });
        tokio::task::yield_now().await;
        backlog.close();
        tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
            .await
            .expect("closing released the wait")
            .unwrap();
        assert!(backlog.has_room());
    }
}
