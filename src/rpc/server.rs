//! The dispatcher: classifies every frame, enforces the lifecycle, routes requests through the
//! method table, handles client notifications in arrival order and completes the server's own
//! requests.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::ops::Range;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::task::AbortHandle;

use super::error::*;
use super::methods::MethodTable;
use super::peer::Peer;
use super::request_id::{RequestId, recover_id};
use super::stdio::StdioConnection;
use crate::protocol::{
    CancelRequest, CancelRequestParams, Exit, Initialize, InitializeParams, InitializeResult,
    Initialized, Notification, Request, Shutdown, read_params,
};
use crate::runtime::Runtime;
use crate::util::lock;

/// The methods the dispatcher answers itself, as constants a `match` can name.
const INITIALIZE: &str = <Initialize as Request>::METHOD;
const SHUTDOWN: &str = <Shutdown as Request>::METHOD;
const INITIALIZED: &str = <Initialized as Notification>::METHOD;
const EXIT: &str = <Exit as Notification>::METHOD;
const CANCEL_REQUEST: &str = <CancelRequest as Notification>::METHOD;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Uninitialized,
    Running,
    ShuttingDown,
}

/// What to do with one classified message.
enum Outcome<'a> {
    /// Nothing to answer (a notification, or a reply to our own request).
    Silent,
    /// A complete response frame.
    Reply(String),
    /// A request for the method table; its params are still the JSON text they arrived as,
    /// in the frame.
    Call {
        id: RequestId,
        method: String,
        params: Option<&'a RawValue>,
    },
    /// The client said `exit`.
    Exit,
}

/// One JSON-RPC message, read once from its frame. `params` stays JSON text until the method's
/// route reads it as that method's params type; `id` stays the JSON text it arrived as, so the
/// answer carries it unchanged. `id`, `result` and `error` are `Some(null)` when present as
/// `null`, which is not the same as absent.
#[derive(Debug, Deserialize)]
struct Message<'a> {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present_raw")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Value>,
    /// Borrowed from the frame, which the call takes along: the params are never copied.
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

fn present_raw<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Some)
}

impl<'a> Message<'a> {
    /// Reads one message, or the error frame that answers it. A frame that does not read as a
    /// message is still answered with its own id when its envelope shows one, so the
    /// client's request does not wait for an answer that never comes.
    fn read(text: &'a str) -> Result<Message<'a>, String> {
        serde_json::from_str(text).map_err(|e| {
            let bytes = text.as_bytes();
            let id = recover_id(bytes).unwrap_or_else(RequestId::null);
            let id = id.json();
            if e.is_syntax() || e.is_eof() {
                error_frame(id, PARSE_ERROR, &format!("Parse error: {e}"), None)
            } else if bytes.trim_ascii_start().first() == Some(&b'{') {
                error_frame(id, INVALID_REQUEST, &format!("Invalid Request: {e}"), None)
            } else {
                error_frame(
                    id,
                    INVALID_REQUEST,
                    "Invalid Request: expected an object",
                    None,
                )
            }
        })
    }
}

/// Where a request's answer goes.
#[derive(Clone)]
enum ReplyTo {
    /// Out on its own.
    Alone,
    /// Into its place in a batch's answer.
    Batch {
        batch: Arc<Mutex<BatchReply>>,
        slot: usize,
    },
}

/// A batch's answer while its members run: one slot per member that is answered, in the
/// order of the batch, sent as one array once every slot is filled.
#[derive(Default)]
struct BatchReply {
    slots: Vec<Option<String>>,
    /// Slots still waiting for a call to end.
    missing: usize,
    /// Every member has been read, so no more slots will be added.
    sealed: bool,
}

impl BatchReply {
    /// The batch's answer once it is complete and not yet taken.
    fn take_if_complete(&mut self) -> Option<String> {
        if !self.sealed || self.missing > 0 || self.slots.is_empty() {
            return None;
        }
        let answers: Vec<String> = self.slots.drain(..).flatten().collect();
        Some(format!("[{}]", answers.join(",")))
    }
}

/// A request being answered on its own task.
struct InFlight {
    task: AbortHandle,
    reply_to: ReplyTo,
}

/// A request's params: the JSON text they arrived as, where it lies in the frame. The request's
/// task owns the frame (shared with the other members of a batch) until its method has read
/// the params, so a long message is held once, in the buffer it was read into, rather than
/// copied out of it first.
struct CallParams {
    frame: Arc<String>,
    span: Option<Range<usize>>,
}

impl CallParams {
    /// `params`, borrowed from `frame`'s text.
    fn new(frame: &Arc<String>, params: Option<&RawValue>) -> Self {
        let span = params.map(|params| {
            let start = params.get().as_ptr() as usize - frame.as_ptr() as usize;
            start..start + params.get().len()
        });
        Self {
            frame: frame.clone(),
            span,
        }
    }

