//! The runtime's events, queued in publication order for the task that turns them into ACP
//! updates.
//!
//! The runtime publishes from its run tasks, under each session's `seq` lock, so the queue holds
//! every session's events in `seq` order. A barrier queued behind them lets a request wait
//! until everything published before it has been written, so its answer follows its updates.

use tokio::sync::{mpsc, oneshot};

use crate::protocol::Delta;
use crate::protocol::SessionEventParams;
use crate::runtime::EventSink;

/// One item of the queue.
pub enum Item {
    Event(Box<SessionEventParams>),
    /// Answered once every item before it has been handled.
    Barrier(oneshot::Sender<()>),
}

/// The event sink of `sidechat acp`.
pub struct AcpSink {
    queue: mpsc::UnboundedSender<Item>,
}

impl AcpSink {
    /// The sink and the receiving end for the translating task.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Item>) {
        let (queue, items) = mpsc::unbounded_channel();
        (Self { queue }, items)
    }

    /// Resolves once every event published before this call has been handled.
    pub async fn barrier(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.send(Item::Barrier(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

impl EventSink for AcpSink {
    fn emit(&self, event: &SessionEventParams) {
        let _ = self.queue.send(Item::Event(Box::new(event.clone())));
    }

    fn emit_delta(&self, delta: &Delta<'_>) {
        let _ = self.queue.send(Item::Event(Box::new(delta.to_event())));
    }
}
