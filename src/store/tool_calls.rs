//! Tool calls, approvals, per-session tool permissions and changed files.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError, StoreResult};
use crate::protocol::{ApprovalDecision, ChangedFile, PendingApproval, ToolCallStatus};
use crate::util::{now_ms, rfc3339};

/// A tool call as stored, with its result once it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRow {
    pub id: String,
    pub run_id: String,
    pub message_id: String,
    pub name: String,
    pub input: serde_json::Value,
    pub status: ToolCallStatus,
    pub output: Option<String>,
    pub is_error: bool,
}

/// What answering an approval did.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalOutcome {
    Applied(ApprovalRow),
    /// It was already resolved; nothing changed.
    AlreadyResolved(ApprovalDecision),
    NotFound,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRow {
    pub id: String,
    pub session_id: String,
    pub run_id: String,
    pub call_id: String,
    pub tool: String,
}

/// What the user answered, as `resolve_approval` records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub decision: ApprovalDecision,
    /// With a deny: why, for the model.
    pub reason: Option<String>,
    /// With `allowWorkspace`: the workspace root and the allow rule to save for it.
    pub workspace_rule: Option<(String, String)>,
}

impl Answer {
    pub fn plain(decision: ApprovalDecision) -> Self {
        Self {
            decision,
            reason: None,
            workspace_rule: None,
        }
    }
}

/// An approval's answer, and which daemon (lease owner) took it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalAnswer {
    pub approval_id: String,
    pub decision: ApprovalDecision,
    pub resolved_by: Option<String>,
    /// The user's reason for a deny, which the model is told.
    pub reason: Option<String>,
}

/// A call's latest approval as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct LatestApproval {
    pub approval_id: String,
    pub status: ApprovalStatus,
    /// The daemon (lease owner) that answered it.
    pub resolved_by: Option<String>,
    /// The user's reason for a deny.
    pub reason: Option<String>,
}

impl LatestApproval {
    /// The answer, once one was given; `None` while it waits or when the run's end cancelled
    /// it.
    pub fn answer(self) -> Option<ApprovalAnswer> {
        let decision = self.status.decision()?;
        Some(ApprovalAnswer {
            approval_id: self.approval_id,
            decision,
            resolved_by: self.resolved_by,
            reason: self.reason,
        })
    }
}

/// Where an approval stands: waiting, answered with a decision, or cancelled with its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalStatus {
    Pending,
    Allow,
    AllowAlways,
    AllowWorkspace,
    Deny,
    Cancelled,
}

impl From<ApprovalDecision> for ApprovalStatus {
    fn from(decision: ApprovalDecision) -> Self {
        match decision {
            ApprovalDecision::Allow => ApprovalStatus::Allow,
            ApprovalDecision::AllowAlways => ApprovalStatus::AllowAlways,
            ApprovalDecision::AllowWorkspace => ApprovalStatus::AllowWorkspace,
            ApprovalDecision::Deny => ApprovalStatus::Deny,
            ApprovalDecision::Cancelled => ApprovalStatus::Cancelled,
        }
    }
}

impl ApprovalStatus {
    /// The decision once it is made (the user's, or `cancelled` by the run's end).
    pub fn decision(self) -> Option<ApprovalDecision> {
        match self {
            ApprovalStatus::Pending => None,
            ApprovalStatus::Allow => Some(ApprovalDecision::Allow),
            ApprovalStatus::AllowAlways => Some(ApprovalDecision::AllowAlways),
            ApprovalStatus::AllowWorkspace => Some(ApprovalDecision::AllowWorkspace),
            ApprovalStatus::Deny => Some(ApprovalDecision::Deny),
            ApprovalStatus::Cancelled => Some(ApprovalDecision::Cancelled),
        }
    }
}

/// Inserts the tool calls of a freshly appended assistant message (same transaction).
pub(super) fn insert_calls(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    run_id: &str,
    message_id: &str,
    calls: &[(&str, &str, &serde_json::Value)],
) -> StoreResult<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO tool_calls (id, session_id, run_id, message_id, position, name, input, status)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for (position, (id, name, input)) in calls.iter().enumerate() {
        stmt.execute(params![
            id,
            session_id,
            run_id,
            message_id,
            position as i64,
            name,
            input.to_string(),
            ToolCallStatus::Pending
        ])?;
    }
    Ok(())
}

