//! Output backpressure of `sidechat serve`: what a client that stops reading its stdout
//! mid-stream costs the daemon, beside a client that never stops, in the same run.
//!
//! Run with `cargo bench --bench backpressure` (a release build; `--bench` mode refuses a debug
//! build). Without `--bench`, as under `cargo test --benches`, it makes one short round with a
//! short pause to check that it works.
//!
//! Each round streams the same answer twice, to a fresh daemon each time, one after the other:
//! a fake OpenAI-compatible server on 127.0.0.1 (a thread of this process) answers with
//! [`DELTAS`] `delta.content` chunks (`"w<index> "`) in writes of up to 16 KiB, as fast as the
//! socket takes them. The never-pausing reader reads the daemon's stdout until `runFinished`;
//! the pausing reader reads the first [`READ_BEFORE_PAUSE`] deltas, stops reading for
//! [`PAUSE`], then reads the rest. Both check that every delta arrives once, in order, and that
//! `seq` rises by one from each event to the next. Figures per reader: the daemon's peak
//! resident memory (`VmHWM`, read before shutdown) and the whole stream's rate; for the pausing
//! reader also the daemon's resident memory and how much of the stream the fake upstream had
//! got out by the end of the pause (a daemon that stops reading its provider leaves the rest
//! in the socket).
//!
//! The daemon gets an empty environment apart from `PATH`, a temporary `HOME` and XDG folders,
//! the provider variables and `SIDECHAT_LOG=warn`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStdout};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Exit, Initialize, Initialized, Notification, Request, SessionCreate, SessionEvent,
    Shutdown,
};

#[path = "support/stdio.rs"]
mod stdio;
#[path = "../tests/support/upstream.rs"]
mod upstream;

const DELTAS: usize = 2_000_000;
const READ_BEFORE_PAUSE: usize = 100_000;
/// The case is a 60 s pause; 20 s keeps a run of the bench short, and the pause's
/// length does not change what a bounded queue holds (the figures show whether the upstream
/// was still being drained when the reader resumed).
const PAUSE: Duration = Duration::from_secs(20);
const ROUNDS: usize = 3;

const SMOKE_DELTAS: usize = 20_000;
const SMOKE_READ_BEFORE_PAUSE: usize = 1_000;
const SMOKE_PAUSE: Duration = Duration::from_millis(500);

/// At most this much more resident memory for a reader that pauses.
const GOAL_EXTRA_MIB: f64 = 32.0;

/// The largest write of the fake upstream.
const WRITE: usize = 16 * 1024;

