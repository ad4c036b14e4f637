//! Fifty sessions streaming at once through one `sidechat serve`, one of them on a slow store:
//! a slow commit of one session must not hold another session's deltas.
//!
//! Run with `cargo bench --bench load` (a release build; `--bench` mode refuses a debug build).
//! Without `--bench`, as under `cargo test --bench load`, it makes one short round of each case
//! to check that they work; its figures mean nothing.
//!
//! Each round starts a fresh database in which a first daemon creates the sessions and exits;
//! the measured daemon is then spawned on it, pointed at a fake OpenAI-compatible server on
//! 127.0.0.1 (the tests' shared one, `tests/support/upstream.rs`: threads of this process, one
//! per connection). Of the 50 sessions, 49 ask once and are answered with
//! [`STREAM_DELTAS`] chunks, one every [`PACE`]; the 50th, the chatty one, asks
//! [`CHATTY_TURNS`] short questions ([`SHORT_DELTAS`] chunks each), one every [`CHATTY_EVERY`]
//! (or as soon as the previous answer has finished, when that is later). Both cases do exactly
//! this work on the same schedule, so the slow case's figures compare with the baseline's.
//! Two cases, run side by side at the same time in one invocation, each with its own daemon,
//! database and fake server, so that a hiccup of the machine (other processes on its shared
//! cores) falls on both alike and the ratio compares the store's effect alone:
//! - baseline: nothing is slowed;
//! - slow store: every message commit of the chatty session sleeps [`SLOW_COMMIT`] while it
//!   holds the store's writer, as on a slow disk (`SIDECHAT_TEST_SLOW_COMMIT`, a setting for
//!   tests only), so a slow commit is in progress most of the time while the others stream.
//!
//! The latency of a delta is the time from the fake server's write of its chunk to the
//! `textDelta` line being read from the daemon's stdout (by a thread that does nothing else);
//! each chunk's text carries its session's tag and the instant of its write, both instants are
//! taken in this process. Only the 49 streaming sessions' deltas count. The goal: their p99 in
//! the slow case at most [`GOAL_RATIO`] times the baseline's.
//!
//! Checked in every round (the smoke run too): no lost or crossed events. Each session's `seq`
//! goes up by exactly one from event to event; every delta carries its own session's tag; every
//! streamed answer's `messageCompleted` text is its deltas joined; every streaming session got
//! all its deltas and ended its run with `end_turn`. Memory: the daemon's peak resident set
//! (`VmHWM`) when the round ends, and its resident set (`VmRSS`) after a second of idleness.
//!
//! The daemon gets an empty environment apart from `PATH`, a temporary `HOME` and XDG folders
//! (so no config file of the machine is read), the provider variables and `SIDECHAT_LOG=error`.

#[path = "support/stdio.rs"]
mod stdio;
#[path = "../tests/support/upstream.rs"]
mod upstream;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Child;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Exit, Initialize, Initialized, Notification, Request, SessionCreate, SessionEvent,
    Shutdown,
};

const SESSIONS: usize = 50;
/// The session whose commits are slowed in the slow case; it asks short questions.
const CHATTY: usize = 0;

/// Chunks in each streaming session's answer, one every [`PACE`].
const STREAM_DELTAS: usize = 500;
const PACE: Duration = Duration::from_millis(10);
/// Chunks in each of the chatty session's answers.
const SHORT_DELTAS: usize = 5;
/// The chatty session's questions, and how far apart they are asked: spread over the
/// streams' [`STREAM_DELTAS`] × [`PACE`], with room for a slow turn (two slow commits).
const CHATTY_TURNS: usize = 12;
const CHATTY_EVERY: Duration = Duration::from_millis(400);
/// How long each message commit of the chatty session takes in the slow case.
const SLOW_COMMIT: Duration = Duration::from_millis(150);
/// Rounds, each running both cases at once.
const ROUNDS: usize = 3;

const SMOKE_STREAM_DELTAS: usize = 20;
const SMOKE_PACE: Duration = Duration::from_millis(5);
const SMOKE_SLOW_COMMIT: Duration = Duration::from_millis(20);
const SMOKE_CHATTY_TURNS: usize = 3;
const SMOKE_CHATTY_EVERY: Duration = Duration::from_millis(30);

