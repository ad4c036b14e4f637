//! A database another program holds (another daemon mid-commit, a backup, a `sqlite3` shell):
//! input is kept and stored once it is free, with a notice saying so; a stop answers, and its
//! run ends, at once; a run's end that cannot be recorded yet is recorded by the heartbeat once
//! the database is free.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::run_end::{DeferredEnd, Ending};
use super::{Inner, Runtime};
use crate::protocol::{Block, Event, NoticeLevel, Role};
use crate::store::{NewMessage, SeqClaim, Store, StoreError, UsageRow};
use crate::util::{lock, new_id};

/// How often a waiting request looks whether the store waits for the lock.
const LOCK_POLL: Duration = Duration::from_millis(100);

/// What a client is told while its input waits for the database.
pub const LOCKED_NOTICE: &str = "The database is locked by another program; your input is kept and is saved as soon as the database is free.";

/// Resolves once the store waits for a database another program holds.
pub async fn lock_held(store: &Store) {
    loop {
        tokio::time::sleep(LOCK_POLL).await;
        if store.lock_waits() > 0 {
            return;
        }
    }
}

impl Runtime {
    /// Tells the session's clients, with a `notice`, that input waits for a database another
    /// program holds and is kept; once while such a notice is not stored yet. The notice
    /// cannot be stored first (the database is what is locked): it goes out at once and is
    /// stored, under the same id and `seq`, once the database is free, so a client that loads
    /// the transcript later sees it where a live client did.
    pub(super) fn tell_locked(&self, session_id: &str) {
        let inner = &self.inner;
        if !lock(&inner.locked_notices).insert(session_id.to_string()) {
            return;
        }
        let message_id = new_id("msg");
        let Some(seq) = inner.events.emit_numbered(
            &inner.store,
            session_id,
            None,
            Event::Notice {
                level: NoticeLevel::Warning,
                message: LOCKED_NOTICE.into(),
                message_id: message_id.clone(),
            },
        ) else {
            lock(&inner.locked_notices).remove(session_id);
            return;
        };
        let mut notice = NewMessage::new(
            session_id,
            None,
            Role::Notice,
            vec![Block::Notice {
                level: NoticeLevel::Warning,
                text: LOCKED_NOTICE.into(),
            }],
        );
        notice.id = Some(message_id);
        notice.seq = seq;
        notice.seq_claim = SeqClaim::Published;
        // Off the request, which answers at once.
        let inner = Arc::downgrade(inner);
        std::thread::spawn(move || store_published(&inner, notice));
    }
}

/// How often a published notice is tried at once while the database still refuses it (each
/// try waits for the lock as long as any write does); after that the heartbeat keeps trying.
const NOTICE_TRIES: usize = 5;

/// Stores a message already published under its `seq`, once the database takes it: tried
/// [`NOTICE_TRIES`] times here, then handed to the heartbeat, which tries again on each beat
/// until the database takes it. A client that loads the transcript later sees it where a live
/// client did, however long the database stayed locked.
fn store_published(inner: &Weak<Inner>, message: NewMessage) {
    for _ in 0..NOTICE_TRIES {
        let Some(inner) = inner.upgrade() else { return };
        match inner.store.append_message_claimed(&message) {
            Ok(_) => return inner.notice_stored(&message),
            Err(e) if e.is_unavailable() => {
                tracing::warn!(error = %e, "still cannot store the notice that the database is locked");
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot store the notice that the database is locked");
                return inner.notice_stored(&message);
            }
        }
    }
    if let Some(inner) = inner.upgrade() {
        tracing::warn!(
            "the notice that the database is locked is stored once the database is free"
        );
        lock(&inner.deferred_notices).push(message);
    }
}

impl Inner {
    /// Keeps a run's end to record on a later heartbeat.
    pub(super) fn defer_end(&self, end: DeferredEnd) {
        lock(&self.deferred_ends).push(end);
    }

