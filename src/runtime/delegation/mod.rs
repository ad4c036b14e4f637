//! Delegation: a run hands a task to a child session through the built-in `delegate` tool.
//!
//! Design notes:
//! - **One level deep.** A child session is linked to its parent session, the parent's run
//!   and the `delegate` call it answers (`store::delegations`). A child is never offered
//!   `delegate`, and a call of it from a child fails with the reason.
//! - **Inside the parent's tool phase.** The parent's `delegate` call starts the child's run
//!   and awaits its end; the child's answer (or a report of how it ended, `answer`) is the
//!   call's result. The child is an ordinary session: its own transcript, runs, approvals and
//!   usage lines, working in the parent's workspace with a fresh context holding the task.
//! - **Events.** Everything the child publishes also reaches the parent's clients as
//!   `delegation` events (`forward`).
//! - **Approvals stay durable.** A child's approval is its own approval row; the parent's
//!   call shows `awaitingApproval` meanwhile and the root's transcript lists it as a
//!   delegated approval. Answering it (by its id, from anywhere) resumes the child. When a
//!   daemon stops while the child waits, both runs stay open: the parent's run counts as
//!   suspended for as long as its child's run is open (`Store::suspended_run`), and when the
//!   resumed child ends, its parent's run is resumed and reads the child's answer from the
//!   store.
//! - **Stop stops the tree.** Stopping the parent stops the child (live, or suspended after a
//!   restart), whose report says "stopped".

mod answer;
mod expiry;
mod files;
mod forward;

use serde_json::{Value, json};
use tokio::sync::watch;

pub(super) use expiry::start_sweep;
pub(super) use forward::Forward;

use super::run::{RunContext, RunStart, spawn_run};
use super::run_end::RunEnd;
use super::{Inner, RuntimeError, RuntimeResult};
use crate::protocol::*;
use crate::provider::ToolSpec;
use crate::store::{DelegationRow, Lineage, NewMessage, NewSession, RunRow, ToolCallRow, ToolSet};
use crate::tools::ToolOutcome;
use crate::util::{new_id, now_ms};

/// The tool's name.
pub const DELEGATE: &str = "delegate";

const ONE_LEVEL: &str = "Delegation is one level deep: a delegated task cannot delegate again. Do the work with your own tools.";
const TURNED_OFF: &str =
    "Delegation is turned off for this session. Do the work with your own tools.";
const STOPPED: &str = "The user stopped the run before the delegated task started.";

/// What a child session is told about its role, before the parent's instructions.
pub(crate) const CHILD_PROMPT: &str = "You are a sub-agent. Another agent handed you one task in its workspace. Work on it with the tools you have, then answer with a final message that reports what you found or did: that message is all the other agent sees, so make it complete and concise.";

/// The `delegate` tool's definition.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: DELEGATE.into(),
        description: "Hand a focused, self-contained task (a search through many files, a change to one module) to a sub-agent that works in a fresh context in the same workspace, and get its final answer back; this conversation's context stays small. tools: \"read-only\" (default) only reads and searches; \"all\" may also write files and run commands, each asking the user's approval.".into(),
        input_schema: json!({"type": "object", "properties": {
            "task": {"type": "string", "description": "What the sub-agent should do, with everything it needs to know"},
            "instructions": {"type": "string", "description": "How to work or answer (added to the sub-agent's system prompt)"},
            "tools": {"type": "string", "enum": ["read-only", "all"], "description": "Tools the sub-agent gets (default read-only)"},
            "model": {"type": "string", "description": "A model of this session's account; this session's model when absent"}
        }, "required": ["task"]}),
    }
}

/// A `delegate` call's input, checked.
#[derive(Debug, Clone, PartialEq)]
struct DelegateInput {
    task: String,
    instructions: Option<String>,
    tools: ToolSet,
    model: Option<String>,
}

