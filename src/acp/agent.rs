//! The ACP agent's methods over the runtime, and the task that turns the runtime's events into
//! `session/update` notifications, permission requests and prompt answers.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::sink::{AcpSink, Item, Items};
use super::translate;
use crate::config::Config;
use crate::protocol::*;
use crate::rpc::Peer;
use crate::rpc::error::{
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, error_frame, result_frame,
};
use crate::rpc::request_id::RequestId;
use crate::runtime::{Runtime, RuntimeError};

/// ACP's "resource not found", for an unknown or closed session.
pub const RESOURCE_NOT_FOUND: i32 = -32002;

/// How long a permission request may wait for the person: a prompt left open over a weekend
/// is still answered. A restart asks again anyway.
const PERMISSION_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The extension method codex-acp and claude-agent-acp clients use to type while a turn runs.
pub const STEERING: &str = "_session/steering";

/// A JSON-RPC error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl AcpError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }
}

impl From<RuntimeError> for AcpError {
    fn from(error: RuntimeError) -> Self {
        if let RuntimeError::SessionNotFound(id) = &error {
            return Self {
                code: RESOURCE_NOT_FOUND,
                message: error.to_string(),
                data: Some(json!({"sessionId": id})),
            };
        }
        // The native protocol's codes and messages, which already name what to do.
        let object = jsonrpsee_types::ErrorObjectOwned::from(error);
        Self {
            code: object.code(),
            message: object.message().to_string(),
            data: object
                .data()
                .and_then(|raw| serde_json::from_str(raw.get()).ok()),
        }
    }
}

pub type Answer = Result<Value, AcpError>;

/// What a session's opening answer is followed by.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Then {
    Nothing,
    /// A new session: its slash commands.
    Opened(String),
    /// A loaded or resumed one: its slash commands, then the permission requests a previous
    /// connection left open.
    Reopened(String),
}

/// A prompt the runtime has taken.
enum Accepted {
    /// A slash command, answered by its note.
    Command,
    /// A turn (or a queued interjection) whose end answers the prompt.
    Waiting(oneshot::Receiver<Result<acp::StopReason, AcpError>>),
}

/// What a prompt's request waits for: how the turn that took it ended.
type Waiter = oneshot::Sender<Result<acp::StopReason, AcpError>>;

/// Who waits for which turn, and which permission requests are open.
#[derive(Default)]
struct State {
    /// Prompts answered when the run ends.
    by_run: HashMap<String, Vec<Waiter>>,
    /// Prompts queued as interjections, until a run takes them.
    by_pending: HashMap<String, Waiter>,
    /// Prompts promoted into a new turn, until that turn's run starts, by session.
    promoted: HashMap<String, Vec<Waiter>>,
    /// Permission requests in flight: the id of the request asking for each approval, by
    /// approval id. An approval resolved while its request is still here was withdrawn.
    asking: HashMap<String, String>,
    /// Sessions closed on this connection; loading or resuming opens them again.
    closed: HashSet<String>,
    /// The MCP servers each session was given, kept for when MCP tools exist.
    mcp_servers: HashMap<String, Vec<acp::McpServer>>,
}

pub struct Agent {
    peer: Peer,
    sink: Arc<AcpSink>,
    config: Config,
    opening: tokio::sync::Mutex<Option<super::Opening>>,
    ready: tokio::sync::OnceCell<Result<Runtime, String>>,
    initialized: AtomicBool,
    state: tokio::sync::Mutex<State>,
}

fn parse<T: DeserializeOwned>(method: &str, params: Option<Value>) -> Result<T, AcpError> {
    serde_json::from_value(params.unwrap_or(Value::Null))
        .map_err(|e| AcpError::new(INVALID_PARAMS, format!("Invalid params for {method}: {e}")))
}

fn to_value<T: Serialize>(value: &T) -> Answer {
    serde_json::to_value(value)
        .map_err(|e| AcpError::new(INTERNAL_ERROR, format!("cannot serialise the answer: {e}")))
}

impl Agent {
    pub fn new(peer: Peer, sink: Arc<AcpSink>, config: Config, opening: super::Opening) -> Self {
        Self {
            peer,
            sink,
            config,
            opening: tokio::sync::Mutex::new(Some(opening)),
            ready: tokio::sync::OnceCell::new(),
            initialized: AtomicBool::new(false),
            state: tokio::sync::Mutex::default(),
        }
    }

