//! The `sessions` table.

use rusqlite::{OptionalExtension, Row, params};

use super::delegations::LINEAGE;
use super::{Lineage, Store, StoreResult};
use crate::util::{new_id, now_ms};

/// A session as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub id: String,
    pub title: String,
    pub account: String,
    pub model: String,
    pub system_prompt: Option<String>,
    pub workspace_root: Option<String>,
    pub max_steps: u32,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_seq: u64,
    /// Spend cap in USD; runs stop before a request that would pass it.
    pub cap_usd: Option<f64>,
    /// Longest a run may take.
    pub max_seconds: Option<u64>,
    /// Messages with this `seq` or lower are not sent to the model (`/clear`, or a new context
    /// opening with a carry-over note).
    pub context_start_seq: u64,
    /// The highest event `seq` reserved; events may have used any number up to it.
    pub seq_reserved: u64,
    /// After this many idle seconds a new turn starts a new context with a carry-over note.
    pub rollover_secs: Option<u64>,
    /// Which kind of client started the session (`interactive`, `oneshot`), when it said.
    pub origin: Option<String>,
}

impl SessionRow {
    /// The lowest `seq` no event or message of the session can have used: past both the last
    /// committed message and every number reserved for events.
    pub fn next_free_seq(&self) -> u64 {
        self.last_seq.max(self.seq_reserved) + 1
    }
}

#[derive(Debug, Clone)]
pub struct NewSession {
    pub title: String,
    pub account: String,
    pub model: String,
    pub system_prompt: Option<String>,
    pub workspace_root: Option<String>,
    pub max_steps: u32,
    pub cap_usd: Option<f64>,
    pub max_seconds: Option<u64>,
    /// The idle time after which a new turn starts a new context; `None` for never.
    pub rollover_secs: Option<u64>,
}

/// Fields `session/update` may change; `None` leaves a field alone.
#[derive(Debug, Clone, Default)]
pub struct SessionUpdate {
    pub title: Option<String>,
    pub account: Option<String>,
    pub model: Option<String>,
    pub workspace_root: Option<String>,
    /// `Some(None)` removes the system prompt.
    pub system_prompt: Option<Option<String>>,
    pub max_steps: Option<u32>,
    /// `Some(None)` removes the cap.
    pub cap_usd: Option<Option<f64>>,
    pub max_seconds: Option<Option<u64>>,
    /// `Some(None)` turns rollover off.
    pub rollover_secs: Option<Option<u64>>,
}

/// One page of sessions, newest first.
#[derive(Debug, Clone)]
pub struct SessionPage {
    pub sessions: Vec<SessionRow>,
    /// Where the next page starts, when there is one.
    pub next: Option<(i64, String)>,
}

const COLUMNS: &str = "id, title, account, model, system_prompt, workspace_root, max_steps, \
                       created_at, updated_at, last_seq, cap_usd, max_seconds, context_start_seq, \
                       seq_reserved, rollover_secs, origin";

fn from_row(row: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        id: row.get(0)?,
        title: row.get(1)?,
        account: row.get(2)?,
        model: row.get(3)?,
        system_prompt: row.get(4)?,
        workspace_root: row.get(5)?,
        max_steps: row.get(6)?,
        created_at: row.get(7)?,
        updated_at: row.get(8)?,
        last_seq: row.get::<_, i64>(9)? as u64,
        cap_usd: row.get(10)?,
        max_seconds: row.get::<_, Option<i64>>(11)?.map(|s| s as u64),
        context_start_seq: row.get::<_, i64>(12)? as u64,
        seq_reserved: row.get::<_, i64>(13)? as u64,
        rollover_secs: row.get::<_, Option<i64>>(14)?.map(|s| s as u64),
        origin: row.get(15)?,
    })
}

/// The query of one page of [`Store::list_sessions`]: of one folder's sessions through
/// `sessions_by_root`, or of all through `sessions_by_update`. One text for both would leave
/// the planner one plan, the one for all, which walks every session to find a folder's.
pub(super) fn list_query(of_one_folder: bool) -> String {
    let folder = if of_one_folder {
        "workspace_root = ?1"
    } else {
        "?1 IS NULL"
    };
    format!(
        "SELECT {COLUMNS} FROM sessions
         WHERE {folder}
           AND (updated_at < ?2 OR (updated_at = ?2 AND (?3 = '' OR id < ?3)))
           AND {LINEAGE}
         ORDER BY updated_at DESC, id DESC
         LIMIT ?4"
    )
}

