//! The task that turns the runtime's events into `session/update` notifications, permission
//! requests and prompt answers, in the order the runtime published them. A delegated task's
//! events show in its parent's `delegate` call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use super::agent::{Agent, send_update};
use super::sink::{Item, Items};
use super::translate;
use crate::context::{TokenCounter, Tokenizers};
use crate::protocol::{BudgetEstimate, Event, Session, SessionEventParams, ToolCallStatus};
use crate::runtime::Runtime;

/// What the routing task remembers between events.
#[derive(Default)]
struct Router {
    roots: HashMap<String, PathBuf>,
    /// The tool of each call announced in the current runs, by call id.
    tools: HashMap<String, String>,
    /// Whether a session is a delegation's child, whose events show in its parent's call.
    children: HashMap<String, bool>,
    /// The latest progress lines of each running `delegate` call, by call id.
    progress: HashMap<String, Vec<String>>,
}

impl Router {
    /// Whether a tool call's update is a successful write or edit, whose diff stays what the
    /// client shows rather than the tool's output.
    fn keeps_diff(&self, call_id: &str, status: ToolCallStatus) -> bool {
        self.tools.get(call_id).is_some_and(|t| {
            matches!(t.as_str(), "write_file" | "edit_file") && status == ToolCallStatus::Done
        })
    }
}

/// Files larger than this are shown as a new text in a write's diff, without the old one.
const MAX_DIFF_FILE: u64 = 1024 * 1024;

/// The content a write is about to replace, read inside the workspace only (through the tools'
/// opener, which follows no symlink).
fn old_file(root: Option<&Path>, input: &Value) -> Option<String> {
    use std::io::Read;
    let workspace = crate::tools::Workspace::new(root?).ok()?;
    let mut file = workspace.open_file(input.get("path")?.as_str()?).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() || metadata.len() > MAX_DIFF_FILE {
        return None;
    }
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    Some(text)
}

impl Agent {
    /// Turns the runtime's events into updates, permission requests and prompt answers, in
    /// the order the runtime published them.
    pub async fn route(self: Arc<Self>, mut items: Items) {
        let mut router = Router::default();
        loop {
            // A client that stops reading leaves the events queued in the sink, where they
            // hold the runs back, rather than translated into an output nobody drains.
            self.peer.outbox().room().await;
            let Some(item) = items.recv().await else {
                break;
            };
            match item {
                Item::Barrier(done) => {
                    let _ = done.send(());
                }
                Item::Event(event) => self.route_event(&mut router, *event).await,
            }
        }
    }

