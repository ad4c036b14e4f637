//! Streaming throughput of `sidechat serve`: how fast `textDelta` notifications reach the
//! editor when a provider streams as fast as it can, and how much each delta's trip through the
//! daemon adds.
//!
//! Run with `cargo bench --bench deltas` (a release build; `--bench` mode refuses a debug build).
//! Without `--bench`, as under `cargo test --benches`, it makes one short run of each
//! measurement to check that they work.
//!
//! Measured in the same run, interleaved:
//! - end to end: a fake OpenAI-compatible server on 127.0.0.1 (a thread of this process) answers
//!   the daemon's one request with 100,000 `delta.content` chunks (`"w<index> "`), then
//!   `finish_reason: "stop"` and `[DONE]`, as fast as the socket takes them. The stream is
//!   rendered before the daemon connects. It is written twice, in separate runs: in writes of up
//!   to 16 KiB cut at chunk boundaries (as a provider's TCP stream carries tokens that come
//!   faster than it sends, and so that the feeder costs next to nothing and the daemon is what
//!   is measured; the goals are judged on this one), and with one `write` per chunk (where the
//!   feeder's own system calls compete with the daemon for the two cores and cap the rate at
//!   its own). `sidechat serve` is spawned with `OPENAI_BASE_URL` pointing at it; the bench
//!   sends `initialize`, `session/create` and `chat/send`, and reads stdout (one JSON object per
//!   line) until `runFinished`. Deltas per second count from writing `chat/send` to reading
//!   `runFinished`. The latency of a delta is the time from the write that carried its chunk
//!   returning to its `textDelta` line being read from the daemon's stdout; both instants are
//!   taken in this process, and the delta's text carries its index. When the feeder floods,
//!   that is mostly time spent queued in socket buffers, not time the daemon adds.
//! - paced: 20,000 chunks one every 50 µs (20,000 a second) and 50,000 one every 10 µs (100,000
//!   a second, the goal rate; sleeps overshoot, so these go out in small bursts), each on its
//!   own write: the latency a delta sees when the daemon is not behind.
//! - raw pipe: the same 100,000 notification lines, byte for byte as the daemon wrote them
//!   (rebuilt from the first one; the last is checked against the daemon's), written by a child
//!   process to its stdout one `write` per line, and read by a thread of this process doing the
//!   same per-line work as the end-to-end reader. This is the ceiling for sending one frame at a
//!   time through stdout.
//! - the daemon's CPU time and context switches, summed over its threads from `/proc`, from
//!   `chat/send` to the last delta, per delta; the time from the last delta to `runFinished`
//!   (committing the answer); and its peak resident memory (`VmHWM`), read before shutdown.
//!
//! Before `chat/send` the bench waits until the daemon has been idle for 100 ms, so work it does
//! in the background after starting (warming its tokenizer) is not measured as streaming; how
//! long that took is shown.
//!
//! The daemon gets an empty environment apart from `PATH`, a temporary `HOME` and XDG folders
//! (so no config file of the machine is read), the provider variables and `SIDECHAT_LOG=warn`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Exit, Initialize, Initialized, Notification, Request, SessionCreate, Shutdown,
};
use stream::{
    Feed, Line, Usage, classify, find, median, per_second, percentile, sorted, start_upstream, us,
    verdict,
};

#[path = "support/stdio.rs"]
mod stdio;
#[path = "support/stream.rs"]
mod stream;
#[path = "../tests/support/upstream.rs"]
mod upstream;

const DELTAS: usize = 100_000;
const RUNS: usize = 3;
const SMOKE_DELTAS: usize = 1_000;

/// The paced streams: this many deltas, one every `*_PACE` at most. Sleeps overshoot, so the
/// fast one goes out in small bursts; the achieved rates are measured and shown.
const SLOW_PACED_DELTAS: usize = 20_000;
const SLOW_PACE: Duration = Duration::from_micros(50);
/// At the goal rate of 100,000 deltas a second.
const FAST_PACED_DELTAS: usize = 50_000;
const FAST_PACE: Duration = Duration::from_micros(10);
const SMOKE_PACED_DELTAS: usize = 200;

const GOAL_RATE: f64 = 100_000.0;
const GOAL_SHARE: f64 = 0.30;
const GOAL_P99: Duration = Duration::from_millis(1);

