//! The first message after an editor starts the daemon: spawn → `initialize` →
//! `session/create` → `chat/send` → the provider has the request, on a fresh daemon beside a new
//! session's first message on a warm one (a daemon that has answered before), measured in one
//! run, interleaved; and the same for `sidechat acp` (`session/new` → `session/prompt`).
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

#[allow(dead_code)]
#[path = "support/stdio.rs"]
mod stdio;
#[path = "../tests/support/upstream.rs"]
mod upstream;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const WARM_UP: usize = 2;
const RUNS: usize = 15;
const GOAL_RATIO: f64 = 3.0;

/// Which front end: the native protocol or ACP.
#[derive(Clone, Copy)]
enum Front {
    Serve,
    Acp,
}

struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Process {
    fn spawn(front: Front, home: &Path, upstream: &str) -> Self {
        let mut command = stdio::serve_command(home, &home.join("sidechat.db"), upstream, "warn");
        if let Front::Acp = front {
            // The same environment, the ACP agent instead of `serve`.
            let mut acp = std::process::Command::new(command.get_program());
            acp.arg("acp").arg("--db").arg(home.join("sidechat.db"));
            acp.env_clear();
            for (key, value) in command.get_envs() {
                if let Some(value) = value {
                    acp.env(key, value);
                }
            }
            acp.stdin(Stdio::piped()).stdout(Stdio::piped());
            command = acp;
        }
        let mut child = command
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot spawn sidechat");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Self {
            child,
            stdin,
            stdout,
            next_id: 1,
        }
    }

    fn write(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("write to sidechat");
    }

    /// Writes a request; its id.
    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The result of request `id`; notifications on the way are skipped.
    fn result(&mut self, id: u64) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read sidechat");
            assert!(n > 0, "sidechat closed its output");
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            if message["id"] == id && message.get("method").is_none() {
                assert!(
                    message.get("error").is_none(),
                    "request {id} failed: {message}"
                );
                return message["result"].clone();
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.result(id)
    }

    /// The handshake of `front`.
    fn initialize(&mut self, front: Front) {
        match front {
            Front::Serve => {
                self.call(
                    "initialize",
                    json!({"clientInfo": {"name": "first-message-bench"}, "protocolVersion": 1, "capabilities": {}}),
                );
                self.write(&json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}));
            }
            Front::Acp => {
                self.call(
                    "initialize",
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
                let session = self.call("session/create", json!({}))["id"]
                    .as_str()
                    .expect("an id")
                    .to_string();
                (
                    "chat/send",
                    json!({"sessionId": session, "text": "Hello there, what does this project do?"}),
                )
            }
            Front::Acp => {
                let session = self.call(
                    "session/new",
                    json!({"cwd": home.display().to_string(), "mcpServers": []}),
                )["sessionId"]
                    .as_str()
                    .expect("a session id")
                    .to_string();
                (
                    "session/prompt",
                    json!({"sessionId": session, "prompt": [{"type": "text", "text": "Hello there, what does this project do?"}]}),
                )
            }
        };
        let sent = Instant::now();
        let id = self.request(method, params);
        while fake.seen().len() < requests {
            std::thread::sleep(Duration::from_micros(100));
        }
        (sent.elapsed(), id)
    }

    fn close(mut self, front: Front) {
        if let Front::Serve = front {
            self.write(&json!({"jsonrpc": "2.0", "id": 0, "method": "shutdown"}));
            self.write(&json!({"jsonrpc": "2.0", "method": "exit"}));
        }
        drop(self.stdin);
        let _ = self.child.wait();
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
}
