//! Numbering and publishing of session events.
//!
//! Each session has one `seq` sequence shared by events and committed messages, so a committed
//! message's `seq` is the `seq` of its `messageCompleted` event.
//!
//! **The rule: a session's `seq` strictly increases and never repeats, across stops, crashes
//! and restarts too; it may jump.** Streamed deltas are never stored (no write per delta), so
//! the last committed `seq` cannot tell a restarted daemon which numbers a client already saw.
//! The counter therefore hands out only numbers at or below a mark persisted ahead of use
//! (`sessions.seq_reserved`), reserved [`RESERVE_BLOCK`] at a time, and a daemon starts each
//! session's counter at that mark, reserving its first block with the first number it hands
//! out (a commit does it in its own transaction). A commit extends the mark in its own
//! transaction when it runs low; when half a block is used without one (a long
//! stream of deltas), the next block is reserved ahead on a thread of its own, so numbering a
//! delta does not wait for the store's writer (which a slow commit of another session may
//! hold). Only if that reservation has not landed when the block runs out does the event wait
//! for it (claiming another block instead would skip the one on its way: a gap of a block). Numbers reserved and not used before a stop are skipped.
//!
//! **Two daemons on one database** each claim blocks of their own (a block starts above the
//! mark and moves it, in one statement), so they never hand out the same number. A message is
//! committed only if its `seq` still follows the session's last message (checked in its
//! transaction); when another daemon committed first, it is numbered again from a new block,
//! so the transcript keeps the order in which messages were committed.
//!
//! **Order:** a session's events reach the sink in `seq` order. A commit takes its number, then
//! writes without holding the counter (a slow disk must not hold anyone waiting to number an
//! event), then publishes; an event numbered after a commit still being written waits in the
//! counter until that commit is published, or has failed (its number is then skipped).
//!
//! **A slow disk holds one session only.** Nothing writes to the store while holding the table
//! of counters, and a lock that may be held across a write (a session's counter, while its
//! next block is claimed) is waited for off the async worker, so another session's deltas
//! never wait behind it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::protocol::{Block, Delta, DeltaKind, Event, Role, SessionEventParams, TranscriptEntry};
use crate::store::{NewMessage, SeqClaim, SessionRow, Store, StoreError};

use super::RuntimeResult;
use crate::util::{lock, lock_off_worker, off_worker, wait_while};

/// Where session events go: the connected client, or nowhere during recovery.
pub trait EventSink: Send + Sync + 'static {
    fn emit(&self, event: &SessionEventParams);

    /// A streamed text or thinking delta: nearly all of what a run sends, so a sink may write
    /// it without building the event first.
    fn emit_delta(&self, delta: &Delta<'_>) {
        self.emit(&delta.to_event());
    }

    /// Whether the client has taken enough of what was sent to it. A run checks this before
    /// it reads more of its provider's stream, and waits in [`EventSink::room`] when not: a
    /// client that stops reading slows its runs (the provider's socket holds the rest), never
    /// grows the daemon (DESIGN.md, invariant 10). Nothing is ever dropped.
    fn has_room(&self) -> bool {
        true
    }

    /// Resolves once [`EventSink::has_room`] may hold again.
    fn room(&self) -> RoomFuture<'_> {
        Box::pin(std::future::ready(()))
    }
}

/// What [`EventSink::room`] returns: a sink is used as a trait object.
pub type RoomFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

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

/// How many numbers one reservation covers: a write per this many events at most.
pub const RESERVE_BLOCK: u64 = 1024;

/// How often a commit is numbered again because other daemons keep writing first; more
/// means something is wrong, and the commit fails.
const MAX_RENUMBER: u32 = 8;

/// A session's event numbering, shared by everything that publishes its events.
pub type SeqCounter = Arc<SessionSeq>;

pub struct SessionSeq {
    session_id: String,
    /// For reservations made while numbering a delta.
    store: Store,
    state: Mutex<SeqState>,
    /// Signalled when a reservation made ahead has landed (or failed).
    landed: Condvar,
}

struct SeqState {
    /// The last number handed out.
    last: u64,
    /// The highest number known to be persisted as reserved (or committed).
    reserved: u64,
    /// A reservation of the next block is being written off the event path.
    reserving_ahead: bool,
    /// A block claimed ahead that does not follow the current one (another daemon claimed in
    /// between): taken up when the current one runs out.
    ahead: Option<(u64, u64)>,
    /// Commits numbered but not yet published.
    writing: BTreeSet<u64>,
    /// Events numbered after a commit still being written, waiting for it, by `seq`.
    held: BTreeMap<u64, SessionEventParams>,
}

