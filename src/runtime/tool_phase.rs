//! Resolving the tool calls of an assistant message: approval policy, execution, results.
//!
//! Calls run one after another in the model's order. Each result is stored as soon as it is
//! known; once every call has one, they are committed together as one tool message, so the
//! transcript always pairs each call with exactly one result.

use super::run::RunContext;
use super::{RuntimeError, RuntimeResult};
use crate::permissions::{self, Decision};
use crate::protocol::*;
use crate::store::{FileChange, LatestApproval, ToolCallRow};
use crate::tools::{self, ToolOutcome, Workspace};
use crate::util::new_id;

const STOPPED_BEFORE: &str = "The user stopped the run before this tool ran.";
const STOPPED_DURING: &str =
    "The user stopped the run while this tool was running; it was interrupted.";
const DENIED: &str =
    "The user denied this tool call. Do not retry it; ask the user how to proceed if needed.";

/// What the model is told of a call a deny rule refused: the rule and where it is written, so
/// the model (and the user reading along) knows what to change.
fn refused(matched: &permissions::Matched) -> String {
    format!(
        "Refused by {matched}, without asking the user. Do not retry it; ask the user how to proceed if needed."
    )
}

impl RunContext {
    pub(super) async fn resolve_tool_calls(
        &mut self,
        assistant: &TranscriptEntry,
    ) -> RuntimeResult<()> {
        let store = &self.inner.store;
        let calls = store.tool_calls_of_message(&assistant.id)?;
        let session = store.session(&self.session_id)?;
        let workspace = session
            .as_ref()
            .and_then(|s| s.workspace_root.as_deref())
            .map(|root| Workspace::new(std::path::Path::new(root)));
        let root = match &workspace {
            Some(Ok(ws)) => Some(ws.root().to_path_buf()),
            _ => session
                .as_ref()
                .and_then(|s| s.workspace_root.as_deref())
                .map(std::path::PathBuf::from),
        };
        let rules = self.rules(root.as_deref())?;
        for call in calls.iter().filter(|c| c.output.is_none()) {
            self.emit(Event::ToolCallStarted {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                input: call.input.clone(),
                summary: tools::summary(&call.name, &call.input),
            });
        }
        for call in calls.iter().filter(|c| c.output.is_none()) {
            let decision = rules.decide(&call.name, &call.input, root.as_deref());
            let (status, outcome) = self.resolve_one(call, workspace.as_ref(), decision).await?;
            if let Some(change) = outcome.changed.as_ref().filter(|_| !outcome.is_error) {
                self.inner
                    .store
                    .record_changed_file(&self.session_id, change)?;
                if let Some(snapshot) = &outcome.snapshot {
                    self.inner.store.record_file_change(
                        &self.session_id,
                        &FileChange {
                            call_id: &call.id,
                            path: &change.path,
                            before: snapshot.before.as_deref(),
                            after: &snapshot.after,
                        },
                    )?;
                }
            }
            self.inner.store.set_tool_call_result(
                &self.session_id,
                &call.id,
                status,
                &outcome.output,
                outcome.is_error,
            )?;
            self.emit(Event::ToolCallUpdated {
                call_id: call.id.clone(),
                status,
                output: Some(outcome.output),
            });
        }
        let resolved = self.inner.store.tool_calls_of_message(&assistant.id)?;
        self.commit(
            None,
            Role::Tool,
            result_blocks(&resolved),
            MessageStatus::Complete,
        )?;
        Ok(())
    }

