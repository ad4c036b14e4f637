//! Wire types of the native protocol: every `*Params`, `*Result` and event that crosses stdio.
//!
//! They live in one place so that the JSON Schema in `schema/` can be generated from them
//! (`sidechat schema`) and a test can tell when the checked-in copy is stale.

mod budget;
mod chat;
mod cost;
mod events;
mod images;
mod lifecycle;
mod mcp;
mod methods;
mod permissions;
mod schema;
mod session;
mod transcript;

pub use budget::*;
pub use chat::*;
pub use cost::*;
pub use events::*;
pub use images::*;
pub use lifecycle::*;
pub use mcp::*;
pub use methods::*;
pub use permissions::*;
pub use schema::{SchemaFile, file_name as schema_file_name, generate_schema_files};
pub use session::*;
pub use transcript::*;

/// The version of the native protocol this build speaks; `initialize` reports it.
pub const PROTOCOL_VERSION: u32 = 1;
