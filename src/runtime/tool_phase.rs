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

/// What the model is told of a call the user denied with a reason: the reason, in their words.
fn denied_because(reason: &str) -> String {
    format!(
        "The user denied this tool call and said why: {reason}\nDo not retry it as it was; take what the user said into account, and ask the user how to proceed if needed."
    )
}

/// What an approval prompt says beyond the call: the rule a workspace answer would save, and
/// why the rules in force did not settle the call.
#[derive(Debug, Clone, Default)]
struct Prompt {
    proposed_rule: Option<String>,
    why_asked: Option<String>,
}

impl Prompt {
    fn of(call: &ToolCallRow, decision: &Decision, root: Option<&std::path::Path>) -> Self {
        let why_asked = match decision {
            Decision::Ask(matched) => Some(format!("Asked by {matched}.")),
            Decision::Default { why: Some(why) } => Some(format!("No allow rule applies: {why}.")),
            _ => None,
        };
        Self {
            proposed_rule: permissions::answers::propose(&call.name, &call.input, root),
            why_asked,
        }
    }
}

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
        // The run's model (a custom command's, if it gave one) decides whether images go.
        let session = store.session(&self.session_id)?.map(|mut session| {
            if let Some(model) = &self.command_model {
                session.model = model.clone();
            }
            session
        });
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
        for call in calls.iter().filter(|c| c.output.is_none()) {
            self.emit(Event::ToolCallStarted {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                input: call.input.clone(),
                summary: tools::summary(&call.name, &call.input),
            });
        }
        let model = session
            .as_ref()
            .map(|s| s.model.clone())
            .unwrap_or_default();
        for call in calls.iter().filter(|c| c.output.is_none()) {
            // Read for each call: a workspace answer to one call applies to the next.
            let rules = self.rules(root.as_deref())?;
            let decision = rules.decide(&call.name, &call.input, root.as_deref());
            let prompt = Prompt::of(call, &decision, root.as_deref());
            let (status, mut outcome) = self
                .resolve_one(call, workspace.as_ref(), decision, &prompt)
                .await?;
            if let Some(image) = outcome.image.take() {
                let told = match crate::images::accepts_images(&model) {
                    true => {
                        let block = self.inner.store.put_image(&self.session_id, &image)?;
                        // Recorded before the result, so a result that says "attached" always
                        // has its image, also in a tool message recovery rebuilds.
                        self.inner
                            .store
                            .set_tool_call_image(&self.session_id, &call.id, &block)?;
                        "It is attached to this result.".to_string()
                    }
                    false => {
                        format!("The model {model} does not read images, so it is not attached.")
                    }
                };
                outcome.output = format!("{} {told}", outcome.output);
            }
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
        let mut blocks = result_blocks(&resolved);
        // The images the calls read go after all the results, as the providers want them.
        blocks.extend(self.inner.store.tool_call_images(&assistant.id)?);
        self.commit(None, Role::Tool, blocks, MessageStatus::Complete)?;
        Ok(())
    }

    async fn resolve_one(
        &mut self,
        call: &ToolCallRow,
        workspace: Option<&Result<Workspace, tools::PathError>>,
        decision: Decision,
        prompt: &Prompt,
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
            && let Some(refused) = self.refusal(call, &decision, prompt).await?
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
        let sandboxed = self.inner.runs_sandboxed(&call.name, &call.input);
        if let Some(refused) = self
            .command_refusal(call, &decision, sandboxed, prompt)
            .await?
        {
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
        } else if call.name == tools::plan::UPDATE_PLAN {
            self.update_plan(call)?
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
            let snapshot = match (call.name == tools::RUN_COMMAND, workspace) {
                (true, Some(ws)) => self.snapshot_before(ws.root()).await?,
                _ => None,
            };
            let outcome = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => None,
                outcome = async {
                    match sandboxed {
                        _ if call.name == tools::web_fetch::NAME => tools::web_fetch::fetch(&call.input, &self.inner.config.web_fetch).await.unwrap_or_else(ToolOutcome::error),
                        true => tools::execute_sandboxed(workspace, &call.input, &self.inner.store, &self.inner.config.sandbox).await,
                        false => tools::execute(workspace, &call.name, &call.input, &self.inner.store, &checkpoints).await,
                    }
                } => Some(outcome),
            };
            if let Some(before) = snapshot {
                // Also when the command was stopped: what it changed until then is kept.
                match before
                    .keep_changes(&self.inner.store, &self.session_id, &call.id)
                    .await
                {
                    Ok(files) if files > 0 => {
                        tracing::debug!(call_id = %call.id, files, "kept the files a command changed");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(call_id = %call.id, error = %e, "cannot keep the files a command changed; they cannot be rewound");
                    }
                }
            }
            match outcome {
                Some(outcome) => outcome,
                None => {
                    return Ok((
                        ToolCallStatus::Cancelled,
                        ToolOutcome::error(STOPPED_DURING),
                    ));
                }
            }
        };
        let status = if outcome.is_error {
            ToolCallStatus::Error
        } else {
            ToolCallStatus::Done
        };
        Ok((status, outcome))
    }

    /// [`Self::refusal`] with the sandbox's part: a command that runs sandboxed and that no
    /// rule asks for runs without a prompt; one the model asks to run outside the sandbox
    /// (`"sandbox": false`) always asks, whatever the rules or earlier answers say.
    async fn command_refusal(
        &mut self,
        call: &ToolCallRow,
        decision: &Decision,
        sandboxed: bool,
        prompt: &Prompt,
    ) -> RuntimeResult<Option<(ToolCallStatus, ToolOutcome)>> {
        if call.name != tools::RUN_COMMAND {
            return self.refusal(call, decision, prompt).await;
        }
        if tools::wants_outside_sandbox(&call.input) {
            let answer = self.approval(call, true, prompt).await?;
            return self.refused_by(call, answer);
        }
        if sandboxed && matches!(decision, Decision::Allow(_) | Decision::Default { .. }) {
            return Ok(None);
        }
        self.refusal(call, decision, prompt).await
    }

    /// Stores the plan an `update_plan` call gives and publishes it whole; a plan that is not
    /// valid is a tool error the model reads, and the plan before stays.
    fn update_plan(&self, call: &ToolCallRow) -> RuntimeResult<ToolOutcome> {
        let plan = match tools::plan::parse(&call.input) {
            Ok(plan) => plan,
            Err(problem) => return Ok(ToolOutcome::error(problem)),
        };
        let json = serde_json::to_string(&plan)
            .map_err(|e| RuntimeError::Internal(format!("a plan does not serialise: {e}")))?;
        self.inner.store.set_session_plan(&self.session_id, &json)?;
        let answer = tools::plan::answer(&plan);
        self.emit(Event::Plan {
            call_id: call.id.clone(),
            plan,
        });
        Ok(ToolOutcome::ok(answer))
    }

    /// The result of a call the user (or a stop) did not let run; `None` when it may run.
    async fn refusal(
        &mut self,
        call: &ToolCallRow,
        decision: &Decision,
        prompt: &Prompt,
    ) -> RuntimeResult<Option<(ToolCallStatus, ToolOutcome)>> {
        let answer = match decision {
            Decision::Allow(_) => Some(ApprovalDecision::Allow),
            Decision::Ask(_) => self.approval(call, true, prompt).await?,
            _ => self.approval(call, false, prompt).await?,
        };
        self.refused_by(call, answer)
    }

    /// What the model is told of a call `answer` did not let run; `None` when it may run.
    fn refused_by(
        &self,
        call: &ToolCallRow,
        answer: Option<ApprovalDecision>,
    ) -> RuntimeResult<Option<(ToolCallStatus, ToolOutcome)>> {
        Ok(match answer {
            Some(ApprovalDecision::Deny) => {
                let output = match self.expired_output(call)? {
                    Some(expired) => expired,
                    None => match self.deny_reason(call)? {
                        Some(reason) => denied_because(&reason),
                        None => DENIED.to_string(),
                    },
                };
                Some((ToolCallStatus::Denied, ToolOutcome::error(output)))
            }
            Some(ApprovalDecision::Cancelled) | None => Some((
                ToolCallStatus::Cancelled,
                ToolOutcome::error(STOPPED_BEFORE),
            )),
            Some(
                ApprovalDecision::Allow
                | ApprovalDecision::AllowAlways
                | ApprovalDecision::AllowWorkspace,
            ) => None,
        })
    }

    /// The reason the user gave with a deny of this call, if any.
    fn deny_reason(&self, call: &ToolCallRow) -> RuntimeResult<Option<String>> {
        Ok(self
            .inner
            .store
            .latest_approval(&self.session_id, &call.id)?
            .and_then(|a| a.reason))
    }

    /// The rules in force for this run's calls: the user's, the workspace's own file's, whose
    /// notices (an ignored allow, a rule that cannot be read) the session hears once, and the
    /// answers saved for the workspace.
    fn rules(&self, root: Option<&std::path::Path>) -> RuntimeResult<permissions::Rules> {
        let in_force = self.inner.rules_in_force(root)?;
        for notice in in_force.notices {
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
        Ok(in_force.rules)
    }

    /// The workspace before a command: its snapshot in git, or the scan of its files' sizes
    /// and times. A work tree too large to snapshot is said once per session.
    async fn snapshot_before(
        &self,
        root: &std::path::Path,
    ) -> RuntimeResult<Option<super::command_snapshots::Before>> {
        let taken = self
            .inner
            .command_snapshots
            .before(&self.inner.store, &self.session_id, root)
            .await;
        if taken.tell_too_large {
            self.inner.notice(
                &self.session_id,
                Some(&self.run_id),
                NoticeLevel::Warning,
                format!(
                    "The workspace has more than {} files: the files commands change in it are listed but not kept, so a rewind cannot put them back.",
                    self.inner.config.undo.max_snapshot_files
                ),
            )?;
        }
        Ok(taken.before)
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
        prompt: &Prompt,
    ) -> RuntimeResult<Option<ApprovalDecision>> {
        let store = &self.inner.store;
        if !forced
            && (self.inner.runs_unasked(&self.session_id, &call.name)
                || store.is_tool_allowed(
                    &self.session_id,
                    &tools::session_key(&call.name, &call.input),
                )?)
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
                proposed_rule: prompt.proposed_rule.clone(),
                why_asked: prompt.why_asked.clone(),
                sandboxed: None,
            };
            let approval = self.inner.with_sandbox(approval);
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
            let answer = {
                // An answer stored but not yet announced is waited for (`Inner::answering`).
                let _answering = crate::util::lock_off_worker(&self.inner.answering);
                self.inner
                    .store
                    .latest_approval(&self.session_id, &call.id)?
                    .and_then(LatestApproval::answer)
            };
            if let Some(answer) = answer {
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
