//! The dispatcher: classifies every frame, enforces the lifecycle, routes requests through the
//! method table, handles client notifications in arrival order and completes the server's own
//! requests.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::join_all;
use jsonrpsee::core::server::{ConnectionId, MethodCallback};
use jsonrpsee::{Extensions, RpcModule};
use jsonrpsee_types::{Id, Params};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::task::AbortHandle;

use super::error::*;
use super::framing::{Decoded, MAX_FRAME_BYTES};
use super::methods::method_table;
use super::peer::Peer;
use super::transport::{spawn_reader, spawn_writer};
use crate::protocol::{InitializeParams, InitializeResult, read_params};
use crate::runtime::Runtime;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Uninitialized,
    Running,
    ShuttingDown,
}

/// What to do with one classified message.
enum Outcome {
    /// Nothing to answer (a notification, or a reply to our own request).
    Silent,
    /// A complete response frame.
    Reply(String),
    /// A request for the method table; its params are still the JSON text they arrived as.
    Call {
        id: Value,
        method: String,
        params: Option<Box<RawValue>>,
    },
    /// The client said `exit`.
    Exit,
}

/// One JSON-RPC message, read once from its frame. `params` stays JSON text until the method's
/// route reads it as that method's params type; `id`, `result` and `error` are `Some(Null)`
/// when present as `null`, which is not the same as absent.
#[derive(Debug, Deserialize)]
struct Message {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl Message {
    /// Reads one message, or the error frame that answers it.
    fn read(bytes: &[u8]) -> Result<Message, String> {
        serde_json::from_slice(bytes).map_err(|e| {
            if e.is_syntax() || e.is_eof() {
                error_response(
                    &Value::Null,
                    PARSE_ERROR,
                    &format!("Parse error: {e}"),
                    None,
                )
            } else if bytes.trim_ascii_start().first() == Some(&b'{') {
                error_response(
                    &Value::Null,
                    INVALID_REQUEST,
                    &format!("Invalid Request: {e}"),
                    None,
                )
            } else {
                error_response(
                    &Value::Null,
                    INVALID_REQUEST,
                    "Invalid Request: expected an object",
                    None,
                )
            }
        })
    }
}

/// The runtime once its store is open, with the method table over it.
struct Ready {
    runtime: Runtime,
    module: RpcModule<Runtime>,
}

/// The store being opened and repaired on a blocking thread while the handshake goes on.
pub type Opening = tokio::task::JoinHandle<Result<Runtime, String>>;

struct Dispatcher {
    /// The `initialize` answer, ready before the store is.
    init: InitializeResult,
    opening: tokio::sync::Mutex<Option<Opening>>,
    ready: tokio::sync::OnceCell<Result<Ready, String>>,
    peer: Peer,
    state: Mutex<Lifecycle>,
    /// In-flight requests by their id's JSON text, so `$/cancelRequest` can end them.
    inflight: Mutex<HashMap<String, AbortHandle>>,
    /// Signalled whenever an in-flight request ends, so `shutdown` can wait for them.
    request_ended: tokio::sync::Notify,
}

/// Serves one client on `input`/`output` until `exit` or end of input; returns the exit code
/// (0 after `shutdown`, 1 otherwise, as in LSP). `open` starts opening the runtime for the
/// connected peer; requests other than `initialize` wait for it.
pub async fn serve<R, W>(
    input: R,
    output: W,
    init: InitializeResult,
    open: impl FnOnce(Peer) -> Opening,
) -> i32
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let framing = Arc::new(OnceLock::new());
    let outbox = spawn_writer(output, framing.clone());
    let peer = Peer::new(outbox.clone());
    let mut frames = spawn_reader(input, framing);
    let opening = open(peer.clone());
    let dispatcher = Arc::new(Dispatcher {
        init,
        opening: tokio::sync::Mutex::new(Some(opening)),
        ready: tokio::sync::OnceCell::new(),
        peer: peer.clone(),
        state: Mutex::new(Lifecycle::Uninitialized),
        inflight: Mutex::default(),
        request_ended: tokio::sync::Notify::new(),
    });
    let mut exit_requested = false;
    while let Some(item) = frames.recv().await {
        match item {
            Decoded::Frame(bytes) => {
                if dispatcher.clone().handle_frame(&bytes).await {
                    exit_requested = true;
                    break;
                }
            }
            Decoded::Garbage { skipped } => {
                tracing::warn!(skipped, "skipped bytes that were not a frame");
                outbox.send(error_response(
                    &Value::Null,
                    PARSE_ERROR,
                    "Parse error: bytes that are not a frame were skipped",
                    Some(serde_json::json!({"skipped": skipped})),
                ));
            }
            Decoded::TooLarge { size } => {
                tracing::warn!(size, "refused an oversized frame");
                let message = format!(
                    "Frame of {size} bytes exceeds the limit of {} bytes; it was skipped",
                    MAX_FRAME_BYTES
                );
                outbox.send(error_response(
                    &Value::Null,
                    INVALID_REQUEST,
                    &message,
                    None,
                ));
            }
            Decoded::Truncated { buffered } => {
                tracing::warn!(buffered, "input ended inside a frame");
            }
        }
    }
    if !exit_requested {
        tracing::info!("input closed without exit");
    }
    let clean = dispatcher.lifecycle() == Lifecycle::ShuttingDown;
    if let Ok(ready) = dispatcher.ready().await {
        ready.runtime.shutdown().await;
    }
    peer.close();
    outbox.flush().await;
    if clean { 0 } else { 1 }
}

