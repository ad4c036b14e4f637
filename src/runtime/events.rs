//! Numbering and publishing of session events.
//!
//! Each session has one `seq` counter shared by events and committed messages, so a committed
//! message's `seq` is the `seq` of its `messageCompleted` event. The counter lives in memory
//! (no write per streamed delta) and starts from the session's stored `last_seq`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::protocol::{Event, SessionEventParams, TranscriptEntry};
use crate::store::{NewMessage, Store};

use super::RuntimeResult;

/// Where session events go: the connected client, or nowhere during recovery.
pub trait EventSink: Send + Sync + 'static {
    fn emit(&self, event: &SessionEventParams);
}

/// A sink that drops everything, for tools and tests that need no client.
pub struct NoClient;

impl EventSink for NoClient {
    fn emit(&self, _event: &SessionEventParams) {}
}

pub struct Events {
    sink: Arc<dyn EventSink>,
    counters: Mutex<HashMap<String, Arc<Mutex<u64>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Events {
    pub fn new(sink: Arc<dyn EventSink>) -> Self {
        Self {
            sink,
            counters: Mutex::default(),
        }
    }

    fn counter(&self, store: &Store, session_id: &str) -> RuntimeResult<Arc<Mutex<u64>>> {
        if let Some(counter) = lock(&self.counters).get(session_id) {
            return Ok(counter.clone());
        }
        let last = store
            .session(session_id)?
            .map(|s| s.last_seq)
            .ok_or_else(|| super::RuntimeError::SessionNotFound(session_id.to_string()))?;
        Ok(lock(&self.counters)
            .entry(session_id.to_string())
            .or_insert_with(|| Arc::new(Mutex::new(last)))
            .clone())
    }

    /// Publishes one event with the session's next `seq`.
    pub fn emit(&self, store: &Store, session_id: &str, run_id: Option<&str>, event: Event) {
        let counter = match self.counter(store, session_id) {
            Ok(counter) => counter,
            Err(e) => {
                tracing::warn!(session_id, error = %e, "event for a session that is gone");
                return;
            }
        };
        let mut seq = lock(&counter);
        *seq += 1;
        self.sink.emit(&SessionEventParams {
            session_id: session_id.to_string(),
            seq: *seq,
            run_id: run_id.map(str::to_string),
            event,
        });
    }

    /// Commits a message and then announces it, under one `seq`: persisted before told.
    /// The message's own `seq` is ignored; the session's next one is used.
    pub fn commit(&self, store: &Store, mut message: NewMessage) -> RuntimeResult<TranscriptEntry> {
        let counter = self.counter(store, &message.session_id)?;
        let mut seq = lock(&counter);
        message.seq = *seq + 1;
        let entry = store.append_message(&message)?;
        *seq = entry.seq;
        self.sink.emit(&SessionEventParams {
            session_id: message.session_id,
            seq: entry.seq,
            run_id: message.run_id,
            event: Event::MessageCompleted {
                entry: entry.clone(),
            },
        });
        Ok(entry)
    }

    /// Forgets a deleted session's counter.
    pub fn forget(&self, session_id: &str) {
        lock(&self.counters).remove(session_id);
    }
}
