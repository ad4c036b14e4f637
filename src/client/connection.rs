//! A JSON-RPC client for a spawned `sidechat serve`, framed as LSP editors frame it, or for a
//! listening daemon over WebSocket (`serve --listen`), one message per WebSocket message.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};

use crate::protocol::{Exit, Notification, Request, Shutdown};
use crate::rpc::framing::{Decoded, FrameDecoder, Framing};
use crate::util::lock;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A connection to a daemon child process, or to a listening daemon.
pub struct Connection {
    /// The daemon process, when this client spawned it.
    child: Option<Child>,
    writer: Writer,
    pending: Pending,
    next_id: AtomicU64,
    /// The last lines the daemon wrote to stderr, kept to explain why it failed to start.
    stderr_tail: StderrTail,
}

/// Where requests and notifications go.
enum Writer {
    /// A child's stdin, framed.
    Stdio {
        stdin: tokio::sync::Mutex<ChildStdin>,
        framing: Framing,
    },
    /// A WebSocket's writing task: each text is one message.
    WebSocket(mpsc::UnboundedSender<String>),
}

/// The newest lines of a child's stderr, bounded so a chatty daemon costs nothing.
type StderrTail = Arc<Mutex<std::collections::VecDeque<String>>>;

/// How many stderr lines are kept.
const STDERR_LINES: usize = 40;

/// An error answer from the daemon.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (error {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

/// Reads the daemon's output to its end, handing each frame's body to `frame` as the bytes the
/// daemon wrote (unparsed, so a test can see an id exactly as it was written); bytes that are
/// not a frame are passed over.
pub async fn read_frames(mut output: impl AsyncRead + Unpin, mut frame: impl FnMut(Vec<u8>)) {
    let mut decoder = FrameDecoder::default();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    while let Ok(n) = output.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        decoder.push(&chunk[..n], &mut out);
        for item in out.drain(..) {
            if let Decoded::Frame(bytes) = item {
                frame(bytes);
            }
        }
    }
}

