//! Delegations: which session a child session works for, and for which tool call.
//!
//! A child session is an ordinary session (its own transcript, runs, approvals and usage
//! lines) plus one `delegations` row naming its parent session, the parent's run and the
//! parent's `delegate` tool call it answers. The row makes the child one level deep: a session
//! with a row is never offered `delegate` itself. A parent may turn the tool off for itself
//! (`sessions.delegation_off`).

use rusqlite::{OptionalExtension, Row, params};

use super::{Store, StoreResult};
use crate::util::now_ms;

/// Who resolved a delegated approval that expired (`approvals.resolved_by`).
pub const EXPIRED: &str = "expired";

/// Which tools a child session is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSet {
    /// Only the tools that read (`read_file`, `list_directory`, `search_text`): nothing asks.
    ReadOnly,
    /// Every tool the parent has except `delegate`; writes and commands ask as usual.
    All,
}

impl ToolSet {
    /// The name the `delegate` tool's input uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSet::ReadOnly => "read-only",
            ToolSet::All => "all",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "read-only" => Some(ToolSet::ReadOnly),
            "all" => Some(ToolSet::All),
            _ => None,
        }
    }
}

/// One child session's link to the call it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegationRow {
    pub child_id: String,
    pub parent_id: String,
    pub parent_run_id: String,
    /// The parent's `delegate` tool call.
    pub call_id: String,
    pub tools: ToolSet,
    /// The task as the parent's model gave it.
    pub task: String,
    pub created_at: i64,
}

const COLUMNS: &str = "child_id, parent_id, parent_run_id, call_id, tools, task, created_at";

fn from_row(row: &Row<'_>) -> rusqlite::Result<DelegationRow> {
    let tools: String = row.get(4)?;
    Ok(DelegationRow {
        child_id: row.get(0)?,
        parent_id: row.get(1)?,
        parent_run_id: row.get(2)?,
        call_id: row.get(3)?,
        tools: ToolSet::parse(&tools).unwrap_or(ToolSet::ReadOnly),
        task: row.get(5)?,
        created_at: row.get(6)?,
    })
}

/// Which sessions `session/list` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lineage {
    /// Sessions that are not a delegation's child.
    TopLevel,
    /// Every session.
    All,
    /// The children of one session.
    ChildrenOf(String),
}

/// The SQL condition on `sessions.id` a [`Lineage`] sets: `?5` is [`Lineage::mode`], `?6` the
/// parent of [`Lineage::ChildrenOf`].
pub(super) const LINEAGE: &str = "CASE ?5
    WHEN 'top' THEN id NOT IN (SELECT child_id FROM delegations)
    WHEN 'children' THEN id IN (SELECT child_id FROM delegations WHERE parent_id = ?6)
    ELSE 1 END";

impl Lineage {
    pub(super) fn mode(&self) -> &'static str {
        match self {
            Lineage::TopLevel => "top",
            Lineage::All => "all",
            Lineage::ChildrenOf(_) => "children",
        }
    }

    pub(super) fn parent(&self) -> Option<&str> {
        match self {
            Lineage::ChildrenOf(parent) => Some(parent),
            _ => None,
        }
    }
}