impl DelegateInput {
    fn parse(input: &Value) -> Result<Self, String> {
        let text = |key: &str| -> Result<Option<String>, String> {
            match input.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("{key} must be a string, not {other}")),
            }
        };
        let task = text("task")?
            .filter(|t| !t.trim().is_empty())
            .ok_or("task is missing: say what the sub-agent should do")?;
        let tools = match text("tools")? {
            None => ToolSet::ReadOnly,
            Some(name) => ToolSet::parse(&name).ok_or_else(|| {
                format!("unknown tool set {name:?}: tools must be \"read-only\" or \"all\"")
            })?,
        };
        Ok(Self {
            task,
            instructions: text("instructions")?.filter(|i| !i.trim().is_empty()),
            tools,
            model: text("model")?,
        })
    }

    fn system_prompt(&self) -> String {
        match &self.instructions {
            Some(instructions) => format!(
                "{CHILD_PROMPT}\n\nInstructions from the agent that delegated the task:\n{instructions}"
            ),
            None => CHILD_PROMPT.into(),
        }
    }

    fn title(&self) -> String {
        // Redacted before the cut, so that no part of a key is left at its edge.
        let first = crate::context::redact::redact(self.task.lines().next().unwrap_or_default());
        let first = first.trim();
        let mut title: String = first.chars().take(60).collect();
        if title.len() < first.len() {
            title.push('…');
        }
        format!("Delegated: {title}")
    }
}

/// Which sessions `session/list` shows for its params.
pub(super) fn lineage(params: &SessionListParams) -> Lineage {
    match (&params.parent_id, params.include_children) {
        (Some(parent), _) => Lineage::ChildrenOf(parent.clone()),
        (None, Some(true)) => Lineage::All,
        (None, _) => Lineage::TopLevel,
    }
}

/// A session's place among delegations, as `session/get` shows it.
pub(super) struct LineageView {
    /// Whether its model is offered `delegate`.
    pub offered: bool,
    pub parent_id: Option<String>,
    pub parent_call_id: Option<String>,
    pub children: Vec<String>,
}

/// The limits a child session runs under.
struct ChildLimits {
    max_steps: u32,
    max_seconds: Option<u64>,
    cap_usd: Option<f64>,
}

/// Where a child's run stands.
enum Progress {
    /// A task drives it; the receiver turns true once it has left the registry.
    Live(watch::Receiver<bool>),
    /// Open, no task drives it: it waits for an approval after a restart.
    Suspended(RunRow),
    Ended(FinishReason, Option<String>),
    /// The child has its task but no run answered it yet (a stop came in between).
    NotStarted,
}

impl Inner {
    pub(super) fn lineage(&self, session_id: &str) -> RuntimeResult<LineageView> {
        let link = self.store.delegation_of_child(session_id)?;
        Ok(LineageView {
            offered: link.is_none() && !self.store.delegation_off(session_id)?,
            parent_id: link.as_ref().map(|l| l.parent_id.clone()),
            parent_call_id: link.map(|l| l.call_id),
            children: self
                .store
                .delegations_of_parent(session_id)?
                .into_iter()
                .map(|d| d.child_id)
                .collect(),
        })
    }

    /// Fits the tools a session's request offers to its place: a child gets its tool set and
    /// never `delegate`; any other session gets `delegate` unless it turned it off.
    pub(super) fn fit_delegation_tools(&self, session_id: &str, specs: &mut Vec<ToolSpec>) {
        let link = match self.store.delegation_of_child(session_id) {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!(session_id, error = %e, "cannot read a session's delegation");
                return;
            }
        };
        match link {
            Some(link) if link.tools == ToolSet::ReadOnly => {
                // A read-only task answers one question: it keeps no plan.
                specs.retain(|s| {
                    self.runs_unasked(session_id, &s.name)
                        && s.name != crate::tools::plan::UPDATE_PLAN
                })
            }
            Some(_) => {}
            None if self.store.delegation_off(session_id).unwrap_or(false) => {}
            None => specs.push(spec()),
        }
    }

    /// The approvals the children of `session_id` wait for, with who asked for what.
    pub(super) fn delegated_approvals(
        &self,
        session_id: &str,
    ) -> RuntimeResult<Vec<DelegatedApproval>> {
        let mut approvals = Vec::new();
        for link in self.store.delegations_of_parent(session_id)? {
            for approval in self.store.pending_approvals(&link.child_id)? {
                approvals.push(DelegatedApproval {
                    child_session_id: link.child_id.clone(),
                    call_id: link.call_id.clone(),
                    task: link.task.clone(),
                    approval,
                });
            }
        }
        Ok(approvals)
    }
}

