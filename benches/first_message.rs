//! The first message after an editor starts the daemon: spawn → `initialize` →
//! `session/create` → `chat/send` → the provider has the request, on a fresh daemon beside a new
//! session's first message on a warm one (a daemon that has answered before), measured in one
//! run, interleaved; and the same for `sidechat acp` (`session/new` → `session/prompt`). Then
//! `sidechat acp`'s `session/load` of one of those sessions, on a fresh agent beside a warm one
//! (its replay needs no tokenizer, so the answer should not wait for one).
//!
//! Run with `cargo bench --bench first_message` (a release build). Without `--bench`, as under
//! `cargo test --benches`, it makes one quick run of each to check that they work.
//!
//! A fresh daemon's tokenizer is still being built when its first request is made: the request
//! goes out counted by its bytes (see `context::tokens::upper_bounds`). Each fresh run spawns
//! the binary on a database a warm-up run created (as on every later start), with a fake
//! OpenAI-compatible upstream on 127.0.0.1. The figure compared is from writing the message
//! (`chat/send`, `session/prompt`) to the upstream having the request; the fresh run's whole
//! path from spawn is reported beside it. Goal: the fresh median ≤ 3 × the warm median.

#[path = "support/stdio.rs"]
mod stdio;
#[path = "../tests/support/upstream.rs"]
mod upstream;

use std::path::Path;
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1::AGENT_METHOD_NAMES;
use serde_json::{Value, json};
use sidechat::protocol::{ChatSend, Initialize, Initialized, Notification, Request, SessionCreate};

const WARM_UP: usize = 2;
const RUNS: usize = 15;
const GOAL_RATIO: f64 = 3.0;

/// Which front end: the native protocol or ACP.
#[derive(Clone, Copy)]
enum Front {
    Serve,
    Acp,
}

/// `sidechat serve` or `sidechat acp`, as `front` says.
struct Process(stdio::Process);

impl Process {
    fn spawn(front: Front, home: &Path, upstream: &str) -> Self {
        let db = home.join("sidechat.db");
        Self(stdio::Process::spawn(match front {
            Front::Serve => stdio::serve_command(home, &db, upstream, "warn"),
            Front::Acp => stdio::acp_command(home, &db, upstream, "warn"),
        }))
    }

    fn result(&mut self, id: u64) -> Value {
        self.0.result(id)
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.0.call(method, params)
    }

    /// The handshake of `front`.
    fn initialize(&mut self, front: Front) {
        match front {
            Front::Serve => {
                self.call(
                    Initialize::METHOD,
                    json!({"clientInfo": {"name": "first-message-bench"}, "protocolVersion": 1, "capabilities": {}}),
                );
                self.0.notify(Initialized::METHOD, json!({}));
            }
            Front::Acp => {
                self.call(
                    AGENT_METHOD_NAMES.initialize,
                    json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "first-message-bench", "version": "1"}}),
                );
            }
        }
    }

    /// A new session's first message: written, then the time until the upstream has had
    /// `requests` requests; the message's request id.
    fn first_message(
        &mut self,
        front: Front,
        home: &Path,
        fake: &upstream::Upstream,
        requests: usize,
    ) -> (Duration, u64) {
        let (method, params) = match front {
            Front::Serve => {
                let session = self.call(SessionCreate::METHOD, json!({}))["id"]
                    .as_str()
                    .expect("an id")
                    .to_string();
                (
                    ChatSend::METHOD,
                    json!({"sessionId": session, "text": "Hello there, what does this project do?"}),
                )
            }
            Front::Acp => {
                let session = self.call(
                    AGENT_METHOD_NAMES.session_new,
                    json!({"cwd": home.display().to_string(), "mcpServers": []}),
                )["sessionId"]
                    .as_str()
                    .expect("a session id")
                    .to_string();
                (
                    AGENT_METHOD_NAMES.session_prompt,
                    json!({"sessionId": session, "prompt": [{"type": "text", "text": "Hello there, what does this project do?"}]}),
                )
            }
        };
        let sent = Instant::now();
        let id = self.0.request(method, params);
        while fake.seen().len() < requests {
            std::thread::sleep(Duration::from_micros(100));
        }
        (sent.elapsed(), id)
    }

    fn close(self, front: Front) {
        match front {
            Front::Serve => self.0.shut_down(),
            Front::Acp => self.0.close(),
        }
    }
}

fn answers(n: usize) -> Vec<upstream::Reply> {
    (0..n)
        .map(|_| upstream::Reply::sse(&upstream::openai::text(&["Hi."], 10, 1)))
        .collect()
}