    fn text(&self) -> Option<&str> {
        self.span.clone().and_then(|span| self.frame.get(span))
    }
}

/// The runtime once its store is open, with the method table over it.
struct Ready {
    runtime: Runtime,
    methods: MethodTable,
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
    /// In-flight requests by their id's JSON text, so `$/cancelRequest` can end them. An id is
    /// in here at most once: a request reusing one still in flight is refused.
    inflight: Mutex<HashMap<String, InFlight>>,
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
    let mut connection = StdioConnection::open(input, output);
    let (outbox, peer) = (connection.outbox.clone(), connection.peer.clone());
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
    while let Some(frame) = connection.next_frame().await {
        if dispatcher.clone().handle_frame(frame).await {
            exit_requested = true;
            break;
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
        *lock(&self.state)
    }

    fn set_lifecycle(&self, state: Lifecycle) {
        *lock(&self.state) = state;
    }

    /// Handles one frame; true when the client asked to exit.
    async fn handle_frame(self: Arc<Self>, frame: String) -> bool {
        let frame = Arc::new(frame);
        if frame.trim_ascii_start().starts_with('[') {
            return match serde_json::from_str::<Vec<&RawValue>>(&frame) {
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
                Ok(items) => self.handle_batch(&frame, items).await,
            };
        }
        let outcome = match Message::read(&frame) {
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
                let params = CallParams::new(&frame, params);
                self.spawn_call(id, method, params, ReplyTo::Alone);
                false
            }
            Outcome::Exit => true,
        }
    }

    /// A batch: every member handled as it would be alone (calls on their own tasks, each
    /// cancellable), the answers sent together as one array once the last call has ended.
    async fn handle_batch(self: Arc<Self>, frame: &Arc<String>, items: Vec<&RawValue>) -> bool {
        let mut exit = false;
        let batch = Arc::new(Mutex::new(BatchReply::default()));
        for item in items {
            let outcome = match Message::read(item.get()) {
                Ok(message) => self.classify(message).await,
                Err(reply) => Outcome::Reply(reply),
            };
            match outcome {
                Outcome::Silent => {}
                Outcome::Reply(text) => lock(&batch).slots.push(Some(text)),
                Outcome::Call { id, method, params } => {
                    let slot = {
                        let mut batch = lock(&batch);
                        batch.slots.push(None);
                        batch.missing += 1;
                        batch.slots.len() - 1
                    };
                    let reply_to = ReplyTo::Batch {
                        batch: batch.clone(),
                        slot,
                    };
                    let params = CallParams::new(frame, params);
                    self.clone().spawn_call(id, method, params, reply_to);
                }
                Outcome::Exit => exit = true,
            }
        }
        let complete = {
            let mut batch = lock(&batch);
            batch.sealed = true;
            batch.take_if_complete()
        };
        if let Some(answer) = complete {
            self.peer.outbox().send(answer);
        }
        exit
    }

    /// Sends a request's answer where it belongs.
    fn deliver(&self, reply_to: &ReplyTo, answer: String) {
        match reply_to {
            ReplyTo::Alone => self.peer.outbox().send(answer),
            ReplyTo::Batch { batch, slot } => {
                let complete = {
                    let mut batch = lock(batch);
                    if let Some(place) = batch.slots.get_mut(*slot) {
                        *place = Some(answer);
                    }
                    batch.missing = batch.missing.saturating_sub(1);
                    batch.take_if_complete()
                };
                if let Some(answer) = complete {
                    self.peer.outbox().send(answer);
                }
            }
        }
    }

