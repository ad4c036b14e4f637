//! Streaming through the WebSocket listener (`sidechat serve --listen`) beside stdio, in one
//! run: what a WebSocket client costs compared with the stdio client an editor spawns, and
//! what many clients on one session cost.
//!
//! Run with `cargo bench --bench ws_deltas` (a release build; `--bench` mode refuses a debug
//! build). Without `--bench`, as under `cargo test --benches`, it makes one short run of each
//! measurement to check that they work.
//!
//! Measured in the same run, interleaved, on the fake provider of the `deltas` benchmark
//! (`support/stream.rs`: chunks `"w<index> "`, written in 16 KiB writes or paced one a write):
//! - flood: 100,000 deltas through the stdio client of `sidechat serve`, and through one
//!   WebSocket client of `sidechat serve --listen 127.0.0.1:0 --no-stdio` (so no stdio client
//!   takes its share of the work). Deltas per second count from writing `chat/send` to reading
//!   `runFinished`; the goal is a WebSocket rate of at least half the stdio rate.
//! - paced: 20,000 deltas one every 50 µs (20,000 a second) through each transport. The latency
//!   of a delta is from the write that carried its chunk returning to its `textDelta` being
//!   read by the client, both instants taken in this process; the goal is a WebSocket p99
//!   under 1 ms. The stdio p99 is shown beside it, and the difference is what WebSocket adds.
//! - ten clients: ten WebSocket clients on one session (one creates it, nine subscribe), each
//!   read by a thread of its own, while 20,000 deltas flood in. Every client must receive every
//!   event of the session, in order, with the same `seq`s as the others (asserted); shown are
//!   the slowest client's rate (its last delta), the same stream to one client alone, and the
//!   daemon's memory per client: resident set (`VmRSS`) added by the nine subscribed clients at
//!   rest, and the peak (`VmHWM`) of the ten-client run above the one-client run's, per extra
//!   client.
//!
//! Before `chat/send` the bench waits until the daemon has been idle for 100 ms, as `deltas`
//! does. The WebSocket clients are blocking `tungstenite` clients over TCP with `TCP_NODELAY`,
//! read one message at a time as the stdio client reads one line at a time.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Exit, Initialize, Initialized, Notification, Request, SessionCreate, SessionEvent,
    SessionSubscribe, Shutdown,
};
use sidechat::rpc::listen::discovery;
use stream::{
    Feed, Line, classify, find, median, per_second, percentile, sorted, start_upstream, us, verdict,
};
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};

#[path = "support/stdio.rs"]
mod stdio;
#[path = "support/stream.rs"]
mod stream;
#[path = "../tests/support/upstream.rs"]
mod upstream;

const RUNS: usize = 3;
const FLOOD_DELTAS: usize = 100_000;
const PACED_DELTAS: usize = 20_000;
const PACE: Duration = Duration::from_micros(50);
const CLIENTS: usize = 10;
const FAN_DELTAS: usize = 20_000;
const SMOKE_FLOOD_DELTAS: usize = 1_000;
const SMOKE_PACED_DELTAS: usize = 200;
const SMOKE_FAN_DELTAS: usize = 1_000;

const GOAL_SHARE: f64 = 0.5;
const GOAL_P99: Duration = Duration::from_millis(1);

/// Read buffer of the stdio client.
const READ_BUFFER: usize = 256 * 1024;

/// How a client reaches the daemon.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Transport {
    Stdio,
    WebSocket,
}

/// One client connection: requests out, one message at a time in.
trait Client {
    fn send(&mut self, message: &Value);
    /// The next message's bytes, into `buf` (cleared first).
    fn read(&mut self, buf: &mut Vec<u8>);
    /// Writes a request; its id.
    fn start_call(&mut self, method: &str, params: Value) -> u64;

