//! The runtime's side of MCP: which tools a session's request offers, which calls need no
//! approval, a session's own servers, and the notices the server manager asks for.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use super::{Inner, Runtime, RuntimeError, RuntimeResult};
use crate::mcp::{RawSpec, ServerSpec};
use crate::protocol::{McpServerParams, NoticeLevel};
use crate::provider::ToolSpec;

/// Tells a session what happened to one of its MCP servers, as a stored `notice`.
pub(super) struct Notices(pub Weak<Inner>);

impl crate::mcp::Notify for Notices {
    fn notice(&self, session_id: &str, text: &str) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        let run_id = inner.runs.active_run(session_id);
        if let Err(e) = inner.notice(session_id, run_id.as_deref(), NoticeLevel::Warning, text) {
            tracing::warn!(error = %e, session_id, "cannot store an MCP notice");
        }
    }
}

/// Checks a session's `mcpServers`: each must be valid and their names distinct.
pub(super) fn check_servers(params: Vec<McpServerParams>) -> RuntimeResult<Vec<ServerSpec>> {
    let mut names = HashSet::new();
    params
        .into_iter()
        .map(|p| {
            if !names.insert(p.name.clone()) {
                return Err(RuntimeError::InvalidParams(format!(
                    "mcpServers names {:?} twice; names must be distinct",
                    p.name
                )));
            }
            let raw = RawSpec {
                command: p.command,
                args: p.args,
                env: p.env,
                cwd: p.cwd,
                url: p.url,
                headers: p.headers,
                bearer_token_env_var: p.bearer_token_env_var,
                enabled: p.enabled,
                startup_timeout_secs: p.startup_timeout_secs,
                tool_timeout_secs: p.tool_timeout_secs,
                enabled_tools: p.enabled_tools,
                disabled_tools: p.disabled_tools,
                trust: p.trust,
            };
            ServerSpec::check(&p.name, raw).map_err(RuntimeError::InvalidParams)
        })
        .collect()
}

impl Inner {
    /// The tool definitions a session's next request sends: the built-in tools, then the MCP
    /// tools its servers offer now.
    pub(super) fn tool_specs(&self, session_id: &str) -> Vec<ToolSpec> {
        let mut specs = crate::tools::specs();
        let mut taken: HashSet<String> = specs.iter().map(|s| s.name.clone()).collect();
        let offered = self.mcp.offered(session_id, &mut taken);
        specs.extend(offered.iter().map(|t| t.spec()));
        self.fit_delegation_tools(session_id, &mut specs);
        specs
    }

    /// Whether a call runs without asking: a reading built-in tool, or an MCP tool its trusted
    /// server marks read-only.
    pub(super) fn runs_unasked(&self, session_id: &str, tool: &str) -> bool {
        match crate::mcp::names::is_mcp(tool) {
            true => self.mcp.trusted(session_id, tool),
            false => !crate::tools::needs_approval(tool),
        }
    }

    /// Starts, in the background, the session's servers that never started.
    pub(super) fn open_mcp(&self, session_id: &str) {
        self.mcp.open(session_id);
    }

    /// Starts, in the background, the session's servers that are not running, a failed one
    /// once its backoff has passed: a run needs them.
    pub(super) fn need_mcp(&self, session_id: &str) {
        self.mcp.need(session_id);
    }
}

impl Runtime {
    /// Gives a session its own MCP servers (replacing those it had), e.g. from ACP's
    /// `session/load`, and starts them in the background.
    pub fn set_mcp_servers(
        &self,
        session_id: &str,
        servers: Vec<McpServerParams>,
    ) -> RuntimeResult<()> {
        self.session_row(session_id)?;
        self.replace_mcp_servers(session_id, check_servers(servers)?)
    }

    /// Stores a session's own servers in place of those it had, and starts them in the
    /// background: the next request offers their tools (cached ones at once).
    pub(super) fn replace_mcp_servers(
        &self,
        session_id: &str,
        specs: Vec<ServerSpec>,
    ) -> RuntimeResult<()> {
        self.store_mcp_servers(session_id, &specs)?;
        self.inner.mcp.remember(session_id, specs);
        self.inner.open_mcp(session_id);
        Ok(())
    }

    /// Records a session's own servers, their secret values left out.
    pub(super) fn store_mcp_servers(
        &self,
        session_id: &str,
        specs: &[ServerSpec],
    ) -> RuntimeResult<()> {
        let json = crate::mcp::spec::encode_stored(specs)
            .map_err(|e| RuntimeError::Internal(format!("MCP servers do not serialise: {e}")))?;
        self.inner
            .store
            .set_session_mcp_servers(session_id, &json)?;
        Ok(())
    }

    /// The server manager, for a shutdown that must kill every server's process group.
    pub fn mcp(&self) -> Arc<crate::mcp::Manager> {
        self.inner.mcp.clone()
    }
}