    async fn classify<'a>(&self, message: Message<'a>) -> Outcome<'a> {
        let Message {
            jsonrpc,
            id,
            method,
            params,
            result,
            error,
        } = message;
        let id = id.map(RequestId::new);
        if jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return match id {
                Some(id) if method.is_some() || result.is_none() => Outcome::Reply(error_frame(
                    id.json(),
                    INVALID_REQUEST,
                    "Invalid Request: \"jsonrpc\" must be \"2.0\"",
                    None,
                )),
                _ => Outcome::Silent,
            };
        }
        match (method, id) {
            (Some(Value::String(method)), Some(id)) => {
                if !id.is_valid() {
                    return Outcome::Reply(error_response(
                        &Value::Null,
                        INVALID_REQUEST,
                        "Invalid Request: id must be a string or a number",
                        None,
                    ));
                }
                self.request(method, id, params).await
            }
            (Some(Value::String(method)), None) => self.notification(&method, params).await,
            (Some(_), id) => Outcome::Reply(error_frame(
                id.unwrap_or_else(RequestId::null).json(),
                INVALID_REQUEST,
                "Invalid Request: method must be a string",
                None,
            )),
            (None, Some(id)) if result.is_some() || error.is_some() => {
                let mut response = serde_json::json!({"jsonrpc": "2.0", "id": id.to_value()});
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
            (None, id) => Outcome::Reply(error_frame(
                id.unwrap_or_else(RequestId::null).json(),
                INVALID_REQUEST,
                "Invalid Request: no method",
                None,
            )),
        }
    }

    async fn request<'a>(
        &self,
        method: String,
        id: RequestId,
        params: Option<&'a RawValue>,
    ) -> Outcome<'a> {
        let state = self.lifecycle();
        match (method.as_str(), state) {
            (INITIALIZE, Lifecycle::Uninitialized) => {
                let params = match read_params::<InitializeParams>(params.map(RawValue::get)) {
                    Ok(params) => params,
                    Err(e) => {
                        let message = format!("Invalid params: {e}");
                        return Outcome::Reply(error_frame(
                            id.json(),
                            INVALID_PARAMS,
                            &message,
                            None,
                        ));
                    }
                };
                if let Some(client) = &params.client_info {
                    tracing::info!(client = %client.name, version = ?client.version, "{INITIALIZE}");
                }
                self.set_lifecycle(Lifecycle::Running);
                Outcome::Reply(result_response(&id, &self.init))
            }
            (INITIALIZE, _) => Outcome::Reply(error_frame(
                id.json(),
                INVALID_REQUEST,
                "Invalid Request: initialize was already received",
                None,
            )),
            (_, Lifecycle::Uninitialized) => Outcome::Reply(error_frame(
                id.json(),
                SERVER_NOT_INITIALIZED,
                &format!("Server not initialized: send initialize before {method}"),
                None,
            )),
            (_, Lifecycle::ShuttingDown) => Outcome::Reply(error_frame(
                id.json(),
                INVALID_REQUEST,
                &format!("Invalid Request: the server is shutting down and refuses {method}"),
                None,
            )),
            (SHUTDOWN, Lifecycle::Running) => {
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

    async fn notification(&self, method: &str, params: Option<&RawValue>) -> Outcome<'static> {
        match method {
            EXIT => return Outcome::Exit,
            INITIALIZED => tracing::debug!("client initialized"),
            CANCEL_REQUEST => {
                match params.map(|p| serde_json::from_str::<CancelRequestParams>(p.get())) {
                    Some(Ok(CancelRequestParams { id })) => self.cancel(&RequestId::new(id)),
                    _ => tracing::warn!("{CANCEL_REQUEST} without an id"),
                }
            }
            other => tracing::debug!(method = other, "ignored notification"),
        }
        Outcome::Silent
    }

    /// Runs a request on its own task so a slow method never blocks the connection. A request
    /// whose id is still in flight is refused (-32600, as LSP servers do): answering both
    /// would give the client two answers it cannot tell apart, and the first would lose its
    /// place in the in-flight map, so `$/cancelRequest` and `shutdown` could no longer see it.
    fn spawn_call(
        self: Arc<Self>,
        id: RequestId,
        method: String,
        params: CallParams,
        reply_to: ReplyTo,
    ) {
        let key = id.key();
        // Hold the lock while spawning so the task cannot finish before it is registered.
        let mut inflight = lock(&self.inflight);
        if inflight.contains_key(&key) {
            drop(inflight);
            tracing::warn!(%id, method, "refused a request reusing the id of one in flight");
            let message = format!("Invalid Request: request {id} is still in flight");
            self.deliver(
                &reply_to,
                error_frame(id.json(), INVALID_REQUEST, &message, None),
            );
            return;
        }
        let this = self.clone();
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            let answer = this.call(&id, &method, params).await;
            {
                let mut inflight = lock(&this.inflight);
                // Only this task's own entry: once cancelled, the id may belong to a new
                // request, and the cancellation has answered this one.
                let own = inflight
                    .get(&task_key)
                    .is_some_and(|entry| entry.task.id() == tokio::task::id());
                if own && let Some(entry) = inflight.remove(&task_key) {
                    // Under the lock, so a cancellation cannot answer it as well.
                    this.deliver(&entry.reply_to, answer);
                }
            }
            this.request_ended.notify_waiters();
        });
        inflight.insert(
            key,
            InFlight {
                task: task.abort_handle(),
                reply_to,
            },
        );
    }

    /// Waits until every request accepted before `shutdown` has been answered.
    async fn requests_drained(&self) {
        loop {
            let ended = self.request_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if lock(&self.inflight).is_empty() {
                return;
            }
            ended.await;
        }
    }

    fn cancel(&self, id: &RequestId) {
        let mut inflight = lock(&self.inflight);
        if let Some(entry) = inflight.remove(&id.key()) {
            entry.task.abort();
            let answer = error_frame(id.json(), REQUEST_CANCELLED, "Request cancelled", None);
            self.deliver(&entry.reply_to, answer);
            drop(inflight);
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
                    methods: MethodTable::new(runtime.clone()),
                    runtime,
                })
            })
            .await;
        ready.as_ref().map_err(String::as_str)
    }

    /// Runs one request through the method table and returns its response frame, carrying
    /// the client's id as it wrote it. The method reads the params from the frame's text,
    /// once; the frame is let go before the method's work starts.
    async fn call(&self, id: &RequestId, method: &str, params: CallParams) -> String {
        let methods = match self.ready().await {
            Ok(ready) => &ready.methods,
            Err(e) => return error_frame(id.json(), INTERNAL_ERROR, e, None),
        };
        let Some(run) = methods.get(method) else {
            let message = format!("Method not found: {method}");
            return error_frame(id.json(), METHOD_NOT_FOUND, &message, None);
        };
        tracing::debug!(method, "request started");
        let running = run(params.text());
        drop(params);
        let answer = running.await;
        // With the start above, a request that never ends shows in the log as started alone.
        tracing::debug!(method, ok = answer.is_ok(), "request answered");
        match answer {
            Ok(result) => result_frame(id.json(), result.get()),
            Err(error) => object_frame(id.json(), &error),
        }
    }
}

