//! The stdio connection the daemon's protocol and ACP are both served over: the reader thread
//! and the writer, the peer that speaks through the writer, and one answer to input that did
//! not decode into a frame.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use tokio::sync::mpsc;

use super::error::{INVALID_REQUEST, PARSE_ERROR, error_frame, error_response};
use super::framing::{Decoded, MAX_FRAME_BYTES};
use super::peer::Peer;
use super::request_id::{RequestId, recover_id};
use super::transport::{Input, Outbox, spawn_reader, spawn_writer};

/// Both ends of one client's connection.
pub struct StdioConnection {
    /// Where every frame to the client is queued.
    pub outbox: Outbox,
    /// Requests to the client and their answers, through [`Self::outbox`].
    pub peer: Peer,
    frames: mpsc::UnboundedReceiver<Input>,
}

impl StdioConnection {
    /// Starts reading `input` on its own thread and writing `output`, in the framing the
    /// client's first frame uses.
    pub fn open<R, W>(input: R, output: W) -> Self
    where
        R: Read + Send + 'static,
        W: Write + Send + 'static,
    {
        let framing = Arc::new(OnceLock::new());
        let outbox = spawn_writer(output, framing.clone());
        let peer = Peer::new(outbox.clone());
        let frames = spawn_reader(input, framing);
        Self {
            outbox,
            peer,
            frames,
        }
    }

    /// The next frame's text, once what did not decode before it has been answered; `None`
    /// when the input has ended, or a `SIGTERM` or `SIGHUP` asked the daemon to end as if it
    /// had (see [`crate::lifetime::signals`]).
    pub async fn next_frame(&mut self) -> Option<String> {
        loop {
            let input = tokio::select! {
                input = self.frames.recv() => input?,
                () = crate::lifetime::signals::ended() => return None,
            };
            match input {
                Input::Frame(text) => return Some(text),
                Input::NotAFrame(decoded) => answer_not_a_frame(&self.outbox, decoded),
            }
        }
    }
}

/// Answers what could not be decoded. Skipped bytes are a parse error, with a null id since no
/// id could be read; an oversized frame is an invalid request, answered with the id its first
/// bytes show. Input that ended inside a frame is only logged, as nobody is left to read
/// an answer.
fn answer_not_a_frame(outbox: &Outbox, decoded: Decoded) {
    match decoded {
        Decoded::Frame(_) => tracing::error!("a frame was handed on as not a frame"),
        Decoded::Garbage { skipped } => {
            tracing::warn!(skipped, "skipped bytes that were not a message");
            outbox.send(error_response(
                &Value::Null,
                PARSE_ERROR,
                "Parse error: bytes that are not a JSON-RPC message were skipped",
                Some(serde_json::json!({"skipped": skipped})),
            ));
        }
        Decoded::TooLarge { size, head } => {
            tracing::warn!(size, "refused an oversized message");
            // The frame's first bytes usually show its id, in either framing; the answer is
            // the same in both.
            let id = recover_id(&head).unwrap_or_else(RequestId::null);
            let message = format!(
                "Message exceeds the limit of {MAX_FRAME_BYTES} bytes; it was refused and the \
                 rest of it skipped"
            );
            outbox.send(error_frame(id.json(), INVALID_REQUEST, &message, None));
        }
        Decoded::Truncated { buffered } => {
            tracing::warn!(buffered, "input ended inside a message");
        }
    }
}