/// The answer's body: `deltas` text chunks, then the end of the answer.
fn render_stream(deltas: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(deltas * 160);
    for index in 0..deltas {
        write!(
            bytes,
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{index} \"}},\"finish_reason\":null}}]}}\n\n"
        )
        .expect("formatting into a Vec cannot fail");
    }
    bytes.extend_from_slice(
        b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
    bytes
}

/// The fake upstream answering one request with `body`, and how many of its bytes it has
/// written so far.
fn start_upstream(body: Arc<Vec<u8>>) -> (upstream::Upstream, Arc<AtomicUsize>) {
    let written = Arc::new(AtomicUsize::new(0));
    let progress = written.clone();
    let fake = upstream::start(vec![upstream::Reply::writer(
        move |socket: &mut TcpStream| {
            for piece in body.chunks(WRITE) {
                socket.write_all(piece)?;
                progress.fetch_add(piece.len(), Ordering::SeqCst);
            }
            Ok(())
        },
    )]);
    (fake, written)
}

/// `sidechat serve` driven over its stdio, one JSON object per line.
struct Daemon {
    child: Child,
    requests: stdio::Requests,
    stdout: BufReader<ChildStdout>,
}

impl Daemon {
    fn spawn(home: &Path, db: &Path, upstream: &str) -> Self {
        let mut child = stdio::serve_command(home, db, upstream, "warn")
            .spawn()
            .expect("cannot spawn `sidechat serve`");
        let stdin = child.stdin.take().expect("the child's stdin is piped");
        let stdout = child.stdout.take().expect("the child's stdout is piped");
        Self {
            child,
            requests: stdio::Requests::new(stdin),
            stdout: BufReader::with_capacity(256 * 1024, stdout),
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.requests.start_call(method, params);
        let mut line = Vec::new();
        loop {
            self.read_line(&mut line);
            let message: Value =
                serde_json::from_slice(&line).expect("a JSON line from the daemon");
            if message["id"] == id && message.get("method").is_none() {
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return message["result"].clone();
            }
        }
    }

    fn read_line(&mut self, line: &mut Vec<u8>) {
        line.clear();
        let n = self
            .stdout
            .read_until(b'\n', line)
            .expect("cannot read the daemon's stdout");
        assert!(n > 0, "the daemon closed stdout");
    }

    fn stop(mut self) {
        self.call(Shutdown::METHOD, Value::Null);
        self.requests
            .send(&json!({"jsonrpc": "2.0", "method": Exit::METHOD}));
        drop(self.requests);
        let status = self.child.wait().expect("cannot reap the daemon");
        assert!(status.success(), "the daemon exited with {status}");
    }
}

/// A number after `"key":` in `text`.
fn number_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    let digits = text[at..].find(|c: char| !c.is_ascii_digit())?;
    text[at..at + digits].parse().ok()
}

/// What one stream cost.
struct Figures {
    peak_rss_kib: u64,
    rate: f64,
    /// The pausing reader's: resident memory at the end of the pause, and the share of the
    /// stream the fake upstream had written by then.
    paused_rss_kib: Option<u64>,
    upstream_share_at_resume: Option<f64>,
}

/// Streams `body` (`deltas` deltas) to a fresh daemon; `pause` is where the reader stops
/// reading and for how long.
fn stream(
    home: &Path,
    db: &Path,
    body: &Arc<Vec<u8>>,
    deltas: usize,
    pause: Option<(usize, Duration)>,
) -> Figures {
    let (fake, written) = start_upstream(body.clone());
    let mut daemon = Daemon::spawn(home, db, &fake.url);
    daemon.call(
        Initialize::METHOD,
        json!({"clientInfo": {"name": "backpressure-bench", "version": "1"}, "protocolVersion": 1, "capabilities": {}}),
    );
    daemon
        .requests
        .send(&json!({"jsonrpc": "2.0", "method": Initialized::METHOD, "params": {}}));
    let session = daemon.call(SessionCreate::METHOD, json!({}));
    let session_id = session["id"].as_str().expect("a session id").to_owned();
    let started = Instant::now();
    daemon.requests.start_call(
        ChatSend::METHOD,
        json!({"sessionId": session_id, "text": "go"}),
    );
    let mut line = Vec::with_capacity(1024);
    let (mut next_delta, mut last_seq) = (0usize, None::<u64>);
    let (mut paused_rss_kib, mut upstream_share_at_resume) = (None, None);
    let mut pause = pause;
    let event_marker = format!("\"method\":\"{}\"", SessionEvent::METHOD);
    loop {
        daemon.read_line(&mut line);
        let text = std::str::from_utf8(&line).expect("UTF-8 from the daemon");
        if !text.contains(&event_marker) {
            continue;
        }
        let seq = number_after(text, "\"seq\":").expect("an event has a seq");
        if let Some(last) = last_seq {
            assert_eq!(seq, last + 1, "seq must rise by one: {text}");
        }
        last_seq = Some(seq);
        if text.contains("\"kind\":\"textDelta\"") {
            let index = number_after(text, "\"text\":\"w").expect("a delta of the bench's shape");
            assert_eq!(index, next_delta as u64, "deltas out of order or lost");
            next_delta += 1;
            if let Some((at, long)) = pause
                && next_delta == at
            {
                std::thread::sleep(long);
                paused_rss_kib = Some(stdio::status_kib(daemon.child.id(), "VmRSS:"));
                upstream_share_at_resume =
                    Some(written.load(Ordering::SeqCst) as f64 / body.len() as f64);
                pause = None;
            }
        } else if text.contains("\"kind\":\"runFinished\"") {
            assert!(text.contains("\"reason\":\"end_turn\""), "{text}");
            break;
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(next_delta, deltas, "deltas lost on the way");
    let peak_rss_kib = stdio::status_kib(daemon.child.id(), "VmHWM:");
    daemon.stop();
    Figures {
        peak_rss_kib,
        rate: deltas as f64 / elapsed.as_secs_f64(),
        paused_rss_kib,
        upstream_share_at_resume,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && cfg!(debug_assertions) {
        eprintln!(
            "backpressure: this is a debug build; run `cargo bench --bench backpressure` for figures that mean something"
        );
        std::process::exit(2);
    }
    let (deltas, read_before, pause, rounds) = if bench_mode {
        (DELTAS, READ_BEFORE_PAUSE, PAUSE, ROUNDS)
    } else {
        (SMOKE_DELTAS, SMOKE_READ_BEFORE_PAUSE, SMOKE_PAUSE, 1)
    };
    let temp = tempfile::tempdir().expect("cannot create a temporary folder");
    let home = temp.path();
    let body = Arc::new(render_stream(deltas));

    let (mut steady, mut pausing) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        steady.push(stream(
            home,
            &home.join(format!("steady-{round}.db")),
            &body,
            deltas,
            None,
        ));
        pausing.push(stream(
            home,
            &home.join(format!("pausing-{round}.db")),
            &body,
            deltas,
            Some((read_before, pause)),
        ));
    }

    let profile = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    println!(
        "sidechat output backpressure: {deltas} deltas per stream ({:.0} MiB of SSE), {rounds} round(s) of a never-pausing and a pausing reader ({profile})",
        body.len() as f64 / (1024.0 * 1024.0)
    );
    println!(
        "the pausing reader stops after {read_before} deltas for {:.1} s",
        pause.as_secs_f64()
    );
    println!();
    let peak = |figures: &[Figures]| median(figures.iter().map(|f| mib(f.peak_rss_kib)).collect());
    let rate = |figures: &[Figures]| median(figures.iter().map(|f| f.rate).collect());
    let (steady_peak, pausing_peak) = (peak(&steady), peak(&pausing));
    let extra = median(
        steady
            .iter()
            .zip(&pausing)
            .map(|(s, p)| mib(p.peak_rss_kib) - mib(s.peak_rss_kib))
            .collect(),
    );
    println!("{:<60} {:>10}", "", "median");
    println!(
        "{:<60} {steady_peak:>10.1} MiB",
        "daemon peak RSS, never-pausing reader"
    );
    println!(
        "{:<60} {pausing_peak:>10.1} MiB",
        "daemon peak RSS, pausing reader"
    );
    println!(
        "{:<60} {extra:>10.1} MiB",
        "pausing minus never-pausing, per round"
    );
    println!(
        "{:<60} {:>10.1} MiB",
        "daemon RSS at the end of the pause",
        median(
            pausing
                .iter()
                .filter_map(|f| f.paused_rss_kib)
                .map(mib)
                .collect()
        )
    );
    println!(
        "{:<60} {:>10.1} %",
        "share of the stream the upstream got out during the pause",
        100.0
            * median(
                pausing
                    .iter()
                    .filter_map(|f| f.upstream_share_at_resume)
                    .collect()
            )
    );
    println!(
        "{:<60} {:>10.0} deltas/s",
        "whole stream, never-pausing reader",
        rate(&steady)
    );
    println!(
        "{:<60} {:>10.0} deltas/s",
        "whole stream, pausing reader (pause included)",
        rate(&pausing)
    );
    for (round, (s, p)) in steady.iter().zip(&pausing).enumerate() {
        println!(
            "round {round}: peak {:.1} / {:.1} MiB (never-pausing / pausing)",
            mib(s.peak_rss_kib),
            mib(p.peak_rss_kib)
        );
    }
    if !bench_mode {
        return;
    }
    println!();
    println!(
        "goal: a pausing reader costs <= {GOAL_EXTRA_MIB:.0} MiB over a never-pausing one: {}",
        if extra <= GOAL_EXTRA_MIB {
            "met"
        } else {
            "NOT met"
        }
    );
}