/// The rows `sql` selects for `key`, each built by `build` from the row and its `input`
/// column's JSON. Column 0 is the row's id, which names the row when its input is not JSON:
/// the store then reports corruption rather than a row without its input.
fn rows_with_input<T>(
    conn: &rusqlite::Connection,
    sql: &str,
    key: &str,
    what: &str,
    build: impl Fn(&rusqlite::Row<'_>, serde_json::Value) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map([key], |r| {
        let input: String = r.get("input")?;
        match serde_json::from_str(&input) {
            Ok(input) => build(r, input).map(Ok),
            Err(e) => Ok(Err(StoreError::Corrupt(format!(
                "{what} {}: {e}",
                r.get::<_, String>(0)?
            )))),
        }
    })?;
    rows.map(|row| row?).collect()
}

/// [`Store::pending_approvals`]'s query, run for each listed session (its plan is checked in
/// the store's tests).
pub(super) const PENDING_APPROVALS: &str =
    "SELECT id, run_id, call_id, tool, input, summary, created_at, proposed_rule, why_asked
     FROM approvals WHERE session_id = ?1 AND status = 'pending' ORDER BY created_at";

impl Store {
    /// The tool calls of one assistant message, in the order the model made them.
    pub fn tool_calls_of_message(&self, message_id: &str) -> StoreResult<Vec<ToolCallRow>> {
        self.read(|conn| {
            rows_with_input(
                conn,
                "SELECT id, run_id, message_id, name, input, status, output, is_error FROM tool_calls
                 WHERE message_id = ?1 ORDER BY position",
                message_id,
                "tool call",
                |r, input| {
                    Ok(ToolCallRow {
                        id: r.get(0)?,
                        run_id: r.get(1)?,
                        message_id: r.get(2)?,
                        name: r.get(3)?,
                        input,
                        status: r.get(5)?,
                        output: r.get(6)?,
                        is_error: r.get(7)?,
                    })
                },
            )
        })
    }