const GOAL_RATIO: f64 = 1.5;

/// More model requests than a round makes: the 49 streams and the chatty session's questions.
const MAX_REQUESTS: usize = 20_000;

/// Deltas carry the instant of their write as microseconds since this one.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    stream_deltas: usize,
    pace: Duration,
    slow_commit: Duration,
    chatty_turns: usize,
    chatty_every: Duration,
}

// ---------------------------------------------------------------------------------------------
// The fake OpenAI-compatible server: the shared one of the tests, with replies that write
// their own paced bodies.

/// Starts the fake server with enough replies for any round. Reply `n` answers request `n`;
/// it reads that request to learn the session's tag (the user text is `load-<tag>`), which
/// decides how long the answer is and goes into every chunk.
fn start_upstream(plan: Plan) -> upstream::Upstream {
    let requests: Arc<OnceLock<Arc<Mutex<Vec<Value>>>>> = Arc::default();
    let replies = (0..MAX_REQUESTS)
        .map(|index| {
            let requests = requests.clone();
            upstream::Reply::writer(move |socket| {
                let body = requests
                    .get()
                    .and_then(|all| all.lock().ok()?.get(index).cloned())
                    .unwrap_or(Value::Null);
                let tag = tag_of(&body).expect("a request without a session tag");
                stream_answer(socket, tag, plan)
            })
        })
        .collect();
    let upstream = upstream::start(replies);
    // No request can come before this: the daemon is spawned afterwards.
    let _ = requests.set(upstream.requests.clone());
    upstream
}

/// Writes the answer for session `tag`: its chunks one every `plan.pace`, each carrying the
/// tag and the instant of its write.
fn stream_answer(socket: &mut TcpStream, tag: usize, plan: Plan) -> std::io::Result<()> {
    let deltas = if tag == CHATTY {
        SHORT_DELTAS
    } else {
        plan.stream_deltas
    };
    let started = Instant::now();
    let mut chunk = Vec::with_capacity(256);
    for index in 0..deltas {
        let due = started + plan.pace * u32::try_from(index).expect("a small index");
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        chunk.clear();
        let micros = epoch().elapsed().as_micros();
        write!(
            chunk,
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{tag}:{micros} \"}},\"finish_reason\":null}}]}}\n\n"
        )?;
        socket.write_all(&chunk)?;
    }
    socket.write_all(
        b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    )
}

/// The number after the last `load-` in a request body.
fn tag_of(body: &Value) -> Option<usize> {
    let text = body.to_string();
    let at = text.rfind("load-")? + "load-".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// The daemon over stdio.

struct Daemon {
    child: Child,
    requests: stdio::Requests,
    /// Lines of stdout with the instant each was read, from a thread that only reads.
    lines: Receiver<(Instant, Vec<u8>)>,
}

impl Daemon {
    fn spawn(home: &Path, db: &Path, upstream: &str, slow: Option<(&str, Duration)>) -> Self {
        let mut command = stdio::serve_command(home, db, upstream, "error");
        if let Some((session, delay)) = slow {
            command.env(
                "SIDECHAT_TEST_SLOW_COMMIT",
                format!("{session}:{}", delay.as_millis()),
            );
        }
        let mut child = command.spawn().expect("cannot spawn `sidechat serve`");
        let stdin = child.stdin.take().expect("the child's stdin is piped");
        let stdout = child.stdout.take().expect("the child's stdout is piped");
        let (tx, lines) = channel();
        std::thread::Builder::new()
            .name("daemon-stdout".into())
            .spawn(move || {
                let mut stdout = BufReader::with_capacity(256 * 1024, stdout);
                loop {
                    let mut line = Vec::with_capacity(256);
                    match stdout.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            if tx.send((Instant::now(), line)).is_err() {
                                return;
                            }
                        }
                    }
                }
            })
            .expect("cannot start the stdout reader");
        let mut daemon = Self {
            child,
            requests: stdio::Requests::new(stdin),
            lines,
        };
        daemon.call(
            Initialize::METHOD,
            json!({"clientInfo": {"name": "load-bench", "version": "1"}, "protocolVersion": 1}),
        );
        daemon
            .requests
            .send(&json!({"jsonrpc": "2.0", "method": Initialized::METHOD, "params": {}}));
        daemon
    }

    /// The next line from the daemon, parsed, with the instant it was read.
    fn next(&self) -> (Instant, Value) {
        self.next_before(Instant::now() + Duration::from_secs(120))
            .expect("the daemon went quiet or closed stdout")
    }

    /// The next line if one comes before `deadline`.
    fn next_before(&self, deadline: Instant) -> Option<(Instant, Value)> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(wait) {
            Ok((at, line)) => Some((
                at,
                serde_json::from_slice(&line).expect("a JSON line from the daemon"),
            )),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the daemon closed stdout")
            }
        }
    }

    /// Sends a request and waits for its result; there are no notifications while it runs.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.requests.start_call(method, params);
        loop {
            let (_, message) = self.next();
            if message["id"] == id && message.get("method").is_none() {
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return message["result"].clone();
            }
        }
    }

    fn status_kib(&self, field: &str) -> u64 {
        stdio::status_kib(self.child.id(), field)
    }

    fn close(mut self) {
        self.call(Shutdown::METHOD, Value::Null);
        self.requests
            .send(&json!({"jsonrpc": "2.0", "method": Exit::METHOD}));
        let status = self.child.wait().expect("cannot reap the daemon");
        assert!(status.success(), "the daemon exited with {status}");
    }
}

