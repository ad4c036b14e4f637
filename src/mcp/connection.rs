//! One running MCP server: its process (or HTTP session), the MCP client over it, and the
//! guard that kills the server's whole process group when the connection goes away.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientInitializeError, NotificationContext, Peer, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::worker::WorkerQuitReason;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, watch};

use super::spec::{ServerSpec, Transport};

/// The MCP client's side of the protocol: it only listens for `tools/list_changed`.
pub struct Handler {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("sidechat", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A server's process group, killed (`SIGKILL`, every process in it) when this is dropped, so
/// whatever the server started goes with it.
#[derive(Debug)]
pub struct Group {
    pid: rustix::process::Pid,
    groups: Groups,
}

impl Group {
    pub fn kill(&self) {
        let _ = rustix::process::kill_process_group(self.pid, rustix::process::Signal::KILL);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
        crate::util::lock(&self.groups).remove(&self.pid.as_raw_nonzero().get());
    }
}

/// Every server process group alive, so a shutdown kills even a server still starting.
pub type Groups = Arc<std::sync::Mutex<std::collections::HashSet<i32>>>;

/// Kills every group in `groups`.
pub fn kill_all(groups: &Groups) {
    for pid in crate::util::lock(groups).drain() {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A server that answered `initialize` and listed its tools.
pub struct Connection {
    pub peer: Peer<RoleClient>,
    pub service: RunningService<RoleClient, Handler>,
    /// Set for a local server; an HTTP server has no process of ours.
    pub group: Option<Group>,
    /// Woken when the server says its tool list changed.
    pub tools_changed: Arc<Notify>,
    pub tools: Vec<Value>,
    /// How the server's own process ended, once it has (never, for an HTTP server).
    pub exited: Exit,
}

/// How a local server's process ended, once it has: `None` while it runs. Watched apart from
/// its stdout, which a process the server started may hold open after the server is gone.
pub type Exit = watch::Receiver<Option<String>>;

/// Waits until the process has ended and says how; never returns for one that cannot end (an
/// HTTP server's, whose sender is gone at once).
pub async fn exit_of(exit: &mut Exit) -> String {
    let ended = exit
        .wait_for(Option::is_some)
        .await
        .map(|ended| ended.clone().unwrap_or_default());
    match ended {
        Ok(ended) => ended,
        Err(_) => std::future::pending().await,
    }
}

/// What could not start a server, as the user reads it.
pub type StartError = String;

/// Starts the process (or opens the HTTP session), performs MCP's handshake and lists the
/// tools. Not bounded in time: the caller wraps it in the server's start-up timeout and drops
/// it when that passes, which kills the process group. A process that exits first ends it at
/// once, whoever holds its stdout.
pub async fn connect(spec: &ServerSpec, groups: &Groups) -> Result<Connection, StartError> {
    let tools_changed = Arc::new(Notify::new());
    let handler = Handler {
        tools_changed: tools_changed.clone(),
    };
    let (service, group, mut exited) = match &spec.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args)
                .process_group(0)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            // Values withheld from the store: the daemon's own variables of those names are
            // used, if it has them.
            if !spec.values_withheld {
                cmd.envs(env);
            }
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            // Recorded as spawned, so the daemon's reaping of adopted processes leaves it to
            // tokio.
            let mut child = crate::lifetime::reaper::spawn(&mut cmd)
                .map_err(|e| format!("cannot run {command:?}: {e}"))?;
            let group = child
                .id()
                .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
                .map(|pid| {
                    crate::util::lock(groups).insert(pid.as_raw_nonzero().get());
                    Group {
                        pid,
                        groups: groups.clone(),
                    }
                });
            let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
                (Some(stdin), Some(stdout)) => (stdin, stdout),
                _ => return Err(format!("cannot talk to {command:?}: no pipes to it")),
            };
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(log_stderr(spec.name.clone(), stderr));
            }
            let exited = watch_exit(spec.name.clone(), child);
            let mut exit = exited.clone();
            let service = tokio::select! {
                served = handler.serve((stdout, stdin)) => {
                    served.map_err(|e| handshake_error(&e))?
                }
                ended = exit_of(&mut exit) => {
                    return Err(format!("its process exited before the MCP handshake ({ended})"));
                }
            };
            (service, group, exited)
        }
        Transport::Http {
            url,
            headers,
            bearer_token_env_var,
        } => {
            let client = crate::http_client::builder()
                .map_err(|e| format!("cannot set up TLS: {e}"))?
                .build()
                .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if !spec.values_withheld {
                config = config.custom_headers(header_map(headers)?);
            }
            if let Some(var) = bearer_token_env_var {
                let token = std::env::var(var).map_err(|_| {
                    format!("`bearer_token_env_var` names {var}, which is not set in the daemon's environment")
                })?;
                config = config.auth_header(token);
            }
            let transport =
                rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
            let service = handler.serve(transport).await.map_err(|e| {
                let error = handshake_error(&e);
                match spec.values_withheld && !headers.is_empty() {
                    true => format!(
                        "{error} (its header values are not kept over a restart of the daemon: give the server again with `session/update`'s `mcpServers`)"
                    ),
                    false => error,
                }
            })?;
            // No process to watch: the sender goes at once, so the exit never comes.
            let (_, exited) = watch::channel(None);
            (service, None, exited)
        }
    };
    let peer = service.peer().clone();
    let tools = tokio::select! {
        tools = list_tools(&peer) => tools?,
        ended = exit_of(&mut exited) => {
            return Err(format!("its process exited while listing its tools ({ended})"));
        }
    };
    Ok(Connection {
        peer,
        service,
        group,
        tools_changed,
        tools,
        exited,
    })
}