    /// Stores the notices [`store_published`] could not store yet, in the order they went out;
    /// those the database still refuses wait for the next heartbeat.
    pub(super) fn store_deferred_notices(&self) {
        store_in_order(&self.deferred_notices, |notice| {
            let stored = self.store.append_message_claimed(notice).map(drop);
            if !matches!(&stored, Err(e) if e.is_unavailable()) {
                self.notice_stored(notice);
            }
            stored.map_err(|e| (e, "cannot store the notice that the database is locked"))
        });
    }

    /// The session's notice that the database is locked is stored (or given up): the next
    /// lock is told again.
    fn notice_stored(&self, notice: &NewMessage) {
        lock(&self.locked_notices).remove(&notice.session_id);
    }

    /// Keeps a usage line the database refused, to store on a later heartbeat (before its
    /// run's end).
    pub(super) fn defer_usage(&self, session_id: &str, row: UsageRow) {
        lock(&self.deferred_usage).push((session_id.to_string(), row));
    }

    /// Stores the usage lines kept by [`Inner::defer_usage`], in order; those the database
    /// still refuses wait for the next heartbeat.
    fn store_deferred_usage(&self) {
        store_in_order(&self.deferred_usage, |(session_id, row)| {
            self.store
                .insert_usage(session_id, row)
                .map_err(|e| (e, "cannot store a usage line"))
        });
    }

    /// Records the ends kept by [`Inner::defer_end`] by the path of every run's end
    /// ([`Inner::end_run`]): the queue is handed over and a parent run waiting for one of them
    /// (a delegated task's) resumed, as a run's own end does. Those that still cannot be
    /// recorded wait for the next heartbeat.
    pub(super) fn record_deferred_ends(self: &Arc<Self>) {
        // A run's usage goes in before its end, so its cost is whole once it has ended.
        self.store_deferred_usage();
        let ends = std::mem::take(&mut *lock(&self.deferred_ends));
        for mut end in ends {
            let usage_waits = lock(&self.deferred_usage)
                .iter()
                .any(|(_, row)| row.run_id == end.run_id);
            if usage_waits {
                lock(&self.deferred_ends).push(end);
                continue;
            }
            while let Some(message) = end.messages.first().cloned() {
                match self.commit(message) {
                    Ok(_) => {
                        end.messages.remove(0);
                    }
                    Err(e) => {
                        tracing::warn!(run_id = %end.run_id, error = %e, "still cannot store a run's answer");
                        break;
                    }
                }
            }
            if !end.messages.is_empty() {
                lock(&self.deferred_ends).push(end);
                continue;
            }
            let ending = Ending {
                session_id: &end.session_id,
                run_id: &end.run_id,
                shutting_down: false,
            };
            let recorded = self.end_run(ending, || self.record_deferred(&end), || {});
            if !recorded {
                lock(&self.deferred_ends).push(end);
            }
        }
    }

    /// Records a kept end; false while the database still refuses it.
    fn record_deferred(&self, end: &DeferredEnd) -> bool {
        match self
            .store
            .finish_run(&end.run_id, end.reason, end.error.as_deref())
        {
            Ok(()) => {
                tracing::info!(run_id = %end.run_id, "recorded the end of a run once the database was free");
                true
            }
            Err(e) => {
                tracing::warn!(run_id = %end.run_id, error = %e, "still cannot record the end of a run");
                false
            }
        }
    }
}

/// Stores `queue`'s items in order with `store`. From the first one the database refuses on,
/// they wait, in order and ahead of any queued meanwhile, for the next heartbeat; one refused
/// for another reason is logged and dropped.
fn store_in_order<T>(
    queue: &std::sync::Mutex<Vec<T>>,
    mut store: impl FnMut(&T) -> Result<(), (StoreError, &'static str)>,
) {
    let items = std::mem::take(&mut *lock(queue));
    let mut waiting = Vec::new();
    for item in items {
        if !waiting.is_empty() {
            waiting.push(item);
            continue;
        }
        match store(&item) {
            Ok(()) => {}
            Err((e, _)) if e.is_unavailable() => waiting.push(item),
            Err((e, what)) => tracing::warn!(error = %e, "{what}"),
        }
    }
    if !waiting.is_empty() {
        let mut deferred = lock(queue);
        waiting.append(&mut deferred);
        *deferred = waiting;
    }
}
