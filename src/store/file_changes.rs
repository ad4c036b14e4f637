//! What each successful write or edit did to a file: its text before and after, so a client can
//! show the diff of a changed file.
//!
//! Texts are kept up to [`SNAPSHOT_CAP`] bytes each; a change with a larger side is recorded as
//! omitted (its line counts still appear in `changedFiles`), so one huge file cannot bloat the
//! database.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};
use crate::util::now_ms;

/// Most bytes of one side (before or after) of a change that are kept.
pub const SNAPSHOT_CAP: usize = 256 * 1024;

/// One change to one file, as the tool saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileChange<'a> {
    pub call_id: &'a str,
    /// Path relative to the workspace root, as in `changedFiles`.
    pub path: &'a str,
    /// `None` when the file did not exist.
    pub before: Option<&'a str>,
    pub after: &'a str,
}

/// A file's text before the session's first change to it and after its latest one.
#[derive(Debug, Clone, PartialEq)]
pub struct FileDiffRow {
    /// `None` when the file did not exist before the session changed it (or when omitted).
    pub before: Option<String>,
    /// `None` only when omitted.
    pub after: Option<String>,
    /// True when a side of the first or latest change was over the cap and not kept.
    pub omitted: bool,
    /// How many successful changes the session made to the file.
    pub changes: u32,
}

impl Store {
    pub fn record_file_change(&self, session_id: &str, change: &FileChange<'_>) -> StoreResult<()> {
        self.write(|conn| {
            let too_big = change.before.map_or(0, str::len) > SNAPSHOT_CAP
                || change.after.len() > SNAPSHOT_CAP;
            let (before, after) = if too_big {
                (None, None)
            } else {
                (change.before, Some(change.after))
            };
            conn.execute(
                "INSERT INTO file_changes (session_id, call_id, path, before, after, omitted, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    session_id,
                    change.call_id,
                    change.path,
                    before,
                    after,
                    too_big,
                    now_ms()
                ],
            )?;
            Ok(())
        })
    }

    /// The session's whole change to `path`, or `None` when it never changed that file.
    pub fn file_diff(&self, session_id: &str, path: &str) -> StoreResult<Option<FileDiffRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT first.before, first.omitted, last.after, last.omitted, counted.n
             FROM (SELECT MIN(id) AS first_id, MAX(id) AS last_id, COUNT(*) AS n
                   FROM file_changes WHERE session_id = ?1 AND path = ?2) AS counted
             JOIN file_changes AS first ON first.id = counted.first_id
             JOIN file_changes AS last ON last.id = counted.last_id",
            )?;
            let row = stmt
                .query_row(params![session_id, path], |r| {
                    let first_omitted: bool = r.get(1)?;
                    let last_omitted: bool = r.get(3)?;
                    let omitted = first_omitted || last_omitted;
                    Ok(FileDiffRow {
                        before: if omitted { None } else { r.get(0)? },
                        after: if omitted { None } else { r.get(2)? },
                        omitted,
                        changes: r.get(4)?,
                    })
                })
                .optional()?;
            Ok(row)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::new_session as session;
    use pretty_assertions::assert_eq;

    fn change<'a>(call_id: &'a str, before: Option<&'a str>, after: &'a str) -> FileChange<'a> {
        FileChange {
            call_id,
            path: "a.txt",
            before,
            after,
        }
    }

    #[test]
    fn spans_the_first_before_to_the_latest_after() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        assert_eq!(store.file_diff(&id, "a.txt").unwrap(), None);
        store
            .record_file_change(&id, &change("c1", None, "one\n"))
            .unwrap();
        store
            .record_file_change(&id, &change("c2", Some("one\n"), "two\n"))
            .unwrap();
        assert_eq!(
            store.file_diff(&id, "a.txt").unwrap(),
            Some(FileDiffRow {
                before: None,
                after: Some("two\n".into()),
                omitted: false,
                changes: 2
            })
        );
    }

    #[test]
    fn a_side_over_the_cap_is_omitted_not_stored() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        let huge = "x".repeat(SNAPSHOT_CAP + 1);
        store
            .record_file_change(&id, &change("c1", Some("small"), &huge))
            .unwrap();
        assert_eq!(
            store.file_diff(&id, "a.txt").unwrap(),
            Some(FileDiffRow {
                before: None,
                after: None,
                omitted: true,
                changes: 1
            })
        );
        let stored: Option<String> = store
            .read(|conn| Ok(conn.query_row("SELECT after FROM file_changes", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(stored, None);
    }
}
