//! Opening a WebSocket to a listening daemon (`serve --listen`), on TCP (`ws://host:port/`) or
//! on a unix socket (`ws+unix:///path`), with its token.

use std::pin::Pin;

use anyhow::Context;
use futures::{Sink, Stream, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::rpc::framing::MAX_FRAME_BYTES;
use crate::rpc::listen::unix;

/// Where messages to the daemon go.
pub type Outgoing = Pin<Box<dyn Sink<Message, Error = tungstenite::Error> + Send>>;
/// The daemon's messages.
pub type Incoming = Pin<Box<dyn Stream<Item = Result<Message, tungstenite::Error>> + Send>>;

/// Connects to the daemon at `url` with `token` (sent as `Authorization: Bearer`). Messages
/// may be as large as the daemon's own limit, the stdio transport's.
pub async fn connect(url: &str, token: &str) -> anyhow::Result<(Outgoing, Incoming)> {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    let attaching = || format!("cannot attach to the daemon at {url}");
    match unix::path_of(url) {
        Some(path) => {
            let stream = tokio::net::UnixStream::connect(path)
                .await
                .with_context(attaching)?;
            // The socket is the address; `Host` names nothing the daemon checks.
            let request = request("ws://localhost/", token)?;
            let (socket, _) =
                tokio_tungstenite::client_async_with_config(request, stream, Some(config))
                    .await
                    .with_context(attaching)?;
            Ok(halves(socket))
        }
        None => {
            let request = request(url, token)?;
            // Without Nagle's delay: a request is one small write and waits for its answer.
            let (socket, _) =
                tokio_tungstenite::connect_async_with_config(request, Some(config), true)
                    .await
                    .with_context(attaching)?;
            Ok(halves(socket))
        }
    }
}

/// The socket's two directions, each on its own.
fn halves<S>(socket: tokio_tungstenite::WebSocketStream<S>) -> (Outgoing, Incoming)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (outgoing, incoming) = socket.split();
    (Box::pin(outgoing), Box::pin(incoming))
}

/// The handshake request for `url`, carrying the token.
fn request(url: &str, token: &str) -> anyhow::Result<tungstenite::handshake::client::Request> {
    let mut request = url
        .into_client_request()
        .with_context(|| format!("{url} is not a WebSocket URL"))?;
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {token}")
            .parse()
            .context("the token is not a header value")?,
    );
    Ok(request)
}