/// Read buffer of both readers.
const READ_BUFFER: usize = 256 * 1024;

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
            stdout: BufReader::with_capacity(READ_BUFFER, stdout),
        }
    }

    /// Sends a request and waits for its result; notifications on the way are skipped.
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
        if n == 0 {
            let status = self.child.wait().expect("cannot reap the daemon");
            panic!("the daemon closed stdout ({status})");
        }
    }

    /// The daemon's peak resident set so far.
    fn peak_rss_kib(&self) -> u64 {
        stdio::status_kib(self.child.id(), "VmHWM:")
    }

    /// CPU time and context switches of the daemon's live threads so far.
    fn usage(&self) -> Usage {
        stream::usage(self.child.id())
    }

    /// Waits until the daemon has used no CPU for a while; how long that took.
    fn wait_until_idle(&self) -> Duration {
        stream::wait_until_idle(self.child.id())
    }

    /// `shutdown` and `exit`; checks the daemon exits with 0.
    fn stop(mut self) {
        self.call(Shutdown::METHOD, Value::Null);
        self.requests
            .send(&json!({"jsonrpc": "2.0", "method": Exit::METHOD}));
        drop(self.requests);
        let status = self.child.wait().expect("cannot reap the daemon");
        assert!(status.success(), "the daemon exited with {status}");
    }
}

/// One end-to-end run.
struct StreamRun {
    elapsed: Duration,
    /// Received minus sent, per delta.
    latencies: Vec<Duration>,
    /// How fast the fake upstream got its chunks out.
    upstream_rate: f64,
    peak_rss_kib: u64,
    /// From the last delta to `runFinished`: committing the answer and closing the run.
    wrap_up: Duration,
    /// How long the daemon kept working after start-up before it went idle.
    settled: Duration,
    /// The daemon's CPU time and context switches per delta while it streamed, from `chat/send`
    /// to the last delta.
    cpu_per_delta: Duration,
    switches_per_delta: f64,
    /// The first and the last `textDelta` line, without the newline.
    first_line: String,
    last_line: String,
}

fn stream_run(home: &Path, db: &Path, deltas: usize, feed: Feed) -> StreamRun {
    let upstream = start_upstream(deltas, feed);
    let mut daemon = Daemon::spawn(home, db, &upstream.url);
    daemon.call(
        Initialize::METHOD,
        json!({"clientInfo": {"name": "deltas-bench", "version": "1"}, "protocolVersion": 1, "capabilities": {}}),
    );
    daemon
        .requests
        .send(&json!({"jsonrpc": "2.0", "method": Initialized::METHOD, "params": {}}));
    let session = daemon.call(SessionCreate::METHOD, json!({}));
    let session_id = session["id"].as_str().expect("a session id").to_owned();
    let settled = daemon.wait_until_idle();

    let mut received: Vec<Option<Instant>> = vec![None; deltas];
    let mut count = 0usize;
    let mut first_line = String::new();
    let mut last_line = Vec::new();
    let mut last_delta = None;
    let mut line = Vec::with_capacity(1024);
    let before = daemon.usage();
    let started = Instant::now();
    let send_id = daemon.requests.start_call(
        ChatSend::METHOD,
        json!({"sessionId": session_id, "text": "go"}),
    );
    let finished = loop {
        daemon.read_line(&mut line);
        let at = Instant::now();
        match classify(&line) {
            Line::Delta(index) => {
                assert!(
                    received[index].replace(at).is_none(),
                    "delta {index} arrived twice"
                );
                if count == 0 {
                    first_line = String::from_utf8_lossy(line.trim_ascii_end()).into_owned();
                }
                count += 1;
                if count == deltas {
                    last_line.clone_from(&line);
                    last_delta = Some((at, daemon.usage()));
                }
            }
            Line::RunFinished => {
                let text = String::from_utf8_lossy(&line);
                assert!(
                    text.contains("\"reason\":\"end_turn\""),
                    "the run did not end normally: {text}"
                );
                break at;
            }
            Line::Other => {
                let text = String::from_utf8_lossy(&line);
                assert!(
                    !(text.contains(&format!("\"id\":{send_id},")) && text.contains("\"error\"")),
                    "chat/send failed: {text}"
                );
            }
        }
    };
    let elapsed = finished - started;
    let (last_at, after) = last_delta.expect("the last delta arrived");
    let peak_rss_kib = daemon.peak_rss_kib();
    daemon.stop();
    let sent = upstream
        .sent
        .recv()
        .expect("the fake upstream failed to write the stream");
    assert_eq!(count, deltas, "deltas lost on the way");
    let latencies = sent
        .iter()
        .zip(&received)
        .map(|(sent, received)| {
            received
                .expect("every delta arrived")
                .saturating_duration_since(*sent)
        })
        .collect();
    let upstream_rate = deltas as f64 / (sent[deltas - 1] - sent[0]).as_secs_f64();
    StreamRun {
        elapsed,
        latencies,
        upstream_rate,
        peak_rss_kib,
        settled,
        wrap_up: finished - last_at,
        cpu_per_delta: Duration::from_nanos(
            after.cpu_ns.saturating_sub(before.cpu_ns) / deltas as u64,
        ),
        switches_per_delta: after.switches.saturating_sub(before.switches) as f64 / deltas as f64,
        first_line,
        last_line: String::from_utf8_lossy(last_line.trim_ascii_end()).into_owned(),
    }
}