    pub fn set_tool_call_status(
        &self,
        session_id: &str,
        call_id: &str,
        status: ToolCallStatus,
    ) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE tool_calls SET status = ?3 WHERE session_id = ?1 AND id = ?2",
                params![session_id, call_id, status],
            )?;
            Ok(())
        })
    }

    /// Stores a call's result; a call that already has one keeps it (exactly one result).
    pub fn set_tool_call_result(
        &self,
        session_id: &str,
        call_id: &str,
        status: ToolCallStatus,
        output: &str,
        is_error: bool,
    ) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE tool_calls SET status = ?3, output = ?4, is_error = ?5
             WHERE session_id = ?1 AND id = ?2 AND output IS NULL",
                params![session_id, call_id, status, output, is_error],
            )?;
            Ok(())
        })
    }

    pub fn insert_approval(&self, approval: &PendingApproval, session_id: &str) -> StoreResult<()> {
        self.write(|conn| {
        conn.execute(
            "INSERT INTO approvals (id, session_id, run_id, call_id, tool, input, summary, status, created_at,
                                    proposed_rule, why_asked)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                approval.approval_id,
                session_id,
                approval.run_id,
                approval.call_id,
                approval.tool,
                approval.input.to_string(),
                approval.summary,
                ApprovalStatus::Pending,
                now_ms(),
                approval.proposed_rule,
                approval.why_asked
            ],
        )?;
        Ok(())
            })
    }

    /// A call's latest approval: `None` when none was asked. Once answered, its
    /// [`LatestApproval::answer`] says how and through which daemon: a run learns this way of
    /// an answer given through another daemon.
    pub fn latest_approval(
        &self,
        session_id: &str,
        call_id: &str,
    ) -> StoreResult<Option<LatestApproval>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT id, status, resolved_by, reason FROM approvals WHERE session_id = ?1 AND call_id = ?2
                     ORDER BY created_at DESC LIMIT 1",
                    params![session_id, call_id],
                    |r| {
                        Ok(LatestApproval {
                            approval_id: r.get(0)?,
                            status: r.get(1)?,
                            resolved_by: r.get(2)?,
                            reason: r.get(3)?,
                        })
                    },
                )
                .optional()?)
        })
    }

    /// Whether a call of `run_id` waits to start although its approval was answered (allowed
    /// or denied): the run's daemon stopped before it read the answer, which was given through
    /// another daemon. Whoever takes the run over can still act on it.
    pub fn has_answer_not_acted_on(&self, session_id: &str, run_id: &str) -> StoreResult<bool> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM approvals a JOIN tool_calls c
                   ON c.session_id = a.session_id AND c.id = a.call_id
                 WHERE a.session_id = ?1 AND a.run_id = ?2 AND a.status IN (?3, ?4, ?5, ?7)
                   AND c.status = ?6 AND c.output IS NULL)",
                params![
                    session_id,
                    run_id,
                    ApprovalStatus::Allow,
                    ApprovalStatus::AllowAlways,
                    ApprovalStatus::Deny,
                    ToolCallStatus::AwaitingApproval,
                    ApprovalStatus::AllowWorkspace
                ],
                |r| r.get(0),
            )?)
        })
    }

    pub fn pending_approvals(&self, session_id: &str) -> StoreResult<Vec<PendingApproval>> {
        self.read(|conn| {
            rows_with_input(
                conn,
                PENDING_APPROVALS,
                session_id,
                "approval",
                |r, input| {
                    Ok(PendingApproval {
                        approval_id: r.get(0)?,
                        run_id: r.get(1)?,
                        call_id: r.get(2)?,
                        tool: r.get(3)?,
                        input,
                        summary: r.get(5)?,
                        created_at: rfc3339(r.get(6)?),
                        proposed_rule: r.get(7)?,
                        why_asked: r.get(8)?,
                        // Known to the runtime, which fills it in (`Inner::with_sandbox`).
                        sandboxed: None,
                    })
                },
            )
        })
    }

    /// Records the user's answer once; `allowAlways` also allows the tool for the session, and
    /// `allowWorkspace` saves `answer.workspace_rule` in the same transaction.
    pub fn resolve_approval(&self, id: &str, answer: &Answer) -> StoreResult<ApprovalOutcome> {
        let decision = answer.decision;
        self.write(|conn| {
            let tx = conn.transaction()?;
            let row = tx
                .query_row(
                    "SELECT session_id, run_id, call_id, tool, status FROM approvals WHERE id = ?1",
                    [id],
                    |r| {
                        Ok((
                            ApprovalRow {
                                id: id.to_string(),
                                session_id: r.get(0)?,
                                run_id: r.get(1)?,
                                call_id: r.get(2)?,
                                tool: r.get(3)?,
                            },
                            r.get::<_, ApprovalStatus>(4)?,
                        ))
                    },
                )
                .optional()?;
            let Some((row, status)) = row else {
                return Ok(ApprovalOutcome::NotFound);
            };
            if let Some(earlier) = status.decision() {
                return Ok(ApprovalOutcome::AlreadyResolved(earlier));
            }
            tx.execute(
                "UPDATE approvals SET status = ?2, resolved_at = ?3, resolved_by = ?4, reason = ?5
                 WHERE id = ?1",
                params![
                    id,
                    ApprovalStatus::from(decision),
                    now_ms(),
                    self.owner(),
                    answer.reason
                ],
            )?;
            if let Some((root, rule)) = &answer.workspace_rule {
                super::workspace_rules::insert(&tx, root, rule)?;
            }
            if decision == ApprovalDecision::AllowAlways {
                let input: serde_json::Value = tx
                    .query_row(
                        "SELECT input FROM tool_calls WHERE session_id = ?1 AND id = ?2",
                        params![row.session_id, row.call_id],
                        |r| r.get::<_, String>(0),
                    )
                    .optional()?
                    .and_then(|input| serde_json::from_str(&input).ok())
                    .unwrap_or(serde_json::Value::Null);
                tx.execute(
                    "INSERT OR IGNORE INTO allowed_tools (session_id, tool) VALUES (?1, ?2)",
                    params![row.session_id, crate::tools::session_key(&row.tool, &input)],
                )?;
            }
            tx.commit()?;
            Ok(ApprovalOutcome::Applied(row))
        })
    }

    /// An approval's session and the rule its prompt proposed; `None` when there is no such
    /// approval.
    pub fn approval_proposal(&self, id: &str) -> StoreResult<Option<(String, Option<String>)>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT session_id, proposed_rule FROM approvals WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?)
        })
    }

    /// Cancels every approval of a run still pending; returns their ids.
    pub fn cancel_pending_approvals(&self, run_id: &str) -> StoreResult<Vec<String>> {
        self.write(|conn| {
            let mut stmt = conn.prepare_cached(
                "UPDATE approvals SET status = ?3, resolved_at = ?2
             WHERE run_id = ?1 AND status = 'pending' RETURNING id",
            )?;
            let ids = stmt
                .query_map(params![run_id, now_ms(), ApprovalStatus::Cancelled], |r| {
                    r.get(0)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ids)
        })
    }

    pub fn is_tool_allowed(&self, session_id: &str, tool: &str) -> StoreResult<bool> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT 1 FROM allowed_tools WHERE session_id = ?1 AND tool = ?2",
                    params![session_id, tool],
                    |_| Ok(()),
                )
                .optional()?
                .is_some())
        })
    }

    /// Adds a successful write's line counts to the session's changed files.
    pub fn record_changed_file(&self, session_id: &str, change: &ChangedFile) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
            "INSERT INTO changed_files (session_id, path, added, removed) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (session_id, path) DO UPDATE SET
                added = added + excluded.added, removed = removed + excluded.removed",
            params![
                session_id,
                change.path,
                change.added as i64,
                change.removed as i64
            ],
        )?;
            Ok(())
        })
    }

    pub fn changed_files(&self, session_id: &str) -> StoreResult<Vec<ChangedFile>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
            "SELECT path, added, removed FROM changed_files WHERE session_id = ?1 ORDER BY path",
        )?;
            let files = stmt
                .query_map([session_id], |r| {
                    Ok(ChangedFile {
                        path: r.get(0)?,
                        added: r.get::<_, i64>(1)? as u64,
                        removed: r.get::<_, i64>(2)? as u64,
                        child_session_id: None,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(files)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Block, Role};
    use crate::store::NewMessage;
    use crate::store::test_support::new_session;
    use pretty_assertions::assert_eq;

    /// A store with one session whose assistant message holds one call, `call_1`, awaiting
    /// approval: the session's id and the message's id.
    fn one_call_awaiting_approval(store: &Store) -> (String, String) {
        let session_id = new_session(store);
        store.insert_run("run_1", &session_id, "demo").unwrap();
        let mut message = NewMessage::new(
            &session_id,
            Some("run_1"),
            Role::Assistant,
            vec![Block::ToolCall {
                id: "call_1".into(),
                name: "write_file".into(),
                input: serde_json::json!({"path": "a.md"}),
            }],
        );
        message.seq = 1;
        let message_id = store.append_message(&message).unwrap().id;
        let approval = PendingApproval {
            approval_id: "apr_1".into(),
            run_id: "run_1".into(),
            call_id: "call_1".into(),
            tool: "write_file".into(),
            input: serde_json::json!({"path": "a.md"}),
            summary: "write a.md".into(),
            created_at: rfc3339(0),
            proposed_rule: None,
            why_asked: None,
            sandboxed: None,
        };
        store.insert_approval(&approval, &session_id).unwrap();
        (session_id, message_id)
    }

    #[test]
    fn calls_and_approvals_are_read_with_their_input() {
        let store = Store::open_in_memory().unwrap();
        let (session_id, message_id) = one_call_awaiting_approval(&store);
        let calls = store.tool_calls_of_message(&message_id).unwrap();
        assert_eq!(
            calls,
            vec![ToolCallRow {
                id: "call_1".into(),
                run_id: "run_1".into(),
                message_id,
                name: "write_file".into(),
                input: serde_json::json!({"path": "a.md"}),
                status: ToolCallStatus::Pending,
                output: None,
                is_error: false,
            }]
        );
        let approvals = store.pending_approvals(&session_id).unwrap();
        assert_eq!(approvals.len(), 1);
        assert_eq!(
            (
                &approvals[0].approval_id,
                &approvals[0].input,
                &approvals[0].summary
            ),
            (
                &"apr_1".to_string(),
                &serde_json::json!({"path": "a.md"}),
                &"write a.md".to_string()
            )
        );
    }

    #[test]
    fn an_input_that_is_not_json_is_reported_as_corrupt_naming_the_row() {
        let store = Store::open_in_memory().unwrap();
        let (session_id, message_id) = one_call_awaiting_approval(&store);
        store
            .write(|conn| {
                conn.execute("UPDATE tool_calls SET input = '{cut'", [])?;
                conn.execute("UPDATE approvals SET input = '{cut'", [])?;
                Ok(())
            })
            .unwrap();
        let corrupt = |result: StoreResult<_>| match result {
            Err(StoreError::Corrupt(text)) => text.split(':').next().unwrap_or("").to_string(),
            other => panic!("not reported as corrupt: {other:?}"),
        };
        assert_eq!(
            corrupt(store.tool_calls_of_message(&message_id).map(|_| ())),
            "tool call call_1"
        );
        assert_eq!(
            corrupt(store.pending_approvals(&session_id).map(|_| ())),
            "approval apr_1"
        );
    }
}
