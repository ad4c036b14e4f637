//! Child sessions' events, forwarded to the parent's clients.
//!
//! Every event a child session publishes goes out as itself (a client showing the child's
//! transcript follows it as any session) and, numbered in the parent's own sequence, as a
//! `delegation` event of the parent, so a panel showing the parent can draw the sub-agent
//! working inside the `delegate` call. The link is read from the store once per session and
//! kept; a session that is nobody's child is remembered as such.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::protocol::{Delta, Event, SessionEventParams};
use crate::runtime::{EventSink, Inner, RoomFuture};
use crate::util::lock;

/// Where a child's events go besides the child's own stream.
#[derive(Debug, Clone)]
struct Link {
    parent_id: String,
    parent_run_id: String,
    call_id: String,
}

/// The sink the runtime publishes to: the client's, plus forwarding of children's events.
pub(in crate::runtime) struct Forward {
    sink: Arc<dyn EventSink>,
    inner: Weak<Inner>,
    /// Each session's link, `None` for a session that is nobody's child.
    links: Mutex<HashMap<String, Option<Arc<Link>>>>,
}

impl Forward {
    pub fn new(sink: Arc<dyn EventSink>, inner: Weak<Inner>) -> Self {
        Self {
            sink,
            inner,
            links: Mutex::default(),
        }
    }

    fn link(&self, inner: &Inner, session_id: &str) -> Option<Arc<Link>> {
        if let Some(link) = lock(&self.links).get(session_id) {
            return link.clone();
        }
        let link = match inner.store.delegation_of_child(session_id) {
            Ok(row) => row.map(|row| {
                Arc::new(Link {
                    parent_id: row.parent_id,
                    parent_run_id: row.parent_run_id,
                    call_id: row.call_id,
                })
            }),
            // Not remembered: the next event tries again.
            Err(e) => {
                tracing::warn!(session_id, error = %e, "cannot read a session's delegation");
                return None;
            }
        };
        lock(&self.links).insert(session_id.to_string(), link.clone());
        link
    }

    /// Publishes `event` of a child session on its parent as a `delegation` event.
    fn forward(&self, session_id: &str, seq: u64, event: impl FnOnce() -> Event) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let Some(link) = self.link(&inner, session_id) else {
            return;
        };
        inner.events.emit(
            &inner.store,
            &link.parent_id,
            Some(&link.parent_run_id),
            Event::Delegation {
                call_id: link.call_id.clone(),
                child_session_id: session_id.to_string(),
                child_seq: seq,
                event: Box::new(event()),
            },
        );
    }
}

impl EventSink for Forward {
    fn emit(&self, event: &SessionEventParams) {
        self.sink.emit(event);
        self.forward(&event.session_id, event.seq, || event.event.clone());
    }

    fn emit_delta(&self, delta: &Delta<'_>) {
        self.sink.emit_delta(delta);
        self.forward(delta.session_id, delta.seq, || delta.to_event().event);
    }

    fn has_room(&self) -> bool {
        self.sink.has_room()
    }

    fn room(&self) -> RoomFuture<'_> {
        self.sink.room()
    }
}