impl Dispatcher {
    fn lifecycle(&self) -> Lifecycle {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_lifecycle(&self, state: Lifecycle) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Handles one frame; true when the client asked to exit.
    async fn handle_frame(self: Arc<Self>, bytes: &[u8]) -> bool {
        if bytes.trim_ascii_start().first() == Some(&b'[') {
            return match serde_json::from_slice::<Vec<&RawValue>>(bytes) {
                Err(e) => {
                    self.peer.outbox().send(error_response(
                        &Value::Null,
                        PARSE_ERROR,
                        &format!("Parse error: {e}"),
                        None,
                    ));
                    false
                }
                Ok(items) if items.is_empty() => {
                    self.peer.outbox().send(error_response(
                        &Value::Null,
                        INVALID_REQUEST,
                        "Invalid Request: empty batch",
                        None,
                    ));
                    false
                }
                Ok(items) => self.handle_batch(items).await,
            };
        }
        let outcome = match Message::read(bytes) {
            Ok(message) => self.classify(message).await,
            Err(reply) => Outcome::Reply(reply),
        };
        match outcome {
            Outcome::Silent => false,
            Outcome::Reply(text) => {
                self.peer.outbox().send(text);
                false
            }
            Outcome::Call { id, method, params } => {
                self.spawn_call(id, method, params);
                false
            }
            Outcome::Exit => true,
        }
    }

    /// A batch: every element handled, the answers sent together as one array.
    async fn handle_batch(self: Arc<Self>, items: Vec<&RawValue>) -> bool {
        let mut exit = false;
        let mut replies = Vec::new();
        let mut calls = Vec::new();
        for item in items {
            let outcome = match Message::read(item.get().as_bytes()) {
                Ok(message) => self.classify(message).await,
                Err(reply) => Outcome::Reply(reply),
            };
            match outcome {
                Outcome::Silent => {}
                Outcome::Reply(text) => replies.push(text),
                Outcome::Call { id, method, params } => calls.push((id, method, params)),
                Outcome::Exit => exit = true,
            }
        }
        let this = &self;
        let answered = join_all(
            calls
                .into_iter()
                .map(|(id, method, params)| async move { this.call(&id, &method, params).await }),
        )
        .await;
        replies.extend(answered);
        if !replies.is_empty() {
            self.peer.outbox().send(format!("[{}]", replies.join(",")));
        }
        exit
    }

    async fn classify(&self, message: Message) -> Outcome {
        let Message {
            jsonrpc,
            id,
            method,
            params,
            result,
            error,
        } = message;
        if jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return match id {
                Some(id) if method.is_some() || result.is_none() => Outcome::Reply(error_response(
                    &id,
                    INVALID_REQUEST,
                    "Invalid Request: \"jsonrpc\" must be \"2.0\"",
                    None,
                )),
                _ => Outcome::Silent,
            };
        }
        match (method, id) {
            (Some(Value::String(method)), Some(id)) => {
                if !(id.is_string() || id.is_u64()) {
                    return Outcome::Reply(error_response(
                        &Value::Null,
                        INVALID_REQUEST,
                        "Invalid Request: id must be a string or a non-negative integer",
                        None,
                    ));
                }
                self.request(method, id, params).await
            }
            (Some(Value::String(method)), None) => {
                self.notification(&method, params.as_deref()).await
            }
            (Some(_), id) => Outcome::Reply(error_response(
                &id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                "Invalid Request: method must be a string",
                None,
            )),
            (None, Some(id)) if result.is_some() || error.is_some() => {
                let mut response = serde_json::json!({"jsonrpc": "2.0", "id": id});
                if let Some(result) = result {
                    response["result"] = result;
                }
                if let Some(error) = error {
                    response["error"] = error;
                }
                if !self.peer.complete(&response) {
                    tracing::warn!(%response, "response to no pending request");
                }
                Outcome::Silent
            }
            (None, id) => Outcome::Reply(error_response(
                &id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                "Invalid Request: no method",
                None,
            )),
        }
    }