impl super::Runtime {
    /// The session a child session works for; `None` for a session that is nobody's child.
    pub fn delegation_parent(&self, session_id: &str) -> RuntimeResult<Option<String>> {
        Ok(self
            .inner
            .store
            .delegation_of_child(session_id)?
            .map(|d| d.parent_id))
    }
}

impl RunContext {
    /// The delegation's part in resolving a call: a `delegate` call, or a child's call of a
    /// tool outside its set. `None` for an ordinary call.
    pub(in crate::runtime) async fn resolve_delegation(
        &mut self,
        call: &ToolCallRow,
    ) -> RuntimeResult<Option<(ToolCallStatus, ToolOutcome)>> {
        if call.name == DELEGATE {
            return self.delegate(call).await.map(Some);
        }
        let Some(link) = self.inner.store.delegation_of_child(&self.session_id)? else {
            return Ok(None);
        };
        if link.tools == ToolSet::ReadOnly && !self.inner.runs_unasked(&self.session_id, &call.name)
        {
            return Ok(Some((
                ToolCallStatus::Error,
                ToolOutcome::error(format!(
                    "{} is not among this task's tools: it was delegated with read-only tools, which only read and search.",
                    call.name
                )),
            )));
        }
        Ok(None)
    }

    /// Tells the parent's clients that this child's run waits for the user's approval
    /// (`waiting`), or no longer does: the parent's `delegate` call shows it.
    pub(in crate::runtime) fn delegated_approval(&self, waiting: bool) -> RuntimeResult<()> {
        let Some(link) = self.inner.store.delegation_of_child(&self.session_id)? else {
            return Ok(());
        };
        let status = match waiting {
            true => ToolCallStatus::AwaitingApproval,
            false => ToolCallStatus::Running,
        };
        self.inner
            .store
            .set_tool_call_status(&link.parent_id, &link.call_id, status)?;
        self.inner.events.emit(
            &self.inner.store,
            &link.parent_id,
            Some(&link.parent_run_id),
            Event::ToolCallUpdated {
                call_id: link.call_id,
                status,
                output: None,
            },
        );
        Ok(())
    }

    /// How a child's run ends once the user denied one of its calls: the task cannot be done
    /// as delegated, so the parent hears of the denial rather than the child working around
    /// it. `None` for any other session or answer.
    pub(in crate::runtime) fn child_end_after_calls(
        &self,
        message_id: &str,
    ) -> RuntimeResult<Option<RunEnd>> {
        let store = &self.inner.store;
        if store.delegation_of_child(&self.session_id)?.is_none() {
            return Ok(None);
        }
        let denied = store
            .tool_calls_of_message(message_id)?
            .into_iter()
            .find(|c| c.status == ToolCallStatus::Denied);
        let Some(call) = denied else {
            return Ok(None);
        };
        let summary = crate::tools::summary(&call.name, &call.input);
        Ok(Some(RunEnd::Error(match self.expired(&call.id)? {
            true => format!(
                "the sub-agent's approval expired unanswered{}: {summary}",
                self.waited()
            ),
            false => format!("the user denied the sub-agent's call: {summary}"),
        })))
    }

    /// What the model reads for a call whose approval was denied as expired; `None` for a
    /// call a person denied.
    pub(in crate::runtime) fn expired_output(
        &self,
        call: &ToolCallRow,
    ) -> RuntimeResult<Option<String>> {
        Ok(self.expired(&call.id)?.then(|| {
            format!(
                "This call's approval expired unanswered{}, so it was not run. Do not retry it; ask the user how to proceed if needed.",
                self.waited()
            )
        }))
    }

    /// Whether the call's latest approval was denied by the expiry sweep.
    fn expired(&self, call_id: &str) -> RuntimeResult<bool> {
        Ok(self
            .inner
            .store
            .latest_approval(&self.session_id, call_id)?
            .and_then(|a| a.resolved_by)
            .is_some_and(|by| by == crate::store::EXPIRED))
    }