// ---------------------------------------------------------------------------------------------
// One round.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Baseline,
    SlowStore,
}

#[derive(Default)]
struct RoundResult {
    /// Latency of every delta of the streaming sessions.
    latencies: Vec<Duration>,
    /// Answers the chatty session got, and how long its turns took on average.
    chatty_turns: usize,
    chatty_turn: Duration,
    peak_kib: u64,
    idle_kib: u64,
}

/// What was seen of one session, for the checks.
#[derive(Default)]
struct Seen {
    last_seq: Option<u64>,
    /// Text of the answer being streamed, by message id.
    streamed: HashMap<String, String>,
    deltas: usize,
    runs_finished: usize,
}

fn round(home: &Path, db: &Path, plan: Plan, case: Case) -> RoundResult {
    let server = start_upstream(plan);
    // A first daemon makes the sessions, so the measured one can be told which one is slow.
    let mut setup = Daemon::spawn(home, db, &server.url, None);
    let sessions: Vec<String> = (0..SESSIONS)
        .map(|tag| {
            let created = setup.call(
                SessionCreate::METHOD,
                json!({"title": format!("load-{tag}")}),
            );
            created["id"].as_str().expect("a session id").to_owned()
        })
        .collect();
    setup.close();
    let slow = (case == Case::SlowStore).then(|| (sessions[CHATTY].as_str(), plan.slow_commit));
    let mut daemon = Daemon::spawn(home, db, &server.url, slow);
    let tag_of_session: HashMap<&str, usize> = sessions
        .iter()
        .enumerate()
        .map(|(tag, id)| (id.as_str(), tag))
        .collect();

    let mut seen: Vec<Seen> = (0..SESSIONS).map(|_| Seen::default()).collect();
    let mut result = RoundResult::default();
    let ask = |daemon: &mut Daemon, tag: usize| {
        daemon.requests.start_call(
            ChatSend::METHOD,
            json!({"sessionId": sessions[tag], "text": format!("load-{tag}")}),
        );
    };
    let started = Instant::now();
    for tag in 0..SESSIONS {
        ask(&mut daemon, tag);
    }
    // The chatty session's turns: asked, answered, and when the next one is due.
    let mut chatty_asked = 1;
    let mut chatty_answered = 0;
    let mut chatty_started = started;
    let mut chatty_total = Duration::ZERO;
    let next_due = |asked: usize| started + plan.chatty_every * u32::try_from(asked).unwrap_or(0);
    let mut streams_done = 0;
    while streams_done < SESSIONS - 1 || chatty_answered < plan.chatty_turns {
        let chatty_idle = chatty_answered == chatty_asked && chatty_asked < plan.chatty_turns;
        if chatty_idle && Instant::now() >= next_due(chatty_asked) {
            chatty_started = Instant::now();
            chatty_asked += 1;
            ask(&mut daemon, CHATTY);
            continue;
        }
        let line = if chatty_idle {
            daemon.next_before(next_due(chatty_asked))
        } else {
            Some(daemon.next())
        };
        let Some((at, message)) = line else {
            continue;
        };
        if message.get("method").is_none() {
            assert!(
                message.get("error").is_none(),
                "a request failed: {message}"
            );
            continue;
        }
        if message["method"] != SessionEvent::METHOD {
            continue;
        }
        let params = &message["params"];
        let session = params["sessionId"].as_str().expect("an event's session");
        let tag = tag_of_session[session];
        let seq = params["seq"].as_u64().expect("an event's seq");
        let state = &mut seen[tag];
        if let Some(last) = state.last_seq {
            assert_eq!(seq, last + 1, "session {tag}: seq {seq} after {last}");
        }
        state.last_seq = Some(seq);
        let event = &params["event"];
        match event["kind"].as_str().expect("an event kind") {
            "textDelta" => {
                let text = event["text"].as_str().expect("a delta's text");
                let (sent_tag, micros) = text
                    .trim_end()
                    .split_once(':')
                    .expect("a delta of the bench's shape");
                assert_eq!(
                    sent_tag.parse::<usize>().ok(),
                    Some(tag),
                    "a delta of session {sent_tag} arrived in session {tag}"
                );
                let micros: u64 = micros.parse().expect("a delta's write instant");
                if tag != CHATTY {
                    let written = epoch() + Duration::from_micros(micros);
                    result.latencies.push(at.saturating_duration_since(written));
                }
                state.deltas += 1;
                let id = event["messageId"].as_str().expect("a delta's message id");
                state
                    .streamed
                    .entry(id.to_owned())
                    .or_default()
                    .push_str(text);
            }
            "messageCompleted" => {
                let entry = &event["entry"];
                if entry["role"] == "assistant" {
                    let id = entry["id"].as_str().expect("an entry id");
                    let stored = entry["blocks"][0]["text"].as_str().unwrap_or_default();
                    let streamed = state.streamed.remove(id).unwrap_or_default();
                    assert_eq!(stored, streamed, "session {tag}: stored text differs");
                }
            }
            "runFinished" => {
                assert_eq!(
                    event["reason"], "end_turn",
                    "session {tag}: the run ended with {event}"
                );
                state.runs_finished += 1;
                if tag == CHATTY {
                    chatty_total += chatty_started.elapsed();
                    chatty_answered += 1;
                } else {
                    streams_done += 1;
                }
            }
            _ => {}
        }
    }
    for (tag, state) in seen.iter().enumerate() {
        let (answers, deltas) = if tag == CHATTY {
            (plan.chatty_turns, SHORT_DELTAS * plan.chatty_turns)
        } else {
            (1, plan.stream_deltas)
        };
        assert_eq!(
            (state.runs_finished, state.deltas),
            (answers, deltas),
            "session {tag}: lost deltas"
        );
    }
    result.chatty_turns = seen[CHATTY].runs_finished;
    result.chatty_turn = chatty_total / u32::try_from(result.chatty_turns.max(1)).unwrap_or(1);
    result.peak_kib = daemon.status_kib("VmHWM:");
    std::thread::sleep(Duration::from_secs(1));
    result.idle_kib = daemon.status_kib("VmRSS:");
    daemon.close();
    result
}

