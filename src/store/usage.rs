//! The `usage_lines` table: one row of facts per model request.

use rusqlite::params;

use super::{Store, StoreResult};
use crate::protocol::{TokenUsage, UsageKind};

/// One model request's usage as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    pub run_id: String,
    pub provider: String,
    pub model: String,
    pub tokens: TokenUsage,
    pub at: i64,
    pub duration_ms: u64,
    pub kind: UsageKind,
}

/// [`Store::usage_lines`]'s query (its plan is checked in the store's tests).
pub(super) const USAGE_OF_SESSION: &str =
    "SELECT run_id, provider, model, input, output, cache_read, cache_write, reasoning, at,
            duration_ms, kind
     FROM usage_lines WHERE session_id = ?1 ORDER BY at, id";

/// [`Store::usage_lines_after`]'s query: a session's lines written after a given one.
pub(super) const USAGE_OF_SESSION_AFTER: &str =
    "SELECT run_id, provider, model, input, output, cache_read, cache_write, reasoning, at,
            duration_ms, kind, id
     FROM usage_lines WHERE session_id = ?1 AND id > ?2 ORDER BY id";

impl Store {
    pub fn insert_usage(&self, session_id: &str, row: &UsageRow) -> StoreResult<()> {
        let t = &row.tokens;
        self.write(|conn| {
            conn.execute(
            "INSERT INTO usage_lines (session_id, run_id, provider, model, input, output, cache_read,
                                      cache_write, reasoning, at, duration_ms, kind)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                session_id,
                row.run_id,
                row.provider,
                row.model,
                t.input as i64,
                t.output as i64,
                t.cache_read as i64,
                t.cache_write as i64,
                t.reasoning as i64,
                row.at,
                row.duration_ms as i64,
                row.kind.as_str()
            ],
        )?;
            Ok(())
        })
    }

    pub fn usage_lines(&self, session_id: &str) -> StoreResult<Vec<UsageRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(USAGE_OF_SESSION)?;
            let rows = stmt
                .query_map([session_id], usage_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// The session's lines written after line `after` (0: all of them), each with its id, in
    /// the order they were written.
    ///
    /// A line's id is above every id existing when it was written, and a session's own lines
    /// are deleted only with the session, so nothing written later can have an id at or
    /// below one this returned.
    pub fn usage_lines_after(
        &self,
        session_id: &str,
        after: i64,
    ) -> StoreResult<Vec<(i64, UsageRow)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(USAGE_OF_SESSION_AFTER)?;
            let rows = stmt
                .query_map(params![session_id, after], |r| {
                    Ok((r.get::<_, i64>(11)?, usage_row(r)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }
}

/// A row of [`USAGE_OF_SESSION`] or [`USAGE_OF_SESSION_AFTER`], whose first eleven columns
/// are the same.
pub(super) fn usage_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<UsageRow> {
    Ok(UsageRow {
        run_id: r.get(0)?,
        provider: r.get(1)?,
        model: r.get(2)?,
        tokens: TokenUsage {
            input: r.get::<_, i64>(3)? as u64,
            output: r.get::<_, i64>(4)? as u64,
            cache_read: r.get::<_, i64>(5)? as u64,
            cache_write: r.get::<_, i64>(6)? as u64,
            reasoning: r.get::<_, i64>(7)? as u64,
        },
        at: r.get(8)?,
        duration_ms: r.get::<_, i64>(9)? as u64,
        kind: UsageKind::from_stored(&r.get::<_, String>(10)?),
    })
}

/// Milliseconds since `start`, for a usage line's duration.
pub fn elapsed_ms(start: std::time::Instant) -> u64 {
    start.elapsed().as_millis() as u64
}