    /// How long a delegated approval waits before it expires, as a note says it (" after 1h").
    fn waited(&self) -> String {
        match self.inner.config.budget.delegated_approval_expiry {
            Some(expiry) => format!(
                " after {}",
                crate::context::carry_over::format_rollover(expiry.as_secs())
            ),
            None => String::new(),
        }
    }

    /// Runs a `delegate` call: starts the child (or finds the one a resumed run started) and
    /// awaits its answer. Bad input gives a failed result with the reason.
    async fn delegate(
        &mut self,
        call: &ToolCallRow,
    ) -> RuntimeResult<(ToolCallStatus, ToolOutcome)> {
        let existing = self
            .inner
            .store
            .delegation_of_call(&self.session_id, &call.id)?;
        // The call is announced running before the child's run starts, so that its clients
        // hear of the call before any event of the sub-agent working inside it.
        let (link, started) = match existing {
            Some(link) => {
                self.mark_running(call)?;
                (link, None)
            }
            None if self.stopped() => {
                return Ok((ToolCallStatus::Cancelled, ToolOutcome::error(STOPPED)));
            }
            None => match self.create_child(call)? {
                Ok((link, task)) => {
                    self.mark_running(call)?;
                    let done = self.start_child_run(&link.child_id, Some(task))?;
                    (link, Some(done))
                }
                Err(reason) => return Ok((ToolCallStatus::Error, ToolOutcome::error(reason))),
            },
        };
        self.await_child(&link, started).await
    }

    /// Checks the call and creates the child session with its link; the task it starts on,
    /// or the reason when the call cannot be run.
    fn create_child(
        &self,
        call: &ToolCallRow,
    ) -> RuntimeResult<Result<(DelegationRow, String), String>> {
        let store = &self.inner.store;
        if store.delegation_of_child(&self.session_id)?.is_some() {
            return Ok(Err(ONE_LEVEL.into()));
        }
        if store.delegation_off(&self.session_id)? {
            return Ok(Err(TURNED_OFF.into()));
        }
        let input = match DelegateInput::parse(&call.input) {
            Ok(input) => input,
            Err(reason) => return Ok(Err(reason)),
        };
        let parent = store
            .session(&self.session_id)?
            .ok_or_else(|| RuntimeError::SessionNotFound(self.session_id.clone()))?;
        let model = match self.child_model(&parent, input.model.as_deref()) {
            Ok(model) => model,
            Err(reason) => return Ok(Err(reason)),
        };
        let limits = match self.child_limits(&parent)? {
            Ok(limits) => limits,
            Err(reason) => return Ok(Err(reason)),
        };
        let child = store.insert_session(&NewSession {
            title: input.title(),
            account: parent.account.clone(),
            model,
            system_prompt: Some(input.system_prompt()),
            workspace_root: parent.workspace_root.clone(),
            max_steps: limits.max_steps,
            cap_usd: limits.cap_usd,
            max_seconds: limits.max_seconds,
            rollover_secs: None,
        })?;
        let link = DelegationRow {
            child_id: child.id.clone(),
            parent_id: parent.id.clone(),
            parent_run_id: self.run_id.clone(),
            call_id: call.id.clone(),
            tools: input.tools,
            task: input.task.clone(),
            created_at: now_ms(),
        };
        if let Err(e) = store.insert_delegation(&link) {
            let _ = store.delete_session(&child.id);
            return Err(e.into());
        }
        Ok(Ok((link, input.task)))
    }