    async fn resolve_one(
        &mut self,
        call: &ToolCallRow,
        workspace: Option<&Result<Workspace, tools::PathError>>,
        decision: Decision,
    ) -> RuntimeResult<(ToolCallStatus, ToolOutcome)> {
        if let Decision::Deny(matched) = &decision {
            tracing::info!(call_id = %call.id, tool = %call.name, rule = %matched.rule, "refused by a deny rule");
            return Ok((ToolCallStatus::Denied, ToolOutcome::error(refused(matched))));
        }
        if let Decision::Default { why: Some(why) } = &decision {
            tracing::debug!(call_id = %call.id, why, "no allow rule applies");
        }
        // `delegate` is never asked by default; an ask rule asks before the task starts.
        if call.name == super::delegation::DELEGATE
            && matches!(decision, Decision::Ask(_))
            && let Some(refused) = self.refusal(call, &decision).await?
        {
            return Ok(refused);
        }
        if let Some(resolved) = self.resolve_delegation(call).await? {
            return Ok(resolved);
        }
        if self.stopped() {
            return Ok((
                ToolCallStatus::Cancelled,
                ToolOutcome::error(STOPPED_BEFORE),
            ));
        }
        if let Some(refused) = self.refusal(call, &decision).await? {
            return Ok(refused);
        }
        self.mark_running(call)?;
        let mut stop = self.signals.stop.clone();
        let outcome = if crate::mcp::names::is_mcp(&call.name) {
            // Dropping the call when the run stops cancels the request on the server.
            let mcp = self.inner.mcp.clone();
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return Ok((ToolCallStatus::Cancelled, ToolOutcome::error(STOPPED_DURING))),
                outcome = mcp.call(&self.session_id, &call.name, &call.input) => outcome,
            }
        } else {
            let workspace = match workspace {
                Some(Ok(ws)) => Some(ws),
                Some(Err(e)) => {
                    return Ok((ToolCallStatus::Error, ToolOutcome::error(e.to_string())));
                }
                None => None,
            };
            let checkpoints = super::rewind::CallCheckpoints {
                store: &self.inner.store,
                session_id: &self.session_id,
                call_id: &call.id,
            };
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return Ok((ToolCallStatus::Cancelled, ToolOutcome::error(STOPPED_DURING))),
                outcome = tools::execute(workspace, &call.name, &call.input, &self.inner.store, &checkpoints) => outcome,
            }
        };
        let status = if outcome.is_error {
            ToolCallStatus::Error
        } else {
            ToolCallStatus::Done
        };
        Ok((status, outcome))
    }

    /// The result of a call the user (or a stop) did not let run; `None` when it may run.
    async fn refusal(
        &mut self,
        call: &ToolCallRow,
        decision: &Decision,
    ) -> RuntimeResult<Option<(ToolCallStatus, ToolOutcome)>> {
        let answer = match decision {
            Decision::Allow(_) => Some(ApprovalDecision::Allow),
            Decision::Ask(_) => self.approval(call, true).await?,
            _ => self.approval(call, false).await?,
        };
        Ok(match answer {
            Some(ApprovalDecision::Deny) => {
                let output = self.expired_output(call)?;
                Some((
                    ToolCallStatus::Denied,
                    ToolOutcome::error(output.as_deref().unwrap_or(DENIED)),
                ))
            }
            Some(ApprovalDecision::Cancelled) | None => Some((
                ToolCallStatus::Cancelled,
                ToolOutcome::error(STOPPED_BEFORE),
            )),
            Some(ApprovalDecision::Allow | ApprovalDecision::AllowAlways) => None,
        })
    }

    /// The rules in force for this run's calls: the user's, then the workspace's own, whose
    /// notices (an ignored allow, a rule that cannot be read) the session hears once.
    fn rules(&self, root: Option<&std::path::Path>) -> RuntimeResult<permissions::Rules> {
        let mut rules = self.inner.config.permissions.clone();
        if let Some(root) = root {
            let project = permissions::project::load(root);
            for notice in project.notices {
                if self
                    .inner
                    .first_permission_notice(&self.session_id, &notice)
                {
                    self.inner.notice(
                        &self.session_id,
                        Some(&self.run_id),
                        NoticeLevel::Warning,
                        notice,
                    )?;
                }
            }
            rules.extend(project.rules);
        }
        Ok(rules)
    }

    /// Stores the call as running and tells the clients.
    pub(super) fn mark_running(&self, call: &ToolCallRow) -> RuntimeResult<()> {
        self.inner.store.set_tool_call_status(
            &self.session_id,
            &call.id,
            ToolCallStatus::Running,
        )?;
        self.emit(Event::ToolCallUpdated {
            call_id: call.id.clone(),
            status: ToolCallStatus::Running,
            output: None,
        });
        Ok(())
    }

    /// The decision that lets a call run: asks the user unless the tool needs no approval or
    /// was allowed for the session (or always, when an ask rule `forced` it). `None` when the
    /// run was stopped while waiting.
    async fn approval(
        &mut self,
        call: &ToolCallRow,
        forced: bool,
    ) -> RuntimeResult<Option<ApprovalDecision>> {
        let store = &self.inner.store;
        if !forced
            && (self.inner.runs_unasked(&self.session_id, &call.name)
                || store.is_tool_allowed(&self.session_id, &call.name)?)
        {
            return Ok(Some(ApprovalDecision::Allow));
        }
        if store.latest_approval(&self.session_id, &call.id)?.is_none() {
            let approval = PendingApproval {
                approval_id: new_id("apr"),
                run_id: self.run_id.clone(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                input: call.input.clone(),
                summary: tools::summary(&call.name, &call.input),
                created_at: crate::util::rfc3339(crate::util::now_ms()),
            };
            store.insert_approval(&approval, &self.session_id)?;
            store.set_tool_call_status(
                &self.session_id,
                &call.id,
                ToolCallStatus::AwaitingApproval,
            )?;
            self.emit(Event::ToolCallUpdated {
                call_id: call.id.clone(),
                status: ToolCallStatus::AwaitingApproval,
                output: None,
            });
            self.delegated_approval(true)?;
            self.emit(Event::ApprovalRequested { approval });
        }
        loop {
            // Mark the current answer count seen before reading, so no answer slips between.
            self.signals.approvals.borrow_and_update();
            if let Some(answer) = self
                .inner
                .store
                .latest_approval(&self.session_id, &call.id)?
                .and_then(LatestApproval::answer)
            {
                // Answered through another daemon on the same database: this daemon's clients
                // still show the prompt until told.
                if answer
                    .resolved_by
                    .as_deref()
                    .is_some_and(|by| by != self.inner.store.owner())
                {
                    self.emit(Event::ApprovalResolved {
                        approval_id: answer.approval_id,
                        decision: answer.decision,
                    });
                }
                self.delegated_approval(false)?;
                return Ok(Some(answer.decision));
            }
            let mut stop = self.signals.stop.clone();
            tokio::select! {
                _ = stop.wait_for(|s| *s) => {
                    if self.signals.suspend.load(std::sync::atomic::Ordering::SeqCst) {
                        return Err(RuntimeError::Suspended);
                    }
                    return Ok(None);
                }
                changed = self.signals.approvals.changed() => {
                    if changed.is_err() {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

pub(super) fn result_blocks(calls: &[ToolCallRow]) -> Vec<Block> {
    calls
        .iter()
        .map(|call| Block::ToolResult {
            call_id: call.id.clone(),
            output: call.output.clone().unwrap_or_default(),
            is_error: call.is_error,
            status: call.status,
        })
        .collect()
}