/// The daemon's notification lines for every delta, built from the first one it wrote: only
/// `seq` and the text differ from one delta to the next.
fn frames_like(first_line: &str, deltas: usize) -> Vec<Vec<u8>> {
    let seq_at = find(first_line, "\"seq\":").expect("the notification has a seq");
    let seq_len = first_line[seq_at..]
        .find(|c: char| !c.is_ascii_digit())
        .expect("something follows the seq");
    let first_seq: usize = first_line[seq_at..seq_at + seq_len]
        .parse()
        .expect("a numeric seq");
    let template = first_line
        .replacen(&format!("\"seq\":{first_seq}"), "\"seq\":\u{1}", 1)
        .replacen("\"text\":\"w0 \"", "\"text\":\"\u{2}\"", 1);
    assert!(
        template.contains('\u{1}') && template.contains('\u{2}'),
        "unexpected delta line: {first_line}"
    );
    (0..deltas)
        .map(|index| {
            let mut frame = template
                .replacen('\u{1}', &(first_seq + index).to_string(), 1)
                .replacen('\u{2}', &format!("w{index} "), 1)
                .into_bytes();
            frame.push(b'\n');
            frame
        })
        .collect()
}

/// Argument that makes this binary the raw pipe's writer process.
const PIPE_WRITER: &str = "--pipe-writer";

/// The raw pipe: a child process (this binary again) writes the frames to its stdout, one
/// `write` each, and a thread of this process reads them, as the daemon's output is read. The
/// time from the go signal until the reader has the last frame.
fn pipe_run(first_line: &str, deltas: usize) -> Duration {
    let exe = std::env::current_exe().expect("the bench knows its own path");
    let mut child = Command::new(exe)
        .arg(PIPE_WRITER)
        .env("DELTAS_FIRST_LINE", first_line)
        .env("DELTAS_COUNT", deltas.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot spawn the pipe writer");
    let mut go = child.stdin.take().expect("the writer's stdin is piped");
    let mut reader = BufReader::with_capacity(
        READ_BUFFER,
        child.stdout.take().expect("the writer's stdout is piped"),
    );
    let mut ready = String::new();
    reader
        .read_line(&mut ready)
        .expect("cannot read the pipe writer");
    assert_eq!(ready, "ready\n", "the pipe writer did not start");
    let reading = std::thread::Builder::new()
        .name("pipe-reader".into())
        .spawn(move || {
            let mut received: Vec<Option<Instant>> = vec![None; deltas];
            let mut line = Vec::with_capacity(1024);
            let mut last = None;
            loop {
                line.clear();
                let n = reader
                    .read_until(b'\n', &mut line)
                    .expect("cannot read the pipe");
                if n == 0 {
                    break;
                }
                let at = Instant::now();
                if let Line::Delta(index) = classify(&line) {
                    received[index] = Some(at);
                    last = Some(at);
                }
            }
            assert!(received.iter().all(Option::is_some), "frames lost");
            last.expect("frames arrived")
        })
        .expect("cannot start the pipe reader");
    let started = Instant::now();
    go.write_all(b"g").expect("cannot start the pipe writer");
    drop(go);
    let last = reading.join().expect("the pipe reader failed");
    let status = child.wait().expect("cannot reap the pipe writer");
    assert!(status.success(), "the pipe writer exited with {status}");
    last - started
}

/// The child side of [`pipe_run`]: builds the frames, says it is ready, waits for the go
/// signal, then writes them.
fn pipe_writer() {
    let first_line = std::env::var("DELTAS_FIRST_LINE").expect("the first frame is given");
    let deltas = std::env::var("DELTAS_COUNT")
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("the frame count is given");
    let frames = frames_like(&first_line, deltas);
    // A plain file on the same descriptor: every `write_all` is one `write`, unbuffered.
    let mut out = std::fs::File::from(
        std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .expect("cannot duplicate stdout"),
    );
    out.write_all(b"ready\n").expect("cannot write to stdout");
    let mut go = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut go)
        .expect("no go signal arrived");
    for frame in &frames {
        out.write_all(frame).expect("cannot write to stdout");
    }
}