    /// The child's limits: the tighter of a new session's own (the configured defaults) and
    /// what this run has left of its steps, its time and the session's spend cap. The reason,
    /// naming the limit (`budget_spent: turns | seconds | usd`), when one has nothing left.
    fn child_limits(
        &self,
        parent: &crate::store::SessionRow,
    ) -> RuntimeResult<Result<ChildLimits, String>> {
        let defaults = &self.inner.config.budget;
        let steps_left = parent.max_steps.saturating_sub(self.steps);
        if steps_left == 0 {
            return Ok(Err(format!(
                "budget_spent: turns: this run has used all {} of its steps (maxSteps), so none are left for a delegated task",
                parent.max_steps
            )));
        }
        let seconds_left = match parent.max_seconds {
            None => None,
            Some(max) => match max.checked_sub(self.turn_seconds()) {
                Some(left) if left > 0 => Some(left),
                _ => {
                    return Ok(Err(format!(
                        "budget_spent: seconds: this run has used all {max} s of its time limit (maxSeconds), so none is left for a delegated task"
                    )));
                }
            },
        };
        let usd_left = match parent.cap_usd {
            None => None,
            Some(cap) => {
                let cost = self.inner.cost_summary(&parent.id)?;
                let spent = cost.total_usd.unwrap_or(0.0);
                if spent >= cap {
                    let spent = super::accounting::spent_words(&cost);
                    return Ok(Err(format!(
                        "budget_spent: usd: the session's spend cap of ${cap:.2} is used up ({spent}), so nothing is left for a delegated task"
                    )));
                }
                Some(cap - spent)
            }
        };
        let tighter = |own: Option<u64>, left: Option<u64>| match (own, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Ok(ChildLimits {
            max_steps: defaults.max_steps.min(steps_left),
            max_seconds: tighter(defaults.max_seconds, seconds_left),
            cap_usd: match (defaults.cap_usd, usd_left) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }))
    }

    /// The model the child uses: the one asked for, if the account knows it, else the
    /// parent's.
    fn child_model(
        &self,
        parent: &crate::store::SessionRow,
        asked: Option<&str>,
    ) -> Result<String, String> {
        let Some(asked) = asked else {
            return Ok(parent.model.clone());
        };
        let config = &self.inner.config;
        let Some(account) = config.account(&parent.account) else {
            return Err(format!(
                "this session's account {:?} is not configured",
                parent.account
            ));
        };
        let known = config.known_models(account);
        match known.iter().any(|m| m == asked) {
            true => Ok(asked.to_string()),
            false => Err(format!(
                "unknown model {asked:?}: account {:?} knows {}",
                account.name,
                known.join(", ")
            )),
        }
    }

    /// Starts a run of the child: with `task` as its first user turn, or on the user turn it
    /// already holds. The receiver turns true once the run has told its clients it ended (or
    /// suspended).
    fn start_child_run(
        &self,
        child_id: &str,
        task: Option<String>,
    ) -> RuntimeResult<watch::Receiver<bool>> {
        let inner = &self.inner;
        let session = inner
            .store
            .session(child_id)?
            .ok_or_else(|| RuntimeError::SessionNotFound(child_id.to_string()))?;
        let run_id = new_id("run");
        let signals = inner.claim_run(child_id, &run_id)?;
        let done = signals.done.subscribe();
        if let Some(task) = task {
            let message = NewMessage::new(
                child_id,
                Some(&run_id),
                Role::User,
                vec![Block::Text { text: task }],
            );
            if let Err(e) = inner.commit(message) {
                inner.give_back(child_id, &run_id);
                return Err(e);
            }
        }
        spawn_run(inner.clone(), RunStart::New { session, run_id }, signals)?;
        Ok(done)
    }

    /// Continues a child's run that waits for an approval after a restart, stopping it.
    fn stop_suspended_child(&self, run: RunRow) -> RuntimeResult<()> {
        let inner = &self.inner;
        let session = inner
            .store
            .session(&run.session_id)?
            .ok_or_else(|| RuntimeError::SessionNotFound(run.session_id.clone()))?;
        let signals = inner.claim_run(&session.id, &run.id)?;
        inner.runs.stop(&session.id);
        spawn_run(inner.clone(), RunStart::Resume { session, run }, signals)
    }

    fn progress(&self, child_id: &str) -> RuntimeResult<Progress> {
        if let Some(done) = self.inner.runs.done(child_id) {
            return Ok(Progress::Live(done));
        }
        let store = &self.inner.store;
        if store.session(child_id)?.is_none() {
            return Ok(Progress::Ended(
                FinishReason::Error,
                Some("the delegated task's session was deleted".into()),
            ));
        }
        let Some(run_id) = store.last_run_id(child_id)? else {
            return Ok(Progress::NotStarted);
        };
        Ok(match store.run_end(&run_id)? {
            Some((Some(reason), error)) => Progress::Ended(reason, error),
            _ => match store.run(&run_id)? {
                Some(run) => Progress::Suspended(run),
                None => Progress::NotStarted,
            },
        })
    }

