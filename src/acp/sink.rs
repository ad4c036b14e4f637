//! The runtime's events, queued in publication order for the task that turns them into ACP
//! updates.
//!
//! The runtime publishes from its run tasks, under each session's `seq` lock, so the queue holds
//! every session's events in `seq` order. A barrier queued behind them lets a request wait
//! until everything published before it has been written, so its answer follows its updates.
//!
//! The queue is bounded like the connection's output: the translating task waits for room in
//! the output before it takes the next event, and runs wait for room in this queue
//! ([`EventSink::has_room`]) before they read more of their providers' streams.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::protocol::Delta;
use crate::protocol::SessionEventParams;
use crate::rpc::backlog::Backlog;
use crate::runtime::{EventSink, RoomFuture};

/// Items queued for the translating task at which runs stop reading their providers' streams:
/// a few MiB of events, far more than a client that reads ever leaves queued.
const QUEUED_ITEMS: usize = 8 * 1024;

/// One item of the queue.
pub enum Item {
    Event(Box<SessionEventParams>),
    /// Answered once every item before it has been handled.
    Barrier(oneshot::Sender<()>),
}

/// The event sink of `sidechat acp`.
pub struct AcpSink {
    queue: mpsc::UnboundedSender<Item>,
    /// Items sent and not yet taken.
    backlog: Arc<Backlog>,
}

/// The receiving end of an [`AcpSink`], for the translating task.
pub struct Items {
    items: mpsc::UnboundedReceiver<Item>,
    backlog: Arc<Backlog>,
}

impl Items {
    /// The next item; `None` once every sink is gone.
    pub async fn recv(&mut self) -> Option<Item> {
        let item = self.items.recv().await;
        match item {
            Some(_) => self.backlog.remove(1),
            None => self.backlog.close(),
        }
        item
    }
}

impl Drop for Items {
    /// Nobody takes items any more: no run may wait for room in the queue.
    fn drop(&mut self) {
        self.backlog.close();
    }
}

impl AcpSink {
    /// The sink and the receiving end for the translating task.
    pub fn new() -> (Self, Items) {
        let (queue, items) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::new(QUEUED_ITEMS));
        let items = Items {
            items,
            backlog: backlog.clone(),
        };
        (Self { queue, backlog }, items)
    }

    /// Resolves once every event published before this call has been handled.
    pub async fn barrier(&self) {
        let (done, wait) = oneshot::channel();
        if self.send(Item::Barrier(done)) {
            let _ = wait.await;
        }
    }

    /// Queues `item`; false when the translating task is gone.
    fn send(&self, item: Item) -> bool {
        self.backlog.add(1);
        let sent = self.queue.send(item).is_ok();
        if !sent {
            self.backlog.remove(1);
        }
        sent
    }
}

impl EventSink for AcpSink {
    fn emit(&self, event: &SessionEventParams) {
        self.send(Item::Event(Box::new(event.clone())));
    }

    fn emit_delta(&self, delta: &Delta<'_>) {
        self.send(Item::Event(Box::new(delta.to_event())));
    }

    fn has_room(&self) -> bool {
        self.backlog.has_room()
    }

    fn room(&self) -> RoomFuture<'_> {
        Box::pin(self.backlog.room())
    }
}