/// A fresh process's first message: (spawn → upstream has the request, message → upstream).
fn fresh_once(front: Front, home: &Path) -> (Duration, Duration) {
    let fake = upstream::start(answers(1));
    let started = Instant::now();
    let mut process = Process::spawn(front, home, &fake.url);
    process.initialize(front);
    let (first, id) = process.first_message(front, home, &fake, 1);
    let whole = started.elapsed();
    process.result(id);
    process.close(front);
    (whole, first)
}

/// `session/load` of `session` on `process`: written → answered (the replay comes before).
fn load(process: &mut Process, home: &Path, session: &str) -> Duration {
    let started = Instant::now();
    process.call(
        AGENT_METHOD_NAMES.session_load,
        json!({"sessionId": session, "cwd": home.display().to_string(), "mcpServers": []}),
    );
    started.elapsed()
}

/// A fresh agent's `session/load` of `session`.
fn fresh_load(home: &Path, session: &str) -> Duration {
    let fake = upstream::start(Vec::new());
    let mut process = Process::spawn(Front::Acp, home, &fake.url);
    process.initialize(Front::Acp);
    let took = load(&mut process, home, session);
    process.close(Front::Acp);
    took
}

/// `sidechat acp`'s `session/load` of a session of one exchange on a fresh agent, whose
/// tokenizer is still being built, beside a warm agent's.
fn loads(home: &Path, warm_up: usize, runs: usize) {
    let fake = upstream::start(Vec::new());
    let mut warm = Process::spawn(Front::Acp, home, &fake.url);
    warm.initialize(Front::Acp);
    let listed = warm.call(AGENT_METHOD_NAMES.session_list, json!({}));
    let session = listed["sessions"][0]["sessionId"]
        .as_str()
        .expect("a session from the first messages")
        .to_string();
    for _ in 0..warm_up {
        fresh_load(home, &session);
        load(&mut warm, home, &session);
    }
    let (mut fresh, mut warmed) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        fresh.push(fresh_load(home, &session));
        warmed.push(load(&mut warm, home, &session));
    }
    warm.close(Front::Acp);
    let (fresh, warmed) = (median(fresh), median(warmed));
    println!(
        "  {:<22} → answered: fresh {}  warm {}  ratio {:.2}",
        "acp: session/load",
        ms(fresh),
        ms(warmed),
        fresh.as_secs_f64() / warmed.as_secs_f64()
    );
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench && cfg!(debug_assertions) {
        panic!("run the benchmark with `cargo bench` (release); debug figures mean nothing");
    }
    let (warm_up, runs) = if bench { (WARM_UP, RUNS) } else { (1, 1) };
    let dir = tempfile::tempdir().expect("a temporary folder");
    println!("First message, medians of {runs} runs each, fresh and warm interleaved:");
    for front in [Front::Serve, Front::Acp] {
        let name = match front {
            Front::Serve => "serve: chat/send",
            Front::Acp => "acp: session/prompt",
        };
        let home = dir.path().join(match front {
            Front::Serve => "serve",
            Front::Acp => "acp",
        });
        std::fs::create_dir_all(&home).expect("a home folder");
        for _ in 0..warm_up {
            fresh_once(front, &home);
        }
        // The warm process: it has answered a message before the measured ones.
        let fake = upstream::start(answers(warm_up + runs + 1));
        let mut warm = Process::spawn(front, &home, &fake.url);
        warm.initialize(front);
        let mut asked = 0;
        for _ in 0..warm_up {
            asked += 1;
            let (_, id) = warm.first_message(front, &home, &fake, asked);
            warm.result(id);
        }
        let (mut whole, mut fresh, mut warmed) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (all, first) = fresh_once(front, &home);
            whole.push(all);
            fresh.push(first);
            asked += 1;
            let (first, id) = warm.first_message(front, &home, &fake, asked);
            warm.result(id);
            warmed.push(first);
        }
        warm.close(front);
        let (whole, fresh, warmed) = (median(whole), median(fresh), median(warmed));
        let ratio = fresh.as_secs_f64() / warmed.as_secs_f64();
        println!(
            "  {name:<22} → upstream: fresh {}  warm {}  ratio {ratio:.2}  (fresh from spawn: {})",
            ms(fresh),
            ms(warmed),
            ms(whole)
        );
        if bench {
            println!(
                "  goal ≤ {GOAL_RATIO}×: {}",
                if ratio <= GOAL_RATIO {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
    }
    loads(&dir.path().join("acp"), warm_up, runs);
}