    async fn route_event(self: &Arc<Self>, router: &mut Router, params: SessionEventParams) {
        let session_id = params.session_id.as_str();
        if self.is_child(router, session_id).await {
            // Shown through its parent's `delegation` events.
            return;
        }
        if let Event::Delegation { call_id, event, .. } = &params.event {
            self.route_delegation(router, session_id, call_id, event)
                .await;
            return;
        }
        if let Some(update) = translate::live_update(&params.event) {
            if let Event::ToolCallUpdated {
                call_id, status, ..
            } = &params.event
                && router.keeps_diff(call_id, *status)
            {
                self.update(
                    session_id,
                    acp::SessionUpdate::ToolCallUpdate(translate::tool_call_update(
                        call_id,
                        router.tools.get(call_id).map(String::as_str),
                        *status,
                        None,
                    )),
                );
            } else {
                self.update(session_id, update);
            }
            if let Event::ToolCallUpdated {
                call_id,
                output: Some(_),
                ..
            } = &params.event
            {
                // The call's last update: it carries the result.
                router.tools.remove(call_id);
                router.progress.remove(call_id);
            }
            return;
        }
        match params.event {
            Event::ToolCallStarted {
                call_id,
                tool,
                input,
                ..
            } => {
                let root = self.root(router, session_id).await;
                let old = match tool.as_str() {
                    "write_file" => old_file(root.as_deref(), &input),
                    _ => None,
                };
                let call = translate::tool_call(&call_id, &tool, &input, root.as_deref(), old);
                router.tools.insert(call_id, tool);
                self.update(session_id, acp::SessionUpdate::ToolCall(call));
            }
            Event::ApprovalRequested { approval } => {
                let root = self.root(router, session_id).await;
                let root = root.as_deref().and_then(Path::to_str);
                self.ask(session_id, root, approval).await;
            }
            Event::ApprovalResolved { approval_id, .. } => self.withdraw(&approval_id).await,
            // A fresh daemon's first request goes out counted by upper bounds, and its counted
            // figures follow in the step's next `budget` event. Counting the session for it now
            // would build the tokenizer in the foreground, beside that request.
            Event::Budget { snapshot, .. } if snapshot.estimate == BudgetEstimate::UpperBound => {}
            Event::Budget { .. } => {
                if let Some(update) = self.usage_update(session_id).await {
                    self.update(session_id, update);
                }
            }
            Event::RunStarted { .. } => {
                let mut state = self.state.lock().await;
                state.turns.run_started(session_id, params.run_id);
            }
            Event::InterjectionDelivered { pending_ids, .. } => {
                let mut state = self.state.lock().await;
                state.turns.delivered(pending_ids, params.run_id);
            }
            Event::InterjectionPromoted { pending_ids, .. } => {
                let mut state = self.state.lock().await;
                state.turns.promoted(session_id, pending_ids);
            }
            Event::InterjectionCancelled { pending_id } => {
                self.state.lock().await.turns.cancelled(&pending_id);
            }
            Event::RunFinished { reason, error } => {
                let Some(run_id) = params.run_id else { return };
                // What the next request holds now takes in the run's last answer; told before
                // the prompt answers.
                if let Some(update) = self.usage_update(session_id).await {
                    self.update(session_id, update);
                }
                let mut state = self.state.lock().await;
                state.turns.finished(&run_id, reason, error.as_deref());
            }
            _ => {}
        }
    }

    /// Whether the session is a delegation's child, looked up once per connection.
    async fn is_child(&self, router: &mut Router, session_id: &str) -> bool {
        if let Some(child) = router.children.get(session_id) {
            return *child;
        }
        let Ok(runtime) = self.runtime().await else {
            return false;
        };
        match runtime.delegation_parent(session_id) {
            Ok(parent) => {
                router
                    .children
                    .insert(session_id.to_string(), parent.is_some());
                parent.is_some()
            }
            Err(e) => {
                tracing::warn!(session_id, error = %e, "cannot read a session's delegation");
                false
            }
        }
    }

    /// One event of a sub-agent working on the `delegate` call `call_id` of `session_id`:
    /// its permission requests are asked in this session, its steps become the call's content.
    async fn route_delegation(
        self: &Arc<Self>,
        router: &mut Router,
        session_id: &str,
        call_id: &str,
        event: &Event,
    ) {
        match event {
            Event::ApprovalRequested { approval } => {
                let root = self.root(router, session_id).await;
                let root = root.as_deref().and_then(Path::to_str);
                let asked = super::delegation::approval_in_parent(approval, call_id);
                self.ask(session_id, root, asked).await;
            }
            Event::ApprovalResolved { approval_id, .. } => self.withdraw(approval_id).await,
            event => {
                let Some(line) = super::delegation::progress(event) else {
                    return;
                };
                let lines = router.progress.entry(call_id.to_string()).or_default();
                lines.push(line);
                if lines.len() > super::delegation::PROGRESS_LINES {
                    lines.remove(0);
                }
                let update = super::delegation::update(call_id, lines);
                self.update(session_id, acp::SessionUpdate::ToolCallUpdate(update));
            }
        }
    }

