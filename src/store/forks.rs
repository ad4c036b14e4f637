//! Forks: a new session that starts as a copy of another's transcript up to one message.
//!
//! The copy keeps every message's `seq`, so summaries' folded ranges and the context start
//! still point at the same entries; the messages get ids of their own, so the two sessions
//! share nothing from then on.

use rusqlite::{OptionalExtension, params};

use super::{SessionRow, Store, StoreResult};
use crate::util::{new_id, now_ms};

impl Store {
    /// A new session titled `title` with `source`'s settings (account, model, system prompt,
    /// workspace, limits, MCP servers, delegation) and its live messages up to and including
    /// `through_seq`, recorded as forked from it; its id.
    pub fn fork_session(
        &self,
        source: &SessionRow,
        through_seq: u64,
        title: &str,
    ) -> StoreResult<String> {
        let id = new_id("ses");
        self.write(|conn| {
            let tx = conn.transaction()?;
            let now = now_ms();
            tx.execute(
                "INSERT INTO sessions (id, title, account, model, system_prompt, workspace_root,
                                       max_steps, created_at, updated_at, last_seq, cap_usd,
                                       max_seconds, context_start_seq, seq_reserved,
                                       rollover_secs, origin, delegation_off, forked_from)
                 SELECT ?2, ?3, account, model, system_prompt, workspace_root, max_steps, ?4, ?4,
                        0, cap_usd, max_seconds, MIN(context_start_seq, ?5), 0, rollover_secs,
                        origin, delegation_off, id
                 FROM sessions WHERE id = ?1",
                params![source.id, id, title, now, through_seq as i64],
            )?;
            let mut read = tx.prepare(
                "SELECT seq, run_id, role, blocks, status, created_at, tokens, tokens_exact
                 FROM messages WHERE session_id = ?1 AND seq <= ?2 AND rewound = 0 ORDER BY seq",
            )?;
            let mut rows = read.query(params![source.id, through_seq as i64])?;
            let mut last_seq = 0i64;
            while let Some(row) = rows.next()? {
                let seq: i64 = row.get(0)?;
                last_seq = seq;
                tx.execute(
                    "INSERT INTO messages (id, session_id, seq, run_id, role, blocks, status,
                                           created_at, tokens, tokens_exact)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
                        new_id("msg"),
                        id,
                        seq,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, String>(3)?,
                        row.get::<_, String>(4)?,
                        row.get::<_, i64>(5)?,
                        row.get::<_, Option<i64>>(6)?,
                        row.get::<_, bool>(7)?,
                    ],
                )?;
            }
            drop(rows);
            drop(read);
            tx.execute(
                "UPDATE sessions SET last_seq = ?2, seq_reserved = ?2 WHERE id = ?1",
                params![id, last_seq],
            )?;
            tx.execute(
                "INSERT INTO session_mcp_servers (session_id, servers)
                 SELECT ?2, servers FROM session_mcp_servers WHERE session_id = ?1",
                params![source.id, id],
            )?;
            tx.commit()?;
            Ok(())
        })?;
        Ok(id)
    }

    /// The session `id` was forked from, if it is a fork.
    pub fn forked_from(&self, id: &str) -> StoreResult<Option<String>> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT forked_from FROM sessions WHERE id = ?1")?
                .query_row([id], |r| r.get::<_, Option<String>>(0))
                .optional()?
                .flatten())
        })
    }
}