impl SessionSeq {
    /// A counter past every number an earlier daemon may have handed out. It owns no numbers
    /// yet: the first one it hands out claims its first block (in place, or in the commit's
    /// transaction), so making a counter never writes.
    fn new(session: &SessionRow, store: Store) -> Self {
        let start = session.next_free_seq() - 1;
        Self {
            session_id: session.id.clone(),
            store,
            state: Mutex::new(SeqState {
                last: start,
                reserved: start,
                reserving_ahead: false,
                ahead: None,
                writing: BTreeSet::new(),
                held: BTreeMap::new(),
            }),
            landed: Condvar::new(),
        }
    }

    /// The counter's state, once a reservation made ahead has landed if the owned numbers are
    /// used up: claiming another block meanwhile would skip the one on its way, and the client
    /// would see `seq` jump by a block (and fetch a transcript for events that never existed).
    /// Waited for off the async worker, like the lock.
    fn after_ahead<'a>(&'a self, state: MutexGuard<'a, SeqState>) -> MutexGuard<'a, SeqState> {
        if state.last < state.reserved || !state.reserving_ahead {
            return state;
        }
        off_worker(|| wait_while(&self.landed, state, |state| state.reserving_ahead))
    }

    /// The next number for an event published now, with the state to publish it under. Past
    /// half of the owned block, the next block is claimed ahead; only when the block is used up
    /// before that lands does this wait for it (or for a claim).
    fn next<'a>(
        self: &'a Arc<Self>,
        state: MutexGuard<'a, SeqState>,
    ) -> (MutexGuard<'a, SeqState>, u64) {
        let mut state = self.after_ahead(state);
        let seq = state.last + 1;
        if seq > state.reserved {
            self.take_next_block(&mut state);
        } else if !state.reserving_ahead
            && state.ahead.is_none()
            && state.reserved - seq < RESERVE_BLOCK / 2
        {
            self.claim_ahead(&mut state);
        }
        state.last += 1;
        let seq = state.last;
        (state, seq)
    }

    /// Moves on to the block claimed ahead, or claims one now when there is none.
    fn take_next_block(&self, state: &mut SeqState) {
        match state.ahead.take() {
            Some(block) if block.1 > state.last => adopt(state, block),
            _ => self.claim_now(state),
        }
    }

    /// Claims a block before returning, unless the database is locked: then the event goes
    /// out without one rather than wait (a notice that the database is locked, a stopped run's
    /// end), and the next number tries again.
    fn claim_now(&self, state: &mut SeqState) {
        let claimed = crate::store::without_waiting(|| {
            self.store.claim_seq_block(&self.session_id, RESERVE_BLOCK)
        });
        match claimed {
            Ok(block) => adopt(state, block),
            // The event still goes out: the client is live, and a store that cannot write
            // fails the run's next commit anyway. Only a crash right after could repeat.
            Err(e) => tracing::warn!(
                session_id = %self.session_id,
                error = %e,
                "cannot reserve event numbers"
            ),
        }
    }

    /// Claims the next block on a thread of its own; its numbers are handed out only once it
    /// has landed.
    fn claim_ahead(self: &Arc<Self>, state: &mut SeqState) {
        let counter = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("seq-reserve".into())
            .spawn(move || {
                let claimed = counter
                    .store
                    .claim_seq_block(&counter.session_id, RESERVE_BLOCK);
                let mut state = lock(&counter.state);
                state.reserving_ahead = false;
                match claimed {
                    // Right after the owned numbers: they simply go on.
                    Ok((first, last)) if first == state.reserved + 1 => state.reserved = last,
                    Ok(block) => state.ahead = Some(block),
                    // The block runs out later and one is then claimed in place.
                    Err(e) => tracing::warn!(
                        session_id = %counter.session_id,
                        error = %e,
                        "cannot reserve event numbers ahead"
                    ),
                }
                drop(state);
                counter.landed.notify_all();
            });
        // Without a thread a block is claimed in place when this one runs out, as before.
        state.reserving_ahead = spawned.is_ok();
    }

    /// Numbers a commit: the next `seq`, with the claim that makes it this writer's, and an
    /// extension of the reservation when it runs low.
    fn number_commit(&self, state: &mut SeqState, message: &mut NewMessage) {
        if state.last >= state.reserved
            && let Some(block) = state.ahead.take()
            && block.1 > state.last
        {
            adopt(state, block);
        }
        let seq = state.last + 1;
        state.last = seq;
        state.writing.insert(seq);
        message.seq = seq;
        message.seq_claim = match seq <= state.reserved {
            true => SeqClaim::Owned {
                top: state.reserved,
            },
            false => SeqClaim::Fresh,
        };
        // The commit persists its own number; it extends the mark when half a block or less
        // is left, so deltas seldom need a write of their own.
        message.reserve_seq_through = match state.reserved < seq + RESERVE_BLOCK / 2 {
            true => seq + RESERVE_BLOCK - 1,
            false => 0,
        };
    }

    /// Another daemon committed to the session after this one numbered `message`: gives its
    /// number up and numbers it again from a fresh block, past everything written. Events
    /// numbered meanwhile go out first, in order, as the message now follows them.
    fn renumber_commit(
        &self,
        sink: &dyn EventSink,
        state: &mut SeqState,
        message: &mut NewMessage,
    ) -> RuntimeResult<()> {
        state.writing.remove(&message.seq);
        self.release_held(sink, state);
        let block = self
            .store
            .claim_seq_block(&self.session_id, RESERVE_BLOCK)?;
        adopt(state, block);
        self.number_commit(state, message);
        Ok(())
    }

    /// Publishes now, or holds the event while an earlier commit is being written.
    fn publish(&self, sink: &dyn EventSink, state: &mut SeqState, event: SessionEventParams) {
        if state.writing.first().is_some_and(|&w| w < event.seq) {
            state.held.insert(event.seq, event);
        } else {
            sink.emit(&event);
        }
    }

    /// Publishes the announcement of the committed `entry` of `message`, and gives the entry
    /// back. A `messageCompleted` event takes the entry itself, which returns from it once the
    /// event is published, so a message of up to the size limit is not copied to be announced;
    /// only an event held behind an earlier commit still being written keeps a copy.
    fn announce(
        &self,
        sink: &dyn EventSink,
        state: &mut SeqState,
        message: NewMessage,
        entry: TranscriptEntry,
    ) -> RuntimeResult<TranscriptEntry> {
        let seq = entry.seq;
        let event = |event| SessionEventParams {
            session_id: message.session_id,
            seq,
            run_id: message.run_id,
            event,
        };
        let held = state.writing.first().is_some_and(|&w| w < seq);
        if held || entry.role == Role::Notice {
            self.publish(sink, state, event(announcement(&entry)));
            return Ok(entry);
        }
        let published = event(Event::MessageCompleted { entry });
        sink.emit(&published);
        match published.event {
            Event::MessageCompleted { entry } => Ok(entry),
            _ => Err(super::RuntimeError::Internal(
                "a messageCompleted event lost its entry".into(),
            )),
        }
    }

    /// Publishes the held events no commit in flight precedes, in order.
    fn release_held(&self, sink: &dyn EventSink, state: &mut SeqState) {
        let first_writing = state.writing.first().copied().unwrap_or(u64::MAX);
        while let Some(entry) = state.held.first_entry() {
            if *entry.key() > first_writing {
                break;
            }
            sink.emit(&entry.remove());
        }
    }
}

