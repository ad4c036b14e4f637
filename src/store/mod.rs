//! The single source of truth: one SQLite file in WAL mode.
//!
//! Every state change a client is told about is committed here first. Calls are short and
//! synchronous; the connection sits behind a mutex because SQLite serialises writers anyway.

mod file_changes;
mod messages;
mod migrations;
mod pending;
mod runs;
mod sessions;
mod sql_text;
mod tool_calls;
mod usage;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::Connection;

pub use file_changes::{FileChange, FileDiffRow, SNAPSHOT_CAP};
pub use messages::{NewMessage, Settle, Settled};
pub use pending::{CancelOutcome, EarlierSend, PendingRow};
pub use runs::{RunRow, RunStatus};
pub use sessions::{NewSession, SessionPage, SessionRow, SessionUpdate};
pub use sql_text::TextError;
pub use tool_calls::{ApprovalOutcome, ApprovalRow, ApprovalStatus, ToolCallRow};
pub use usage::{UsageRow, elapsed_ms};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the folder for the database {path}: {source}")]
    CreateDir {
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
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A cheap handle: clones share one database connection.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> StoreResult<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(path)?;
        Self::prepare(conn)
    }

    /// A private in-memory database, for unit tests and benchmarks.
    pub fn open_in_memory() -> StoreResult<Self> {
        Self::prepare(Connection::open_in_memory()?)
    }

    fn prepare(mut conn: Connection) -> StoreResult<Self> {
        conn.busy_timeout(Duration::from_secs(5))?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        // A brand-new file holds nothing to lose: build its schema without waiting for the disk
        // (eight fsyncs otherwise), then switch to the durable setting before any data.
        if version == 0 {
            conn.pragma_update(None, "synchronous", "OFF")?;
        }
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrations::apply(&mut conn)?;
        // WAL + NORMAL: a commit survives a killed process; only power loss can lose the tail.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The connection; a poisoned lock is still usable because every write is a transaction.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_twice_keeps_data_and_uses_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/sidechat.db");
        let id = {
            let store = Store::open(&path).unwrap();
            store
                .insert_session(&NewSession {
                    title: "kept".into(),
                    account: "demo".into(),
                    model: "demo".into(),
                    system_prompt: None,
                    workspace_root: None,
                    max_steps: 25,
                    cap_usd: None,
                    max_seconds: None,
                })
                .unwrap()
                .id
        };
        let store = Store::open(&path).unwrap();
        assert_eq!(store.session(&id).unwrap().unwrap().title, "kept");
        let mode: String = store
            .conn()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
}
