//! sidechat: a chat-agent sidecar that editors spawn and talk to over JSON-RPC on stdio.
//!
//! See `DESIGN` in the README for the data flow: transport → dispatcher → runtime, with the
//! store as the single source of truth and events streamed back to the editor.

pub mod client;
pub mod config;
pub mod context;
pub mod cost;
pub mod logging;
pub mod protocol;
pub mod provider;
pub mod rpc;
pub mod runtime;
pub mod store;
pub mod tools;
pub mod util;
