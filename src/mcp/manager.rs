//! The MCP servers of every open session: started lazily in the background, shared between
//! sessions with the same configuration, restarted with backoff, and killed on shutdown.
//!
//! Nothing here is awaited by `initialize`, `session/create` or a run's first request: opening
//! a session only spawns start-up tasks, and the tools offered come from the running server
//! or, while it starts, from the tool list cached in the store under the configuration's key.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;

use super::catalog::{self, ListedTool, OfferedTool};
use super::connection::{self, Connection, Group};
use super::result;
use super::spec::ServerSpec;
use crate::protocol::{McpServerState, McpServerStatus};
use crate::store::Store;
use crate::tools::ToolOutcome;
use crate::util::lock;

/// The longest wait before a failed server is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a closed connection waits for its process's exit to be known. The two come
/// moments apart, in either order: waiting lets the notice and a call in flight say that the
/// process exited, and how, instead of a vaguer reason.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// Why a server went away when all that is known is that its connection closed.
const CLOSED: &str = "its process exited or the connection closed";

/// Where the manager reports what sessions must be told: a server failed, died or listed
/// tools that cannot be offered. The runtime stores each as a `notice`.
pub trait Notify: Send + Sync {
    fn notice(&self, session_id: &str, text: &str);
}

/// A running server as the manager keeps it.
struct Live {
    peer: rmcp::service::Peer<rmcp::RoleClient>,
    tools: Mutex<Vec<ListedTool>>,
    /// Kills the process group when the last holder lets go.
    group: Option<Group>,
    cancel: Mutex<Option<rmcp::service::RunningServiceCancellationToken>>,
    /// Why it went down, once it has: calls still waiting on it fail with this at once.
    down: watch::Sender<Option<String>>,
}

impl Live {
    /// Waits until the server is down and says why.
    async fn went_down(&self) -> String {
        let mut down = self.down.subscribe();
        let why = down
            .wait_for(Option::is_some)
            .await
            .map(|why| why.clone().unwrap_or_default());
        match why {
            Ok(why) => why,
            Err(_) => std::future::pending().await,
        }
    }

    /// Closes the connection and kills the process group; `why` reaches the calls in flight.
    fn close(&self, why: &str) {
        self.down.send_if_modified(|down| match down {
            Some(_) => false,
            None => {
                *down = Some(why.to_string());
                true
            }
        });
        if let Some(cancel) = lock(&self.cancel).take() {
            cancel.cancel();
        }
        if let Some(group) = &self.group {
            group.kill();
        }
    }
}

#[derive(Clone)]
enum State {
    /// Never started, or closed.
    Idle,
    Starting,
    Ready(Arc<Live>),
    Failed(String),
}

/// One server configuration's process, shared by the sessions that use it.
struct Slot {
    spec: ServerSpec,
    /// Where its tool list is cached ([`ServerSpec::cache_key`]).
    cache_key: String,
    state: watch::Sender<State>,
    /// Sessions that opened it, told of its failures.
    users: Mutex<HashSet<String>>,
    /// Failures since it was last ready, and when it may be tried again.
    backoff: Mutex<(u32, Option<Instant>)>,
}

impl Slot {
    fn state(&self) -> State {
        self.state.borrow().clone()
    }

    /// Whether the backoff after the last failure has passed.
    fn may_retry(&self) -> bool {
        lock(&self.backoff).1.is_none_or(|at| Instant::now() >= at)
    }

    fn failed(&self, error: String) {
        let mut backoff = lock(&self.backoff);
        backoff.0 += 1;
        // The first retry may come at once (the next need); later ones wait 1, 2, 4 … s.
        let wait = match backoff.0 {
            1 => Duration::ZERO,
            n => Duration::from_secs(1 << (n - 2).min(6)).min(MAX_BACKOFF),
        };
        backoff.1 = Some(Instant::now() + wait);
        drop(backoff);
        self.state.send_replace(State::Failed(error));
    }
}