    /// Waits for the child's run to end and gives its answer. Stopping the parent stops the
    /// child; a shutdown leaves both suspended when the child waits for an approval.
    ///
    /// A run this call `started` is waited for on its own signal first: the store and the
    /// registry know of its end before its clients are told, and the call's result must come
    /// after the sub-agent's forwarded `runFinished`.
    async fn await_child(
        &mut self,
        link: &DelegationRow,
        started: Option<watch::Receiver<bool>>,
    ) -> RuntimeResult<(ToolCallStatus, ToolOutcome)> {
        if let Some(done) = started {
            self.wait_for_child(link, done).await;
        }
        loop {
            match self.progress(&link.child_id)? {
                Progress::Ended(reason, error) => {
                    return answer::answer(
                        &self.inner.store,
                        &link.child_id,
                        reason,
                        error.as_deref(),
                    );
                }
                Progress::NotStarted if self.stopped() => {
                    return Ok((ToolCallStatus::Cancelled, ToolOutcome::error(STOPPED)));
                }
                Progress::NotStarted => {
                    let done = self.start_child_run(&link.child_id, None)?;
                    self.wait_for_child(link, done).await;
                }
                Progress::Suspended(run) => {
                    let shutting_down = self
                        .signals
                        .suspend
                        .load(std::sync::atomic::Ordering::SeqCst);
                    if !self.stopped() || shutting_down {
                        // The child's end resumes this run (`Inner::end_run`).
                        return Err(RuntimeError::Suspended);
                    }
                    self.stop_suspended_child(run)?;
                }
                Progress::Live(done) => self.wait_for_child(link, done).await,
            }
        }
    }

    /// Waits until the child's run has ended or suspended (`done`); stopping this run stops
    /// the child and waits for it too.
    async fn wait_for_child(&self, link: &DelegationRow, mut done: watch::Receiver<bool>) {
        let mut stop = self.signals.stop.clone();
        let stopped = tokio::select! {
            _ = done.wait_for(|d| *d) => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        if stopped {
            // The tree stops together; a shutdown's own stop reaches the child too, so it
            // suspends rather than ends if it waits.
            let shutting_down = self
                .signals
                .suspend
                .load(std::sync::atomic::Ordering::SeqCst);
            if !shutting_down {
                self.inner.runs.stop(&link.child_id);
            }
            let _ = done.wait_for(|d| *d).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn input_is_checked_and_defaults_to_read_only_tools() {
        assert_eq!(
            DelegateInput::parse(&json!({"task": "find the parser"})),
            Ok(DelegateInput {
                task: "find the parser".into(),
                instructions: None,
                tools: ToolSet::ReadOnly,
                model: None,
            })
        );
        assert_eq!(
            DelegateInput::parse(
                &json!({"task": "t", "tools": "all", "instructions": "be brief", "model": "m"})
            )
            .map(|i| (i.tools, i.instructions, i.model)),
            Ok((ToolSet::All, Some("be brief".into()), Some("m".into())))
        );
        assert_eq!(
            DelegateInput::parse(&json!({"task": "t", "tools": "write-only"})),
            Err("unknown tool set \"write-only\": tools must be \"read-only\" or \"all\"".into())
        );
        assert_eq!(
            DelegateInput::parse(&json!({"task": "  "})),
            Err("task is missing: say what the sub-agent should do".into())
        );
        assert_eq!(
            DelegateInput::parse(&json!({"task": 3})),
            Err("task must be a string, not 3".into())
        );
    }

    #[test]
    fn the_child_is_told_its_role_then_the_instructions() {
        let input =
            DelegateInput::parse(&json!({"task": "a\nb", "instructions": "list paths"})).unwrap();
        assert_eq!(
            input.system_prompt(),
            format!(
                "{CHILD_PROMPT}\n\nInstructions from the agent that delegated the task:\nlist paths"
            )
        );
        assert_eq!(input.title(), "Delegated: a");
    }
}
