//! One ACP connection over stdio: newline-delimited JSON-RPC through the project's own reader
//! thread and writer, requests answered on their own tasks, client notifications handled in
//! arrival order, and the client's answers to our own requests routed back through [`Peer`].

use std::io::{Read, Write};
use std::sync::Arc;

use serde_json::Value;
use tokio::task::JoinSet;

use super::Opening;
use super::agent::Agent;
use super::sink::{AcpSink, Items};
use crate::config::Config;
use crate::rpc::Peer;
use crate::rpc::error::{INVALID_REQUEST, PARSE_ERROR, error_frame, error_response};
use crate::rpc::request_id::{RequestId, id_as_sent};
use crate::rpc::stdio::StdioConnection;

/// Serves the agent side of ACP until the client closes stdin; returns the exit code.
///
/// Runs still working when the input ends are stopped; one waiting for a permission stays
/// suspended in the store, and the next `sidechat acp` asks again once the session is loaded.
pub async fn serve<R, W>(
    input: R,
    output: W,
    config: Config,
    sink: Arc<AcpSink>,
    items: Items,
    opening: Opening,
) -> i32
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let mut connection = StdioConnection::open(input, output);
    let (outbox, peer) = (connection.outbox.clone(), connection.peer.clone());
    let agent = Arc::new(Agent::new(peer.clone(), sink, config, opening));
    tokio::spawn(agent.clone().route(items));
    let mut requests = JoinSet::new();
    while let Some(frame) = connection.next_frame().await {
        while requests.try_join_next().is_some() {}
        handle_frame(&agent, &peer, frame.as_bytes(), &mut requests).await;
    }
    tracing::info!("input closed");
    if let Ok(runtime) = agent.runtime().await {
        runtime.shutdown().await;
    }
    // Every request still open is answered before the process ends: prompts whose turn was
    // stopped or suspended by the shutdown hear so.
    agent.release_prompts().await;
    peer.close();
    while requests.join_next().await.is_some() {}
    outbox.flush().await;
    0
}

/// Classifies one frame and hands it on.
async fn handle_frame(agent: &Arc<Agent>, peer: &Peer, bytes: &[u8], requests: &mut JoinSet<()>) {
    let invalid = |id: &RequestId, message: &str| {
        peer.outbox()
            .send(error_frame(id.json(), INVALID_REQUEST, message, None));
    };
    let message: Value = match serde_json::from_slice(bytes) {
        Ok(message) => message,
        Err(e) => {
            peer.outbox().send(error_response(
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: {e}"),
                None,
            ));
            return;
        }
    };
    let Value::Object(mut object) = message else {
        return invalid(
            &RequestId::null(),
            "Invalid Request: ACP takes one JSON-RPC object per line, not batches or other values",
        );
    };
    // As the client wrote it: `1e2` is answered as `1e2`, not as `100.0`.
    let id = object.get("id").map(|parsed| id_as_sent(bytes, parsed));
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        if let Some(id) = id.filter(|_| !object.contains_key("result")) {
            invalid(&id, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
        }
        return;
    }
    let params = object.remove("params");
    match (object.get("method").cloned(), id) {
        (Some(Value::String(method)), Some(id)) => {
            if !id.is_valid() {
                return invalid(
                    &RequestId::null(),
                    "Invalid Request: id must be a string or a number",
                );
            }
            let answering = agent.take(id, method, params).await;
            requests.spawn(answering);
        }
        (Some(Value::String(method)), None) => agent.notification(&method, params).await,
        (Some(_), id) => invalid(
            &id.unwrap_or_else(RequestId::null),
            "Invalid Request: method must be a string",
        ),
        (None, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
            if !peer.complete(&Value::Object(object)) {
                tracing::warn!("an answer to no open request (it was withdrawn or answered)");
            }
        }
        (None, id) => invalid(
            &id.unwrap_or_else(RequestId::null),
            "Invalid Request: no method",
        ),
    }
}
