//! The client as seen from the server: notifications out, and server→client requests with a
//! timeout whose replies come back through the dispatcher.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::delta_frame::write_delta_frame;
use super::transport::Outbox;
use crate::protocol::{Delta, SessionEventParams};
use crate::util::lock;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PeerError {
    #[error("the client did not answer {method} within {timeout:?}")]
    Timeout { method: String, timeout: Duration },
    #[error("the client answered {method} with error {code}: {message}")]
    Rejected {
        method: String,
        code: i64,
        message: String,
    },
    #[error("the connection closed before the client answered {method}")]
    Closed { method: String },
}

type Waiter = oneshot::Sender<Result<Value, (i64, String)>>;

/// A cheap handle for talking to the connected client.
#[derive(Clone)]
pub struct Peer {
    outbox: Outbox,
    pending: Arc<Mutex<HashMap<String, Waiter>>>,
    next_id: Arc<AtomicU64>,
}

impl Peer {
    pub fn new(outbox: Outbox) -> Self {
        Self {
            outbox,
            pending: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Sends a notification, serialised straight into the bytes waiting for the writer: a
    /// message's whole text (up to the message size limit) is announced without a JSON value
    /// tree or a string of its own. The bytes are those of serialising
    /// `{"jsonrpc": "2.0", "method": method, "params": params}`.
    pub fn notify<P: Serialize>(&self, method: &str, params: &P) {
        let written = self
            .outbox
            .try_send_with(|out| write_notification(out, method, params));
        if let Err(e) = written {
            tracing::error!(method, error = %e, "cannot serialise notification");
        }
    }

    /// Sends a request to the client and waits for its answer, at most `timeout`.
    pub async fn request<P: Serialize>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<Value, PeerError> {
        self.request_as(self.new_request_id(), method, params, timeout)
            .await
    }

    /// A fresh id for a request to the client, for a caller that names the request before
    /// sending it (to withdraw it later with a cancellation that names its id).
    pub fn new_request_id(&self) -> String {
        format!("sidechat-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// [`Peer::request`] with an id from [`Peer::new_request_id`].
    pub async fn request_as<P: Serialize>(
        &self,
        id: String,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<Value, PeerError> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), tx);
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.outbox.send(frame.to_string());
        let outcome = tokio::time::timeout(timeout, rx).await;
        lock(&self.pending).remove(&id);
        match outcome {
            Err(_) => Err(PeerError::Timeout {
                method: method.to_string(),
                timeout,
            }),
            Ok(Err(_)) => Err(PeerError::Closed {
                method: method.to_string(),
            }),
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err((code, message)))) => Err(PeerError::Rejected {
                method: method.to_string(),
                code,
                message,
            }),
        }
    }

    /// Routes a client's response to the request waiting for it; false if none waits.
    pub fn complete(&self, response: &Value) -> bool {
        let id = match &response["id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let Some(waiter) = lock(&self.pending).remove(&id) else {
            return false;
        };
        let outcome = match response.get("error") {
            Some(error) => Err((
                error["code"].as_i64().unwrap_or(0),
                error["message"].as_str().unwrap_or("").to_string(),
            )),
            None => Ok(response.get("result").cloned().unwrap_or(Value::Null)),
        };
        let _ = waiter.send(outcome);
        true
    }

    /// Fails every request still waiting: the connection is closing.
    pub fn close(&self) {
        lock(&self.pending).clear();
    }
}