impl Connection {
    /// Spawns `program args…` and connects to its stdio; notifications arrive on the receiver.
    pub fn spawn(
        mut command: tokio::process::Command,
        framing: Framing,
    ) -> anyhow::Result<(Self, mpsc::UnboundedReceiver<Value>)> {
        #[allow(
            clippy::disallowed_methods,
            reason = "a client is no subreaper: nothing reaps its children but tokio"
        )]
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start sidechat serve")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr_tail = StderrTail::default();
        if let Some(stderr) = child.stderr.take() {
            let tail = stderr_tail.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut tail = lock(&tail);
                    if tail.len() == STDERR_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        let pending: Pending = Arc::default();
        let (notes_tx, notes_rx) = mpsc::unbounded_channel();
        let routing = pending.clone();
        tokio::spawn(async move {
            read_frames(stdout, |bytes| {
                if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
                    route(value, &routing, &notes_tx);
                }
            })
            .await;
            // The daemon is gone: requests still waiting fail instead of hanging.
            lock(&routing).clear();
        });
        Ok((
            Self {
                child: Some(child),
                writer: Writer::Stdio {
                    stdin: tokio::sync::Mutex::new(stdin),
                    framing,
                },
                pending,
                next_id: AtomicU64::new(1),
                stderr_tail,
            },
            notes_rx,
        ))
    }

    /// Connects to a listening daemon at `url` (`ws://host:port/`, or `ws+unix:///path` for a
    /// unix socket) with its `token`;
    /// notifications arrive on the receiver.
    pub async fn attach(
        url: &str,
        token: &str,
    ) -> anyhow::Result<(Self, mpsc::UnboundedReceiver<Value>)> {
        use futures::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        let (mut outgoing, mut incoming) = super::websocket::connect(url, token).await?;
        let (to_send, mut sending) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(text) = sending.recv().await {
                if outgoing.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
            let _ = outgoing.close().await;
        });
        let pending: Pending = Arc::default();
        let (notes_tx, notes_rx) = mpsc::unbounded_channel();
        let routing = pending.clone();
        tokio::spawn(async move {
            while let Some(Ok(message)) = incoming.next().await {
                let value = match &message {
                    Message::Text(text) => serde_json::from_str::<Value>(text.as_str()),
                    Message::Binary(bytes) => serde_json::from_slice::<Value>(bytes),
                    Message::Close(_) => break,
                    _ => continue,
                };
                if let Ok(value) = value {
                    route(value, &routing, &notes_tx);
                }
            }
            // The daemon is gone: requests still waiting fail instead of hanging.
            lock(&routing).clear();
        });
        Ok((
            Self {
                child: None,
                writer: Writer::WebSocket(to_send),
                pending,
                next_id: AtomicU64::new(1),
                stderr_tail: StderrTail::default(),
            },
            notes_rx,
        ))
    }

    /// Writes raw bytes to the daemon, framing and all (for protocol tests); over WebSocket,
    /// as one text message.
    pub async fn write_raw(&self, bytes: &[u8]) -> anyhow::Result<()> {
        match &self.writer {
            Writer::Stdio { stdin, .. } => {
                let mut stdin = stdin.lock().await;
                stdin.write_all(bytes).await?;
                stdin.flush().await?;
                Ok(())
            }
            Writer::WebSocket(sender) => sender
                .send(String::from_utf8_lossy(bytes).into_owned())
                .map_err(|_| anyhow!("the connection to the daemon is closed")),
        }
    }

    /// Sends one JSON value framed as this connection frames.
    pub async fn send_value(&self, value: &Value) -> anyhow::Result<()> {
        match &self.writer {
            Writer::Stdio { framing, .. } => {
                let mut wire = Vec::new();
                framing.encode(&value.to_string(), &mut wire);
                self.write_raw(&wire).await
            }
            Writer::WebSocket(_) => self.write_raw(value.to_string().as_bytes()).await,
        }
    }

    /// Sends a request and waits for its response frame (result or error, whole).
    pub async fn request_raw(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        self.send_value(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        rx.await
            .map_err(|_| anyhow!("the daemon closed the connection before answering {method}"))
    }

    /// Sends a request by name, with any params; its `result`, or its error. [`Connection::call`]
    /// is the typed form; this one is for protocol tests.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Result<Value, RpcError>> {
        let response = self.request_raw(method, params).await?;
        Ok(match response.get("error") {
            Some(error) => Err(RpcError {
                code: error["code"].as_i64().unwrap_or(0),
                message: error["message"].as_str().unwrap_or("").to_string(),
                data: error.get("data").cloned(),
            }),
            None => Ok(response.get("result").cloned().unwrap_or(Value::Null)),
        })
    }

    /// Sends request `M`; its result read as `M::Result`, or its error answer. A result that
    /// is not `M::Result` is an error of the connection, like a broken frame.
    pub async fn call<M: Request>(
        &self,
        params: M::Params,
    ) -> anyhow::Result<Result<M::Result, RpcError>> {
        let params = serde_json::to_value(params)
            .with_context(|| format!("cannot write {}'s params", M::METHOD))?;
        match self.request(M::METHOD, params).await? {
            Ok(result) => serde_json::from_value(result)
                .map(Ok)
                .with_context(|| format!("cannot read {}'s answer", M::METHOD)),
            Err(e) => Ok(Err(e)),
        }
    }

    /// Sends notification `N`.
    pub async fn notify<N: Notification>(&self, params: N::Params) -> anyhow::Result<()> {
        let params = serde_json::to_value(params)
            .with_context(|| format!("cannot write {}'s params", N::METHOD))?;
        self.notify_raw(N::METHOD, params).await
    }

    /// Sends a notification by name, with any params (for protocol tests).
    pub async fn notify_raw(&self, method: &str, params: Value) -> anyhow::Result<()> {
        self.send_value(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    /// `shutdown`, `exit`, and the daemon's exit code. An attached client only leaves: the
    /// daemon goes on serving others (0).
    pub async fn close(mut self) -> anyhow::Result<i32> {
        let Some(mut child) = self.child.take() else {
            return Ok(0);
        };
        let _ = self.call::<Shutdown>(None).await?;
        self.notify::<Exit>(None).await?;
        let status = child.wait().await?;
        Ok(status.code().unwrap_or(-1))
    }

    /// What the daemon last wrote to stderr, oldest line first.
    pub fn stderr_tail(&self) -> Vec<String> {
        lock(&self.stderr_tail).iter().cloned().collect()
    }

    /// The daemon process, when this client spawned it.
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }
}

/// Responses complete their request; everything else is a notification or a server request.
fn route(value: Value, pending: &Pending, notes: &mpsc::UnboundedSender<Value>) {
    let is_response = value.get("method").is_none() && value.get("id").is_some();
    if is_response && let Some(id) = value["id"].as_u64() {
        let waiter = lock(pending).remove(&id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(value);
            return;
        }
    }
    let _ = notes.send(value);
}
