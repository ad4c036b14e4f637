//! `pending_input`: what the user typed while a run was working, and `sends`, the answers to
//! earlier sends, so a retried `chat/send` stores nothing twice.
//!
//! A row moves pending → leased (taken into a model request) → delivered (that request was
//! sent, and the text is in the transcript), or → promoted (it became a user turn of its own),
//! or → cancelled. Each move that puts the text into the transcript happens in the same
//! transaction as the message that carries it, so a row is in the transcript exactly once.

use rusqlite::{OptionalExtension, Row, params};

use super::{Store, StoreError, StoreResult};
use crate::protocol::{Block, InterjectionStatus};
use crate::util::{new_id, now_ms, rfc3339};

/// What becomes of the interjections a message carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Settle {
    pub pending_ids: Vec<String>,
    pub status: Settled,
}

/// How a message carries interjections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Sent to the model inside a tool-results turn.
    Delivered,
    /// Made a user turn of their own.
    Promoted,
}

impl Settled {
    /// The interjections' stored status afterwards.
    pub fn stored(self) -> InterjectionStatus {
        match self {
            Settled::Delivered => InterjectionStatus::Delivered,
            Settled::Promoted => InterjectionStatus::Promoted,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PendingRow {
    pub id: String,
    pub session_id: String,
    pub text: String,
    /// The files its `@`-mentions attached when it was typed (`attachment` blocks), which go
    /// with its text when it is delivered or promoted.
    pub attachments: Vec<Block>,
    pub status: InterjectionStatus,
    pub created_at: String,
}

impl PendingRow {
    /// The row as the transcript keeps it: an `interjection` block (`promoted` when it became
    /// a user turn of its own), then its attachments.
    pub fn into_blocks(self, promoted: bool) -> Vec<Block> {
        let mut blocks = vec![Block::Interjection {
            pending_id: self.id,
            text: self.text,
            promoted,
        }];
        blocks.extend(self.attachments);
        blocks
    }
}

/// What `interjection/cancel` found.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    Cancelled(PendingRow),
    /// Too late: it was already leased, delivered, promoted or cancelled.
    Settled(InterjectionStatus),
    NotFound,
}

const COLUMNS: &str = "id, session_id, text, status, created_at, attachments";

fn from_row(row: &Row<'_>) -> rusqlite::Result<PendingRow> {
    let attachments = match row.get::<_, Option<String>>(5)? {
        Some(json) => serde_json::from_str(&json).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, Box::new(e))
        })?,
        None => Vec::new(),
    };
    Ok(PendingRow {
        id: row.get(0)?,
        session_id: row.get(1)?,
        text: row.get(2)?,
        attachments,
        status: row.get(3)?,
        created_at: rfc3339(row.get(4)?),
    })
}

/// The stored form of queued input's attachments: a JSON array, or NULL for none.
fn attachments_json(attachments: &[Block]) -> StoreResult<Option<String>> {
    if attachments.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(attachments)
        .map(Some)
        .map_err(|e| StoreError::Corrupt(format!("unserialisable attachments: {e}")))
}

/// Marks the rows a committed message carries (inside that message's transaction).
pub(super) fn settle(
    tx: &rusqlite::Transaction<'_>,
    settle: &Settle,
    message_id: &str,
) -> StoreResult<()> {
    let mut stmt = tx.prepare_cached(
        "UPDATE pending_input SET status = ?2, message_id = ?3, updated_at = ?4
         WHERE id = ?1 AND status IN ('pending', 'leased')",
    )?;
    for id in &settle.pending_ids {
        stmt.execute(params![id, settle.status.stored(), message_id, now_ms()])?;
    }
    Ok(())
}

impl Store {
    /// Queues an interjection for `run_id`, the run working when it was typed; committed
    /// before the client is told.
    pub fn insert_pending(
        &self,
        session_id: &str,
        run_id: &str,
        client_message_id: Option<&str>,
        text: &str,
    ) -> StoreResult<PendingRow> {
        self.insert_pending_with(session_id, run_id, client_message_id, text, &[])
    }

    /// [`Store::insert_pending`] with the `attachment` blocks the text's `@`-mentions made.
    pub fn insert_pending_with(
        &self,
        session_id: &str,
        run_id: &str,
        client_message_id: Option<&str>,
        text: &str,
        attachments: &[Block],
    ) -> StoreResult<PendingRow> {
        let stored = attachments_json(attachments)?;
        self.write(|conn| {
        let id = new_id("inj");
        let now = now_ms();
        conn.execute(
            "INSERT INTO pending_input (id, session_id, run_id, client_message_id, text, status, created_at, updated_at, attachments)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)",
            params![
                id,
                session_id,
                run_id,
                client_message_id,
                text,
                InterjectionStatus::Pending,
                now,
                stored
            ],
        )?;
        Ok(PendingRow {
            id,
            session_id: session_id.to_string(),
            text: text.to_string(),
            attachments: attachments.to_vec(),
            status: InterjectionStatus::Pending,
            created_at: rfc3339(now),
        })
            })
    }