    /// A request's result, which must succeed; other messages on the way are passed over.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.start_call(method, params);
        let mut buf = Vec::new();
        loop {
            self.read(&mut buf);
            let message: Value = serde_json::from_slice(&buf).expect("a JSON message");
            if message["id"] == id && message.get("method").is_none() {
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return message["result"].clone();
            }
        }
    }

    /// `initialize` and `initialized`.
    fn handshake(&mut self) {
        self.call(
            Initialize::METHOD,
            json!({"clientInfo": {"name": "ws-deltas-bench", "version": "1"}, "protocolVersion": 1, "capabilities": {}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": Initialized::METHOD, "params": {}}));
    }
}

/// The stdio client of a spawned `sidechat serve`.
struct StdioClient {
    requests: stdio::Requests,
    stdout: BufReader<ChildStdout>,
}

impl Client for StdioClient {
    fn send(&mut self, message: &Value) {
        self.requests.send(message);
    }

    fn read(&mut self, buf: &mut Vec<u8>) {
        buf.clear();
        let n = self
            .stdout
            .read_until(b'\n', buf)
            .expect("cannot read the daemon's stdout");
        assert!(n > 0, "the daemon closed stdout");
    }

    fn start_call(&mut self, method: &str, params: Value) -> u64 {
        self.requests.start_call(method, params)
    }
}

/// A blocking WebSocket client.
struct WsClient {
    socket: tungstenite::WebSocket<TcpStream>,
    next_id: u64,
}

impl WsClient {
    /// Connects to `serve.json`'s daemon.
    fn connect(file: &discovery::ServeFile) -> Self {
        let authority = file
            .url
            .trim_start_matches("ws://")
            .trim_end_matches('/')
            .to_string();
        let stream = TcpStream::connect(&authority).expect("cannot reach the daemon");
        stream.set_nodelay(true).expect("cannot set TCP_NODELAY");
        let mut request = file.url.as_str().into_client_request().expect("a URL");
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", file.token).parse().expect("a header"),
        );
        let config = tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (socket, _) = tungstenite::client::client_with_config(request, stream, Some(config))
            .unwrap_or_else(|e| panic!("the WebSocket handshake failed: {e}"));
        Self { socket, next_id: 1 }
    }
}

impl Client for WsClient {
    fn send(&mut self, message: &Value) {
        self.socket
            .send(Message::text(message.to_string()))
            .expect("cannot write to the WebSocket");
    }

    fn read(&mut self, buf: &mut Vec<u8>) {
        buf.clear();
        loop {
            match self.socket.read().expect("cannot read the WebSocket") {
                Message::Text(text) => {
                    buf.extend_from_slice(text.as_bytes());
                    return;
                }
                Message::Binary(bytes) => {
                    buf.extend_from_slice(&bytes);
                    return;
                }
                Message::Close(_) => panic!("the daemon closed the WebSocket"),
                _ => {}
            }
        }
    }

    fn start_call(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }
}

/// A spawned daemon: `serve` with its stdio client, or `serve --listen --no-stdio`.
struct Daemon {
    child: Child,
    /// The stdio client, for [`Transport::Stdio`].
    stdio: Option<StdioClient>,
    /// Its serve file, for [`Transport::WebSocket`].
    serve: Option<discovery::ServeFile>,
}

impl Daemon {
    fn spawn(home: &Path, db: &Path, upstream: &str, transport: Transport) -> Self {
        let mut command = stdio::serve_command(home, db, upstream, "warn");
        match transport {
            Transport::Stdio => {
                let mut child = command.spawn().expect("cannot spawn `sidechat serve`");
                let requests = stdio::Requests::new(child.stdin.take().expect("piped stdin"));
                let stdout = BufReader::with_capacity(
                    READ_BUFFER,
                    child.stdout.take().expect("piped stdout"),
                );
                Self {
                    child,
                    stdio: Some(StdioClient { requests, stdout }),
                    serve: None,
                }
            }
            Transport::WebSocket => {
                let runtime = runtime_dir(db);
                command
                    .args(["--listen", "127.0.0.1:0", "--no-stdio"])
                    .env("XDG_RUNTIME_DIR", &runtime)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped());
                let mut child = command.spawn().expect("cannot spawn `sidechat serve`");
                // It says where it listens once serve.json is written.
                let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
                let mut line = String::new();
                loop {
                    line.clear();
                    let n = stderr.read_line(&mut line).expect("cannot read stderr");
                    assert!(n > 0, "the daemon ended before it listened");
                    if line.contains("listening on") {
                        break;
                    }
                }
                // The rest of its stderr is not read; a thread drains it so it never blocks.
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut stderr, &mut std::io::sink());
                });
                let serve = discovery::read(&runtime.join("sidechat/serve.json"))
                    .expect("the daemon's serve file");
                Self {
                    child,
                    stdio: None,
                    serve: Some(serve),
                }
            }
        }
    }

    /// A new client: the stdio one (only once), or one more WebSocket.
    fn client(&mut self) -> Box<dyn Client + Send> {
        match (self.stdio.take(), &self.serve) {
            (Some(stdio), _) => Box::new(stdio),
            (None, Some(serve)) => Box::new(WsClient::connect(serve)),
            (None, None) => panic!("the stdio client was taken already"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rss_kib(&self) -> u64 {
        stdio::status_kib(self.pid(), "VmRSS:")
    }

    fn peak_rss_kib(&self) -> u64 {
        stdio::status_kib(self.pid(), "VmHWM:")
    }

    /// Ends the daemon (`shutdown` and `exit` on stdio, SIGTERM without); checks it exits 0.
    fn stop(mut self, client: Option<Box<dyn Client + Send>>) {
        match (client, &self.serve) {
            (Some(mut client), None) => {
                client.call(Shutdown::METHOD, Value::Null);
                client.send(&json!({"jsonrpc": "2.0", "method": Exit::METHOD}));
            }
            _ => {
                rustix::process::kill_process(
                    rustix::process::Pid::from_child(&self.child),
                    rustix::process::Signal::TERM,
                )
                .expect("cannot signal the daemon");
            }
        }
        let status = self.child.wait().expect("cannot reap the daemon");
        assert!(status.success(), "the daemon exited with {status}");
    }
}

/// The runtime folder of the daemon on `db`: its serve file goes there.
fn runtime_dir(db: &Path) -> PathBuf {
    db.with_extension("run")
}

/// One stream to one client.
struct StreamRun {
    elapsed: Duration,
    /// Received minus sent, per delta.
    latencies: Vec<Duration>,
}

fn stream_run(
    home: &Path,
    db: &Path,
    deltas: usize,
    feed: Feed,
    transport: Transport,
) -> StreamRun {
    let upstream = start_upstream(deltas, feed);
    let mut daemon = Daemon::spawn(home, db, &upstream.url, transport);
    let mut client = daemon.client();
    client.handshake();
    let session = client.call(SessionCreate::METHOD, json!({}));
    let session_id = session["id"].as_str().expect("a session id").to_owned();
    stream::wait_until_idle(daemon.pid());
    let started = Instant::now();
    client.start_call(
        ChatSend::METHOD,
        json!({"sessionId": session_id, "text": "go"}),
    );
    let received = read_stream(client.as_mut(), deltas);
    daemon.stop(Some(client));
    let sent = upstream
        .sent
        .recv()
        .expect("the fake upstream failed to write the stream");
    let latencies = sent
        .iter()
        .zip(&received.at)
        .map(|(sent, received)| received.saturating_duration_since(*sent))
        .collect();
    StreamRun {
        elapsed: received.finished - started,
        latencies,
    }
}

/// What one client read of a run.
struct Received {
    /// When each delta arrived, by index.
    at: Vec<Instant>,
    /// The `seq` of every event of the session, in the order they arrived.
    seqs: Vec<u64>,
    last_delta: Instant,
    finished: Instant,
}

/// Reads messages until `runFinished`, checking that the deltas arrive each once and in order.
fn read_stream(client: &mut dyn Client, deltas: usize) -> Received {
    let mut at = Vec::with_capacity(deltas);
    let mut seqs = Vec::with_capacity(deltas + 16);
    let mut buf = Vec::with_capacity(1024);
    let mut last_delta = None;
    loop {
        client.read(&mut buf);
        let now = Instant::now();
        if let Some(seq) = seq_of(&buf) {
            seqs.push(seq);
        }
        match classify(&buf) {
            Line::Delta(index) => {
                assert_eq!(index, at.len(), "a delta out of order or lost");
                at.push(now);
                last_delta = Some(now);
            }
            Line::RunFinished => {
                let text = String::from_utf8_lossy(&buf);
                assert!(
                    text.contains("\"reason\":\"end_turn\""),
                    "the run did not end normally: {text}"
                );
                assert_eq!(at.len(), deltas, "deltas lost on the way");
                return Received {
                    at,
                    seqs,
                    last_delta: last_delta.expect("deltas arrived"),
                    finished: now,
                };
            }
            Line::Other => {}
        }
    }
}

/// `"method":"session/event"`, as a notification of events begins.
static EVENT_METHOD: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("\"method\":\"{}\"", SessionEvent::METHOD));

/// The `seq` of a `session/event` notification.
fn seq_of(message: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(message).ok()?;
    find(text, &EVENT_METHOD)?;
    let at = find(text, "\"seq\":")?;
    let digits = text[at..].find(|c: char| !c.is_ascii_digit())?;
    text[at..at + digits].parse().ok()
}

/// Many clients on one session.
struct FanRun {
    /// The slowest client's deltas per second, to its last delta.
    slowest_rate: f64,
    /// Resident memory the subscribed clients added at rest, per client.
    rest_kib_per_client: f64,
    peak_rss_kib: u64,
    /// Events each client received.
    events: usize,
}

fn fan_run(home: &Path, db: &Path, clients: usize, deltas: usize) -> FanRun {
    let upstream = start_upstream(deltas, Feed::Coalesced);
    let mut daemon = Daemon::spawn(home, db, &upstream.url, Transport::WebSocket);
    let mut first = daemon.client();
    first.handshake();
    let session = first.call(SessionCreate::METHOD, json!({}));
    let session_id = session["id"].as_str().expect("a session id").to_owned();
    stream::wait_until_idle(daemon.pid());
    let before = daemon.rss_kib();
    let mut others = Vec::with_capacity(clients - 1);
    for _ in 1..clients {
        let mut client = daemon.client();
        client.handshake();
        client.call(SessionSubscribe::METHOD, json!({"sessionId": session_id}));
        others.push(client);
    }
    stream::wait_until_idle(daemon.pid());
    let rest_kib_per_client = if clients > 1 {
        daemon.rss_kib().saturating_sub(before) as f64 / (clients - 1) as f64
    } else {
        0.0
    };
    let readers: Vec<_> = others
        .into_iter()
        .map(|mut client| std::thread::spawn(move || read_stream(client.as_mut(), deltas)))
        .collect();
    let started = Instant::now();
    first.start_call(
        ChatSend::METHOD,
        json!({"sessionId": session_id, "text": "go"}),
    );
    let mut received = vec![read_stream(first.as_mut(), deltas)];
    for reader in readers {
        received.push(reader.join().expect("a client's reader failed"));
    }
    let peak_rss_kib = daemon.peak_rss_kib();
    daemon.stop(None);
    upstream
        .sent
        .recv()
        .expect("the fake upstream failed to write the stream");
    // Every client got every event of the session, in order: the same seqs, one after another.
    let seqs = &received[0].seqs;
    let expected: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert_eq!(
        seqs, &expected,
        "the first client's events are not consecutive"
    );
    for (index, client) in received.iter().enumerate() {
        assert!(
            client.seqs == *seqs,
            "client {index} received other events than the first"
        );
    }
    let slowest = received
        .iter()
        .map(|r| r.last_delta)
        .max()
        .expect("at least one client");
    FanRun {
        slowest_rate: per_second(deltas, slowest - started),
        rest_kib_per_client,
        peak_rss_kib,
        events: seqs.len(),
    }
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && cfg!(debug_assertions) {
        eprintln!(
            "ws_deltas: this is a debug build; run `cargo bench --bench ws_deltas` for figures that mean something"
        );
        std::process::exit(2);
    }
    let (flood, paced, fan, runs) = if bench_mode {
        (FLOOD_DELTAS, PACED_DELTAS, FAN_DELTAS, RUNS)
    } else {
        (SMOKE_FLOOD_DELTAS, SMOKE_PACED_DELTAS, SMOKE_FAN_DELTAS, 1)
    };
    let temp = tempfile::tempdir().expect("cannot create a temporary folder");
    let home = temp.path();
    let db = |name: &str, run: usize| home.join(format!("{name}-{run}.db"));

    let (mut stdio_rates, mut ws_rates) = (Vec::new(), Vec::new());
    let (mut stdio_paced, mut ws_paced) = (Vec::new(), Vec::new());
    let (mut one_rates, mut ten_rates) = (Vec::new(), Vec::new());
    let (mut rest_kib, mut streaming_kib) = (Vec::new(), Vec::new());
    let mut events = 0;
    for run in 0..runs {
        let flooded =
            |name, transport| stream_run(home, &db(name, run), flood, Feed::Coalesced, transport);
        stdio_rates.push(per_second(
            flood,
            flooded("stdio", Transport::Stdio).elapsed,
        ));
        ws_rates.push(per_second(
            flood,
            flooded("ws", Transport::WebSocket).elapsed,
        ));
        let paced_run = |name, transport| {
            stream_run(home, &db(name, run), paced, Feed::Paced(PACE), transport).latencies
        };
        stdio_paced.extend(paced_run("stdio-paced", Transport::Stdio));
        ws_paced.extend(paced_run("ws-paced", Transport::WebSocket));
        let one = fan_run(home, &db("one", run), 1, fan);
        let ten = fan_run(home, &db("ten", run), CLIENTS, fan);
        one_rates.push(one.slowest_rate);
        ten_rates.push(ten.slowest_rate);
        rest_kib.push(ten.rest_kib_per_client);
        streaming_kib
            .push(ten.peak_rss_kib.saturating_sub(one.peak_rss_kib) as f64 / (CLIENTS - 1) as f64);
        events = ten.events;
    }
    let [
        stdio_rates,
        ws_rates,
        one_rates,
        ten_rates,
        rest_kib,
        streaming_kib,
    ] = [
        stdio_rates,
        ws_rates,
        one_rates,
        ten_rates,
        rest_kib,
        streaming_kib,
    ]
    .map(sorted);
    stdio_paced.sort();
    ws_paced.sort();

    let profile = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    println!(
        "sidechat over WebSocket beside stdio: {flood} deltas flooded, {paced} paced at {:.0}/s, {fan} to {CLIENTS} clients; {runs} run(s) ({profile})",
        1.0 / PACE.as_secs_f64()
    );
    println!("binary: {}", env!("CARGO_BIN_EXE_sidechat"));
    println!();
    println!("{:<56} {:>12} {:>12} {:>12}", "", "median", "min", "max");
    let row = |name: &str, sorted: &[f64], decimals: usize, unit: &str| {
        println!(
            "{name:<56} {:>12.decimals$} {:>12.decimals$} {:>12.decimals$}  {unit}",
            median(sorted),
            sorted[0],
            sorted[sorted.len() - 1],
        );
    };
    row(
        "stdio, upstream in 16 KiB writes",
        &stdio_rates,
        0,
        "deltas/s",
    );
    row(
        "WebSocket, upstream in 16 KiB writes",
        &ws_rates,
        0,
        "deltas/s",
    );
    let share = median(&ws_rates) / median(&stdio_rates);
    println!("{:<56} {:>11.2}x", "WebSocket / stdio (medians)", share);
    let latency_row = |name: &str, sorted: &[Duration]| {
        println!(
            "{name:<56} {:>9.1} us p50 {:>9.1} us p99 {:>9.1} us max",
            us(percentile(sorted, 50.0)),
            us(percentile(sorted, 99.0)),
            us(sorted[sorted.len() - 1]),
        );
    };
    latency_row("latency per delta, stdio, paced", &stdio_paced);
    latency_row("latency per delta, WebSocket, paced", &ws_paced);
    let ws_p99 = percentile(&ws_paced, 99.0);
    let added = us(ws_p99) - us(percentile(&stdio_paced, 99.0));
    println!(
        "{:<56} {:>9.1} us",
        "p99 added by WebSocket over stdio", added
    );
    row(
        "one WebSocket client alone, to its last delta",
        &one_rates,
        0,
        "deltas/s",
    );
    row(
        &format!("slowest of {CLIENTS} clients on one session"),
        &ten_rates,
        0,
        "deltas/s",
    );
    println!(
        "{:<56} {:>12}",
        "events each client received, all in order", events
    );
    row(
        "daemon RSS per subscribed client at rest",
        &rest_kib,
        1,
        "KiB",
    );
    row(
        &format!("daemon peak RSS per client, {CLIENTS} over 1 streaming"),
        &streaming_kib,
        1,
        "KiB",
    );
    if !bench_mode {
        return;
    }
    println!();
    println!(
        "goal: WebSocket >= {GOAL_SHARE}x stdio's rate: {}",
        verdict(share >= GOAL_SHARE)
    );
    println!(
        "goal: WebSocket p99 latency < {} ms at 20,000 deltas/s: {}",
        GOAL_P99.as_millis(),
        verdict(ws_p99 < GOAL_P99)
    );
}