/// Makes a claimed block `(first, last)` the owned numbers, skipping past numbers another daemon
/// handed out meanwhile.
fn adopt(state: &mut SeqState, (first, last): (u64, u64)) {
    state.reserved = last;
    state.last = state.last.max(first - 1);
}

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

    /// The session's `seq` counter, shared by everything that publishes its events. A new one
    /// starts past every number an earlier daemon may have handed out.
    pub fn counter(&self, store: &Store, session_id: &str) -> RuntimeResult<SeqCounter> {
        if let Some(counter) = lock_off_worker(&self.counters).get(session_id) {
            return Ok(counter.clone());
        }
        let session = store
            .session(session_id)?
            .ok_or_else(|| super::RuntimeError::SessionNotFound(session_id.to_string()))?;
        Ok(lock_off_worker(&self.counters)
            .entry(session_id.to_string())
            .or_insert_with(|| Arc::new(SessionSeq::new(&session, store.clone())))
            .clone())
    }

    /// Publishes one event with the session's next `seq`.
    pub fn emit(&self, store: &Store, session_id: &str, run_id: Option<&str>, event: Event) {
        self.emit_numbered(store, session_id, run_id, event);
    }

    /// [`Events::emit`], answering the `seq` the event went out with (`None` when the session
    /// is gone): a notice that cannot be stored yet is stored later under that number
    /// ([`SeqClaim::Published`]).
    pub fn emit_numbered(
        &self,
        store: &Store,
        session_id: &str,
        run_id: Option<&str>,
        event: Event,
    ) -> Option<u64> {
        let counter = match self.counter(store, session_id) {
            Ok(counter) => counter,
            Err(e) => {
                tracing::warn!(session_id, error = %e, "event for a session that is gone");
                return None;
            }
        };
        let (mut state, seq) = counter.next(lock_off_worker(&counter.state));
        let event = SessionEventParams {
            session_id: session_id.to_string(),
            seq,
            run_id: run_id.map(str::to_string),
            event,
        };
        counter.publish(&*self.sink, &mut state, event);
        Some(seq)
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
        let (mut state, seq) = counter.next(lock_off_worker(&counter.state));
        let delta = Delta {
            session_id,
            seq,
            run_id,
            kind,
            message_id,
            text,
        };
        if state.writing.is_empty() {
            self.sink.emit_delta(&delta);
        } else {
            counter.publish(&*self.sink, &mut state, delta.to_event());
        }
    }

    /// Commits a message and then announces it, under one `seq`: persisted before told. A
    /// notice is announced by the `notice` event, anything else by `messageCompleted`.
    /// The message's own `seq` is ignored; the session's next one is used. The counter is not
    /// held during the write, so other events of the session can be numbered meanwhile; they
    /// are published after this one.
    pub fn commit(&self, store: &Store, mut message: NewMessage) -> RuntimeResult<TranscriptEntry> {
        let counter = self.counter(store, &message.session_id)?;
        counter.number_commit(
            &mut counter.after_ahead(lock_off_worker(&counter.state)),
            &mut message,
        );
        let mut renumbered = 0;
        loop {
            let written = store.append_message_claimed(&message);
            let mut state = lock_off_worker(&counter.state);
            if let Err(StoreError::StaleSeq(_)) = &written
                && renumbered < MAX_RENUMBER
            {
                renumbered += 1;
                let renumbered = counter.renumber_commit(&*self.sink, &mut state, &mut message);
                if let Err(e) = renumbered {
                    state.writing.remove(&message.seq);
                    counter.release_held(&*self.sink, &mut state);
                    return Err(e);
                }
                continue;
            }
            state.writing.remove(&message.seq);
            let entry = match written {
                Ok((mut entry, extended)) => {
                    if let Some(through) = extended {
                        state.reserved = state.reserved.max(through);
                    }
                    entry.blocks = std::mem::take(&mut message.blocks);
                    counter.announce(&*self.sink, &mut state, message, entry)
                }
                Err(e) => Err(e.into()),
            };
            counter.release_held(&*self.sink, &mut state);
            return entry;
        }
    }

    /// Whether the client has room for more events ([`EventSink::has_room`]).
    pub fn has_room(&self) -> bool {
        self.sink.has_room()
    }

    /// Resolves once the client may have room again ([`EventSink::room`]).
    pub async fn room(&self) {
        self.sink.room().await;
    }

    /// Forgets a deleted session's counter.
    pub fn forget(&self, session_id: &str) {
        lock(&self.counters).remove(session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Block, NoticeLevel, Role};
    use crate::store::test_support::new_session as session;
    use pretty_assertions::assert_eq;

    /// Keeps every published event's `seq`.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<u64>>);

    impl EventSink for Recorder {
        fn emit(&self, event: &SessionEventParams) {
            lock(&self.0).push(event.seq);
        }
    }

    fn notice() -> Event {
        Event::Notice {
            level: NoticeLevel::Info,
            message: "hi".into(),
            message_id: "msg_notice".into(),
        }
    }

    #[test]
    fn numbers_are_reserved_before_use_and_a_new_counter_starts_past_them() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        let recorder = Arc::new(Recorder::default());
        let events = Events::new(recorder.clone());
        events.emit(&store, &id, None, notice());
        let counter = events.counter(&store, &id).unwrap();
        events.emit_delta(&counter, &id, None, DeltaKind::Text, "msg_1", "a");
        assert_eq!(*lock(&recorder.0), vec![1, 2]);
        let stored = store.session(&id).unwrap().unwrap();
        assert_eq!((stored.last_seq, stored.seq_reserved), (0, RESERVE_BLOCK));

        // A later daemon (a fresh `Events`) continues past everything reserved.
        let later = Events::new(recorder.clone());
        later.emit(&store, &id, None, notice());
        let entry = later
            .commit(
                &store,
                NewMessage::new(
                    &id,
                    None,
                    Role::User,
                    vec![Block::Text { text: "x".into() }],
                ),
            )
            .unwrap();
        assert_eq!(
            *lock(&recorder.0),
            vec![1, 2, RESERVE_BLOCK + 1, RESERVE_BLOCK + 2]
        );
        assert_eq!(entry.seq, RESERVE_BLOCK + 2);
        // The commit extended the reservation in its own transaction.
        let stored = store.session(&id).unwrap().unwrap();
        assert_eq!(
            (stored.last_seq, stored.seq_reserved),
            (RESERVE_BLOCK + 2, 2 * RESERVE_BLOCK)
        );
    }

    /// Numbers `n` deltas of the session through `counter`.
    fn deltas(events: &Events, counter: &SeqCounter, id: &str, n: u64) {
        for _ in 0..n {
            events.emit_delta(counter, id, None, DeltaKind::Text, "msg_1", "a");
        }
    }

    /// Waits until `counter` knows `through` is reserved; a guard against a hang, not a timing.
    fn await_reserved(counter: &SeqCounter, through: u64) {
        let guard = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while lock(&counter.state).reserved < through {
            assert!(
                std::time::Instant::now() < guard,
                "numbers through {through} were never reserved"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn the_next_block_is_reserved_ahead_so_deltas_never_wait_for_the_writer() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        let recorder = Arc::new(Recorder::default());
        let events = Arc::new(Events::new(recorder.clone()));
        let counter = events.counter(&store, &id).unwrap();
        // Past half of the first block, the second is reserved ahead, off this thread.
        deltas(&events, &counter, &id, RESERVE_BLOCK / 2 + 1);
        await_reserved(&counter, 2 * RESERVE_BLOCK);
        let stored = store.session(&id).unwrap().unwrap();
        assert_eq!(stored.seq_reserved, 2 * RESERVE_BLOCK);

        // With the writer held (a slow commit elsewhere), the rest of the first block and all
        // of the second are numbered and published without waiting for it.
        let writer = store.hold_writer();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn({
            let (events, counter, id) = (events.clone(), counter.clone(), id.clone());
            move || {
                deltas(
                    &events,
                    &counter,
                    &id,
                    2 * RESERVE_BLOCK - (RESERVE_BLOCK / 2 + 1),
                );
                done.send(()).unwrap();
            }
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a delta waited for the store's writer");
        drop(writer);
        // The reservation of the third block, asked for while the writer was held, lands now.
        await_reserved(&counter, 3 * RESERVE_BLOCK);
        assert_eq!(
            *lock(&recorder.0),
            (1..=2 * RESERVE_BLOCK).collect::<Vec<_>>()
        );
        let stored = store.session(&id).unwrap().unwrap();
        assert_eq!(stored.seq_reserved, 3 * RESERVE_BLOCK);
    }

    #[test]
    fn a_block_reserved_ahead_that_lands_late_is_used_rather_than_skipped() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        let recorder = Arc::new(Recorder::default());
        let events = Events::new(recorder.clone());
        let counter = events.counter(&store, &id).unwrap();
        deltas(&events, &counter, &id, 1);
        // The reservation of the second block is asked for while a slow commit holds the
        // writer, and the first block is used up meanwhile.
        let writer = store.hold_writer();
        deltas(&events, &counter, &id, RESERVE_BLOCK - 1);
        assert!(lock(&counter.state).reserving_ahead);
        // The reservation is written, but has not reached the counter when the next number is
        // asked for (the counter is busy numbering).
        let state = lock(&counter.state);
        drop(writer);
        let guard = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while store.session(&id).unwrap().unwrap().seq_reserved < 2 * RESERVE_BLOCK {
            assert!(
                std::time::Instant::now() < guard,
                "the reservation never landed"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (state, seq) = counter.next(state);
        drop(state);
        assert_eq!(seq, RESERVE_BLOCK + 1);
        deltas(&events, &counter, &id, 1);
        let seen = lock(&recorder.0).clone();
        assert_eq!(
            seen,
            (1..=RESERVE_BLOCK)
                .chain([RESERVE_BLOCK + 2])
                .collect::<Vec<_>>()
        );
        // Nothing was reserved beyond the block that was used.
        let stored = store.session(&id).unwrap().unwrap();
        assert_eq!(stored.seq_reserved, 2 * RESERVE_BLOCK);
    }

    #[test]
    fn a_new_sessions_counter_is_made_without_waiting_for_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let (new, streaming) = (session(&store), session(&store));
        let recorder = Arc::new(Recorder::default());
        let events = Arc::new(Events::new(recorder.clone()));
        events.emit(&store, &streaming, None, notice());
        // While a slow commit holds the writer, a send on another session makes that session's
        // counter, and the streaming session's events go on meanwhile.
        let writer = store.hold_writer();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn({
            let (events, store) = (events.clone(), store.clone());
            move || {
                events.counter(&store, &new).unwrap();
                events.emit(&store, &streaming, None, notice());
                done.send(()).unwrap();
            }
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("making a counter waited for the store's writer");
        drop(writer);
        assert_eq!(*lock(&recorder.0), vec![1, 2]);
    }

    #[test]
    fn a_failed_commit_skips_its_number_and_tells_nobody() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        let recorder = Arc::new(Recorder::default());
        let events = Events::new(recorder.clone());
        let mut orphan = NewMessage::new(&id, None, Role::User, vec![]);
        // A tool call id that was already used makes the insert fail inside the transaction.
        orphan.run_id = Some("run_x".into());
        orphan.blocks = vec![
            Block::ToolCall {
                id: "call_1".into(),
                name: "read_file".into(),
                input: serde_json::json!({}),
            };
            2
        ];
        assert!(events.commit(&store, orphan).is_err());
        events.emit(&store, &id, None, notice());
        assert_eq!(*lock(&recorder.0), vec![2]);
    }

    #[test]
    fn an_event_numbered_during_a_slow_commit_waits_for_it_without_blocking() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        // Long enough that the other side surely finishes first, even on a loaded machine.
        store.slow_commits(&id, std::time::Duration::from_secs(4));
        let recorder = Arc::new(Recorder::default());
        let events = Arc::new(Events::new(recorder.clone()));
        events.emit(&store, &id, None, notice());
        let counter = events.counter(&store, &id).unwrap();
        let committing = std::thread::spawn({
            let (events, store, id) = (events.clone(), store.clone(), id.clone());
            move || {
                let text = vec![Block::Text { text: "x".into() }];
                events
                    .commit(&store, NewMessage::new(&id, None, Role::User, text))
                    .unwrap()
                    .seq
            }
        });
        while lock(&counter.state).writing.is_empty() {
            std::thread::yield_now();
        }
        // Numbered at once, published only after the commit before it.
        events.emit(&store, &id, None, notice());
        assert!(!committing.is_finished(), "the event waited for the write");
        assert_eq!(*lock(&recorder.0), vec![1]);
        assert_eq!(committing.join().unwrap(), 2);
        assert_eq!(*lock(&recorder.0), vec![1, 2, 3]);
    }

    #[test]
    fn two_daemons_never_share_a_number_and_messages_keep_commit_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let (store_a, store_b) = (Store::open(&path).unwrap(), Store::open(&path).unwrap());
        let id = session(&store_a);
        let (seen_a, seen_b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        let (a, b) = (Events::new(seen_a.clone()), Events::new(seen_b.clone()));
        let text =
            |t: &str| NewMessage::new(&id, None, Role::User, vec![Block::Text { text: t.into() }]);
        // A numbers from its block; B, starting later, from one above it.
        a.emit(&store_a, &id, None, notice());
        b.emit(&store_b, &id, None, notice());
        let first_b = b.commit(&store_b, text("from b")).unwrap();
        // A's next number is below B's message: its commit is numbered again, past it.
        let then_a = a.commit(&store_a, text("from a")).unwrap();
        assert!(then_a.seq > first_b.seq, "{} {}", then_a.seq, first_b.seq);
        let numbers: Vec<u64> = lock(&seen_a.0)
            .iter()
            .chain(lock(&seen_b.0).iter())
            .copied()
            .collect();
        let mut unique = numbers.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), numbers.len(), "{numbers:?}");
        // Each daemon's own stream still only goes up.
        for seen in [&seen_a, &seen_b] {
            let seen = lock(&seen.0).clone();
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        }
        let order: Vec<String> = store_a
            .messages_after(&id, 0, 10)
            .unwrap()
            .into_iter()
            .map(|m| match &m.blocks[0] {
                Block::Text { text } => text.clone(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, ["from b", "from a"]);
    }
}