impl Store {
    /// Links a new child session to the call it answers.
    pub fn insert_delegation(&self, row: &DelegationRow) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                &format!("INSERT INTO delegations ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
                params![
                    row.child_id,
                    row.parent_id,
                    row.parent_run_id,
                    row.call_id,
                    row.tools.as_str(),
                    row.task,
                    row.created_at
                ],
            )?;
            Ok(())
        })
    }

    /// The link of a child session; `None` for a session that is nobody's child.
    pub fn delegation_of_child(&self, child_id: &str) -> StoreResult<Option<DelegationRow>> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM delegations WHERE child_id = ?1"
                ))?
                .query_row([child_id], from_row)
                .optional()?)
        })
    }

    /// The child session that answers a parent's tool call, if one was started.
    pub fn delegation_of_call(
        &self,
        parent_id: &str,
        call_id: &str,
    ) -> StoreResult<Option<DelegationRow>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    &format!(
                        "SELECT {COLUMNS} FROM delegations WHERE parent_id = ?1 AND call_id = ?2"
                    ),
                    params![parent_id, call_id],
                    from_row,
                )
                .optional()?)
        })
    }

    /// A session's children, oldest first.
    pub fn delegations_of_parent(&self, parent_id: &str) -> StoreResult<Vec<DelegationRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM delegations WHERE parent_id = ?1 ORDER BY created_at, child_id"
            ))?;
            let rows = stmt
                .query_map([parent_id], from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// The session's unfinished run whose delegated task (a child) has not ended: the child
    /// waits for an approval, or works on after its approval was answered (or expired) while
    /// the parent's run was suspended. The child's end resumes that run, so until then it
    /// stays open rather than being closed as interrupted.
    pub fn run_waiting_on_child(&self, parent_id: &str) -> StoreResult<Option<super::RunRow>> {
        for link in self.delegations_of_parent(parent_id)? {
            let Some(run) = self.run(&link.parent_run_id)?.filter(|r| !r.finished) else {
                continue;
            };
            if self.has_open_run(&link.child_id)? {
                return Ok(Some(run));
            }
        }
        Ok(None)
    }

    /// Whether `run_id` (of session `parent_id`) delegated a task that has ended while its
    /// `delegate` call still has no result: the daemon stopped between the child's end and the
    /// parent's resume, so whoever finds the run resumes it to take the child's answer.
    pub fn awaits_ended_child(&self, parent_id: &str, run_id: &str) -> StoreResult<bool> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM delegations d JOIN tool_calls c
                   ON c.session_id = d.parent_id AND c.id = d.call_id
                 WHERE d.parent_id = ?1 AND d.parent_run_id = ?2 AND c.output IS NULL
                   AND EXISTS (SELECT 1 FROM runs r WHERE r.session_id = d.child_id)
                   AND NOT EXISTS (SELECT 1 FROM runs r
                                   WHERE r.session_id = d.child_id AND r.status <> ?3))",
                params![parent_id, run_id, super::RunStatus::Finished],
                |r| r.get(0),
            )?)
        })
    }

    fn has_open_run(&self, session_id: &str) -> StoreResult<bool> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT 1 FROM runs WHERE session_id = ?1 AND status <> 'finished' LIMIT 1",
                    [session_id],
                    |_| Ok(()),
                )
                .optional()?
                .is_some())
        })
    }

    /// The pending approvals of child sessions asked before `before` (milliseconds since the
    /// epoch), oldest first: those the expiry sweep denies.
    pub fn expirable_delegated_approvals(
        &self,
        before: i64,
    ) -> StoreResult<Vec<super::ApprovalRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, session_id, run_id, call_id, tool FROM approvals
                 WHERE status = 'pending' AND created_at < ?1
                   AND session_id IN (SELECT child_id FROM delegations)
                 ORDER BY created_at, id",
            )?;
            let rows = stmt
                .query_map(params![before], |r| {
                    Ok(super::ApprovalRow {
                        id: r.get(0)?,
                        session_id: r.get(1)?,
                        run_id: r.get(2)?,
                        call_id: r.get(3)?,
                        tool: r.get(4)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// Denies a pending approval as expired, marking it `resolved_by` [`EXPIRED`]; false when
    /// it was answered first.
    pub fn expire_approval(&self, id: &str) -> StoreResult<bool> {
        self.write(|conn| {
            Ok(conn.execute(
                "UPDATE approvals SET status = 'deny', resolved_at = ?2, resolved_by = ?3
                 WHERE id = ?1 AND status = 'pending'",
                params![id, now_ms(), EXPIRED],
            )? > 0)
        })
    }

    /// Whether the session turned the `delegate` tool off.
    pub fn delegation_off(&self, session_id: &str) -> StoreResult<bool> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT delegation_off FROM sessions WHERE id = ?1",
                    [session_id],
                    |r| r.get::<_, bool>(0),
                )
                .optional()?
                .unwrap_or(false))
        })
    }

    /// Turns the session's `delegate` tool off or back on.
    pub fn set_delegation_off(&self, session_id: &str, off: bool) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE sessions SET delegation_off = ?2, updated_at = ?3 WHERE id = ?1",
                params![session_id, off, now_ms()],
            )?;
            Ok(())
        })
    }
}