impl Store {
    pub fn insert_session(&self, new: &NewSession) -> StoreResult<SessionRow> {
        let now = now_ms();
        let row = SessionRow {
            id: new_id("ses"),
            title: new.title.clone(),
            account: new.account.clone(),
            model: new.model.clone(),
            system_prompt: new.system_prompt.clone(),
            workspace_root: new.workspace_root.clone(),
            max_steps: new.max_steps,
            created_at: now,
            updated_at: now,
            last_seq: 0,
            cap_usd: new.cap_usd,
            max_seconds: new.max_seconds,
            context_start_seq: 0,
            seq_reserved: 0,
            rollover_secs: new.rollover_secs,
            origin: None,
        };
        self.write(|conn| {
            conn.execute(
                &format!(
                    "INSERT INTO sessions ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10, ?11, 0, 0, ?12, NULL)"
                ),
                params![
                    row.id,
                    row.title,
                    row.account,
                    row.model,
                    row.system_prompt,
                    row.workspace_root,
                    row.max_steps,
                    row.created_at,
                    row.updated_at,
                    row.cap_usd,
                    row.max_seconds.map(|s| s as i64),
                    row.rollover_secs.map(|s| s as i64)
                ],
            )?;
            Ok(())
        })?;
        Ok(row)
    }

