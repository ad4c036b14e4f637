//! Numbering and publishing of session events.
//!
//! Each session has one `seq` counter shared by events and committed messages, so a committed
//! message's `seq` is the `seq` of its `messageCompleted` event. The counter lives in memory
//! (no write per streamed delta) and starts from the session's stored `last_seq`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::protocol::{Block, Event, Role, SessionEventParams, TranscriptEntry};
use crate::store::{NewMessage, Store};

use super::RuntimeResult;
use crate::util::lock;

/// Where session events go: the connected client, or nowhere during recovery.
pub trait EventSink: Send + Sync + 'static {
    fn emit(&self, event: &SessionEventParams);

    /// A streamed text or thinking delta: nearly all of what a run sends, so a sink may write
    /// it without building the event first.
    fn emit_delta(&self, delta: &Delta<'_>) {
        self.emit(&delta.to_event());
    }
}

/// Which streamed text a [`Delta`] adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaKind {
    Text,
    Thinking,
}

/// A `textDelta` or `thinkingDelta` event, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta<'a> {
    pub session_id: &'a str,
    pub seq: u64,
    pub run_id: Option<&'a str>,
    pub kind: DeltaKind,
    pub message_id: &'a str,
    pub text: &'a str,
}

impl Delta<'_> {
    /// The event as every other event is published.
    pub fn to_event(&self) -> SessionEventParams {
        let message_id = self.message_id.to_string();
        let text = self.text.to_string();
        SessionEventParams {
            session_id: self.session_id.to_string(),
            seq: self.seq,
            run_id: self.run_id.map(str::to_string),
            event: match self.kind {
                DeltaKind::Text => Event::TextDelta { message_id, text },
                DeltaKind::Thinking => Event::ThinkingDelta { message_id, text },
            },
        }
    }
}

/// A sink that drops everything, for tools and tests that need no client.
pub struct NoClient;

impl EventSink for NoClient {
    fn emit(&self, _event: &SessionEventParams) {}

    /// Nothing to build an event for.
    fn emit_delta(&self, _delta: &Delta<'_>) {}
}

/// The event that tells a client about a committed entry.
fn announcement(entry: &TranscriptEntry) -> Event {
    match (entry.role, entry.blocks.as_slice()) {
        (Role::Notice, [Block::Notice { level, text }]) => Event::Notice {
            level: *level,
            message: text.clone(),
            message_id: entry.id.clone(),
        },
        _ => Event::MessageCompleted {
            entry: entry.clone(),
        },
    }
}

/// A session's last published `seq`.
pub type SeqCounter = Arc<Mutex<u64>>;

pub struct Events {
    sink: Arc<dyn EventSink>,
    counters: Mutex<HashMap<String, SeqCounter>>,
}

impl Events {
    pub fn new(sink: Arc<dyn EventSink>) -> Self {
        Self {
            sink,
            counters: Mutex::default(),
        }
    }

    /// The session's `seq` counter, shared by everything that publishes its events.
    pub fn counter(&self, store: &Store, session_id: &str) -> RuntimeResult<SeqCounter> {
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

    /// Publishes one streamed delta with the session's next `seq`, through `counter` (from
    /// [`Events::counter`], kept by the run so each delta skips the lookup).
    pub fn emit_delta(
        &self,
        counter: &SeqCounter,
        session_id: &str,
        run_id: Option<&str>,
        kind: DeltaKind,
        message_id: &str,
        text: &str,
    ) {
        let mut seq = lock(counter);
        *seq += 1;
        self.sink.emit_delta(&Delta {
            session_id,
            seq: *seq,
            run_id,
            kind,
            message_id,
            text,
        });
    }

    /// Commits a message and then announces it, under one `seq`: persisted before told. A
    /// notice is announced by the `notice` event, anything else by `messageCompleted`.
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
            event: announcement(&entry),
        });
        Ok(entry)
    }

    /// Forgets a deleted session's counter.
    pub fn forget(&self, session_id: &str) {
        lock(&self.counters).remove(session_id);
    }
}
