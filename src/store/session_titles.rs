//! Where a session's title came from, and whether its older turns are folded automatically
//! (`sessions.title_state`, `sessions.auto_compact`).
//!
//! A title a client gave (at `session/create` or `session/update`) is `given` and never
//! replaced. A session created without one holds a `placeholder` until its first answer; the
//! daemon then claims it (`titling`) for one request to a model, and writes the answer only if
//! the state is still `titling`: a title the user set meanwhile wins.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};
use crate::util::now_ms;

/// The daemon may replace the title (it was never given).
const PLACEHOLDER: &str = "placeholder";
/// The daemon is asking a model for a title.
const TITLING: &str = "titling";
/// The daemon titled the session.
const AUTO: &str = "auto";
/// A client set the title.
const GIVEN: &str = "given";

impl Store {
    /// Marks the session's title as a placeholder the daemon replaces after the first answer.
    pub fn set_title_placeholder(&self, session_id: &str) -> StoreResult<()> {
        self.set_title_state(session_id, PLACEHOLDER)
    }

    /// Marks the session's title as one a client gave, never replaced by the daemon.
    pub fn set_title_given(&self, session_id: &str) -> StoreResult<()> {
        self.set_title_state(session_id, GIVEN)
    }

    fn set_title_state(&self, session_id: &str, state: &str) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE sessions SET title_state = ?2 WHERE id = ?1",
                params![session_id, state],
            )?;
            Ok(())
        })
    }

    /// Whether the session's title is still one the daemon may replace (a placeholder, or
    /// being titled).
    pub fn title_replaceable(&self, session_id: &str) -> StoreResult<bool> {
        self.read(|conn| {
            let state: Option<String> = conn
                .query_row(
                    "SELECT title_state FROM sessions WHERE id = ?1",
                    [session_id],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(matches!(state.as_deref(), Some(PLACEHOLDER | TITLING)))
        })
    }

    /// Claims the session's placeholder title for titling; false when it is not one (given,
    /// titled, or claimed already).
    pub fn claim_titling(&self, session_id: &str) -> StoreResult<bool> {
        self.write(|conn| {
            Ok(conn.execute(
                "UPDATE sessions SET title_state = ?3 WHERE id = ?1 AND title_state = ?2",
                params![session_id, PLACEHOLDER, TITLING],
            )? > 0)
        })
    }

    /// Ends a claim: with a title, writes it unless a client set one meanwhile (whether it
    /// was written); without one (the request failed), gives the placeholder back.
    pub fn finish_titling(&self, session_id: &str, title: Option<&str>) -> StoreResult<bool> {
        self.write(|conn| {
            Ok(match title {
                Some(title) => {
                    conn.execute(
                        "UPDATE sessions SET title = ?3, title_state = ?4, updated_at = ?5
                         WHERE id = ?1 AND title_state = ?2",
                        params![session_id, TITLING, title, AUTO, now_ms()],
                    )? > 0
                }
                None => {
                    conn.execute(
                        "UPDATE sessions SET title_state = ?3 WHERE id = ?1 AND title_state = ?2",
                        params![session_id, TITLING, PLACEHOLDER],
                    )?;
                    false
                }
            })
        })
    }

    /// Replaces a placeholder title by another placeholder (a client's provisional name, as
    /// ACP's from the first prompt), which the daemon's title still replaces; whether it did.
    pub fn set_provisional_title(&self, session_id: &str, title: &str) -> StoreResult<bool> {
        self.write(|conn| {
            Ok(conn.execute(
                "UPDATE sessions SET title = ?2, updated_at = ?3
                 WHERE id = ?1 AND title_state IN (?4, ?5)",
                params![session_id, title, now_ms(), PLACEHOLDER, TITLING],
            )? > 0)
        })
    }

    /// The session's own `autoCompact` setting; `None` when it follows the config.
    pub fn auto_compact(&self, session_id: &str) -> StoreResult<Option<bool>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT auto_compact FROM sessions WHERE id = ?1",
                    [session_id],
                    |r| r.get::<_, Option<bool>>(0),
                )
                .optional()?
                .flatten())
        })
    }

    pub fn set_auto_compact(&self, session_id: &str, on: bool) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE sessions SET auto_compact = ?2, updated_at = ?3 WHERE id = ?1",
                params![session_id, on, now_ms()],
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

    fn title(store: &Store, id: &str) -> String {
        store.session(id).unwrap().unwrap().title
    }

    #[test]
    fn a_given_title_is_never_claimed() {
        let store = Store::open_in_memory().unwrap();
        let id = new_session(&store);
        assert!(!store.claim_titling(&id).unwrap());
        assert!(!store.set_provisional_title(&id, "other").unwrap());
        assert_eq!(title(&store, &id), "t");
    }

    #[test]
    fn a_placeholder_is_titled_once() {
        let store = Store::open_in_memory().unwrap();
        let id = new_session(&store);
        store.set_title_placeholder(&id).unwrap();
        assert!(store.title_replaceable(&id).unwrap());
        assert!(store.claim_titling(&id).unwrap());
        assert!(!store.claim_titling(&id).unwrap(), "claimed once");
        assert!(store.finish_titling(&id, Some("Named")).unwrap());
        assert_eq!(title(&store, &id), "Named");
        assert!(!store.title_replaceable(&id).unwrap());
        assert!(!store.claim_titling(&id).unwrap(), "titled once");
    }

    #[test]
    fn a_title_set_while_titling_wins_and_a_failure_gives_the_placeholder_back() {
        let store = Store::open_in_memory().unwrap();
        let id = new_session(&store);
        store.set_title_placeholder(&id).unwrap();
        assert!(store.claim_titling(&id).unwrap());
        assert!(!store.finish_titling(&id, None).unwrap());
        assert!(store.claim_titling(&id).unwrap(), "claimable again");
        store.set_title_given(&id).unwrap();
        assert!(!store.finish_titling(&id, Some("Named")).unwrap());
        assert_eq!(title(&store, &id), "t");
    }

    #[test]
    fn auto_compact_follows_the_config_until_set() {
        let store = Store::open_in_memory().unwrap();
        let id = new_session(&store);
        assert_eq!(store.auto_compact(&id).unwrap(), None);
        store.set_auto_compact(&id, false).unwrap();
        assert_eq!(store.auto_compact(&id).unwrap(), Some(false));
    }
}