    /// A session's workspace root, looked up once per connection. A session without one is
    /// asked again next time: loading it here gives it one.
    async fn root(&self, router: &mut Router, session_id: &str) -> Option<PathBuf> {
        if let Some(root) = router.roots.get(session_id) {
            return Some(root.clone());
        }
        let runtime = self.runtime().await.ok()?;
        let root = runtime
            .get_session(session_id)
            .ok()
            .and_then(|s| s.workspace_root)
            .map(PathBuf::from)?;
        router.roots.insert(session_id.to_string(), root.clone());
        Some(root)
    }

    /// Context usage and the session's cost. `used` is what the session's next request holds,
    /// the figure `session/budget` gives at the same moment: always the same measure, so an
    /// editor's meter moves with the conversation (never between the provider's count of the
    /// last request, which may leave out cached input, and the estimate of the next).
    pub(super) async fn usage_update(&self, session_id: &str) -> Option<acp::SessionUpdate> {
        usage_of(self.runtime().await.ok()?, session_id)
    }

    /// Sends a loaded session's `usage_update`: at once when its tokenizer is built, and
    /// otherwise once the warm-up thread has built it (the update then follows the load's
    /// answer). Counting the session now would build the tables in the foreground, and a
    /// fresh agent would answer `session/load` only after them.
    pub(super) async fn send_usage_when_counted(&self, session: &Session) {
        let encoding = TokenCounter::for_model(&session.model).encoding();
        if Tokenizers::is_built(encoding) {
            if let Some(update) = self.usage_update(&session.id).await {
                self.update(&session.id, update);
            }
            return;
        }
        let Ok(runtime) = self.runtime().await else {
            return;
        };
        let (runtime, peer) = (runtime.clone(), self.peer.clone());
        let session_id = session.id.clone();
        tokio::spawn(async move {
            let warm_up = move || Tokenizers::wait_for_warm_up(encoding);
            let _ = tokio::task::spawn_blocking(warm_up).await;
            if let Some(update) = usage_of(&runtime, &session_id) {
                send_update(&peer, &session_id, update);
            }
        });
    }
}

/// Context usage and the session's cost, as [`Agent::usage_update`] describes them.
fn usage_of(runtime: &Runtime, session_id: &str) -> Option<acp::SessionUpdate> {
    let snapshot = runtime.budget(session_id).ok()?.snapshot;
    let (window, used) = (snapshot.context_window, snapshot.input_tokens);
    let cost = runtime.cost(session_id).ok()?.cost;
    let priced = cost.total_usd.map(|usd| acp::Cost::new(usd, "USD"));
    Some(acp::SessionUpdate::UsageUpdate(
        acp::UsageUpdate::new(used, window).cost(priced),
    ))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    /// The diff preview reads the file a write replaces through the tools' opener: a path
    /// through a symlink shows no old text, even when the link points at a file inside.
    #[test]
    fn the_old_text_of_a_write_is_never_read_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.md"), "old\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("src"), dir.path().join("inner")).unwrap();
        let old = |path: &str| old_file(Some(dir.path()), &json!({"path": path}));
        assert_eq!(
            (old("src/a.md"), old("inner/a.md"), old("missing.md")),
            (Some("old\n".to_string()), None, None)
        );
    }

    /// Only a write or an edit that succeeded keeps its diff; other tools, failed writes and
    /// calls never announced show their update.
    #[test]
    fn only_successful_writes_and_edits_keep_their_diff() {
        let mut router = Router::default();
        router.tools.insert("w".into(), "write_file".into());
        router.tools.insert("e".into(), "edit_file".into());
        router.tools.insert("r".into(), "read_file".into());
        let kept = [
            ("w", ToolCallStatus::Done),
            ("e", ToolCallStatus::Done),
            ("w", ToolCallStatus::Error),
            ("r", ToolCallStatus::Done),
            ("unknown", ToolCallStatus::Done),
        ]
        .map(|(call, status)| router.keeps_diff(call, status));
        assert_eq!(kept, [true, true, false, false, false]);
    }
}
