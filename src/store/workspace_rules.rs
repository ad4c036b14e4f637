//! "Always in this workspace" answers: allow rules saved per workspace root.
//!
//! They outlive sessions and restarts, so they live here rather than with a session; a rule
//! applies only where its root is the session's (resolved) workspace root.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};
use crate::util::new_id;

/// One saved answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRuleRow {
    pub id: String,
    pub workspace_root: String,
    pub rule: String,
    pub created_at: i64,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<WorkspaceRuleRow> {
    Ok(WorkspaceRuleRow {
        id: r.get(0)?,
        workspace_root: r.get(1)?,
        rule: r.get(2)?,
        created_at: r.get(3)?,
    })
}

/// Saves `rule` for `root` (inside the answer's transaction); saving the same rule twice keeps
/// the first.
pub(super) fn insert(tx: &rusqlite::Transaction<'_>, root: &str, rule: &str) -> StoreResult<()> {
    tx.execute(
        "INSERT OR IGNORE INTO workspace_rules (id, workspace_root, rule, created_at)
         VALUES (?1, ?2, ?3, ?4)",
        params![new_id("wr"), root, rule, crate::util::now_ms()],
    )?;
    Ok(())
}

impl Store {
    /// The saved answers, oldest first: of `root` only, or of every workspace.
    pub fn workspace_rules(&self, root: Option<&str>) -> StoreResult<Vec<WorkspaceRuleRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, workspace_root, rule, created_at FROM workspace_rules
                 WHERE ?1 IS NULL OR workspace_root = ?1 ORDER BY created_at, id",
            )?;
            let rows = stmt
                .query_map([root], row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// Deletes a saved answer; `None` when there is none with that id.
    pub fn remove_workspace_rule(&self, id: &str) -> StoreResult<Option<WorkspaceRuleRow>> {
        self.write(|conn| {
            Ok(conn
                .query_row(
                    "DELETE FROM workspace_rules WHERE id = ?1
                     RETURNING id, workspace_root, rule, created_at",
                    [id],
                    row,
                )
                .optional()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn save(store: &Store, root: &str, rule: &str) {
        store
            .write(|conn| {
                let tx = conn.transaction()?;
                insert(&tx, root, rule)?;
                tx.commit()?;
                Ok(())
            })
            .unwrap();
    }

    fn rules(store: &Store, root: Option<&str>) -> Vec<(String, String)> {
        store
            .workspace_rules(root)
            .unwrap()
            .into_iter()
            .map(|r| (r.workspace_root, r.rule))
            .collect()
    }

    #[test]
    fn answers_are_kept_per_root_once_and_removed_by_id() {
        let store = Store::open_in_memory().unwrap();
        save(&store, "/a", "run_command(cargo test *)");
        save(&store, "/b", "write_file(src/**)");
        save(&store, "/a", "run_command(cargo test *)");
        assert_eq!(
            rules(&store, Some("/a")),
            [("/a".to_string(), "run_command(cargo test *)".to_string())]
        );
        assert_eq!(rules(&store, None).len(), 2);
        let id = store.workspace_rules(Some("/b")).unwrap()[0].id.clone();
        let removed = store.remove_workspace_rule(&id).unwrap().unwrap();
        assert_eq!(removed.rule, "write_file(src/**)");
        assert_eq!(store.remove_workspace_rule(&id).unwrap(), None);
        assert_eq!(rules(&store, Some("/b")), []);
    }
}
