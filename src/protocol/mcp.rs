//! MCP servers on the wire: a session's own servers as `session/create` and `session/update`
//! take them, and each server's state as `session/get` reports it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An MCP server a session uses beside those of the config file (`session/create`'s
/// `mcpServers`). Give `command` for a local server speaking MCP over stdio, or `url` for one
/// speaking streamable HTTP. A server named like a configured one replaces it for the session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerParams {
    /// Tools are offered as `mcp__NAME__tool`: 1 to 32 letters, digits, `_` or `-`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables set for the server's process. Their values are not stored (they may be
    /// secrets): after a daemon restart the daemon's own variable of the same name is used.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Absolute working directory of the server's process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with every request to a `url` server (an API key, say). Their values
    /// are not stored, like `env`'s: after a daemon restart give the servers again (ACP's
    /// `session/load` does), or use `bearerTokenEnvVar`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// For a `url` server: a variable of the daemon's environment whose value is sent as
    /// `Authorization: Bearer …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env_var: Option<String>,
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_secs: Option<u64>,
    /// Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_secs: Option<u64>,
    /// When given, only these tools (by the server's names) are offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_tools: Vec<String>,
    /// Tools the server marks `readOnlyHint` run without asking. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<bool>,
}

/// Where one of a session's MCP servers stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum McpServerState {
    /// Not started yet (it starts when the session is opened or needs it).
    Idle,
    Starting,
    Ready,
    /// It failed to start, timed out or died; `lastError` says why. It is tried again, with
    /// backoff, when next needed.
    Failed,
    /// `enabled = false`.
    Disabled,
}

/// One of a session's MCP servers in `session/get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerStatus {
    pub name: String,
    pub state: McpServerState,
    /// How many of its tools are offered (while it is ready).
    pub tools: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
