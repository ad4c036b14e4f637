//! The single source of truth: one SQLite file in WAL mode.
//!
//! Every state change a client is told about is committed here first.
//!
//! The store never blocks an async worker. Its methods stay synchronous, so callers need no
//! `.await`, and each runs its SQLite work through `off_worker`: on tokio's multi-threaded
//! runtime that hands the worker's other tasks to another thread for the duration
//! (`block_in_place`), so a slow commit (a slow fsync) holds up only the task that waits for
//! it, never another session's stream. Writes go through one connection, because SQLite
//! serialises writers anyway; reads use connections of their own, which in WAL mode read the
//! last commit while a write is in progress, so a read never queues behind a write.
//!
//! A write waits for a database another program holds ([`LOCK_WAIT`]); two kinds of work
//! choose otherwise: what must not wait at all writes [`without_waiting`], and input the client
//! was told is kept writes [`until_free`].

mod blob_delta;
mod checkpoints;
mod command_processes;
mod delegations;
mod file_changes;
mod forks;
mod images;
mod leases;
mod listing;
mod mcp;
mod messages;
mod migrations;
mod pending;
mod plans;
#[cfg(test)]
mod query_plans;
mod runs;
mod session_effort;
mod session_titles;
mod sessions;
mod spend;
mod sql_text;
mod tool_calls;
mod usage;
mod workspace_rules;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

// A poisoned connection is still usable: every write is a transaction.
use crate::util::{lock, off_worker};

pub use checkpoints::{
    MessagePlace, NewCheckpoint, PlannedFile, RestoreStep, RewindJournal, RewindScope, TurnFiles,
    content_hash,
};
pub use command_processes::CommandRow;
pub use delegations::{DelegationRow, EXPIRED, FailedCall, Lineage, ToolSet};
pub use file_changes::{FileChange, FileDiffRow, SNAPSHOT_CAP};
pub use leases::{DEFAULT_LEASE, LEASE_MS_VAR, LeaseClaim, LeaseRow, host_identity};
pub use listing::{LastModelMessage, ListedFacts};
pub use messages::{NewMessage, NoteDeletion, SeqClaim};
pub use migrations::SCHEMA_VERSION;
pub use pending::{CancelOutcome, EarlierSend, PendingRow, Settle, Settled};
pub use runs::{RunRow, RunStatus};
pub use sessions::{NewSession, SessionPage, SessionRow, SessionUpdate};
pub use spend::KeptSpend;
pub use sql_text::TextError;
pub use tool_calls::{
    Answer, ApprovalAnswer, ApprovalOutcome, ApprovalRow, ApprovalStatus, LatestApproval,
    ToolCallRow,
};
pub use usage::{UsageRow, elapsed_ms};
pub use workspace_rules::WorkspaceRuleRow;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the folder for the database {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the database {path}: {source}")]
    CreateFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error(
        "the database was written by a newer sidechat (schema version {found}, this build knows {known})"
    )]
    TooNew { found: i64, known: i64 },
    #[error(
        "{SLOW_COMMIT_VAR} must be `<session id>:<milliseconds>`, not {0:?} (it is for tests only)"
    )]
    BadSlowCommit(String),
    #[error("{LEASE_MS_VAR} must be a number of milliseconds of at least 100, not {0:?}")]
    BadLeaseMs(String),
    #[error("{LOCK_WAIT_VAR} must be a number of milliseconds, not {0:?}")]
    BadLockWait(String),
    #[error("{MAX_PAGES_VAR} must be a number of pages, not {0:?} (it is for tests only)")]
    BadMaxPages(String),
    /// Another program held the database's write lock for longer than a write waits.
    #[error(
        "the database is locked by another program (waited {} s); nothing was saved, so try again once it is free",
        .0.as_secs()
    )]
    Locked(Duration),
    /// Another daemon took the session's run over (this daemon's lease expired).
    #[error(
        "session {session_id}: run {run_id} is no longer driven by this process; another sidechat process took it over"
    )]
    LeaseLost { session_id: String, run_id: String },
    /// The message's `seq` is no longer past the session's last message: another daemon
    /// committed one meanwhile. The caller numbers it again.
    #[error("session {0}: another process wrote to the transcript first")]
    StaleSeq(String),
}

