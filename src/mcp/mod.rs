//! Tools from Model Context Protocol servers, offered to the model beside the built-in ones.
//!
//! Servers come from the config file (`[mcp_servers.NAME]`) and from a session's own
//! `mcpServers`. They start lazily, in the background, when a session that uses them is
//! opened; nothing a client waits for (`initialize`, `session/create`, a run's first request)
//! waits for them. Their tools are named `mcp__server__tool` for the providers, go through the
//! approval policy like built-in tools, and their results are capped like built-in output.
//!
//! - [`spec`]: one server's checked configuration and the key it is shared and cached under;
//! - [`names`]: the provider-safe tool names;
//! - [`catalog`]: a server's tools checked, filtered and named;
//! - [`connection`]: one running server (process group, MCP client);
//! - [`manager`]: every server's state, start-up, restarts, calls and shutdown;
//! - [`result`]: a tool result as the model reads it.

pub mod catalog;
pub mod connection;
pub mod manager;
pub mod names;
pub mod result;
pub mod spec;

pub use manager::{Manager, Notify};
pub use spec::{RawSpec, ServerSpec};
