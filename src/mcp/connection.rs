//! One running MCP server: its process (or HTTP session), the MCP client over it, and the
//! guard that kills the server's whole process group when the connection goes away.

use std::sync::Arc;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

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
}

/// What could not start a server, as the user reads it.
pub type StartError = String;

/// Starts the process (or opens the HTTP session), performs MCP's handshake and lists the
/// tools. Not bounded in time: the caller wraps it in the server's start-up timeout and drops
/// it when that passes, which kills the process group.
pub async fn connect(spec: &ServerSpec, groups: &Groups) -> Result<Connection, StartError> {
    let tools_changed = Arc::new(Notify::new());
    let handler = Handler {
        tools_changed: tools_changed.clone(),
    };
    let (service, group) = match &spec.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).kill_on_drop(true).process_group(0);
            for (key, value) in env {
                // An empty value is one whose secret was not stored: the daemon's own
                // variable of that name is used, if it has one.
                if !value.is_empty() {
                    cmd.env(key, value);
                }
            }
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {command:?}: {e}"))?;
            let group = transport
                .id()
                .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
                .map(|pid| {
                    crate::util::lock(groups).insert(pid.as_raw_nonzero().get());
                    Group {
                        pid,
                        groups: groups.clone(),
                    }
                });
            if let Some(stderr) = stderr {
                tokio::spawn(log_stderr(spec.name.clone(), stderr));
            }
            let service = handler
                .serve(transport)
                .await
                .map_err(|e| handshake_error(&e.to_string()))?;
            (service, group)
        }
        Transport::Http { url } => {
            let client = crate::http_client::builder()
                .map_err(|e| format!("cannot set up TLS: {e}"))?
                .build()
                .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
            let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let transport =
                rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
            let service = handler
                .serve(transport)
                .await
                .map_err(|e| handshake_error(&e.to_string()))?;
            (service, None)
        }
    };
    let peer = service.peer().clone();
    let tools = list_tools(&peer).await?;
    Ok(Connection {
        peer,
        service,
        group,
        tools_changed,
        tools,
    })
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

fn handshake_error(detail: &str) -> StartError {
    format!("the MCP handshake failed: {detail}")
}

/// The server's stderr goes to the log, a line at a time, never to our stdout.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "sidechat::mcp::stderr", server = %server, "{line}");
    }
}