impl StoreError {
    /// The database cannot take a write now but may later: another program held it past the
    /// wait, or the disk is full.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Locked(_) => true,
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => {
                e.code == rusqlite::ErrorCode::DiskFull
            }
            _ => false,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// How many connections read beside the writer.
const READERS: usize = 2;

/// Test-only: `<session id>:<milliseconds>` makes every message commit of that session sleep
/// that long while it holds the writer, as a slow disk would. It exists for the load benchmark
/// and for tests of the store's concurrency; it changes nothing else, and is logged when set.
pub const SLOW_COMMIT_VAR: &str = "SIDECHAT_TEST_SLOW_COMMIT";

/// Test-only: how long, in milliseconds, a write waits for a database another program holds
/// before it fails (default [`LOCK_WAIT`]). Logged when set.
pub const LOCK_WAIT_VAR: &str = "SIDECHAT_LOCK_WAIT_MS";

/// Test-only: the most pages the database may grow to through this daemon (SQLite's
/// `max_page_count`), so a test can fill it up as a full disk would, and free room again by
/// deleting through a connection of its own. Logged when set.
pub const MAX_PAGES_VAR: &str = "SIDECHAT_TEST_MAX_PAGES";

/// How many pages the WAL grows to before a commit checkpoints it (SQLite's default, said
/// here so the bound below is plain): 1000 pages of 4 KiB.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 1000;

/// The size in bytes the WAL file is cut back to when it restarts (`journal_size_limit`):
/// under steady use it stays below this, or below one checkpoint's worth plus the largest
/// transaction when a reader held the checkpoint back.
const WAL_LIMIT: i64 = 16 * 1024 * 1024;

/// How long a write waits, by default, for a database another program holds.
pub const LOCK_WAIT: Duration = Duration::from_secs(60);

/// How long one attempt of a write waits for the lock (SQLite's busy timeout) before the
/// write counts as waiting for another program and tries again.
const LOCK_ATTEMPT: Duration = Duration::from_millis(500);

/// A cheap handle: clones share the same connections.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

struct Shared {
    /// The one connection that writes.
    writer: Mutex<Connection>,
    /// Connections that only read; empty for an in-memory database, where the writer reads.
    readers: Vec<Mutex<Connection>>,
    /// Which reader a read waits for when all are busy.
    next_reader: AtomicUsize,
    /// See [`SLOW_COMMIT_VAR`].
    slow_commit: OnceLock<SlowCommit>,
    /// This daemon's name in leases (see [`Store::owner`]).
    owner: String,
    /// How long a lease lasts without a heartbeat.
    lease: Duration,
    /// How long a write waits for a database another program holds.
    lock_wait: Duration,
    /// Writes waiting right now for a database another program holds.
    lock_waits: AtomicUsize,
}

thread_local! {
    /// Set by [`without_waiting`] for the writes made inside it on this thread.
    static AT_ONCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

tokio::task_local! {
    /// Set by [`until_free`] for the writes of the task it wraps.
    static UNTIL_FREE: ();
}

/// Runs `work` with writes that do not wait for a database another program holds, nor for a
/// write of this daemon that waits for it: each fails with [`StoreError::Locked`] instead, so
/// the caller can keep what it wanted to write for later. What must not wait for the store (a
/// stopped run telling its client that it ended, numbering a notice that the store is locked)
/// writes this way; a write that finds the database free is made as usual.
pub fn without_waiting<R>(work: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            AT_ONCE.with(|at_once| at_once.set(self.0));
        }
    }
    let _restore = Restore(AT_ONCE.with(|at_once| at_once.replace(true)));
    work()
}

/// Runs `task` with writes that wait for a database another program holds however long it
/// stays locked, instead of giving up after the lock wait: input the client was told is kept
/// is stored once the database is free, never dropped.
pub async fn until_free<F: std::future::Future>(task: F) -> F::Output {
    UNTIL_FREE.scope((), task).await
}

