//! What the delta-streaming benchmarks share (`deltas`, `ws_deltas`): the fake provider's
//! stream of numbered text chunks and how it is fed, reading the deltas back from the daemon's
//! messages, the daemon's CPU use, and the figures' arithmetic. The bench that includes it
//! declares `mod upstream` (`tests/support/upstream.rs`) beside it.

// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How the fake provider writes its chunks to the socket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Feed {
    /// As fast as the socket takes them, in writes of up to [`COALESCED_WRITE`] bytes cut at
    /// chunk boundaries: how a provider's TCP stream carries tokens that come faster than it
    /// sends. The feeder then costs almost nothing, so the daemon is what is measured.
    Coalesced,
    /// As fast as the socket takes them, each chunk on its own `write` (with `TCP_NODELAY`, one
    /// segment each): the feeder's own system calls compete with the daemon for the two cores.
    EachChunk,
    /// At most one chunk every `pace`, each on its own `write`; a late sleep is caught up by
    /// writing what is due back to back.
    Paced(Duration),
}

/// The largest write of [`Feed::Coalesced`], the size of a TLS record.
pub const COALESCED_WRITE: usize = 16 * 1024;

/// The fake provider (the tests' own, `tests/support/upstream.rs`) answering one request with
/// `deltas` chunks, and when each chunk was written.
pub struct Upstream {
    pub url: String,
    pub sent: mpsc::Receiver<Vec<Instant>>,
}

pub fn start_upstream(deltas: usize, feed: Feed) -> Upstream {
    // Rendered before the daemon connects, so only writing is timed.
    let stream = render_stream(deltas);
    let (report, sent) = mpsc::channel();
    let fake = super::upstream::start(vec![super::upstream::Reply::writer(move |socket| {
        let _ = report.send(feed_stream(socket, &stream, feed)?);
        Ok(())
    })]);
    Upstream {
        url: fake.url,
        sent,
    }
}

/// The response body: `deltas` text chunks, then the end of the answer.
pub struct RenderedStream {
    bytes: Vec<u8>,
    /// Where each text chunk ends in `bytes`.
    ends: Vec<usize>,
}

pub fn render_stream(deltas: usize) -> RenderedStream {
    let mut bytes = Vec::with_capacity(deltas * 160);
    let mut ends = Vec::with_capacity(deltas);
    for index in 0..deltas {
        write!(
            bytes,
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{index} \"}},\"finish_reason\":null}}]}}\n\n"
        )
        .expect("formatting into a Vec cannot fail");
        ends.push(bytes.len());
    }
    bytes.extend_from_slice(
        b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
    RenderedStream { bytes, ends }
}

/// Writes the body after the fake upstream's `200 text/event-stream` head (its sockets have
/// `TCP_NODELAY`); when each chunk's write returned.
pub fn feed_stream(
    socket: &mut TcpStream,
    stream: &RenderedStream,
    feed: Feed,
) -> std::io::Result<Vec<Instant>> {
    let deltas = stream.ends.len();
    let mut sent = Vec::with_capacity(deltas);
    let started = Instant::now();
    let mut from = 0;
    while sent.len() < deltas {
        let index = sent.len();
        // The chunks of this write: `index..upto`.
        let upto = match feed {
            Feed::Coalesced => {
                let limit = from + COALESCED_WRITE;
                index
                    + stream.ends[index..]
                        .partition_point(|&end| end <= limit)
                        .max(1)
            }
            Feed::EachChunk => index + 1,
            Feed::Paced(pace) => {
                let due = started + pace * u32::try_from(index).expect("a small index");
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                index + 1
            }
        };
        let to = stream.ends[upto - 1];
        socket.write_all(&stream.bytes[from..to])?;
        let at = Instant::now();
        sent.resize(upto, at);
        from = to;
    }
    socket.write_all(&stream.bytes[from..])?;
    Ok(sent)
}

/// Time on the CPU and context switches, summed over threads.
#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    pub cpu_ns: u64,
    pub switches: u64,
}

/// CPU time and context switches of the live threads of process `pid` so far (an ended
/// thread no longer counts).
pub fn usage(pid: u32) -> Usage {
    let tasks = format!("/proc/{pid}/task");
    let mut usage = Usage::default();
    for task in std::fs::read_dir(&tasks).expect("cannot list the daemon's threads") {
        let dir = task.expect("a thread entry").path();
        // A thread may end between listing and reading.
        let Ok(schedstat) = std::fs::read_to_string(dir.join("schedstat")) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        usage.cpu_ns += schedstat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .expect("schedstat starts with the time on the CPU");
        usage.switches += status
            .lines()
            .filter_map(|line| {
                line.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    usage
}

/// Waits until the daemon `pid` has used no CPU for a while: work it does in the
/// background after starting would otherwise be measured as streaming. How long that took.
pub fn wait_until_idle(pid: u32) -> Duration {
    const QUIET: Duration = Duration::from_millis(100);
    const QUIET_CPU_NS: u64 = 2_000_000;
    let started = Instant::now();
    let mut last = usage(pid).cpu_ns;
    loop {
        std::thread::sleep(QUIET);
        let now = usage(pid).cpu_ns;
        // A thread that ended takes its time out of the sum: not quiet either.
        if now >= last && now - last < QUIET_CPU_NS {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the daemon stayed busy for a minute after starting"
        );
        last = now;
    }
}

/// What a reader makes of one output line.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A `textDelta` whose text is `w<index> `.
    Delta(usize),
    RunFinished,
    Other,
}

pub fn find(haystack: &str, needle: &str) -> Option<usize> {
    haystack.find(needle).map(|at| at + needle.len())
}

/// The per-line work of both readers: the event kind and, for a delta, its index.
pub fn classify(line: &[u8]) -> Line {
    let Ok(text) = std::str::from_utf8(line) else {
        return Line::Other;
    };
    let Some(kind) = find(text, "\"kind\":\"") else {
        return Line::Other;
    };
    let kind = &text[kind..];
    if kind.starts_with("textDelta\"") {
        let at = find(text, "\"text\":\"w").expect("a delta of the bench's shape");
        let digits = text[at..]
            .find(|c: char| !c.is_ascii_digit())
            .expect("the delta's index is followed by a space");
        Line::Delta(text[at..at + digits].parse().expect("a delta index"))
    } else if kind.starts_with("runFinished\"") {
        Line::RunFinished
    } else {
        Line::Other
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(sorted: &[f64]) -> f64 {
    percentile(sorted, 50.0)
}

pub fn per_second(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

pub fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}