/// Figures of one kind of stream, gathered over the runs.
#[derive(Default)]
struct Series {
    /// End to end, deltas per second.
    rates: Vec<f64>,
    /// How fast the fake upstream got its chunks out.
    upstream: Vec<f64>,
    latencies: Vec<Duration>,
    cpu_per_delta_us: Vec<f64>,
    switches_per_delta: Vec<f64>,
    wrap_up_ms: Vec<f64>,
    settled_ms: Vec<f64>,
    peak_rss_kib: u64,
}

impl Series {
    fn add(&mut self, run: StreamRun, deltas: usize) {
        self.rates.push(per_second(deltas, run.elapsed));
        self.upstream.push(run.upstream_rate);
        self.latencies.extend(run.latencies);
        self.cpu_per_delta_us.push(us(run.cpu_per_delta));
        self.switches_per_delta.push(run.switches_per_delta);
        self.wrap_up_ms.push(run.wrap_up.as_secs_f64() * 1e3);
        self.settled_ms.push(run.settled.as_secs_f64() * 1e3);
        self.peak_rss_kib = self.peak_rss_kib.max(run.peak_rss_kib);
    }

    fn sort(&mut self) {
        for values in [
            &mut self.rates,
            &mut self.upstream,
            &mut self.cpu_per_delta_us,
            &mut self.switches_per_delta,
            &mut self.wrap_up_ms,
            &mut self.settled_ms,
        ] {
            values.sort_by(f64::total_cmp);
        }
        self.latencies.sort();
    }

