//! JSON-RPC 2.0 over stdio: framing, transport, the dispatcher and the method table; and over
//! WebSocket for many clients at once (`listen`).

pub mod backlog;
mod delta_frame;
pub mod error;
pub mod framing;
pub mod listen;
mod methods;
pub mod peer;
pub mod readable;
pub mod request_id;
mod server;
pub mod stdio;
pub mod transport;

pub use peer::{ClientSink, Peer, PeerError};
pub use server::{Opening, serve};
