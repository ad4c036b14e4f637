//! sidechat: a chat-agent sidecar that editors spawn and talk to over JSON-RPC on stdio.
//!
//! Data flows transport ([`rpc`]) → dispatcher → [`runtime`], with the [`store`] as the single
//! source of truth, model [`provider`]s behind one driver trait, and session events streamed
//! back to the editor.

#![deny(unsafe_code)]

pub mod acp;
pub mod client;
pub mod clock;
pub mod config;
pub mod context;
pub mod cost;
pub mod doctor;
pub mod http_client;
pub mod images;
mod json_text;
pub mod lifetime;
pub mod logging;
pub mod low_priority;
pub mod mcp;
pub mod mentions;
pub mod permissions;
pub mod private_files;
pub mod protocol;
pub mod provider;
pub mod rpc;
pub mod runtime;
pub mod sandbox;
pub mod store;
pub mod tools;
pub mod util;