    /// Records which kind of client started the session.
    pub fn set_session_origin(&self, id: &str, origin: &str) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE sessions SET origin = ?2 WHERE id = ?1",
                params![id, origin],
            )?;
            Ok(())
        })
    }

    pub fn session(&self, id: &str) -> StoreResult<Option<SessionRow>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"),
                    [id],
                    from_row,
                )
                .optional()?)
        })
    }

    /// Sessions newest first (by last update), starting after `after` (a previous page's end),
    /// of the `lineage` asked for (delegations' children are left out of the top level).
    pub fn list_sessions(
        &self,
        after: Option<(i64, String)>,
        limit: usize,
        workspace_root: Option<&str>,
        lineage: &Lineage,
    ) -> StoreResult<SessionPage> {
        let (after_at, after_id) = after.unwrap_or((i64::MAX, String::new()));
        let mut sessions = self.read(|conn| {
            let mut stmt = conn.prepare_cached(&list_query(workspace_root.is_some()))?;
            let rows = stmt
                .query_map(
                    params![
                        workspace_root,
                        after_at,
                        after_id,
                        limit as i64 + 1,
                        lineage.mode(),
                        lineage.parent()
                    ],
                    from_row,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })?;
        let next = if sessions.len() > limit {
            sessions.truncate(limit);
            sessions.last().map(|s| (s.updated_at, s.id.clone()))
        } else {
            None
        };
        Ok(SessionPage { sessions, next })
    }

    /// Applies an update; `None` when the session does not exist.
    pub fn update_session(
        &self,
        id: &str,
        update: &SessionUpdate,
    ) -> StoreResult<Option<SessionRow>> {
        let changed = self.write(|conn| {
            Ok(conn.execute(
                "UPDATE sessions SET
                title = COALESCE(?2, title),
                model = COALESCE(?3, model),
                system_prompt = CASE WHEN ?4 THEN ?5 ELSE system_prompt END,
                max_steps = COALESCE(?6, max_steps),
                updated_at = ?7,
                cap_usd = CASE WHEN ?8 THEN ?9 ELSE cap_usd END,
                max_seconds = CASE WHEN ?10 THEN ?11 ELSE max_seconds END,
                account = COALESCE(?12, account),
                workspace_root = COALESCE(?13, workspace_root),
                rollover_secs = CASE WHEN ?14 THEN ?15 ELSE rollover_secs END
             WHERE id = ?1",
                params![
                    id,
                    update.title,
                    update.model,
                    update.system_prompt.is_some(),
                    update.system_prompt.clone().flatten(),
                    update.max_steps,
                    now_ms(),
                    update.cap_usd.is_some(),
                    update.cap_usd.flatten(),
                    update.max_seconds.is_some(),
                    update.max_seconds.flatten().map(|s| s as i64),
                    update.account,
                    update.workspace_root,
                    update.rollover_secs.is_some(),
                    update.rollover_secs.flatten().map(|s| s as i64)
                ],
            )?)
        })?;
        if changed == 0 {
            return Ok(None);
        }
        self.session(id)
    }

    /// Deletes a session and, by cascade, everything that belongs to it; then the kept file
    /// contents no remaining checkpoint needs, and the images no remaining message or tool
    /// call refers to.
    pub fn delete_session(&self, id: &str) -> StoreResult<bool> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let images = super::images::images_of_session(&tx, id)?;
            let deleted = tx.execute("DELETE FROM sessions WHERE id = ?1", [id])? > 0;
            if deleted {
                super::checkpoints::collect_blobs(&tx)?;
                super::images::collect_images(&tx, &images)?;
            }
            tx.commit()?;
            Ok(deleted)
        })
    }

    /// Rewrites the database file without its free pages (SQLite's `VACUUM`), then empties
    /// the WAL. Deleting sessions frees pages that new data reuses, but the file keeps its
    /// size until this runs; it reads and writes the whole file, so it runs only when asked.
    pub fn vacuum(&self) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute_batch("VACUUM")?;
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            Ok(())
        })
    }

    /// Claims the next `size` event numbers of a session for this writer alone, above every
    /// number handed out or committed so far: `(first, last)`. Two daemons on one database
    /// each number from blocks of their own, so they never hand out the same `seq`.
    pub fn claim_seq_block(&self, session_id: &str, size: u64) -> StoreResult<(u64, u64)> {
        self.write(|conn| {
            let last: i64 = conn.query_row(
                "UPDATE sessions SET seq_reserved = MAX(seq_reserved, last_seq) + ?2 WHERE id = ?1
                 RETURNING seq_reserved",
                params![session_id, size as i64],
                |r| r.get(0),
            )?;
            let last = last.max(0) as u64;
            Ok((last + 1 - size, last))
        })
    }

    /// Starts the model's context after the session's current last message (`/clear`).
    pub fn clear_context(&self, id: &str) -> StoreResult<u64> {
        self.write(|conn| {
            Ok(conn.query_row(
                "UPDATE sessions SET context_start_seq = last_seq, updated_at = ?2 WHERE id = ?1
                 RETURNING context_start_seq",
                params![id, now_ms()],
                |r| r.get::<_, i64>(0),
            )? as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn new(title: &str, root: Option<&str>) -> NewSession {
        NewSession {
            title: title.into(),
            account: "demo".into(),
            model: "demo".into(),
            system_prompt: None,
            workspace_root: root.map(str::to_string),
            max_steps: 25,
            cap_usd: None,
            max_seconds: None,
            rollover_secs: None,
        }
    }

    #[test]
    fn pages_newest_first_without_gaps_or_repeats() {
        let store = Store::open_in_memory().unwrap();
        let mut made = Vec::new();
        for i in 0..7 {
            made.push(
                store
                    .insert_session(&new(&format!("s{i}"), None))
                    .unwrap()
                    .id,
            );
        }
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .list_sessions(after, 3, None, &Lineage::TopLevel)
                .unwrap();
            seen.extend(page.sessions.iter().map(|s| s.id.clone()));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        made.reverse();
        assert_eq!(seen, made);
    }

    #[test]
    fn filters_by_workspace_root() {
        let store = Store::open_in_memory().unwrap();
        store.insert_session(&new("a", Some("/a"))).unwrap();
        let b = store.insert_session(&new("b", Some("/b"))).unwrap();
        let page = store
            .list_sessions(None, 10, Some("/b"), &Lineage::TopLevel)
            .unwrap();
        assert_eq!(page.sessions, vec![b]);
    }

    #[test]
    fn update_changes_only_named_fields() {
        let store = Store::open_in_memory().unwrap();
        let mut s = new("a", None);
        s.system_prompt = Some("be brief".into());
        let row = store.insert_session(&s).unwrap();
        let updated = store
            .update_session(
                &row.id,
                &SessionUpdate {
                    title: Some("renamed".into()),
                    ..Default::default()
                },
            )
            .unwrap()
            .unwrap();
        assert_eq!(updated.title, "renamed");
        assert_eq!(updated.system_prompt.as_deref(), Some("be brief"));
        let cleared = store
            .update_session(
                &row.id,
                &SessionUpdate {
                    system_prompt: Some(None),
                    ..Default::default()
                },
            )
            .unwrap()
            .unwrap();
        assert_eq!(cleared.system_prompt, None);
        assert!(
            store
                .update_session("ses_missing", &SessionUpdate::default())
                .unwrap()
                .is_none()
        );
    }
}