/// A tool call of a child session that failed, for the child's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedCall {
    pub name: String,
    pub input: serde_json::Value,
    pub output: String,
}

impl Store {
    /// How a run ended: its reason (`None` while open) and error text; `None` for an unknown
    /// run.
    #[allow(clippy::type_complexity)]
    pub fn run_end(
        &self,
        run_id: &str,
    ) -> StoreResult<Option<(Option<crate::protocol::FinishReason>, Option<String>)>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT reason, error FROM runs WHERE id = ?1",
                    [run_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?)
        })
    }

    /// The newest run of a session, open or finished.
    pub fn last_run_id(&self, session_id: &str) -> StoreResult<Option<String>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT id FROM runs WHERE session_id = ?1 ORDER BY started_at DESC, rowid DESC LIMIT 1",
                    [session_id],
                    |r| r.get(0),
                )
                .optional()?)
        })
    }

    /// The session's tool calls that ended in an error, in the order they were made.
    pub fn failed_calls(&self, session_id: &str) -> StoreResult<Vec<FailedCall>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT name, input, output FROM tool_calls
                 WHERE session_id = ?1 AND is_error = 1 ORDER BY rowid",
            )?;
            let rows = stmt
                .query_map([session_id], |r| {
                    let input: String = r.get(1)?;
                    Ok(FailedCall {
                        name: r.get(0)?,
                        input: serde_json::from_str(&input).unwrap_or_default(),
                        output: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::new_session;
    use pretty_assertions::assert_eq;

    fn link(parent: &str, child: &str, call: &str) -> DelegationRow {
        DelegationRow {
            child_id: child.into(),
            parent_id: parent.into(),
            parent_run_id: "run_1".into(),
            call_id: call.into(),
            tools: ToolSet::All,
            task: "look around".into(),
            created_at: 1,
        }
    }

    #[test]
    fn a_child_is_found_by_its_id_its_call_and_its_parent() {
        let store = Store::open_in_memory().unwrap();
        let parent = new_session(&store);
        let child = new_session(&store);
        let row = link(&parent, &child, "call_1");
        store.insert_delegation(&row).unwrap();
        assert_eq!(
            store.delegation_of_child(&child).unwrap(),
            Some(row.clone())
        );
        assert_eq!(store.delegation_of_child(&parent).unwrap(), None);
        assert_eq!(
            store.delegation_of_call(&parent, "call_1").unwrap(),
            Some(row.clone())
        );
        assert_eq!(store.delegation_of_call(&parent, "call_2").unwrap(), None);
        assert_eq!(store.delegations_of_parent(&parent).unwrap(), vec![row]);
        // One child per call.
        assert!(
            store
                .insert_delegation(&link(&parent, &parent, "call_1"))
                .is_err()
        );
    }

    #[test]
    fn top_level_listing_leaves_children_out() {
        let store = Store::open_in_memory().unwrap();
        let parent = new_session(&store);
        let child = new_session(&store);
        store
            .insert_delegation(&link(&parent, &child, "call_1"))
            .unwrap();
        let ids = |lineage: Lineage| -> Vec<String> {
            let mut ids: Vec<String> = store
                .list_sessions(None, 10, None, &lineage)
                .unwrap()
                .sessions
                .into_iter()
                .map(|s| s.id)
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(ids(Lineage::TopLevel), vec![parent.clone()]);
        assert_eq!(
            ids(Lineage::ChildrenOf(parent.clone())),
            vec![child.clone()]
        );
        let mut both = vec![parent, child];
        both.sort();
        assert_eq!(ids(Lineage::All), both);
    }

    #[test]
    fn delegation_can_be_turned_off_and_on() {
        let store = Store::open_in_memory().unwrap();
        let id = new_session(&store);
        assert!(!store.delegation_off(&id).unwrap());
        store.set_delegation_off(&id, true).unwrap();
        assert!(store.delegation_off(&id).unwrap());
        store.set_delegation_off(&id, false).unwrap();
        assert!(!store.delegation_off(&id).unwrap());
    }
}
