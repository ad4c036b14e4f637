//! A session's own reasoning effort (`sessions.effort`): `NULL` while it follows its account's
//! default, else the level's wire name. A name this build does not know reads as unset.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};
use crate::util::now_ms;

impl Store {
    /// The session's own effort setting as stored (`low`, …); `None` when it has none.
    pub fn session_effort(&self, session_id: &str) -> StoreResult<Option<String>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT effort FROM sessions WHERE id = ?1",
                    [session_id],
                    |r| r.get::<_, Option<String>>(0),
                )
                .optional()?
                .flatten())
        })
    }

    /// Sets the session's effort; `None` goes back to the account's default.
    pub fn set_session_effort(&self, session_id: &str, effort: Option<&str>) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE sessions SET effort = ?2, updated_at = ?3 WHERE id = ?1",
                params![session_id, effort, now_ms()],
            )?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::super::test_support::new_session;
    use super::*;

    #[test]
    fn effort_is_unset_until_set_and_can_be_unset() {
        let store = Store::open_in_memory().unwrap();
        let id = new_session(&store);
        assert_eq!(store.session_effort(&id).unwrap(), None);
        store.set_session_effort(&id, Some("high")).unwrap();
        assert_eq!(store.session_effort(&id).unwrap(), Some("high".to_string()));
        store.set_session_effort(&id, None).unwrap();
        assert_eq!(store.session_effort(&id).unwrap(), None);
    }
}