    /// The runtime, waiting for the store to open on first use.
    pub async fn runtime(&self) -> Result<&Runtime, AcpError> {
        let ready = self
            .ready
            .get_or_init(|| async {
                match self.opening.lock().await.take() {
                    Some(opening) => opening
                        .await
                        .unwrap_or_else(|e| Err(format!("opening the store failed: {e}"))),
                    None => Err("the runtime was never started".to_string()),
                }
            })
            .await;
        ready
            .as_ref()
            .map_err(|e| AcpError::new(INTERNAL_ERROR, e.clone()))
    }

    /// Sends one update of a session.
    fn update(&self, session_id: &str, update: acp::SessionUpdate) {
        self.peer.notify(
            "session/update",
            &acp::SessionNotification::new(session_id.to_string(), update),
        );
    }

    /// Takes one request in arrival order. Prompts and steering reach the runtime before the
    /// next message is read; the returned future answers (a prompt, when its turn ends).
    pub async fn take(
        self: &Arc<Self>,
        id: RequestId,
        method: String,
        params: Option<Value>,
    ) -> BoxFuture<'static, ()> {
        let this = self.clone();
        if !self.initialized.load(Ordering::SeqCst)
            || !matches!(method.as_str(), "session/prompt" | STEERING)
        {
            return async move { this.answer(id, &method, params).await }.boxed();
        }
        if method == STEERING {
            let answer = match parse(&method, params) {
                Ok(params) => self.steer(params).await,
                Err(e) => Err(e),
            };
            this.reply(&id, answer);
            return futures::future::ready(()).boxed();
        }
        let accepted = match parse(&method, params) {
            Ok(params) => self.accept_prompt(params).await,
            Err(e) => Err(e),
        };
        async move {
            let answer = match accepted {
                Ok(accepted) => this.finish_prompt(accepted).await,
                Err(e) => Err(e),
            };
            this.reply(&id, answer);
        }
        .boxed()
    }

    /// Answers the request `id`, carrying the id as the client wrote it.
    fn reply(&self, id: &RequestId, answer: Answer) {
        let frame = match answer {
            Ok(result) => result_frame(id.json(), &result.to_string()),
            Err(error) => error_frame(id.json(), error.code, &error.message, error.data),
        };
        self.peer.outbox().send(frame);
    }

    /// Answers one request, then sends what follows the answer.
    async fn answer(self: &Arc<Self>, id: RequestId, method: &str, params: Option<Value>) {
        let mut then = Then::Nothing;
        let answer = self.request(method, params, &mut then).await;
        self.reply(&id, answer);
        let (session_id, reopened) = match then {
            Then::Nothing => return,
            Then::Opened(id) => (id, false),
            Then::Reopened(id) => (id, true),
        };
        self.update(
            &session_id,
            acp::SessionUpdate::AvailableCommandsUpdate(translate::available_commands()),
        );
        if reopened && let Err(e) = self.ask_pending(&session_id).await {
            tracing::warn!(session_id, error = %e.message, "cannot ask again for open approvals");
        }
    }

    async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
        then: &mut Then,
    ) -> Answer {
        if method == "initialize" {
            return self.initialize(parse(method, params)?);
        }
        if !self.initialized.load(Ordering::SeqCst) {
            return Err(AcpError::new(
                INVALID_REQUEST,
                format!("send initialize before {method}"),
            ));
        }
        match method {
            "authenticate" => to_value(&acp::AuthenticateResponse::new()),
            "session/new" => self.new_session(parse(method, params)?, then).await,
            "session/load" => self.load_session(parse(method, params)?, then).await,
            "session/resume" => self.resume_session(parse(method, params)?, then).await,
            "session/list" => self.list_sessions(parse(method, params)?).await,
            "session/close" => self.close_session(parse(method, params)?).await,
            "session/prompt" => {
                let accepted = self.accept_prompt(parse(method, params)?).await?;
                self.finish_prompt(accepted).await
            }
            "session/set_config_option" => self.set_config_option(parse(method, params)?).await,
            STEERING => self.steer(parse(method, params)?).await,
            other => Err(AcpError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: sidechat acp does not serve {other}"),
            )),
        }
    }

    /// Handles one notification from the client.
    pub async fn notification(self: &Arc<Self>, method: &str, params: Option<Value>) {
        match method {
            "session/cancel" => match parse::<acp::CancelNotification>(method, params) {
                Ok(cancel) => {
                    let this = self.clone();
                    tokio::spawn(async move { this.cancel(&cancel.session_id.0).await });
                }
                Err(e) => tracing::warn!(error = %e.message, "ignored a malformed session/cancel"),
            },
            other => tracing::debug!(method = other, "ignored notification"),
        }
    }

    fn initialize(&self, params: acp::InitializeRequest) -> Answer {
        if self.initialized.swap(true, Ordering::SeqCst) {
            return Err(AcpError::new(
                INVALID_REQUEST,
                "initialize was already received on this connection",
            ));
        }
        if let Some(client) = &params.client_info {
            tracing::info!(client = %client.name, version = %client.version, "initialize");
        }
        let capabilities = acp::AgentCapabilities::new()
            .load_session(true)
            .prompt_capabilities(acp::PromptCapabilities::new().embedded_context(true))
            .mcp_capabilities(acp::McpCapabilities::new().http(true))
            .session_capabilities(
                acp::SessionCapabilities::new()
                    .list(acp::SessionListCapabilities::new())
                    .resume(acp::SessionResumeCapabilities::new())
                    .close(acp::SessionCloseCapabilities::new()),
            );
        let meta = json!({
            "sidechat": {
                // A prompt sent while a turn runs is queued and delivered between tool results
                // and the next model step; its request answers when that turn ends.
                "promptWhileRunning": "interjection",
                "steering": STEERING,
                "accounts": self.config.account_infos(),
            }
        });
        let response =
            acp::InitializeResponse::new(agent_client_protocol_schema::ProtocolVersion::V1)
                .agent_capabilities(capabilities)
                .auth_methods(Vec::new())
                .agent_info(acp::Implementation::new(
                    "sidechat",
                    env!("CARGO_PKG_VERSION"),
                ))
                .meta(meta.as_object().cloned());
        to_value(&response)
    }

    /// The model selector of a session.
    fn config_options(&self, session: &Session) -> Vec<acp::SessionConfigOption> {
        let default = self
            .config
            .account(&session.account)
            .map_or(session.model.as_str(), |a| a.default_model.as_str());
        vec![translate::model_option(&session.model, default)]
    }

    /// The workspace root an ACP `cwd` names; it must be absolute.
    fn workspace_root(cwd: &Path) -> Result<String, AcpError> {
        if !cwd.is_absolute() {
            return Err(AcpError::new(
                INVALID_PARAMS,
                format!("cwd must be an absolute path, got {:?}", cwd.display()),
            ));
        }
        Ok(cwd.display().to_string())
    }

    async fn new_session(&self, params: acp::NewSessionRequest, then: &mut Then) -> Answer {
        let runtime = self.runtime().await?;
        let (mcp_servers, skipped) = super::mcp::servers(params.mcp_servers.clone());
        let session = runtime.create_session(SessionCreateParams {
            workspace_root: Some(Self::workspace_root(&params.cwd)?),
            mcp_servers: Some(mcp_servers),
            ..SessionCreateParams::default()
        })?;
        for server in skipped {
            tracing::warn!(session_id = %session.id, server, "MCP server left out");
        }
        self.state
            .lock()
            .await
            .mcp_servers
            .insert(session.id.clone(), params.mcp_servers);
        let response = acp::NewSessionResponse::new(session.id.clone())
            .config_options(self.config_options(&session));
        *then = Then::Opened(session.id.clone());
        to_value(&response)
    }

    /// Opens a stored session on this connection: checks it exists and forgets a close. A
    /// session without a workspace (created by another client) takes `cwd` as its own, as ACP
    /// says a session works in its `cwd`.
    async fn open(
        &self,
        session_id: &str,
        cwd: &Path,
        mcp: Vec<acp::McpServer>,
    ) -> Result<Session, AcpError> {
        let root = Self::workspace_root(cwd)?;
        let runtime = self.runtime().await?;
        let mut session = runtime.get_session(session_id)?;
        let (servers, skipped) = super::mcp::servers(mcp.clone());
        runtime.set_mcp_servers(session_id, servers)?;
        for server in skipped {
            tracing::warn!(session_id, server, "MCP server left out");
        }
        if session.workspace_root.is_none() {
            session = runtime.update_session(SessionUpdateParams {
                session_id: session_id.to_string(),
                workspace_root: Some(root),
                ..SessionUpdateParams::default()
            })?;
        }
        let mut state = self.state.lock().await;
        state.closed.remove(session_id);
        state.mcp_servers.insert(session_id.to_string(), mcp);
        Ok(session)
    }

    async fn load_session(&self, params: acp::LoadSessionRequest, then: &mut Then) -> Answer {
        let session = self
            .open(&params.session_id.0, &params.cwd, params.mcp_servers)
            .await?;
        self.replay(&session).await?;
        let response =
            acp::LoadSessionResponse::new().config_options(self.config_options(&session));
        *then = Then::Reopened(session.id.clone());
        to_value(&response)
    }

    async fn resume_session(&self, params: acp::ResumeSessionRequest, then: &mut Then) -> Answer {
        let session = self
            .open(&params.session_id.0, &params.cwd, params.mcp_servers)
            .await?;
        let response =
            acp::ResumeSessionResponse::new().config_options(self.config_options(&session));
        *then = Then::Reopened(session.id.clone());
        to_value(&response)
    }

    /// Sends the stored history as the updates that showed it live, oldest first.
    async fn replay(&self, session: &Session) -> Result<(), AcpError> {
        let runtime = self.runtime().await?;
        let root = session.workspace_root.as_deref().map(Path::new);
        let mut tools = HashMap::new();
        let mut after = 0;
        loop {
            let page = runtime.transcript(SessionTranscriptParams {
                session_id: session.id.clone(),
                after_seq: Some(after),
                before_seq: None,
                limit: Some(5000),
            })?;
            for entry in &page.entries {
                for update in translate::replay(entry, root, &mut tools) {
                    self.update(&session.id, update);
                }
            }
            match page.entries.last() {
                Some(last) if page.has_more => after = last.seq,
                _ => break,
            }
        }
        if !session.title.is_empty() {
            self.update(
                &session.id,
                acp::SessionUpdate::SessionInfoUpdate(
                    acp::SessionInfoUpdate::new()
                        .title(session.title.clone())
                        .updated_at(session.updated_at.clone()),
                ),
            );
        }
        if let Some(update) = self.usage_update(&session.id).await {
            self.update(&session.id, update);
        }
        Ok(())
    }

    async fn list_sessions(&self, params: acp::ListSessionsRequest) -> Answer {
        let runtime = self.runtime().await?;
        let workspace_root = params
            .cwd
            .as_deref()
            .map(Self::workspace_root)
            .transpose()?;
        let page = runtime.list_sessions(SessionListParams {
            cursor: params.cursor,
            limit: None,
            workspace_root,
            ..SessionListParams::default()
        })?;
        // ACP needs a folder for every session. One created without a workspace (by another
        // client) is listed in the folder this agent runs in, where loading it would put it;
        // `_meta` says it has none yet.
        let here = std::env::current_dir().ok().filter(|d| d.is_absolute());
        let sessions = page
            .sessions
            .into_iter()
            .filter_map(|s| {
                let info = match s.workspace_root {
                    Some(root) => acp::SessionInfo::new(s.id, root),
                    None => acp::SessionInfo::new(s.id, here.clone()?).meta(
                        json!({"sidechat": {"workspaceRoot": null}})
                            .as_object()
                            .cloned(),
                    ),
                };
                Some(info.title(s.title).updated_at(s.updated_at))
            })
            .collect();
        to_value(&acp::ListSessionsResponse::new(sessions).next_cursor(page.next_cursor))
    }

    /// Closes a session on this connection: its turn is cancelled, its open permission
    /// requests withdrawn, and prompts for it refused until it is loaded again.
    async fn close_session(&self, params: acp::CloseSessionRequest) -> Answer {
        let session_id = params.session_id.0.to_string();
        self.runtime().await?.get_session(&session_id)?;
        self.state.lock().await.closed.insert(session_id.clone());
        self.cancel(&session_id).await;
        to_value(&acp::CloseSessionResponse::new())
    }

    async fn cancel(&self, session_id: &str) {
        let Ok(runtime) = self.runtime().await else {
            return;
        };
        if let Err(e) = runtime.stop(session_id).await {
            tracing::warn!(session_id, error = %e, "session/cancel could not stop the turn");
        }
    }

    async fn usable_session(&self, session_id: &str) -> Result<Session, AcpError> {
        if self.state.lock().await.closed.contains(session_id) {
            return Err(AcpError {
                code: RESOURCE_NOT_FOUND,
                message: format!(
                    "session {session_id} was closed on this connection; load or resume it to use it again"
                ),
                data: Some(json!({"sessionId": session_id})),
            });
        }
        Ok(self.runtime().await?.get_session(session_id)?)
    }

    /// Takes a prompt: sends it to the runtime now, in the order requests arrived, so a cancel
    /// or a list sent after it sees it started or queued. What it then waits for is returned.
    async fn accept_prompt(&self, params: acp::PromptRequest) -> Result<Accepted, AcpError> {
        let session_id = params.session_id.0.to_string();
        let session = self.usable_session(&session_id).await?;
        let (text, attachments) = translate::prompt_text(&params.prompt)
            .map_err(|e| AcpError::new(INVALID_PARAMS, e.0))?;
        let runtime = self.runtime().await?;
        let command = crate::runtime::is_command(&text);
        if session.title == "New chat" && !command {
            self.retitle(runtime, &session_id, &text)?;
        }
        // Held while sending, so the run's end cannot be handled before its waiter is in.
        let mut state = self.state.lock().await;
        let sent = runtime
            .send_stored(ChatSendParams {
                session_id: session_id.clone(),
                text,
                client_message_id: None,
                attachments,
            })
            .await?;
        let (waiter, waiting) = oneshot::channel();
        match (sent.pending_id, sent.run_id) {
            (Some(pending_id), _) => {
                state.by_pending.insert(pending_id, waiter);
            }
            (None, Some(run_id)) => state.by_run.entry(run_id).or_default().push(waiter),
            // A slash command: its note is the whole answer.
            (None, None) => return Ok(Accepted::Command),
        }
        Ok(Accepted::Waiting(waiting))
    }

    /// The answer of an accepted prompt, once the turn that took it has ended.
    async fn finish_prompt(&self, accepted: Accepted) -> Answer {
        let waiting = match accepted {
            Accepted::Command => {
                // After the note's update, which was published before `send` returned.
                self.sink.barrier().await;
                return to_value(&acp::PromptResponse::new(acp::StopReason::EndTurn));
            }
            Accepted::Waiting(waiting) => waiting,
        };
        match waiting.await {
            Ok(Ok(reason)) => to_value(&acp::PromptResponse::new(reason)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(AcpError::new(
                INTERNAL_ERROR,
                "the turn ended without an outcome: the agent is shutting down",
            )),
        }
    }

    /// Names a new session after its first prompt, and tells the client.
    fn retitle(&self, runtime: &Runtime, session_id: &str, text: &str) -> Result<(), AcpError> {
        let title = translate::title_from(text);
        if title.is_empty() {
            return Ok(());
        }
        let session = runtime.update_session(SessionUpdateParams {
            session_id: session_id.to_string(),
            title: Some(title),
            ..SessionUpdateParams::default()
        })?;
        self.update(
            session_id,
            acp::SessionUpdate::SessionInfoUpdate(
                acp::SessionInfoUpdate::new()
                    .title(session.title)
                    .updated_at(session.updated_at),
            ),
        );
        Ok(())
    }

    /// `_session/steering`: the prompt joins the running turn, or starts one when none runs.
    async fn steer(&self, params: SteeringParams) -> Answer {
        let session_id = params.session_id;
        self.usable_session(&session_id).await?;
        let (text, attachments) = translate::prompt_text(&params.prompt)
            .map_err(|e| AcpError::new(INVALID_PARAMS, e.0))?;
        let sent = self
            .runtime()
            .await?
            .send_stored(ChatSendParams {
                session_id,
                text,
                client_message_id: None,
                attachments,
            })
            .await?;
        let outcome = match sent.queued {
            true => "injected",
            false => "startedNewTurn",
        };
        Ok(json!({"outcome": outcome}))
    }

    async fn set_config_option(&self, params: acp::SetSessionConfigOptionRequest) -> Answer {
        let session_id = params.session_id.0.to_string();
        self.usable_session(&session_id).await?;
        if &*params.config_id.0 != "model" {
            return Err(AcpError::new(
                INVALID_PARAMS,
                format!(
                    "unknown config option {:?}; sidechat offers \"model\"",
                    params.config_id.0
                ),
            ));
        }
        let model = match &params.value {
            acp::SessionConfigOptionValue::ValueId { value } => value.0.to_string(),
            _ => {
                return Err(AcpError::new(
                    INVALID_PARAMS,
                    "the model option takes a model id, not a boolean",
                ));
            }
        };
        let session = self.runtime().await?.update_session(SessionUpdateParams {
            session_id,
            model: Some(model),
            ..SessionUpdateParams::default()
        })?;
        to_value(&acp::SetSessionConfigOptionResponse::new(
            self.config_options(&session),
        ))
    }

    /// Asks the client again for every approval of the session still waiting (after a load,
    /// a resume, or a restart of the agent).
    async fn ask_pending(self: &Arc<Self>, session_id: &str) -> Result<(), AcpError> {
        let runtime = self.runtime().await?;
        let transcript = runtime.transcript(SessionTranscriptParams {
            session_id: session_id.to_string(),
            after_seq: None,
            before_seq: None,
            limit: Some(1),
        })?;
        let session = runtime.get_session(session_id)?;
        for approval in transcript.pending_approvals {
            self.ask(session_id, session.workspace_root.as_deref(), approval)
                .await;
        }
        for delegated in transcript.delegated_approvals {
            let asked =
                super::delegation::approval_in_parent(&delegated.approval, &delegated.call_id);
            self.ask(session_id, session.workspace_root.as_deref(), asked)
                .await;
        }
        Ok(())
    }

    /// Sends `session/request_permission` for one approval, unless one is already out, and
    /// applies the answer through the same durable approval rows as the native protocol.
    ///
    /// An approval resolved otherwise (the turn cancelled, stopped or ended, the session
    /// closed) withdraws its request with `$/cancel_request` (see [`Agent::withdraw`]); the
    /// client's answer to a withdrawn request, `cancelled` or a choice that came too late,
    /// changes nothing.
    async fn ask(
        self: &Arc<Self>,
        session_id: &str,
        root: Option<&str>,
        approval: PendingApproval,
    ) {
        let mut state = self.state.lock().await;
        if state.asking.contains_key(&approval.approval_id) {
            return;
        }
        let request = acp::RequestPermissionRequest::new(
            session_id.to_string(),
            translate::permission_subject(&approval, root.map(Path::new)),
            translate::permission_options(),
        );
        let request_id = self.peer.new_request_id();
        state
            .asking
            .insert(approval.approval_id.clone(), request_id.clone());
        let this = self.clone();
        let session_id = session_id.to_string();
        tokio::spawn(async move {
            let answer = this
                .peer
                .request_as(
                    request_id,
                    "session/request_permission",
                    &request,
                    PERMISSION_WAIT,
                )
                .await;
            let approval_id = approval.approval_id;
            let open = this
                .state
                .lock()
                .await
                .asking
                .remove(&approval_id)
                .is_some();
            let outcome = answer
                .map_err(|e| e.to_string())
                .and_then(|v| {
                    serde_json::from_value::<acp::RequestPermissionResponse>(v)
                        .map_err(|e| format!("the client's permission answer is malformed: {e}"))
                })
                .map(|response| response.outcome);
            if !open {
                // Withdrawn before the client answered: `cancelled`, as ACP asks of a client,
                // or a choice made too late; either way the approval is already resolved.
                tracing::debug!(approval_id, outcome = ?outcome, "answer to a withdrawn permission request");
                return;
            }
            let decision = match outcome {
                Ok(acp::RequestPermissionOutcome::Selected(selected)) => {
                    match &*selected.option_id.0 {
                        "allow" => ApprovalDecision::Allow,
                        "allowAlways" => ApprovalDecision::AllowAlways,
                        "deny" => ApprovalDecision::Deny,
                        other => {
                            tracing::warn!(
                                option = other,
                                "the client chose an option that was not offered; the approval stays open"
                            );
                            return;
                        }
                    }
                }
                Ok(_) => {
                    // `cancelled` means the client cancelled the prompt turn; its
                    // `session/cancel` may still be on its way, and stopping twice is harmless.
                    this.cancel(&session_id).await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no usable permission answer; the approval stays open");
                    return;
                }
            };
            let Ok(runtime) = this.runtime().await else {
                return;
            };
            let respond = ApprovalRespondParams {
                approval_id: approval_id.clone(),
                decision,
            };
            if let Err(e) = runtime.respond_approval(respond).await {
                tracing::info!(approval_id, error = %e, "the permission answer came too late to apply");
            }
        });
    }

    /// Withdraws the permission request still open for an approval resolved otherwise than by
    /// its answer: the client closes its prompt and answers `cancelled`.
    async fn withdraw(&self, approval_id: &str) {
        let Some(request_id) = self.state.lock().await.asking.remove(approval_id) else {
            return;
        };
        self.peer.notify(
            "$/cancel_request",
            &acp::CancelRequestNotification::new(acp::RequestId::Str(request_id)),
        );
    }

    /// Context usage and the session's cost. `used` is what the session's next request holds,
    /// the figure `session/budget` gives at the same moment: always the same measure, so an
    /// editor's meter moves with the conversation (never between the provider's count of the
    /// last request, which may leave out cached input, and the estimate of the next).
    async fn usage_update(&self, session_id: &str) -> Option<acp::SessionUpdate> {
        let runtime = self.runtime().await.ok()?;
        let snapshot = runtime.budget(session_id).ok()?.snapshot;
        let (window, used) = (snapshot.context_window, snapshot.input_tokens);
        let cost = runtime.cost(session_id).ok()?.cost;
        let priced = cost.total_usd.map(|usd| acp::Cost::new(usd, "USD"));
        Some(acp::SessionUpdate::UsageUpdate(
            acp::UsageUpdate::new(used, window).cost(priced),
        ))
    }

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
                && router.tools.get(call_id).is_some_and(|t| {
                    matches!(t.as_str(), "write_file" | "edit_file")
                        && *status == ToolCallStatus::Done
                })
            {
                // A successful write or edit keeps its diff as what the client shows.
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
            Event::Budget { .. } => {
                if let Some(update) = self.usage_update(session_id).await {
                    self.update(session_id, update);
                }
            }
            Event::RunStarted { .. } => {
                let mut state = self.state.lock().await;
                if let (Some(waiters), Some(run_id)) =
                    (state.promoted.remove(session_id), params.run_id)
                {
                    state.by_run.entry(run_id).or_default().extend(waiters);
                }
            }
            Event::InterjectionDelivered { pending_ids, .. } => {
                let mut state = self.state.lock().await;
                for id in pending_ids {
                    if let (Some(waiter), Some(run_id)) =
                        (state.by_pending.remove(&id), params.run_id.clone())
                    {
                        state.by_run.entry(run_id).or_default().push(waiter);
                    }
                }
            }
            Event::InterjectionPromoted { pending_ids, .. } => {
                let mut state = self.state.lock().await;
                for id in pending_ids {
                    if let Some(waiter) = state.by_pending.remove(&id) {
                        state
                            .promoted
                            .entry(session_id.to_string())
                            .or_default()
                            .push(waiter);
                    }
                }
            }
            Event::InterjectionCancelled { pending_id } => {
                if let Some(waiter) = self.state.lock().await.by_pending.remove(&pending_id) {
                    let _ = waiter.send(Ok(acp::StopReason::Cancelled));
                }
            }
            Event::RunFinished { reason, error } => {
                let Some(run_id) = params.run_id else { return };
                // What the next request holds now takes in the run's last answer; told before
                // the prompt answers.
                if let Some(update) = self.usage_update(session_id).await {
                    self.update(session_id, update);
                }
                let waiters = self.state.lock().await.by_run.remove(&run_id);
                let outcome = translate::stop_reason(reason, error.as_deref())
                    .map_err(|message| AcpError::new(INTERNAL_ERROR, message));
                for waiter in waiters.into_iter().flatten() {
                    let _ = waiter.send(outcome.clone());
                }
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

    /// Ends the wait of every prompt still open, once the events before have been routed: the
    /// connection is closing and no turn will answer them here.
    pub async fn release_prompts(&self) {
        self.sink.barrier().await;
        let mut state = self.state.lock().await;
        state.by_run.clear();
        state.by_pending.clear();
        state.promoted.clear();
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
}

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

/// The params of `_session/steering`.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteeringParams {
    pub session_id: String,
    pub prompt: Vec<acp::ContentBlock>,
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
}
