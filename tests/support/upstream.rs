//! A fake model provider on 127.0.0.1:0: real HTTP/1.1 over TCP, answering each request with
//! the next canned reply (real SSE bodies in the providers' own event shapes) and recording
//! what it was sent.
//!
//! One module for every test and benchmark that needs a provider: the daemon tests, the
//! provider driver tests and the streaming benchmarks include it with
//! `#[path = "…/tests/support/upstream.rs"] mod upstream;`.
//!
//! Each connection is served on its own thread and gets the next reply in the order requests
//! arrive; a request beyond the script gets a 500 that says so. Every response closes its
//! connection (`connection: close`), so each request is a connection of its own.

// Each crate that includes this module uses a different part of it.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

/// One step of a body sent with `transfer-encoding: chunked`.
#[derive(Debug, Clone)]
pub enum Part {
    /// Bytes written as one HTTP chunk and flushed.
    Bytes(Vec<u8>),
    Pause(Duration),
    /// Close the connection without ending the chunked body: a connection lost mid-stream.
    Drop,
    /// Send nothing more for a long time (30 s), then close.
    Hang,
    /// Send nothing more and keep the connection open until the client closes it: an answer
    /// that never completes, for timeouts the client enforces itself.
    Stall,
}

/// Writes a response body itself, after the status line and headers (no `content-length`,
/// so the body ends when the connection closes).
pub type Writer = Box<dyn FnOnce(&mut TcpStream) -> std::io::Result<()> + Send>;

pub enum Body {
    /// The whole body at once, with its `content-length`.
    Whole(String),
    /// Chunked transfer encoding, one HTTP chunk per [`Part::Bytes`].
    Parts(Vec<Part>),
    /// Written by the caller's function (benchmarks that time each write).
    Writer(Writer),
}

/// One canned answer.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
}

impl Reply {
    /// An OpenAI Chat Completions stream: one `data:` line per chunk, then `data: [DONE]`.
    pub fn sse(chunks: &[Value]) -> Self {
        let mut events: Vec<String> = chunks.iter().map(openai::event).collect();
        events.push(openai::DONE.to_string());
        Self::events(events)
    }

    /// An Anthropic Messages stream: each event named by its `type`, and no `[DONE]`.
    pub fn anthropic(events: &[Value]) -> Self {
        Self::events(events.iter().map(anthropic::event).collect())
    }

    /// A streamed answer with one HTTP chunk per SSE event, as providers flush them.
    pub fn events(events: Vec<String>) -> Self {
        Self::parts(
            events
                .into_iter()
                .map(|e| Part::Bytes(e.into_bytes()))
                .collect(),
        )
    }

    /// A streamed answer made of these parts.
    pub fn parts(parts: Vec<Part>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body: Body::Parts(parts),
        }
    }

    /// A status with a JSON body, such as an error.
    pub fn status(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: Body::Whole(body.into()),
        }
    }

    /// A `200 text/event-stream` whose body `write` writes.
    pub fn writer(
        write: impl FnOnce(&mut TcpStream) -> std::io::Result<()> + Send + 'static,
    ) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body: Body::Writer(Box::new(write)),
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// A request as the fake upstream saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub path: String,
    /// Names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The JSON body, or `null` when it was not JSON.
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Upstream {
    /// `http://127.0.0.1:<port>`, without a path.
    pub url: String,
    /// The request bodies, in the order they arrived.
    pub requests: Arc<Mutex<Vec<Value>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    /// The requests received so far, whole.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    /// The request bodies received so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.requests.lock().expect("lock").clone()
    }

    /// The `model` of each request body received so far, in order.
    pub fn models(&self) -> Vec<Value> {
        self.bodies().iter().map(|b| b["model"].clone()).collect()
    }
}

/// Starts a fake upstream that answers requests with `replies`, in order.
pub fn start(replies: Vec<Reply>) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("cannot listen on 127.0.0.1");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (recorded_bodies, recorded) = (requests.clone(), seen.clone());
    thread::Builder::new()
        .name("fake-upstream".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let (replies, bodies, recorded) =
                    (replies.clone(), recorded_bodies.clone(), recorded.clone());
                thread::spawn(move || serve(conn, &replies, &bodies, &recorded));
            }
        })
        .expect("cannot start the fake upstream");
    Upstream {
        url,
        requests,
        seen,
    }
}

fn serve(
    mut conn: TcpStream,
    replies: &Mutex<VecDeque<Reply>>,
    bodies: &Mutex<Vec<Value>>,
    seen: &Mutex<Vec<Seen>>,
) {
    // One segment per write, so a test's split of the body reaches the client as split.
    let _ = conn.set_nodelay(true);
    let Some(request) = read_request(&conn) else {
        return;
    };
    // Taken under the same lock as the recording, so reply N answers request N.
    let reply = {
        let mut seen = seen.lock().expect("lock");
        bodies.lock().expect("lock").push(request.body.clone());
        seen.push(request);
        replies.lock().expect("lock").pop_front()
    };
    let reply = reply.unwrap_or_else(|| {
        Reply::status(
            500,
            r#"{"error":{"message":"the fake upstream has no scripted reply left"}}"#,
        )
    });
    // Write errors only mean the client went away, which some tests cause on purpose.
    let _ = write_reply(&mut conn, reply);
}