    async fn request(&self, method: String, id: Value, params: Option<Box<RawValue>>) -> Outcome {
        let state = self.lifecycle();
        match (method.as_str(), state) {
            ("initialize", Lifecycle::Uninitialized) => {
                let params =
                    match read_params::<InitializeParams>(params.as_deref().map(RawValue::get)) {
                        Ok(params) => params,
                        Err(e) => {
                            let message = format!("Invalid params: {e}");
                            return Outcome::Reply(error_response(
                                &id,
                                INVALID_PARAMS,
                                &message,
                                None,
                            ));
                        }
                    };
                if let Some(client) = &params.client_info {
                    tracing::info!(client = %client.name, version = ?client.version, "initialize");
                }
                self.set_lifecycle(Lifecycle::Running);
                Outcome::Reply(result_response(&id, &self.init))
            }
            ("initialize", _) => Outcome::Reply(error_response(
                &id,
                INVALID_REQUEST,
                "Invalid Request: initialize was already received",
                None,
            )),
            (_, Lifecycle::Uninitialized) => Outcome::Reply(error_response(
                &id,
                SERVER_NOT_INITIALIZED,
                &format!("Server not initialized: send initialize before {method}"),
                None,
            )),
            (_, Lifecycle::ShuttingDown) => Outcome::Reply(error_response(
                &id,
                INVALID_REQUEST,
                &format!("Invalid Request: the server is shutting down and refuses {method}"),
                None,
            )),
            ("shutdown", Lifecycle::Running) => {
                self.set_lifecycle(Lifecycle::ShuttingDown);
                self.requests_drained().await;
                if let Ok(ready) = self.ready().await {
                    ready.runtime.shutdown().await;
                }
                Outcome::Reply(result_response(&id, &Value::Null))
            }
            (_, Lifecycle::Running) => Outcome::Call { id, method, params },
        }
    }

    async fn notification(&self, method: &str, params: Option<&RawValue>) -> Outcome {
        /// `$/cancelRequest`'s params.
        #[derive(Deserialize)]
        struct Cancel {
            id: Value,
        }
        match method {
            "exit" => return Outcome::Exit,
            "initialized" => tracing::debug!("client initialized"),
            "$/cancelRequest" => match params.map(|p| serde_json::from_str::<Cancel>(p.get())) {
                Some(Ok(Cancel { id })) => self.cancel(&id),
                _ => tracing::warn!("$/cancelRequest without an id"),
            },
            other => tracing::debug!(method = other, "ignored notification"),
        }
        Outcome::Silent
    }