fn result_response<T: serde::Serialize>(id: &RequestId, result: &T) -> String {
    match serde_json::to_string(result) {
        Ok(result) => result_frame(id.json(), &result),
        Err(e) => error_frame(id.json(), INTERNAL_ERROR, &e.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::rpc::framing::Framing;
    use crate::rpc::transport::spawn_writer;
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

    /// A dispatcher over an in-memory store, with two methods of its own: `test/sleep`, which
    /// never ends by itself, and `test/gate`, which ends when the returned semaphore gives it
    /// a permit.
    fn gated_dispatcher(sink: Sink) -> (Arc<Dispatcher>, Arc<tokio::sync::Semaphore>) {
        let config = crate::config::Config::from_env();
        let store = crate::store::Store::open_in_memory().unwrap();
        let runtime = Runtime::new(store, config, Arc::new(NoClient)).unwrap();
        let mut methods = MethodTable::new(runtime.clone());
        methods.add(
            "test/sleep",
            Box::new(|_| {
                Box::pin(async {
                    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
                    Ok(RawValue::from_string("null".into()).unwrap())
                })
            }),
        );
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let opens = gate.clone();
        methods.add(
            "test/gate",
            Box::new(move |_| {
                let opens = opens.clone();
                Box::pin(async move {
                    opens.acquire().await.map(|permit| permit.forget()).ok();
                    Ok(RawValue::from_string(r#""opened""#.into()).unwrap())
                })
            }),
        );
        let framing = Arc::new(OnceLock::from(Framing::Line));
        let dispatcher = Arc::new(Dispatcher {
            init: crate::runtime::describe(&crate::config::Config::from_env()),
            opening: tokio::sync::Mutex::new(None),
            ready: tokio::sync::OnceCell::new_with(Some(Ok(Ready { runtime, methods }))),
            peer: Peer::new(spawn_writer(sink, framing)),
            state: Mutex::new(Lifecycle::Running),
            inflight: Mutex::default(),
            request_ended: tokio::sync::Notify::new(),
        });
        (dispatcher, gate)
    }

    fn dispatcher(sink: Sink) -> Arc<Dispatcher> {
        gated_dispatcher(sink).0
    }

    /// `session/list`: a method of the table that answers at once.
    const LIST: &str = <crate::protocol::SessionList as Request>::METHOD;

    /// A request frame without params.
    fn call(id: Value, method: &str) -> String {
        json!({"jsonrpc": "2.0", "id": id, "method": method}).to_string()
    }

    /// The `$/cancelRequest` frame of request `id`.
    fn cancel(id: Value) -> String {
        json!({"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"id": id}}).to_string()
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
        let slow = r#"{"jsonrpc":"2.0","id":7,"method":"test/sleep"}"#;
        assert!(!dispatcher.clone().handle_frame(slow.into()).await);
        let cancel = cancel(json!(7));
        dispatcher.clone().handle_frame(cancel.clone()).await;
        // Cancelling again, or an unknown id, is a no-op.
        dispatcher.clone().handle_frame(cancel).await;
        dispatcher.clone().handle_frame(call(json!(8), LIST)).await;
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

    /// A guard against a hang, not a timing assertion.
    const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

    /// Each answer's id and result, or error code.
    fn answers(frames: &[Value]) -> Vec<Value> {
        frames
            .iter()
            .map(|frame| match frame {
                Value::Array(items) => Value::Array(answers(items)),
                one => match one.get("error") {
                    Some(error) => json!([one["id"], error["code"]]),
                    None => json!([one["id"], one["result"].is_null()]),
                },
            })
            .collect()
    }

    /// Waits until the writer has sent a frame answering `id`.
    async fn answered(dispatcher: &Dispatcher, sink: &Sink, id: Value) {
        let wait = async {
            loop {
                dispatcher.peer.outbox().flush().await;
                if frames(sink).iter().any(|f| f["id"] == id) {
                    return;
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(HANG_GUARD, wait).await.unwrap();
    }

    #[tokio::test]
    async fn a_request_reusing_an_in_flight_id_is_refused_and_the_first_still_answered() {
        let sink = Sink::default();
        let (dispatcher, gate) = gated_dispatcher(sink.clone());
        let first = r#"{"jsonrpc":"2.0","id":7,"method":"test/gate"}"#;
        dispatcher.clone().handle_frame(first.into()).await;
        let again = call(json!(7), LIST);
        dispatcher.clone().handle_frame(again.clone()).await;
        answered(&dispatcher, &sink, json!(7)).await;
        // The same id as a string is another id.
        dispatcher
            .clone()
            .handle_frame(call(json!("7"), LIST))
            .await;
        answered(&dispatcher, &sink, json!("7")).await;
        gate.add_permits(1);
        // Shutdown's wait still sees the first request.
        tokio::time::timeout(HANG_GUARD, dispatcher.requests_drained())
            .await
            .unwrap();
        dispatcher.peer.outbox().flush().await;
        let sent = frames(&sink);
        assert_eq!(
            answers(&sent),
            vec![json!([7, -32600]), json!(["7", false]), json!([7, false])]
        );
        assert_eq!(sent[2]["result"], json!("opened"));
        assert!(
            sent[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("in flight"),
            "{}",
            sent[0]
        );
        // Once answered, the id may be used again.
        dispatcher.clone().handle_frame(again).await;
        dispatcher.requests_drained().await;
        dispatcher.peer.outbox().flush().await;
        assert_eq!(answers(&frames(&sink)[3..]), vec![json!([7, false])]);
    }

    #[tokio::test]
    async fn batch_members_run_like_single_calls() {
        let sink = Sink::default();
        let (dispatcher, gate) = gated_dispatcher(sink.clone());
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "test/gate"},
            {"jsonrpc": "2.0", "id": 2, "method": LIST},
            {"jsonrpc": "2.0", "method": "x/y"},
            {"jsonrpc": "2.0", "id": 3, "method": "no/such"},
            {"jsonrpc": "2.0", "id": 4, "method": "test/sleep"},
            {"jsonrpc": "2.0", "id": 5, "method": "test/gate"},
            7
        ]);
        // The reading loop goes on at once, whatever the members do.
        let exit = tokio::time::timeout(
            HANG_GUARD,
            dispatcher.clone().handle_frame(batch.to_string()),
        )
        .await
        .expect("the batch was awaited on the reading loop");
        assert!(!exit);
        // A later frame is answered while the batch works.
        dispatcher.clone().handle_frame(call(json!(6), LIST)).await;
        answered(&dispatcher, &sink, json!(6)).await;
        // Members are cancelled like single calls; a member reusing an id in flight is refused.
        dispatcher.clone().handle_frame(cancel(json!(4))).await;
        dispatcher.clone().handle_frame(call(json!(5), LIST)).await;
        answered(&dispatcher, &sink, json!(5)).await;
        gate.add_permits(2);
        tokio::time::timeout(HANG_GUARD, dispatcher.requests_drained())
            .await
            .unwrap();
        dispatcher.peer.outbox().flush().await;
        // One array for the batch, in the order of its members, once all have finished.
        assert_eq!(
            answers(&frames(&sink)),
            vec![
                json!([6, false]),
                json!([5, -32600]),
                json!([
                    [1, false],
                    [2, false],
                    [3, -32601],
                    [4, -32800],
                    [5, false],
                    [null, -32600]
                ]),
            ]
        );
    }
}