fn read_request(conn: &TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_owned());
        if name == "content-length" {
            length = value.parse().ok()?;
        }
        headers.push((name, value));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn write_reply(conn: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nconnection: close\r\n",
        reply.status
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match &reply.body {
        Body::Whole(body) => head.push_str(&format!("content-length: {}\r\n", body.len())),
        Body::Parts(_) => head.push_str("transfer-encoding: chunked\r\n"),
        Body::Writer(_) => {}
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    match reply.body {
        Body::Whole(body) => conn.write_all(body.as_bytes())?,
        Body::Parts(parts) => {
            for part in parts {
                match part {
                    Part::Bytes(bytes) => {
                        conn.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())?;
                        conn.write_all(&bytes)?;
                        conn.write_all(b"\r\n")?;
                        conn.flush()?;
                    }
                    Part::Pause(pause) => thread::sleep(pause),
                    Part::Drop => return Ok(()),
                    Part::Hang => {
                        thread::sleep(Duration::from_secs(30));
                        return Ok(());
                    }
                    Part::Stall => {
                        wait_for_close(conn);
                        return Ok(());
                    }
                }
            }
            conn.write_all(b"0\r\n\r\n")?;
        }
        Body::Writer(write) => {
            conn.flush()?;
            write(conn)?;
            let _ = conn.shutdown(std::net::Shutdown::Write);
        }
    }
    conn.flush()
}

/// Blocks until the client closes the connection (or it fails). The request was read whole,
/// so anything more the client sends is read and ignored.
fn wait_for_close(conn: &mut TcpStream) {
    let mut buf = [0; 1024];
    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
}

/// OpenAI Chat Completions chunks, as `api.openai.com` streams them with
/// `stream_options.include_usage`: every chunk carries `"usage": null` except the last, which
/// has no choices.
pub mod openai {
    use super::*;

    pub const DONE: &str = "data: [DONE]\n\n";

    /// One SSE event carrying `chunk`.
    pub fn event(chunk: &Value) -> String {
        format!("data: {chunk}\n\n")
    }

    /// A chunk with one choice.
    pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-test", "system_fingerprint": "fp_test",
            "choices": [{"index": 0, "delta": delta, "logprobs": null,
                         "finish_reason": finish_reason}],
            "usage": null,
        })
    }

    /// The final usage chunk (`prompt` includes `cached`, as OpenAI counts).
    pub fn usage(prompt: u64, cached: u64, completion: u64) -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-test", "system_fingerprint": "fp_test", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}},
        })
    }

    /// A whole text answer in these pieces, ending with `stop` and a usage chunk.
    pub fn text(pieces: &[&str], prompt: u64, completion: u64) -> Vec<Value> {
        let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        chunks.extend(pieces.iter().map(|p| chunk(json!({"content": p}), None)));
        chunks.push(chunk(json!({}), Some("stop")));
        chunks.push(usage(prompt, 0, completion));
        chunks
    }
}

/// Anthropic Messages stream events, as `api.anthropic.com` sends them.
pub mod anthropic {
    use super::*;

    /// One SSE event named by its `type`.
    pub fn event(data: &Value) -> String {
        let name = data["type"].as_str().unwrap_or("message");
        format!("event: {name}\ndata: {data}\n\n")
    }

    pub fn message_start(input_tokens: u64) -> Value {
        json!({"type": "message_start", "message": {
            "id": "msg_01", "type": "message", "role": "assistant", "content": [],
            "model": "claude-test", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 1}}})
    }

    pub fn block_start(index: usize, block: Value) -> Value {
        json!({"type": "content_block_start", "index": index, "content_block": block})
    }

    pub fn delta(index: usize, delta: Value) -> Value {
        json!({"type": "content_block_delta", "index": index, "delta": delta})
    }

    pub fn text_delta(index: usize, text: &str) -> Value {
        delta(index, json!({"type": "text_delta", "text": text}))
    }

    pub fn block_stop(index: usize) -> Value {
        json!({"type": "content_block_stop", "index": index})
    }

    /// `message_delta` with the stop reason and output count, then `message_stop`.
    pub fn message_end(stop_reason: &str, output_tokens: u64) -> [Value; 2] {
        [
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": output_tokens}}),
            json!({"type": "message_stop"}),
        ]
    }

    /// A whole text answer in these pieces (one text block), ending with `end_turn`.
    pub fn text(pieces: &[&str], input_tokens: u64, output_tokens: u64) -> Vec<Value> {
        let mut events = vec![
            message_start(input_tokens),
            block_start(0, json!({"type": "text", "text": ""})),
            json!({"type": "ping"}),
        ];
        events.extend(pieces.iter().map(|p| text_delta(0, p)));
        events.push(block_stop(0));
        events.extend(message_end("end_turn", output_tokens));
        events
    }
}
