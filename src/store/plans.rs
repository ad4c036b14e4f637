//! The latest plan of each session (`update_plan`), kept as the protocol's JSON text: the
//! store knows nothing of its shape.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};

impl Store {
    /// Replaces the session's plan with `json`.
    pub fn set_session_plan(&self, session_id: &str, json: &str) -> StoreResult<()> {
        let now = crate::util::now_ms();
        self.write(|conn| {
            conn.execute(
                "INSERT INTO session_plans (session_id, plan, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session_id) DO UPDATE SET plan = excluded.plan,
                     updated_at = excluded.updated_at",
                params![session_id, json, now],
            )?;
            Ok(())
        })
    }

    /// The session's latest plan as it was stored; `None` until its model gives one.
    pub fn session_plan(&self, session_id: &str) -> StoreResult<Option<String>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT plan FROM session_plans WHERE session_id = ?1",
                    [session_id],
                    |row| row.get(0),
                )
                .optional()?)
        })
    }
}
