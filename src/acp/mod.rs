//! `sidechat acp`: the same runtime, database and configuration as `sidechat serve`, spoken as
//! an Agent Client Protocol (v1) agent, so editors that host ACP agents (Zed, JetBrains IDEs,
//! Neovim's CodeCompanion and avante, Emacs' agent-shell) can use sidechat without a plugin.
//!
//! The wire types come from `agent-client-protocol-schema` (1.x), the published ACP types whose
//! v1 API is semver-stable, on sidechat's own stdio transport and [`crate::rpc::Peer`]. The
//! full `agent-client-protocol` runtime crate was not used: its API changed incompatibly three
//! times in two weeks, and its dispatch loop deadlocks when a handler awaits a request to the
//! client, which is exactly what a prompt turn does while a permission request is open.
//!
//! How the runtime maps onto ACP:
//! - `session/new` ↔ `session/create` with `cwd` as the workspace root; `session/load` replays
//!   the stored transcript as updates before answering.
//! - `session/prompt` ↔ `chat/send`; it answers when the turn that took it ends. A prompt sent
//!   while a turn runs is queued as an interjection and answers when the turn that delivered it
//!   ends. `session/cancel` ↔ `chat/stop` (the prompt answers `cancelled`).
//! - `session/request_permission` ↔ the durable approval rows; a permission still open when the
//!   agent stops is asked again after `session/load`.
//! - `usage_update` ↔ the budget snapshot and the priced usage lines.
//! - A delegated task ↔ the `delegate` tool call, its content following the sub-agent; the
//!   sub-agent's permission requests are asked in the parent's session (`delegation`).
//!
//! A frame's way in: `connection` reads it, `dispatch` decodes it by the schema's method table,
//! `agent` hands the call to `handshake`, `sessions` or `prompt_turn`; `events` turns what the
//! runtime publishes into updates, `permissions` requests and prompt answers.

mod agent;
mod connection;
mod delegation;
mod dispatch;
mod error;
mod events;
mod handshake;
mod mcp;
mod permissions;
mod prompt_turn;
mod sessions;
mod sink;
mod translate;

pub use connection::serve;
pub use dispatch::STEERING;
pub use error::AcpError;
pub use sink::{AcpSink, Items};

/// The store being opened and repaired on a blocking thread while `initialize` is answered.
pub type Opening = tokio::task::JoinHandle<Result<crate::runtime::Runtime, String>>;