    fn p99(&self) -> Duration {
        percentile(&self.latencies, 99.0)
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(PIPE_WRITER) {
        pipe_writer();
        return;
    }
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && cfg!(debug_assertions) {
        eprintln!(
            "deltas: this is a debug build; run `cargo bench --bench deltas` for figures that mean something"
        );
        std::process::exit(2);
    }
    let (deltas, slow_deltas, fast_deltas, runs) = if bench_mode {
        (DELTAS, SLOW_PACED_DELTAS, FAST_PACED_DELTAS, RUNS)
    } else {
        (SMOKE_DELTAS, SMOKE_PACED_DELTAS, SMOKE_PACED_DELTAS, 1)
    };

    let temp = tempfile::tempdir().expect("cannot create a temporary folder");
    let home = temp.path();

    let mut coalesced = Series::default();
    let mut each_chunk = Series::default();
    let mut slow = Series::default();
    let mut fast = Series::default();
    let mut pipe = Vec::with_capacity(runs);
    for run in 0..runs {
        let streamed = stream_run(
            home,
            &home.join(format!("coalesced-{run}.db")),
            deltas,
            Feed::Coalesced,
        );
        let frames = frames_like(&streamed.first_line, deltas);
        assert_eq!(
            String::from_utf8_lossy(frames[deltas - 1].trim_ascii_end()),
            streamed.last_line,
            "the rebuilt frames differ from what the daemon wrote"
        );
        pipe.push(per_second(deltas, pipe_run(&streamed.first_line, deltas)));
        coalesced.add(streamed, deltas);

        let db = home.join(format!("each-{run}.db"));
        each_chunk.add(stream_run(home, &db, deltas, Feed::EachChunk), deltas);
        let db = home.join(format!("slow-{run}.db"));
        slow.add(
            stream_run(home, &db, slow_deltas, Feed::Paced(SLOW_PACE)),
            slow_deltas,
        );
        let db = home.join(format!("fast-{run}.db"));
        fast.add(
            stream_run(home, &db, fast_deltas, Feed::Paced(FAST_PACE)),
            fast_deltas,
        );
    }
    for series in [&mut coalesced, &mut each_chunk, &mut slow, &mut fast] {
        series.sort();
    }
    let pipe = sorted(pipe);

    let profile = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    println!(
        "sidechat delta streaming: {deltas} deltas per run, {runs} run(s), interleaved with the raw pipe ({profile})"
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
        "end to end, upstream in 16 KiB writes",
        &coalesced.rates,
        0,
        "deltas/s",
    );
    row(
        "end to end, upstream one write per chunk",
        &each_chunk.rates,
        0,
        "deltas/s",
    );
    row("raw pipe, one write per frame", &pipe, 0, "frames/s");
    row(
        "fake upstream, 16 KiB writes",
        &coalesced.upstream,
        0,
        "chunks/s",
    );
    row(
        "fake upstream, one write per chunk",
        &each_chunk.upstream,
        0,
        "chunks/s",
    );
    row(
        "daemon CPU per delta, 16 KiB writes",
        &coalesced.cpu_per_delta_us,
        2,
        "us",
    );
    row(
        "daemon CPU per delta, one write per chunk",
        &each_chunk.cpu_per_delta_us,
        2,
        "us",
    );
    row(
        "daemon context switches per delta, 16 KiB writes",
        &coalesced.switches_per_delta,
        3,
        "",
    );
    row(
        "last delta -> runFinished (commit, end of run)",
        &coalesced.wrap_up_ms,
        2,
        "ms",
    );
    row(
        "daemon busy after start-up (waited out first)",
        &coalesced.settled_ms,
        0,
        "ms",
    );
    let share = median(&coalesced.rates) / median(&pipe);
    let each_share = median(&each_chunk.rates) / median(&pipe);
    println!(
        "{:<56} {:>11.1}%",
        "end to end / raw pipe, 16 KiB writes (medians)",
        share * 100.0
    );
    println!(
        "{:<56} {:>11.1}%",
        "end to end / raw pipe, one write per chunk (medians)",
        each_share * 100.0
    );
    let latency_row = |name: &str, sorted: &[Duration]| {
        println!(
            "{name:<56} {:>9.1} us p50 {:>9.1} us p99 {:>9.1} us max",
            us(percentile(sorted, 50.0)),
            us(percentile(sorted, 99.0)),
            us(sorted[sorted.len() - 1]),
        );
    };
    latency_row(
        &format!(
            "added latency per delta, paced at {:.0}/s",
            median(&slow.upstream)
        ),
        &slow.latencies,
    );
    latency_row(
        &format!(
            "added latency per delta, paced at {:.0}/s",
            median(&fast.upstream)
        ),
        &fast.latencies,
    );
    latency_row(
        "queued + added, flooding in 16 KiB writes",
        &coalesced.latencies,
    );
    latency_row(
        "queued + added, flooding one write per chunk",
        &each_chunk.latencies,
    );
    let peak = [&coalesced, &each_chunk, &slow, &fast]
        .iter()
        .map(|s| s.peak_rss_kib)
        .max()
        .unwrap_or_default();
    println!(
        "{:<56} {:>8.1} MiB",
        "daemon peak RSS (VmHWM, highest run)",
        peak as f64 / 1024.0
    );
    if !bench_mode {
        return;
    }
    println!();
    println!(
        "goal: >= {GOAL_RATE:.0} deltas/s end to end: {}",
        verdict(median(&coalesced.rates) >= GOAL_RATE)
    );
    println!(
        "goal: >= {:.0}% of the raw pipe: {}",
        GOAL_SHARE * 100.0,
        verdict(share >= GOAL_SHARE)
    );
    for (series, rate) in [(&slow, "20,000"), (&fast, "100,000")] {
        println!(
            "goal: p99 added latency < {} ms at {rate} deltas/s: {}",
            GOAL_P99.as_millis(),
            verdict(series.p99() < GOAL_P99)
        );
    }
}
