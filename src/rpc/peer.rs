//! The client as seen from the server: notifications out, and server→client requests with a
//! timeout whose replies come back through the dispatcher.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::transport::Outbox;
use crate::protocol::{Event, SessionEventParams};

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

    /// Sends a notification.
    pub fn notify<P: Serialize>(&self, method: &str, params: &P) {
        match serde_json::to_string(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
        {
            Ok(text) => self.outbox.send(text),
            Err(e) => tracing::error!(method, error = %e, "cannot serialise notification"),
        }
    }

    /// Sends a request to the client and waits for its answer, at most `timeout`.
    pub async fn request<P: Serialize>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<Value, PeerError> {
        let id = format!("sidechat-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id.clone(), tx);
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.outbox.send(frame.to_string());
        let outcome = tokio::time::timeout(timeout, rx).await;
        self.lock().remove(&id);
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
        let Some(waiter) = self.lock().remove(&id) else {
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
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
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
        match streamed_text_frame(event) {
            Some(Ok(text)) => peer.outbox.send(text),
            Some(Err(e)) => tracing::error!(error = %e, "cannot serialise notification"),
            None => peer.notify("session/event", event),
        }
    }
}

/// The `session/event` notification of a text or thinking delta, written straight from the
/// event without building a [`Value`] first: streamed text is nearly all of what a run sends.
/// The bytes are those of the general path, whose JSON objects have their keys sorted, so the
/// fields below are declared in that order.
#[derive(Serialize)]
struct DeltaNotification<'a> {
    jsonrpc: &'static str,
    method: &'static str,
    params: DeltaParams<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeltaParams<'a> {
    event: DeltaEvent<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
    seq: u64,
    session_id: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeltaEvent<'a> {
    kind: &'static str,
    message_id: &'a str,
    text: &'a str,
}

/// `None` for events other than streamed text, which take the general path.
fn streamed_text_frame(event: &SessionEventParams) -> Option<serde_json::Result<String>> {
    let (kind, message_id, text) = match &event.event {
        Event::TextDelta { message_id, text } => ("textDelta", message_id, text),
        Event::ThinkingDelta { message_id, text } => ("thinkingDelta", message_id, text),
        _ => return None,
    };
    let frame = DeltaNotification {
        jsonrpc: "2.0",
        method: "session/event",
        params: DeltaParams {
            event: DeltaEvent {
                kind,
                message_id,
                text,
            },
            run_id: event.run_id.as_deref(),
            seq: event.seq,
            session_id: &event.session_id,
        },
    };
    let ids = event.session_id.len() + event.run_id.as_deref().map_or(0, str::len);
    // The fixed part is under 128 bytes; escapes are rare.
    let mut out = Vec::with_capacity(128 + ids + message_id.len() + text.len() + text.len() / 8);
    Some(serde_json::to_writer(&mut out, &frame).map(|()| {
        // serde_json writes valid UTF-8 only.
        String::from_utf8(out).unwrap_or_default()
    }))
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

    #[test]
    fn streamed_text_is_written_as_the_general_path_would() {
        let texts = ["w1 ", "", "é \"quoted\" \\ \n\t\u{1} 😀 </script>"];
        for run_id in [Some("run_1".to_string()), None] {
            for text in texts {
                for event in [
                    Event::TextDelta {
                        message_id: "msg_1".into(),
                        text: text.into(),
                    },
                    Event::ThinkingDelta {
                        message_id: "msg_\"2".into(),
                        text: text.into(),
                    },
                ] {
                    let params = SessionEventParams {
                        session_id: "ses_1".into(),
                        seq: 18_446_744_073_709_551_615,
                        run_id: run_id.clone(),
                        event,
                    };
                    let general =
                        json!({"jsonrpc": "2.0", "method": "session/event", "params": &params})
                            .to_string();
                    let fast = streamed_text_frame(&params).unwrap().unwrap();
                    assert_eq!(fast, general);
                }
            }
        }
        let other = SessionEventParams {
            session_id: "ses_1".into(),
            seq: 1,
            run_id: None,
            event: Event::RunStarted { model: "m".into() },
        };
        assert!(streamed_text_frame(&other).is_none());
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