    /// Queues an interjection for `run_id`, which another daemon drives, only while that
    /// daemon's lease on the session is live (in the same statement, so the owner giving the
    /// lease back with its queue empty and this insert cannot interleave); `None` when the lease
    /// is gone. The owner finds the row on its next heartbeat or delivery point.
    pub fn insert_pending_if_leased(
        &self,
        session_id: &str,
        run_id: &str,
        client_message_id: Option<&str>,
        text: &str,
        attachments: &[Block],
    ) -> StoreResult<Option<PendingRow>> {
        let stored = attachments_json(attachments)?;
        self.write(|conn| {
            let id = new_id("inj");
            let now = now_ms();
            let inserted = conn.execute(
                "INSERT INTO pending_input (id, session_id, run_id, client_message_id, text, status, created_at, updated_at, attachments)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8
                 WHERE EXISTS (SELECT 1 FROM run_leases
                               WHERE session_id = ?2 AND run_id = ?3 AND expires_at > ?7)",
                params![
                    id,
                    session_id,
                    run_id,
                    client_message_id,
                    text,
                    InterjectionStatus::Pending,
                    now,
                    stored
                ],
            )?;
            Ok((inserted > 0).then(|| PendingRow {
                id,
                session_id: session_id.to_string(),
                text: text.to_string(),
                attachments: attachments.to_vec(),
                status: InterjectionStatus::Pending,
                created_at: rfc3339(now),
            }))
        })
    }

    /// Rows still waiting (pending or leased), oldest first.
    pub fn open_pending(&self, session_id: &str) -> StoreResult<Vec<PendingRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM pending_input
             WHERE session_id = ?1 AND status IN ('pending', 'leased') ORDER BY rowid"
            ))?;
            let rows = stmt
                .query_map([session_id], from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// Sessions that have rows still waiting, for start-up recovery.
    pub fn sessions_with_open_pending(&self) -> StoreResult<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare(
            "SELECT DISTINCT session_id FROM pending_input WHERE status IN ('pending', 'leased')",
        )?;
            let ids = stmt
                .query_map([], |r| r.get(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ids)
        })
    }

    /// Takes every pending row of the session for the run's next model request, in order.
    pub fn lease_pending(&self, session_id: &str, run_id: &str) -> StoreResult<Vec<PendingRow>> {
        self.write(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "UPDATE pending_input SET status = ?4, run_id = ?2, updated_at = ?3
             WHERE session_id = ?1 AND status = 'pending' RETURNING {COLUMNS}"
            ))?;
            let mut rows = stmt
                .query_map(
                    params![session_id, run_id, now_ms(), InterjectionStatus::Leased],
                    from_row,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            // RETURNING has no order of its own; ids are time-ordered.
            rows.sort_by(|a, b| a.id.cmp(&b.id));
            Ok(rows)
        })
    }

    /// Puts leased rows back to pending (their request was never sent); they stay with the
    /// run that took them.
    pub fn unlease_all(&self, session_id: &str) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE pending_input SET status = ?3, updated_at = ?2
             WHERE session_id = ?1 AND status = 'leased'",
                params![session_id, now_ms(), InterjectionStatus::Pending],
            )?;
            Ok(())
        })
    }

    /// Where a queued row stands now; `None` when there is no such row.
    pub fn pending_status(&self, pending_id: &str) -> StoreResult<Option<InterjectionStatus>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT status FROM pending_input WHERE id = ?1",
                    [pending_id],
                    |r| r.get(0),
                )
                .optional()?)
        })
    }

    pub fn cancel_pending(&self, pending_id: &str) -> StoreResult<CancelOutcome> {
        self.write(|conn| {
            let cancelled = conn
                .query_row(
                    &format!(
                        "UPDATE pending_input SET status = ?3, updated_at = ?2
                     WHERE id = ?1 AND status = 'pending' RETURNING {COLUMNS}"
                    ),
                    params![pending_id, now_ms(), InterjectionStatus::Cancelled],
                    from_row,
                )
                .optional()?;
            if let Some(row) = cancelled {
                return Ok(CancelOutcome::Cancelled(row));
            }
            let status: Option<InterjectionStatus> = conn
                .query_row(
                    "SELECT status FROM pending_input WHERE id = ?1",
                    [pending_id],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(status.map_or(CancelOutcome::NotFound, CancelOutcome::Settled))
        })
    }

    /// The earlier answer to a send with this client id: a queued row or a stored message.
    pub fn earlier_send(
        &self,
        session_id: &str,
        client_message_id: &str,
    ) -> StoreResult<Option<EarlierSend>> {
        self.read(|conn| {
        let queued = conn
            .query_row(
                "SELECT id, run_id FROM pending_input WHERE session_id = ?1 AND client_message_id = ?2",
                params![session_id, client_message_id],
                |r| {
                    Ok(EarlierSend::Queued {
                        pending_id: r.get(0)?,
                        run_id: r.get(1)?,
                    })
                },
            )
            .optional()?;
        if queued.is_some() {
            return Ok(queued);
        }
        let sent = conn
            .query_row(
                "SELECT message_id, run_id FROM sends WHERE session_id = ?1 AND client_message_id = ?2",
                params![session_id, client_message_id],
                |r| Ok(EarlierSend::Sent { message_id: r.get(0)?, run_id: r.get(1)? }),
            )
            .optional()?;
        Ok(sent)
            })
    }
}

/// How an earlier send with the same client id was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum EarlierSend {
    Queued {
        pending_id: String,
        /// The run that took it.
        run_id: Option<String>,
    },
    Sent {
        message_id: String,
        run_id: Option<String>,
    },
}