pub struct Manager {
    store: Store,
    /// Servers from the config file, used by every session.
    configured: Vec<ServerSpec>,
    notify: Arc<dyn Notify>,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    /// Sessions' own servers as given, secret values included (the store keeps only their
    /// names and digest), for the life of the daemon.
    given: Mutex<HashMap<String, Vec<ServerSpec>>>,
    /// Set by `shutdown`: nothing starts after it.
    closed: std::sync::atomic::AtomicBool,
    groups: connection::Groups,
}

impl Manager {
    pub fn new(store: Store, configured: Vec<ServerSpec>, notify: Arc<dyn Notify>) -> Self {
        Self {
            store,
            configured,
            notify,
            slots: Mutex::default(),
            given: Mutex::default(),
            closed: Default::default(),
            groups: Default::default(),
        }
    }

    /// The servers a session uses: the configured ones, then its own (which replace a
    /// configured server of the same name).
    pub fn servers_of(&self, session_id: &str) -> Vec<ServerSpec> {
        let given = lock(&self.given).get(session_id).cloned();
        let own = given.unwrap_or_else(|| {
            let stored = self.store.session_mcp_servers(session_id).map(|json| {
                json.map_or(Ok(Vec::new()), |json| super::spec::decode_stored(&json))
            });
            match stored {
                Ok(Ok(servers)) => servers,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, session_id, "the session's stored MCP servers do not read");
                    Vec::new()
                }
                Err(e) => {
                    tracing::warn!(error = %e, session_id, "cannot read the session's MCP servers");
                    Vec::new()
                }
            }
        });
        let mut servers: Vec<ServerSpec> = self
            .configured
            .iter()
            .filter(|c| !own.iter().any(|o| o.name == c.name))
            .cloned()
            .collect();
        servers.extend(own);
        servers
    }

    /// Keeps a session's own servers as given, secret values included.
    pub fn remember(&self, session_id: &str, servers: Vec<ServerSpec>) {
        lock(&self.given).insert(session_id.to_string(), servers);
    }

    fn slot(&self, spec: &ServerSpec) -> Arc<Slot> {
        lock(&self.slots)
            .entry(spec.key())
            .or_insert_with(|| {
                Arc::new(Slot {
                    spec: spec.clone(),
                    cache_key: spec.cache_key(),
                    state: watch::Sender::new(State::Idle),
                    users: Mutex::default(),
                    backoff: Mutex::default(),
                })
            })
            .clone()
    }

    /// A session was opened: starts, in the background, each of its enabled servers that
    /// never started. A failed one waits for the next need ([`Manager::need`]). Returns at once.
    pub fn open(self: &Arc<Self>, session_id: &str) {
        self.start_servers(session_id, false);
    }

    /// A session is about to run: as [`Manager::open`], and a failed server is started again
    /// once its backoff has passed. Returns at once.
    pub fn need(self: &Arc<Self>, session_id: &str) {
        self.start_servers(session_id, true);
    }

    fn start_servers(self: &Arc<Self>, session_id: &str, retry: bool) {
        for spec in self
            .servers_of(session_id)
            .into_iter()
            .filter(|s| s.enabled)
        {
            let slot = self.slot(&spec);
            lock(&slot.users).insert(session_id.to_string());
            if retry || matches!(slot.state(), State::Idle) {
                self.start_if_needed(&slot);
            }
        }
    }

    fn start_if_needed(self: &Arc<Self>, slot: &Arc<Slot>) {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let start = {
            let mut start = false;
            slot.state.send_if_modified(|state| match state {
                State::Idle => {
                    start = true;
                    *state = State::Starting;
                    true
                }
                State::Failed(_) if slot.may_retry() => {
                    start = true;
                    *state = State::Starting;
                    true
                }
                _ => false,
            });
            start
        };
        if !start {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            slot.failed("no async runtime to start it on".into());
            return;
        };
        let manager = self.clone();
        let slot = slot.clone();
        runtime.spawn(async move { manager.start(slot).await });
    }

    async fn start(self: Arc<Self>, slot: Arc<Slot>) {
        let name = slot.spec.name.clone();
        let timeout = slot.spec.startup_timeout();
        tracing::info!(server = %name, "starting MCP server");
        let connected =
            tokio::time::timeout(timeout, connection::connect(&slot.spec, &self.groups)).await;
        let connection = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => return self.fail(&slot, format!("could not start: {error}")),
            Err(_) => {
                return self.fail(
                    &slot,
                    format!(
                        "did not start within {} s (startup_timeout_secs); it was stopped",
                        timeout.as_secs()
                    ),
                );
            }
        };
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let Connection {
            peer,
            service,
            group,
            tools_changed,
            tools,
            mut exited,
        } = connection;
        let listed = self.accept_tools(&slot, &tools);
        let live = Arc::new(Live {
            peer,
            tools: Mutex::new(listed),
            group,
            cancel: Mutex::new(Some(service.cancellation_token())),
            down: watch::Sender::new(None),
        });
        *lock(&slot.backoff) = (0, None);
        slot.state.send_replace(State::Ready(live.clone()));
        tracing::info!(server = %name, "MCP server ready");
        // Refresh the list when the server says it changed, until the connection ends.
        let refresher = {
            let manager = self.clone();
            let slot = slot.clone();
            let live = live.clone();
            tokio::spawn(async move {
                loop {
                    tools_changed.notified().await;
                    match connection::list_tools(&live.peer).await {
                        Ok(tools) => {
                            let listed = manager.accept_tools(&slot, &tools);
                            *lock(&live.tools) = listed;
                        }
                        Err(e) => {
                            tracing::warn!(server = %slot.spec.name, error = %e, "tool list refresh failed")
                        }
                    }
                }
            })
        };
        // The service ends when the transport closes: the process died, or we closed it. The
        // process may also exit while something it started keeps its stdout open: then its
        // exit is what tells.
        // Held outside the select, so it lives to the end of this function: dropping it closes
        // the connection, which must come after `close` has told the calls in flight why.
        let mut waiting = std::pin::pin!(service.waiting());
        let why = tokio::select! {
            quit = &mut waiting => {
                tracing::warn!(server = %name, reason = ?quit, "MCP server connection ended");
                match tokio::time::timeout(EXIT_GRACE, connection::exit_of(&mut exited)).await {
                    Ok(ended) => format!("its process exited ({ended})"),
                    Err(_) => CLOSED.to_string(),
                }
            }
            ended = connection::exit_of(&mut exited) => format!("its process exited ({ended})"),
        };
        refresher.abort();
        live.close(&why);
        let still_this = matches!(&*slot.state.borrow(), State::Ready(l) if Arc::ptr_eq(l, &live));
        if still_this && !self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::warn!(server = %name, %why, "MCP server stopped");
            self.fail(&slot, format!("stopped unexpectedly ({why})"));
        }
    }

    /// Records a failure, tells the server's sessions, and leaves it to be retried on the next
    /// need.
    fn fail(&self, slot: &Slot, error: String) {
        tracing::warn!(server = %slot.spec.name, %error, "MCP server failed");
        slot.failed(error.clone());
        self.tell(
            slot,
            &format!(
                "MCP server {:?} {error}. Its tools are left out until it runs; it is tried again when next needed.",
                slot.spec.name
            ),
        );
    }

    fn tell(&self, slot: &Slot, text: &str) {
        let users: Vec<String> = lock(&slot.users).iter().cloned().collect();
        for session_id in users {
            self.notify.notice(&session_id, text);
        }
    }

    /// Checks a fresh tool list, caches it under the configuration's key, and reports the
    /// tools that cannot be offered.
    fn accept_tools(&self, slot: &Slot, tools: &[Value]) -> Vec<ListedTool> {
        let (listed, problems) = catalog::read_listed(tools);
        for problem in problems {
            self.tell(
                slot,
                &format!("MCP server {:?}: {problem}.", slot.spec.name),
            );
        }
        match serde_json::to_string(&listed) {
            Ok(json) => {
                if let Err(e) = self.store.save_mcp_tools(&slot.cache_key, &json) {
                    tracing::warn!(error = %e, "cannot cache an MCP tool list");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot cache an MCP tool list"),
        }
        listed
    }

    /// The tools a known server offers before it is up: its last listed tools.
    fn cached_tools(&self, key: &str) -> Vec<ListedTool> {
        match self.store.mcp_tools(key) {
            Ok(Some(json)) => serde_json::from_str(&json).unwrap_or_default(),
            Ok(None) => Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read cached MCP tools");
                Vec::new()
            }
        }
    }

    /// The MCP tools a session's next request offers: a running server's tools, a starting
    /// one's cached tools, none of a failed one. Names in `taken` (the built-in tools) are
    /// never reused; a clash is told to the session once per list.
    pub fn offered(&self, session_id: &str, taken: &mut HashSet<String>) -> Vec<OfferedTool> {
        let mut offered = Vec::new();
        for spec in self
            .servers_of(session_id)
            .into_iter()
            .filter(|s| s.enabled)
        {
            let slot = self.slot(&spec);
            let listed = match slot.state() {
                State::Ready(live) => lock(&live.tools).clone(),
                State::Idle | State::Starting => self.cached_tools(&slot.cache_key),
                State::Failed(_) => Vec::new(),
            };
            let offer = catalog::offer(&spec, &listed, taken);
            for problem in &offer.problems {
                tracing::warn!(server = %spec.name, "{problem}");
            }
            offered.extend(offer.tools);
        }
        offered
    }

    /// Each of a session's servers with its state, for `session/get`.
    pub fn statuses(&self, session_id: &str) -> Vec<McpServerStatus> {
        self.servers_of(session_id)
            .into_iter()
            .map(|spec| {
                let existing = lock(&self.slots).get(&spec.key()).cloned();
                let (state, tools, last_error) = match existing.map(|s| s.state()) {
                    _ if !spec.enabled => (McpServerState::Disabled, 0, None),
                    None | Some(State::Idle) => (McpServerState::Idle, 0, None),
                    Some(State::Starting) => (McpServerState::Starting, 0, None),
                    Some(State::Ready(live)) => {
                        let tools = lock(&live.tools).clone();
                        let count = catalog::offer(&spec, &tools, &mut HashSet::new())
                            .tools
                            .len();
                        (McpServerState::Ready, count as u32, None)
                    }
                    Some(State::Failed(error)) => (McpServerState::Failed, 0, Some(error)),
                };
                McpServerStatus {
                    name: spec.name,
                    state,
                    tools,
                    last_error,
                }
            })
            .collect()
    }

    /// Runs one MCP tool call for a session. Waits for a starting server up to its start-up
    /// timeout; the call itself is bounded by the tool timeout. Dropping the returned future
    /// (the run was stopped) cancels the request on the server. Failures are failed results.
    pub async fn call(
        self: &Arc<Self>,
        session_id: &str,
        exposed: &str,
        input: &Value,
    ) -> ToolOutcome {
        let mut taken = HashSet::new();
        let Some(tool) = self
            .offered_or_known(session_id, &mut taken)
            .into_iter()
            .find(|t| t.exposed == exposed)
        else {
            return ToolOutcome::error(format!(
                "There is no tool named {exposed:?} now: its MCP server is not configured for this session, or no longer lists it."
            ));
        };
        let Some(spec) = self
            .servers_of(session_id)
            .into_iter()
            .find(|s| s.key() == tool.server_key)
        else {
            return ToolOutcome::error(format!(
                "The MCP server of {exposed} is no longer configured."
            ));
        };
        let slot = self.slot(&spec);
        lock(&slot.users).insert(session_id.to_string());
        let live = match self.ready(&slot).await {
            Ok(live) => live,
            Err(error) => {
                return ToolOutcome::error(format!(
                    "MCP server {:?} is not available, so {} did not run: {error}",
                    spec.name, tool.tool.name
                ));
            }
        };
        let arguments = match input {
            Value::Object(map) => map.clone(),
            Value::Null => Default::default(),
            other => {
                return ToolOutcome::error(format!(
                    "The arguments of {exposed} must be a JSON object, not {other}."
                ));
            }
        };
        let params = rmcp::model::CallToolRequestParams::new(tool.tool.name.clone())
            .with_arguments(arguments);
        let timeout = spec.tool_timeout();
        let answer = tokio::select! {
            // First: going down also ends the request, and the reason is the better answer.
            biased;
            why = live.went_down() => {
                return ToolOutcome::error(format!(
                    "The call to {} failed: MCP server {:?} stopped during the call ({why})",
                    tool.tool.name, spec.name
                ));
            }
            answer = tokio::time::timeout(timeout, live.peer.call_tool(params)) => answer,
        };
        let value = match answer {
            Err(_) => {
                return ToolOutcome::error(format!(
                    "{} on MCP server {:?} did not answer within {} s (tool_timeout_secs); the request was cancelled.",
                    tool.tool.name,
                    spec.name,
                    timeout.as_secs()
                ));
            }
            Ok(Err(rmcp::ServiceError::McpError(error))) => {
                return ToolOutcome::error(format!(
                    "MCP server {:?} refused the call to {}: {}",
                    spec.name, tool.tool.name, error.message
                ));
            }
            Ok(Err(rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_))) => {
                // The connection may close a moment before the server is known to be down.
                let why = tokio::time::timeout(EXIT_GRACE, live.went_down())
                    .await
                    .unwrap_or_else(|_| CLOSED.to_string());
                return ToolOutcome::error(format!(
                    "The call to {} failed: MCP server {:?} stopped during the call ({why})",
                    tool.tool.name, spec.name
                ));
            }
            Ok(Err(error)) => {
                return ToolOutcome::error(format!(
                    "The call to {} failed: MCP server {:?} answered with an error ({error})",
                    tool.tool.name, spec.name
                ));
            }
            Ok(Ok(result)) => serde_json::to_value(&result).unwrap_or(Value::Null),
        };
        let converted = result::convert(&tool.tool.name, &value);
        if let Some(bytes) = converted.oversized {
            self.notify.notice(
                session_id,
                &format!(
                    "MCP tool {} returned {bytes} bytes, over the {} KiB limit for tool results; the model was told it failed.",
                    tool.exposed,
                    result::RESULT_CAP / 1024
                ),
            );
        }
        converted.outcome
    }

    /// The tools a call may name: those offered now, and a failed server's cached tools (the
    /// model may call one it was offered before the failure; the call then restarts it).
    fn offered_or_known(&self, session_id: &str, taken: &mut HashSet<String>) -> Vec<OfferedTool> {
        let mut known = Vec::new();
        for spec in self
            .servers_of(session_id)
            .into_iter()
            .filter(|s| s.enabled)
        {
            let slot = self.slot(&spec);
            let listed = match slot.state() {
                State::Ready(live) => lock(&live.tools).clone(),
                _ => self.cached_tools(&slot.cache_key),
            };
            known.extend(catalog::offer(&spec, &listed, taken).tools);
        }
        known
    }

    /// The running server, starting it if needed and waiting up to its start-up timeout.
    async fn ready(self: &Arc<Self>, slot: &Arc<Slot>) -> Result<Arc<Live>, String> {
        self.start_if_needed(slot);
        let mut state = slot.state.subscribe();
        let wait = state.wait_for(|s| !matches!(s, State::Starting | State::Idle));
        let outcome = tokio::time::timeout(slot.spec.startup_timeout(), wait).await;
        match outcome {
            Ok(Ok(state)) => match &*state {
                State::Ready(live) => Ok(live.clone()),
                State::Failed(error) => Err(error.clone()),
                State::Idle | State::Starting => Err("it is not running".into()),
            },
            Ok(Err(_)) => Err("it was shut down".into()),
            Err(_) => Err(format!(
                "it did not start within {} s (startup_timeout_secs)",
                slot.spec.startup_timeout_secs
            )),
        }
    }

    /// Whether a session's approval is not needed for this call: the server is trusted and
    /// marks the tool read-only.
    pub fn trusted(&self, session_id: &str, exposed: &str) -> bool {
        let mut taken = HashSet::new();
        self.offered_or_known(session_id, &mut taken)
            .iter()
            .any(|t| t.exposed == exposed && t.trusted)
    }

    /// Stops every server and kills their process groups; nothing starts afterwards.
    pub fn shutdown(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let slots: Vec<Arc<Slot>> = lock(&self.slots).values().cloned().collect();
        for slot in slots {
            if let State::Ready(live) = slot.state.send_replace(State::Idle) {
                live.close("the daemon shut down");
            }
        }
        connection::kill_all(&self.groups);
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.shutdown();
    }
}
