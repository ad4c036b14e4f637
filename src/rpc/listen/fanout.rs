//! Session events to every connection that wants them: the stdio client gets every session's
//! events, as it always has; each WebSocket connection gets those of the sessions it created,
//! opened or subscribed to.
//!
//! Each WebSocket connection has its own queue, drained into its socket by a task of its own,
//! so a connection that reads slowly holds up no other. Nothing is dropped (DESIGN.md,
//! invariant 10): a connection whose queue is full makes [`EventSink::has_room`] false, and
//! the runs wait in [`EventSink::room`] as they do for a slow stdio client. A connection that
//! closes is forgotten at once, and stops nothing.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jsonrpsee::server::{ConnectionId, MethodSink};
use serde_json::value::RawValue;
use tokio::sync::{Notify, mpsc};

use crate::protocol::{Delta, Notification, SessionEvent, SessionEventParams};
use crate::rpc::ClientSink;
use crate::rpc::delta_frame::write_delta_frame;
use crate::rpc::peer::write_notification;
use crate::runtime::{EventSink, RoomFuture};
use crate::util::lock;

/// How many events may wait for one connection's socket before the runs wait for it.
pub const QUEUE_LIMIT: usize = 1024;

/// One WebSocket connection as the events see it.
struct Listener {
    queue: mpsc::UnboundedSender<Box<RawValue>>,
    /// Events queued and not yet handed to the socket.
    queued: AtomicUsize,
    sessions: std::sync::Mutex<HashSet<String>>,
}

/// The WebSocket connections and the sessions each receives.
#[derive(Default)]
pub struct Listeners {
    connections: std::sync::Mutex<HashMap<ConnectionId, Arc<Listener>>>,
    /// Signalled whenever a connection's queue shrinks or a connection goes.
    drained: Notify,
}

impl Listeners {
    /// Starts delivering events to connection `id` through `sink`, unless it is already known.
    pub fn connect(self: &Arc<Self>, id: ConnectionId, sink: &MethodSink) {
        let mut connections = lock(&self.connections);
        if connections.contains_key(&id) {
            return;
        }
        let (queue, mut waiting) = mpsc::unbounded_channel::<Box<RawValue>>();
        let listener = Arc::new(Listener {
            queue,
            queued: AtomicUsize::new(0),
            sessions: std::sync::Mutex::default(),
        });
        connections.insert(id, listener.clone());
        drop(connections);
        let (this, sink) = (self.clone(), sink.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    next = waiting.recv() => {
                        let Some(event) = next else { break };
                        if sink.send(event).await.is_err() {
                            break;
                        }
                        listener.queued.fetch_sub(1, Ordering::Relaxed);
                        this.drained.notify_waiters();
                    }
                    () = sink.closed() => break,
                }
            }
            lock(&this.connections).remove(&id);
            this.drained.notify_waiters();
            tracing::debug!(connection = id.0, "connection closed");
        });
    }

    /// Connection `id` receives `session`'s events from now on; false if it already did (or
    /// is gone).
    pub fn subscribe(&self, id: ConnectionId, session: &str) -> bool {
        match lock(&self.connections).get(&id) {
            Some(listener) => lock(&listener.sessions).insert(session.to_string()),
            None => false,
        }
    }

    /// Connection `id` no longer receives `session`'s events; whether it did.
    pub fn unsubscribe(&self, id: ConnectionId, session: &str) -> bool {
        match lock(&self.connections).get(&id) {
            Some(listener) => lock(&listener.sessions).remove(session),
            None => false,
        }
    }

    /// The connections receiving `session`'s events.
    fn receiving(&self, session: &str) -> Vec<Arc<Listener>> {
        lock(&self.connections)
            .values()
            .filter(|listener| lock(&listener.sessions).contains(session))
            .cloned()
            .collect()
    }

    /// Queues the notification `write` writes to every connection receiving `session`'s
    /// events; it is written once, and only when one does.
    fn deliver(&self, session: &str, write: impl FnOnce(&mut Vec<u8>)) {
        let receiving = self.receiving(session);
        if receiving.is_empty() {
            return;
        }
        let mut bytes = Vec::new();
        write(&mut bytes);
        let frame = match String::from_utf8(bytes).map(RawValue::from_string) {
            Ok(Ok(frame)) => frame,
            Ok(Err(e)) => return tracing::error!(error = %e, "unwritable session event"),
            Err(e) => return tracing::error!(error = %e, "unwritable session event"),
        };
        for listener in receiving {
            listener.queued.fetch_add(1, Ordering::Relaxed);
            if listener.queue.send(frame.clone()).is_err() {
                listener.queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn has_room(&self) -> bool {
        lock(&self.connections)
            .values()
            .all(|listener| listener.queued.load(Ordering::Relaxed) < QUEUE_LIMIT)
    }

    async fn room(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.has_room() {
                return;
            }
            drained.await;
        }
    }
}

/// The daemon's event sink: the stdio client (when one is connected) and the WebSocket
/// connections.
pub struct Fanout {
    stdio: Arc<ClientSink>,
    listeners: Arc<Listeners>,
}

impl Fanout {
    pub fn new(stdio: Arc<ClientSink>, listeners: Arc<Listeners>) -> Self {
        Self { stdio, listeners }
    }
}

impl EventSink for Fanout {
    fn emit(&self, event: &SessionEventParams) {
        self.stdio.emit(event);
        self.listeners.deliver(&event.session_id, |out| {
            if let Err(e) = write_notification(out, <SessionEvent as Notification>::METHOD, event) {
                tracing::error!(error = %e, "cannot serialise a session event");
                out.clear();
            }
        });
    }

    fn emit_delta(&self, delta: &Delta<'_>) {
        self.stdio.emit_delta(delta);
        self.listeners
            .deliver(delta.session_id, |out| write_delta_frame(delta, out));
    }

    fn has_room(&self) -> bool {
        self.stdio.has_room() && self.listeners.has_room()
    }

    fn room(&self) -> RoomFuture<'_> {
        Box::pin(async move {
            while !self.has_room() {
                self.stdio.room().await;
                self.listeners.room().await;
            }
        })
    }
}