// ---------------------------------------------------------------------------------------------
// Figures.

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[derive(Default)]
struct CaseFigures {
    latencies: Vec<Duration>,
    chatty_turns: usize,
    chatty_turn: Vec<Duration>,
    peak_kib: u64,
    idle_kib: Vec<u64>,
}

impl CaseFigures {
    fn add(&mut self, round: RoundResult) {
        self.latencies.extend(round.latencies);
        self.chatty_turns += round.chatty_turns;
        self.chatty_turn.push(round.chatty_turn);
        self.peak_kib = self.peak_kib.max(round.peak_kib);
        self.idle_kib.push(round.idle_kib);
    }
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && cfg!(debug_assertions) {
        eprintln!(
            "load: this is a debug build; run `cargo bench --bench load` for figures that mean something"
        );
        std::process::exit(2);
    }
    let (plan, rounds) = if bench_mode {
        (
            Plan {
                stream_deltas: STREAM_DELTAS,
                pace: PACE,
                slow_commit: SLOW_COMMIT,
                chatty_turns: CHATTY_TURNS,
                chatty_every: CHATTY_EVERY,
            },
            ROUNDS,
        )
    } else {
        (
            Plan {
                stream_deltas: SMOKE_STREAM_DELTAS,
                pace: SMOKE_PACE,
                slow_commit: SMOKE_SLOW_COMMIT,
                chatty_turns: SMOKE_CHATTY_TURNS,
                chatty_every: SMOKE_CHATTY_EVERY,
            },
            1,
        )
    };
    epoch();
    let temp = tempfile::tempdir().expect("cannot create a temporary folder");
    let home = temp.path();
    let mut baseline = CaseFigures::default();
    let mut slow = CaseFigures::default();
    for index in 0..rounds {
        // Both cases at once, each with its own daemon, database and fake server.
        let (base, slowed) = std::thread::scope(|scope| {
            let run = |case: Case| {
                scope.spawn(move || {
                    let db = home.join(format!("{case:?}-{index}.db"));
                    round(home, &db, plan, case)
                })
            };
            let (base, slowed) = (run(Case::Baseline), run(Case::SlowStore));
            (
                base.join().expect("the baseline round failed"),
                slowed.join().expect("the slow store's round failed"),
            )
        });
        baseline.add(base);
        slow.add(slowed);
    }