/// Appends the notification `method` with `params` to `out`.
pub(crate) fn write_notification<P: Serialize>(
    out: &mut Vec<u8>,
    method: &str,
    params: &P,
) -> serde_json::Result<()> {
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"#);
    serde_json::to_writer(&mut *out, method)?;
    out.extend_from_slice(br#","params":"#);
    serde_json::to_writer(&mut *out, params)?;
    out.push(b'}');
    Ok(())
}

/// An event sink that forwards session events to the client once one is connected.
///
/// The runtime is built (and recovers the store) before the connection exists, so the peer
/// is attached later; events before that have no one to go to.
#[derive(Default)]
pub struct ClientSink {
    peer: std::sync::OnceLock<Peer>,
}

impl ClientSink {
    pub fn connect(&self, peer: Peer) {
        if self.peer.set(peer).is_err() {
            tracing::warn!("the event sink was already connected");
        }
    }
}

impl crate::runtime::EventSink for ClientSink {
    fn emit(&self, event: &SessionEventParams) {
        let Some(peer) = self.peer.get() else { return };
        peer.notify(
            <crate::protocol::SessionEvent as crate::protocol::Notification>::METHOD,
            event,
        );
    }

    fn emit_delta(&self, delta: &Delta<'_>) {
        if let Some(peer) = self.peer.get() {
            peer.outbox.send_with(|out| write_delta_frame(delta, out));
        }
    }

    fn has_room(&self) -> bool {
        self.peer.get().is_none_or(|peer| peer.outbox.has_room())
    }

    fn room(&self) -> crate::runtime::RoomFuture<'_> {
        Box::pin(async move {
            if let Some(peer) = self.peer.get() {
                peer.outbox.room().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::framing::Framing;
    use crate::rpc::transport::spawn_writer;
    use std::sync::OnceLock;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn peer() -> (Peer, Sink) {
        let sink = Sink::default();
        let framing = Arc::new(OnceLock::from(Framing::Line));
        (Peer::new(spawn_writer(sink.clone(), framing)), sink)
    }

    #[tokio::test]
    async fn request_completes_with_the_clients_answer() {
        let (peer, sink) = peer();
        let asking = peer.clone();
        let task = tokio::spawn(async move {
            asking
                .request("fs/read", &json!({"path": "a"}), Duration::from_secs(30))
                .await
        });
        // Wait for the request to be written, then answer it.
        let id = loop {
            peer.outbox().flush().await;
            let written = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
            if let Some(line) = written.lines().next() {
                let frame: Value = serde_json::from_str(line).unwrap();
                break frame["id"].clone();
            }
            tokio::task::yield_now().await;
        };
        assert!(peer.complete(&json!({"jsonrpc": "2.0", "id": id, "result": {"ok": true}})));
        assert_eq!(task.await.unwrap(), Ok(json!({"ok": true})));
        assert!(!peer.complete(&json!({"jsonrpc": "2.0", "id": id, "result": null})));
    }

    #[tokio::test]
    async fn notifications_are_written_as_their_json_value_and_a_failed_one_not_at_all() {
        for framing in [Framing::Line, Framing::ContentLength] {
            let sink = Sink::default();
            let peer = Peer::new(spawn_writer(
                sink.clone(),
                Arc::new(OnceLock::from(framing)),
            ));
            let params = json!({"sessionId": "s", "seq": 7, "event": {"kind": "x", "t": "é\"\n"}});
            peer.notify(
                <crate::protocol::SessionEvent as crate::protocol::Notification>::METHOD,
                &params,
            );
            // A map with keys that are not strings cannot be written as JSON.
            let unwritable: HashMap<(u8, u8), u8> = HashMap::from([((1, 2), 3)]);
            peer.notify(
                <crate::protocol::SessionEvent as crate::protocol::Notification>::METHOD,
                &unwritable,
            );
            peer.notify("x", &1.5);
            peer.outbox().flush().await;
            let mut expected = Vec::new();
            for (method, params) in [
                (
                    <crate::protocol::SessionEvent as crate::protocol::Notification>::METHOD,
                    params,
                ),
                ("x", json!(1.5)),
            ] {
                let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
                framing.encode(&message.to_string(), &mut expected);
            }
            assert_eq!(*sink.0.lock().unwrap(), expected, "{framing:?}");
        }
    }

    #[tokio::test]
    async fn request_times_out() {
        let (peer, _sink) = peer();
        let outcome = peer
            .request("x/y", &json!({}), Duration::from_millis(50))
            .await;
        assert!(matches!(outcome, Err(PeerError::Timeout { .. })));
    }
}