/// Reaps the server's process in the background and tells how it ended.
fn watch_exit(server: String, mut child: tokio::process::Child) -> Exit {
    let (tell, exited) = watch::channel(None);
    tokio::spawn(async move {
        let ended = match child.wait().await {
            Ok(status) => match status.code() {
                Some(code) => format!("exit status {code}"),
                None => format!("{status}"),
            },
            Err(e) => format!("cannot wait for it: {e}"),
        };
        tracing::info!(server = %server, %ended, "MCP server process ended");
        let _ = tell.send(Some(ended));
    });
    exited
}

/// The configured headers as the transport sends them; values are marked sensitive, so they
/// stay out of debug output.
fn header_map(
    headers: &BTreeMap<String, String>,
) -> Result<HashMap<HeaderName, HeaderValue>, StartError> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a valid HTTP header name"))?;
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of header {name} is not valid in HTTP"))?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// The server's tools as JSON, so each is checked on its own (`catalog`).
pub async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Value>, StartError> {
    let tools = peer
        .list_all_tools()
        .await
        .map_err(|e| format!("listing its tools failed: {e}"))?;
    tools
        .iter()
        .map(|tool| serde_json::to_value(tool).map_err(|e| format!("a tool is unreadable: {e}")))
        .collect()
}

fn handshake_error(error: &ClientInitializeError) -> StartError {
    if refused_credentials(error) {
        return "the server refused the request as unauthorized (HTTP 401): check its `headers` or `bearer_token_env_var`".into();
    }
    format!("the MCP handshake failed: {error}")
}

/// Whether the HTTP server answered 401: the configured credentials are missing or wrong.
fn refused_credentials(error: &ClientInitializeError) -> bool {
    let ClientInitializeError::TransportError { error, .. } = error else {
        return false;
    };
    let error = &error.error;
    let http = error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
        .or_else(|| {
            match error.downcast_ref::<WorkerQuitReason<StreamableHttpError<reqwest::Error>>>() {
                Some(WorkerQuitReason::Fatal { error, .. }) => Some(error),
                _ => None,
            }
        });
    matches!(http, Some(StreamableHttpError::AuthRequired(_)))
}

/// The server's stderr goes to the log, a line at a time, never to our stdout.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "sidechat::mcp::stderr", server = %server, "{line}");
    }
}