/// Counts a write among those waiting for the lock while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether SQLite refused because another connection holds the lock (or wrote since this
/// transaction read): the write can be tried again.
fn is_busy(error: &StoreError) -> bool {
    matches!(error, StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
        if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

#[derive(Debug, Clone, PartialEq)]
struct SlowCommit {
    session_id: String,
    delay: Duration,
}

impl SlowCommit {
    fn parse(value: &str) -> StoreResult<Self> {
        let bad = || StoreError::BadSlowCommit(value.to_string());
        let (session_id, ms) = value.rsplit_once(':').ok_or_else(bad)?;
        let ms: u64 = ms.trim().parse().map_err(|_| bad())?;
        if session_id.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            session_id: session_id.to_string(),
            delay: Duration::from_millis(ms),
        })
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> StoreResult<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::private_files::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        // Private from the start: SQLite gives the -wal and -shm files the database's mode.
        crate::private_files::create_file(path).map_err(|source| StoreError::CreateFile {
            path: path.to_path_buf(),
            source,
        })?;
        let mut lock_wait = LOCK_WAIT;
        if let Some(value) = std::env::var(LOCK_WAIT_VAR).ok().filter(|v| !v.is_empty()) {
            let ms: u64 = value
                .trim()
                .parse()
                .map_err(|_| StoreError::BadLockWait(value.clone()))?;
            tracing::warn!(
                lock_wait_ms = ms,
                "{LOCK_WAIT_VAR} is set: writes wait this long for a locked database"
            );
            lock_wait = Duration::from_millis(ms);
        }
        let writer = Self::prepare(Connection::open(path)?, lock_wait)?;
        if let Some(value) = std::env::var(MAX_PAGES_VAR).ok().filter(|v| !v.is_empty()) {
            let pages: i64 = value
                .trim()
                .parse()
                .ok()
                .filter(|pages| *pages > 0)
                .ok_or_else(|| StoreError::BadMaxPages(value.clone()))?;
            tracing::warn!(
                pages,
                "{MAX_PAGES_VAR} is set: the database cannot grow past this many pages"
            );
            writer
                .pragma_update_and_check(None, "max_page_count", pages, |r| r.get::<_, i64>(0))?;
        }
        // Opened after the writer has made the file a WAL database.
        let readers = (0..READERS)
            .map(|_| open_reader(path))
            .collect::<StoreResult<Vec<_>>>()?;
        let lease = leases::lease_from_env().map_err(StoreError::BadLeaseMs)?;
        if let Some(lease) = lease {
            tracing::warn!(
                lease_ms = lease.as_millis() as u64,
                "{LEASE_MS_VAR} is set: run leases last this long"
            );
        }
        let mut store = Self::with_connections(writer, readers, lease.unwrap_or(DEFAULT_LEASE));
        if let Some(shared) = Arc::get_mut(&mut store.shared) {
            shared.lock_wait = lock_wait;
        }
        if let Some(value) = std::env::var(SLOW_COMMIT_VAR)
            .ok()
            .filter(|v| !v.is_empty())
        {
            let slow = SlowCommit::parse(&value)?;
            tracing::warn!(
                session_id = %slow.session_id,
                delay_ms = slow.delay.as_millis() as u64,
                "{SLOW_COMMIT_VAR} is set: commits of this session are slowed on purpose"
            );
            store.slow_commits(&slow.session_id, slow.delay);
        }
        Ok(store)
    }

    /// A private in-memory database, for unit tests and benchmarks.
    pub fn open_in_memory() -> StoreResult<Self> {
        let writer = Self::prepare(Connection::open_in_memory()?, LOCK_WAIT)?;
        Ok(Self::with_connections(writer, Vec::new(), DEFAULT_LEASE))
    }

    /// Test-only (see [`SLOW_COMMIT_VAR`]): every later message commit of `session_id` sleeps
    /// `delay` while it holds the writer. Set once; a second call changes nothing.
    pub fn slow_commits(&self, session_id: &str, delay: Duration) {
        let _ = self.shared.slow_commit.set(SlowCommit {
            session_id: session_id.to_string(),
            delay,
        });
    }

    fn with_connections(writer: Connection, readers: Vec<Connection>, lease: Duration) -> Self {
        // The tail of a v7 id is random; its head is the clock, which two daemons may share.
        let random = uuid::Uuid::now_v7().simple().to_string();
        Self {
            shared: Arc::new(Shared {
                writer: Mutex::new(writer),
                readers: readers.into_iter().map(Mutex::new).collect(),
                next_reader: AtomicUsize::new(0),
                slow_commit: OnceLock::new(),
                owner: format!("pid{}-{}", std::process::id(), &random[20..]),
                lease,
                lock_wait: LOCK_WAIT,
                lock_waits: AtomicUsize::new(0),
            }),
        }
    }

    /// Readies the writer: WAL, foreign keys and the schema. Two daemons may open a new file
    /// at the same moment; while the other one holds the database (making it a WAL file,
    /// building its schema), each step is tried again, for up to `lock_wait`.
    fn prepare(mut conn: Connection, lock_wait: Duration) -> StoreResult<Connection> {
        conn.busy_timeout(LOCK_ATTEMPT)?;
        stable_plans(&conn)?;
        // A transaction takes the write lock when it begins: one that read first and then
        // found another daemon had written meanwhile could only fail, not wait.
        conn.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        let started = std::time::Instant::now();
        loop {
            match Self::set_up(&mut conn) {
                Err(e) if is_busy(&e) && started.elapsed() < lock_wait => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                done => return done.map(|()| conn),
            }
        }
    }

    /// The steps of [`Store::prepare`], each harmless to repeat.
    fn set_up(conn: &mut Connection) -> StoreResult<()> {
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        // A brand-new file holds nothing to lose: build its schema without waiting for the disk
        // (eight fsyncs otherwise), then switch to the durable setting before any data.
        if version == 0 {
            conn.pragma_update(None, "synchronous", "OFF")?;
        }
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrations::apply(conn)?;
        // WAL + NORMAL: a commit survives a killed process; only power loss can lose the tail.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // The WAL is checkpointed (passively) whenever it passes `wal_autocheckpoint` pages,
        // and restarts from its beginning once a checkpoint has caught up; without a limit
        // its file keeps the largest size it ever reached. This truncates it back to
        // `WAL_LIMIT` at each restart.
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
        conn.pragma_update(None, "journal_size_limit", WAL_LIMIT)?;
        Ok(())
    }

    /// Runs `work` on the writer, off the async workers. While another program (another
    /// daemon, a backup, a `sqlite3` shell) holds the database's write lock, `work` is tried
    /// again until the lock clears, for up to the lock wait: input waits instead of being
    /// refused. Each attempt is a transaction of its own, so a failed one left nothing.
    fn write<R>(&self, mut work: impl FnMut(&mut Connection) -> StoreResult<R>) -> StoreResult<R> {
        if AT_ONCE.with(|at_once| at_once.get()) {
            return off_worker(|| self.write_at_once(work));
        }
        let until_free = UNTIL_FREE.try_with(|_| ()).is_ok();
        off_worker(|| {
            let mut conn = lock(&self.shared.writer);
            let mut started = std::time::Instant::now();
            let mut waiting = None;
            loop {
                match work(&mut conn) {
                    Err(e)
                        if is_busy(&e)
                            && until_free
                            && started.elapsed() >= self.shared.lock_wait =>
                    {
                        // Kept input waits on, but lets every other write have its turn
                        // between waits (each gives up after its own), so none of them waits
                        // behind it for as long as the lock lasts.
                        drop(conn);
                        std::thread::sleep(Duration::from_millis(20));
                        conn = lock(&self.shared.writer);
                        started = std::time::Instant::now();
                    }
                    Err(e) if is_busy(&e) => {
                        let waited = started.elapsed();
                        if waited >= self.shared.lock_wait {
                            tracing::error!(
                                waited_ms = waited.as_millis() as u64,
                                "gave up waiting for a locked database"
                            );
                            return Err(StoreError::Locked(waited));
                        }
                        if waiting.is_none() {
                            tracing::warn!("the database is locked by another program; waiting");
                            waiting = Some(Waiting::new(&self.shared.lock_waits));
                        }
                        // SQLite's busy handler has waited already; a short pause between
                        // attempts spares the CPU when the refusal was immediate.
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    done => return done,
                }
            }
        })
    }

    /// [`Store::write`] inside [`without_waiting`]: the writer is waited for only while no
    /// write waits for the lock, and the lock for one attempt (SQLite's busy timeout).
    fn write_at_once<R>(
        &self,
        work: impl FnOnce(&mut Connection) -> StoreResult<R>,
    ) -> StoreResult<R> {
        let mut conn = loop {
            match self.shared.writer.try_lock() {
                Ok(conn) => break conn,
                Err(TryLockError::Poisoned(poison)) => break poison.into_inner(),
                Err(TryLockError::WouldBlock) if self.lock_waits() > 0 => {
                    return Err(StoreError::Locked(Duration::ZERO));
                }
                Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        match work(&mut conn) {
            Err(e) if is_busy(&e) => Err(StoreError::Locked(LOCK_ATTEMPT)),
            done => done,
        }
    }

    /// How many writes are waiting right now for a database another program holds: a caller
    /// can tell its client why an answer is late.
    pub fn lock_waits(&self) -> usize {
        self.shared.lock_waits.load(Ordering::SeqCst)
    }

    /// Runs `work` on a reader (an idle one if any), off the async workers.
    fn read<R>(&self, work: impl FnOnce(&Connection) -> StoreResult<R>) -> StoreResult<R> {
        off_worker(|| {
            let readers = &self.shared.readers;
            if readers.is_empty() {
                return work(&lock(&self.shared.writer));
            }
            for reader in readers {
                match reader.try_lock() {
                    Ok(conn) => return work(&conn),
                    Err(TryLockError::Poisoned(poison)) => return work(&poison.into_inner()),
                    Err(TryLockError::WouldBlock) => {}
                }
            }
            let pick = self.shared.next_reader.fetch_add(1, Ordering::Relaxed) % readers.len();
            work(&lock(&readers[pick]))
        })
    }

    /// Holds the writer as a slow commit would, for tests of what must not wait for it.
    #[cfg(test)]
    pub(crate) fn hold_writer(&self) -> std::sync::MutexGuard<'_, Connection> {
        lock(&self.shared.writer)
    }

    /// Sleeps before a message commit of the session named by [`SLOW_COMMIT_VAR`], if any.
    fn slow_commit(&self, session_id: &str) {
        if let Some(slow) = self.shared.slow_commit.get()
            && slow.session_id == session_id
        {
            std::thread::sleep(slow.delay);
        }
    }
}

/// A connection that only reads (the writer has already set the file up).
fn open_reader(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    stable_plans(&conn)?;
    Ok(conn)
}

/// Turns on SQLite's query planner stability guarantee: a statement's plan never depends on
/// the values bound to it. Without it, a statement with a bound `LIMIT ?` (a `session/list`
/// page, a transcript page) is marked to be planned again whenever that value is bound, which
/// is every time it runs, so a cached statement was compiled anew on each use.
fn stable_plans(conn: &Connection) -> StoreResult<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// What the crate's tests of the store, and of what is built on it, share.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{NewSession, Store};

    /// A new demo session titled `title`; its id.
    pub(crate) fn session_titled(store: &Store, title: &str) -> String {
        store
            .insert_session(&NewSession {
                title: title.into(),
                account: "demo".into(),
                model: "demo".into(),
                system_prompt: None,
                workspace_root: None,
                max_steps: 25,
                cap_usd: None,
                max_seconds: None,
                rollover_secs: None,
            })
            .expect("a new session")
            .id
    }

    /// A new demo session; its id.
    pub(crate) fn new_session(store: &Store) -> String {
        session_titled(store, "t")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{new_session, session_titled};
    use super::*;

    #[test]
    fn opening_twice_keeps_data_and_uses_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/sidechat.db");
        let id = session_titled(&Store::open(&path).unwrap(), "kept");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.session(&id).unwrap().unwrap().title, "kept");
        let mode: String = store
            .read(|conn| Ok(conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    fn user_message(session_id: &str, seq: u64) -> NewMessage {
        NewMessage {
            seq,
            ..NewMessage::new(
                session_id,
                None,
                crate::protocol::Role::User,
                vec![crate::protocol::Block::Text { text: "hi".into() }],
            )
        }
    }

    /// Long enough that the other side surely finishes first, even on a loaded machine.
    const SLOW: Duration = Duration::from_secs(4);

    #[test]
    fn a_read_does_not_wait_for_a_slow_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let slow = new_session(&store);
        store.slow_commits(&slow, SLOW);
        let writer = std::thread::spawn({
            let store = store.clone();
            let slow = slow.clone();
            move || store.append_message(&user_message(&slow, 1)).unwrap()
        });
        // Wait until the write holds the writer.
        while store.shared.writer.try_lock().is_ok() {
            std::thread::yield_now();
        }
        assert_eq!(store.session(&slow).unwrap().unwrap().last_seq, 0);
        assert!(!writer.is_finished(), "the read waited for the write");
        assert_eq!(writer.join().unwrap().seq, 1);
        assert_eq!(store.session(&slow).unwrap().unwrap().last_seq, 1);
    }

    #[test]
    fn a_slow_commit_leaves_the_only_async_worker_free() {
        let store = Store::open_in_memory().unwrap();
        let slow = new_session(&store);
        store.slow_commits(&slow, SLOW);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let commit = tokio::spawn({
                let store = store.clone();
                async move {
                    store.append_message(&user_message(&slow, 1)).unwrap();
                }
            });
            while store.shared.writer.try_lock().is_ok() {
                tokio::task::yield_now().await;
            }
            // Another task keeps running on the one worker while the commit sleeps.
            let ticks = tokio::spawn(async {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
            ticks.await.unwrap();
            assert!(!commit.is_finished(), "the ticks waited for the commit");
            commit.await.unwrap();
        });
    }

    /// Another program's connection holding the database's write lock until dropped.
    fn hold_write_lock(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        conn
    }

    #[test]
    fn a_write_without_waiting_is_refused_while_another_program_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = Store::open(&path).unwrap();
        let id = new_session(&store);
        let lock = hold_write_lock(&path);
        let refused = without_waiting(|| store.append_message(&user_message(&id, 1)));
        assert!(matches!(refused, Err(StoreError::Locked(_))), "{refused:?}");
        drop(lock);
        let written = without_waiting(|| store.append_message(&user_message(&id, 1)));
        assert_eq!(written.unwrap().seq, 1);
    }

    #[test]
    fn a_write_until_free_outlasts_the_lock_wait_and_lets_other_writes_give_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut store = Store::open(&path).unwrap();
        Arc::get_mut(&mut store.shared).unwrap().lock_wait = Duration::from_millis(600);
        let kept = new_session(&store);
        let other = new_session(&store);
        let lock = hold_write_lock(&path);
        let patient = std::thread::spawn({
            let store = store.clone();
            move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                runtime.block_on(until_free(async {
                    store.append_message(&user_message(&kept, 1))
                }))
            }
        });
        while store.lock_waits() == 0 {
            std::thread::yield_now();
        }
        // Another write has its turn, and gives up after its own wait.
        let refused = store.append_message(&user_message(&other, 1));
        assert!(matches!(refused, Err(StoreError::Locked(_))), "{refused:?}");
        assert!(!patient.is_finished(), "the kept write gave up");
        drop(lock);
        assert_eq!(patient.join().unwrap().unwrap().seq, 1);
    }

    #[test]
    fn the_slow_commit_setting_is_checked() {
        assert_eq!(
            SlowCommit::parse("ses_1:250").unwrap(),
            SlowCommit {
                session_id: "ses_1".into(),
                delay: Duration::from_millis(250)
            }
        );
        for bad in ["ses_1", ":250", "ses_1:soon", "ses_1:-1"] {
            assert!(
                matches!(SlowCommit::parse(bad), Err(StoreError::BadSlowCommit(v)) if v == bad),
                "{bad}"
            );
        }
    }
}