    /// Runs a request on its own task so a slow method never blocks the connection.
    fn spawn_call(self: Arc<Self>, id: Value, method: String, params: Option<Box<RawValue>>) {
        let key = id.to_string();
        let this = self.clone();
        let task_key = key.clone();
        let task_id = id.clone();
        // Hold the lock while spawning so the task cannot finish before it is registered.
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let task = tokio::spawn(async move {
            let reply = this.call(&task_id, &method, params).await;
            let still_wanted = this
                .inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&task_key)
                .is_some();
            if still_wanted {
                this.peer.outbox().send(reply);
            }
            this.request_ended.notify_waiters();
        });
        if inflight.insert(key, task.abort_handle()).is_some() {
            tracing::warn!(%id, "a request reused the id of one still in flight");
        }
    }

    /// Waits until every request accepted before `shutdown` has been answered.
    async fn requests_drained(&self) {
        loop {
            let ended = self.request_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self
                .inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
            {
                return;
            }
            ended.await;
        }
    }

    fn cancel(&self, id: &Value) {
        let handle = self
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id.to_string());
        if let Some(handle) = handle {
            handle.abort();
            self.peer.outbox().send(error_response(
                id,
                REQUEST_CANCELLED,
                "Request cancelled",
                None,
            ));
            self.request_ended.notify_waiters();
        }
    }

    /// The runtime, waiting for the store to open on first use.
    async fn ready(&self) -> Result<&Ready, &str> {
        let ready = self
            .ready
            .get_or_init(|| async {
                let opening = self.opening.lock().await.take();
                let runtime = match opening {
                    Some(opening) => opening
                        .await
                        .unwrap_or_else(|e| Err(format!("opening the store failed: {e}"))),
                    None => Err("the runtime was never started".to_string()),
                };
                runtime.map(|runtime| Ready {
                    module: method_table(runtime.clone()),
                    runtime,
                })
            })
            .await;
        ready.as_ref().map_err(String::as_str)
    }

    /// Runs one request through the method table and returns its response frame. The params
    /// are handed over as the text they arrived as; the method's route parses them, once.
    async fn call(&self, id: &Value, method: &str, params: Option<Box<RawValue>>) -> String {
        let module = match self.ready().await {
            Ok(ready) => &ready.module,
            Err(e) => return error_response(id, INTERNAL_ERROR, e, None),
        };
        let wire_id = match id {
            Value::String(text) => Id::Str(text.clone().into()),
            Value::Number(n) => n.as_u64().map_or(Id::Null, Id::Number),
            _ => Id::Null,
        };
        let params = Params::new(params.as_deref().map(RawValue::get)).into_owned();
        let response = match module.method(method) {
            None => {
                let message = format!("Method not found: {method}");
                return error_response(id, METHOD_NOT_FOUND, &message, None);
            }
            Some(MethodCallback::Async(run)) => {
                run(
                    wire_id,
                    params,
                    ConnectionId(0),
                    usize::MAX,
                    Extensions::new(),
                )
                .await
            }
            Some(MethodCallback::Sync(run)) => run(wire_id, params, usize::MAX, Extensions::new()),
            Some(_) => {
                return error_response(id, INTERNAL_ERROR, "not a method", None);
            }
        };
        response.into_json().get().to_string()
    }
}

fn result_response<T: serde::Serialize>(id: &Value, result: &T) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::framing::Framing;
    use crate::runtime::NoClient;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn dispatcher(sink: Sink) -> Arc<Dispatcher> {
        let config = crate::config::Config::from_env();
        let store = crate::store::Store::open_in_memory().unwrap();
        let runtime = Runtime::new(store, config, Arc::new(NoClient)).unwrap();
        let mut module = method_table(runtime.clone());
        module
            .register_async_method("test/sleep", |_, _, _| async {
                tokio::time::sleep(std::time::Duration::from_secs(600)).await;
                Ok::<_, jsonrpsee_types::ErrorObjectOwned>(())
            })
            .unwrap();
        let framing = Arc::new(OnceLock::from(Framing::Line));
        Arc::new(Dispatcher {
            init: crate::runtime::describe(&crate::config::Config::from_env()),
            opening: tokio::sync::Mutex::new(None),
            ready: tokio::sync::OnceCell::new_with(Some(Ok(Ready { runtime, module }))),
            peer: Peer::new(spawn_writer(sink, framing)),
            state: Mutex::new(Lifecycle::Running),
            inflight: Mutex::default(),
            request_ended: tokio::sync::Notify::new(),
        })
    }

    fn frames(sink: &Sink) -> Vec<Value> {
        String::from_utf8(sink.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn cancel_request_ends_an_in_flight_request_with_one_answer() {
        let sink = Sink::default();
        let dispatcher = dispatcher(sink.clone());
        let slow = br#"{"jsonrpc":"2.0","id":7,"method":"test/sleep"}"#;
        assert!(!dispatcher.clone().handle_frame(slow).await);
        let cancel = br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#;
        dispatcher.clone().handle_frame(cancel).await;
        // Cancelling again, or an unknown id, is a no-op.
        dispatcher.clone().handle_frame(cancel).await;
        let quick = br#"{"jsonrpc":"2.0","id":8,"method":"session/list"}"#;
        dispatcher.clone().handle_frame(quick).await;
        dispatcher.requests_drained().await;
        dispatcher.peer.outbox().flush().await;
        let answers: Vec<(Value, Value)> = frames(&sink)
            .into_iter()
            .map(|f| (f["id"].clone(), f["error"]["code"].clone()))
            .collect();
        assert_eq!(
            answers,
            vec![
                (serde_json::json!(7), serde_json::json!(-32800)),
                (serde_json::json!(8), Value::Null)
            ]
        );
    }
}