    let profile = if cfg!(debug_assertions) {
        "debug build, smoke run: figures mean nothing"
    } else {
        "release build"
    };
    println!(
        "load: {SESSIONS} sessions in each case's daemon, {} of them streaming {} deltas one every {:?}, \
         1 asking {} short questions one every {:?} in both cases; {rounds} round(s) of each case, \
         side by side at the same time ({profile})",
        SESSIONS - 1,
        plan.stream_deltas,
        plan.pace,
        plan.chatty_turns,
        plan.chatty_every,
    );
    println!(
        "no lost or crossed events: seq contiguous per session, every delta in its own session, every answer whole"
    );
    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>13} {:>12} {:>12}",
        "case", "p50", "p99", "max", "chatty turn", "peak RSS", "idle RSS"
    );
    let mut p99s = Vec::new();
    for (name, figures) in [
        ("baseline", &mut baseline),
        (
            &*format!("slow store ({:?} per chatty commit)", plan.slow_commit),
            &mut slow,
        ),
    ] {
        figures.latencies.sort_unstable();
        figures.chatty_turn.sort_unstable();
        figures.idle_kib.sort_unstable();
        let p99 = percentile(&figures.latencies, 0.99);
        p99s.push(p99);
        println!(
            "{:<44} {:>10} {:>10} {:>10} {:>13} {:>12} {:>12}",
            name,
            ms(percentile(&figures.latencies, 0.50)),
            ms(p99),
            ms(*figures.latencies.last().unwrap_or(&Duration::ZERO)),
            ms(figures.chatty_turn[figures.chatty_turn.len() / 2]),
            mib(figures.peak_kib),
            mib(figures.idle_kib[figures.idle_kib.len() / 2]),
        );
    }
    let ratio = p99s[1].as_secs_f64() / p99s[0].as_secs_f64().max(1e-9);
    println!(
        "deltas measured per case: {}; chatty answers: baseline {}, slow store {}",
        baseline.latencies.len(),
        baseline.chatty_turns,
        slow.chatty_turns
    );
    let verdict = if ratio <= GOAL_RATIO { "met" } else { "MISSED" };
    println!(
        "p99 of the streaming sessions, slow store / baseline: {ratio:.2}x (goal <= {GOAL_RATIO}x: {verdict})"
    );
}
